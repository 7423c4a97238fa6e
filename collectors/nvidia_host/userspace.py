"""The user-space driver's version: library file names and the package databases (names only, nothing loaded).

- Libraries: ``libnvidia-ml.so.<version>`` and ``libcuda.so.<version>``, the real files the sonames
  ``libnvidia-ml.so.1``/``libcuda.so.1`` point to, named by the driver's version (NVIDIA/nvidia-docker#1287's
  ``selecting /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.435.21``; NVIDIA/nvidia-container-toolkit#735's
  ``failed to locate libcuda.so.535.183.06``). The directories of each stack are listed (names only, never
  opened or followed): Debian/Ubuntu's multiarch dirs, RHEL's ``/usr/lib64``, the GPU Operator's driver root
  ``/run/nvidia/driver`` (the driver container's root, docs/sources.md "GPU stacks" 2), GKE COS's
  ``/home/kubernetes/bin/nvidia/lib64`` and its container view ``/usr/local/nvidia/lib64`` (section 8).
- dpkg: the stanzas of NVIDIA's packages in ``/var/lib/dpkg/status`` (:mod:`forensics.debstatus`), stored as
  text. Ubuntu names them by branch (``nvidia-driver-550``, ``libnvidia-compute-550``, ``nvidia-utils-550``,
  ``nvidia-kernel-common-550``, ``nvidia-fabricmanager-550``) and, from branch 590, without it
  (``libnvidia-compute``, ``nvidia-dkms-open``: NVIDIA's driver installation guide, "Ubuntu 590 package renames").
- rpm: the headers of NVIDIA's packages in ``rpmdb.sqlite`` (:mod:`forensics.rpmdb`), stored as JSON.
"""
from __future__ import annotations

import os
import re

from forensics import debstatus, hostfs, rpmdb
from forensics.artifact import Status, from_oserror
from forensics.versions import version_tuple

REL = "nvidia_host"
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/run/nvidia/driver/usr/lib/x86_64-linux-gnu", "/run/nvidia/driver/usr/lib/aarch64-linux-gnu",
            "/run/nvidia/driver/usr/lib64", "/home/kubernetes/bin/nvidia/lib64", "/usr/local/nvidia/lib64")
#: a driver version (390.157, 550.54.15): the sonames (.so.1) and other numbers are not versions
LIBRARY = re.compile(r"(?P<lib>libnvidia-ml|libcuda)\.so\.(?P<version>[1-9]\d{2,}\.\d+(?:\.\d+)?)")
MAX_PACKAGES = 1000        #: NVIDIA stanzas / rpm headers kept
#: package names that are NVIDIA's driver, its libraries and tools (dpkg and rpm)
PACKAGE_PREFIXES = ("nvidia-", "libnvidia-", "libcuda", "cuda-drivers", "datacenter-gpu-manager", "kmod-nvidia",
                    "linux-modules-nvidia-", "linux-objects-nvidia-", "xserver-xorg-video-nvidia")


_PACKAGE = re.compile(rb"^Package:[ \t]*(\S+)", re.M)  #: a stanza's package name (deb-control(5) field syntax)


def nvidia_package(name: str) -> bool:
    return name.startswith(PACKAGE_PREFIXES)


def acquire(ctx) -> dict:
    """List the library directories, keep the NVIDIA stanzas of dpkg's status file and the NVIDIA headers of
    the rpm database. Returns ``{"libraries": {dir: {"status", "errno", "names": [matching names]}},
    "dpkg": {"status", "stanzas"}, "rpm": {"status", "source", "packages": count}}`` (the stanzas and the headers
    are stored files)."""
    return {"libraries": {d: _libraries(ctx, d) for d in LIB_DIRS}, "dpkg": _dpkg(ctx),
            "rpm": rpmdb.collect(ctx, nvidia_package, f"{REL}/rpm-packages.json", MAX_PACKAGES)[0]}


def _libraries(ctx, d: str) -> dict:
    try:
        names = hostfs.listdir(ctx.root, d)
    except OSError as e:
        a = from_oserror(d, "listdir", e)
        if a.status is not Status.ABSENT:  # most of these directories are absent on any one stack
            ctx.writer.record(a)
        return {"status": a.status.value, "errno": a.errno, "names": None}
    return {"status": "listed", "errno": None, "names": [n for n in names if LIBRARY.fullmatch(n)][:64]}


def _dpkg(ctx) -> dict:
    """Store the NVIDIA stanzas of dpkg's status file as ``nvidia_host/dpkg-status-nvidia``."""
    def keep(stanza: bytes) -> bool:  # the first Package: line (a continuation line starts with a blank)
        m = _PACKAGE.search(stanza)
        return m is not None and nvidia_package(m.group(1).decode("utf-8", "replace"))
    late = ctx.budget_spent(debstatus.PATH, "filter")
    if late:
        return {"status": late.status.value}
    try:
        with hostfs.open_regular(ctx.root, debstatus.PATH) as f:
            kept, cut = debstatus.stanzas(f, debstatus.LIMIT, keep, ctx.deadline)
    except OSError as e:
        a = ctx.writer.record(from_oserror(debstatus.PATH, "filter", e))
        return {"status": a.status.value}
    notes = ("only the stanzas of NVIDIA packages (Package: " + ", ".join(p + "*" for p in PACKAGE_PREFIXES) + ")",)
    if cut:
        notes += (f"truncated: {cut}",)
    if len(kept) > MAX_PACKAGES:
        notes += (f"truncated: {len(kept)} NVIDIA stanzas, the first {MAX_PACKAGES} kept",)
    a = ctx.writer.write_bytes(f"{REL}/dpkg-status-nvidia", b"\n".join(kept[:MAX_PACKAGES]), debstatus.PATH, "filter",
                               notes, status=Status.TRUNCATED if cut or len(kept) > MAX_PACKAGES else Status.COLLECTED)
    return {"status": a.status.value, "stanzas": min(len(kept), MAX_PACKAGES)}


# -- reading ---------------------------------------------------------------------------------------------
def dpkg_packages(text: str) -> tuple[dict, dict]:
    """``({name: version} of installed packages, {name: {"version", "status"}} of the others)`` from the stored
    stanzas; a package known for two architectures is named ``name:arch``."""
    stanzas = [debstatus.fields(s.encode(), ("Package", "Version", "Status", "Architecture"))
               for s in text.split("\n\n") if s.strip()]
    names = [s.get("Package") for s in stanzas]
    installed, other = {}, {}
    for s in stanzas:
        name = s.get("Package")
        if not name:
            continue
        key = f"{name}:{s.get('Architecture')}" if names.count(name) > 1 else name
        if s.get("Status", "").endswith(" installed"):
            installed[key] = s.get("Version")
        else:
            other[key] = {"version": s.get("Version"), "status": s.get("Status")}
    return installed, other


def libraries_fact(libs: dict) -> dict:
    """``{"versions": sorted distinct versions, "libraries": [paths], "dirs": {dir: status}, "source"}``."""
    paths, versions = [], set()
    for d, got in (libs or {}).items():
        for n in got.get("names") or []:
            m = LIBRARY.fullmatch(n)
            if m:
                paths.append(f"{d}/{n}")
                versions.add(m.group("version"))
    return {"versions": sorted(versions, key=version_tuple), "libraries": paths,
            "dirs": {d: got.get("status") for d, got in (libs or {}).items()},
            "source": "names of libnvidia-ml.so.<version> / libcuda.so.<version> in the library directories (listdir)"}

