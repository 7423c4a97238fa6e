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
- rpm: ``rpmdb.sqlite`` (RPM 4.16 and later: ``/var/lib/rpm`` on RHEL 9, ``/usr/lib/sysimage/rpm`` on SUSE and
  newer Fedora), opened with the standard library's sqlite3 read-only and ``immutable=1`` (no lock, no journal,
  nothing written), through the descriptor :func:`forensics.hostfs.open_regular` checked, bounded in time. Each
  ``Packages.blob`` is an rpm header without its 8-byte magic: ``il``, ``dl`` (big-endian uint32), ``il`` index
  entries ``(tag, type, offset, count)``, then ``dl`` bytes of data (rpm's lib/header.c; tags from
  rpmtag.h: NAME 1000, VERSION 1001, RELEASE 1002, EPOCH 1003, ARCH 1022). A Berkeley DB ``Packages``
  (RPM 4.15 and older) or SUSE's ``Packages.db`` is recorded as unsupported, not read.
"""
from __future__ import annotations

import os
import re
import struct
import time

from forensics import debstatus, hostfs
from forensics.artifact import Artifact, Status, from_oserror
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
RPMDBS = ("/var/lib/rpm/rpmdb.sqlite", "/usr/lib/sysimage/rpm/rpmdb.sqlite")
RPM_OLD = ("/var/lib/rpm/Packages", "/var/lib/rpm/Packages.db", "/usr/lib/sysimage/rpm/Packages.db")
RPMDB_LIMIT = 1 << 30      #: bytes of rpmdb.sqlite accepted (RHEL hosts: tens of MB)
RPM_SECONDS = 20.0         #: time the sqlite read may take
MAX_ROWS = 100_000


_PACKAGE = re.compile(rb"^Package:[ \t]*(\S+)", re.M)  #: a stanza's package name (deb-control(5) field syntax)


def nvidia_package(name: str) -> bool:
    return name.startswith(PACKAGE_PREFIXES)


def acquire(ctx) -> dict:
    """List the library directories, keep the NVIDIA stanzas of dpkg's status file and the NVIDIA headers of
    the rpm database. Returns ``{"libraries": {dir: {"status", "errno", "names": [matching names]}},
    "rpm": {"status", "source", "packages": [...]} }`` (the dpkg stanzas are a stored file)."""
    return {"libraries": {d: _libraries(ctx, d) for d in LIB_DIRS}, "dpkg": _dpkg(ctx), "rpm": _rpm(ctx)}


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


def _rpm(ctx) -> dict:
    """The NVIDIA packages of the rpm database, stored as ``nvidia_host/rpm-packages.json``."""
    path = next((p for p in RPMDBS if hostfs.exists(ctx.root, p)), None)
    if path is None:
        old = next((p for p in RPM_OLD if hostfs.exists(ctx.root, p)), None)
        if old is not None:
            ctx.writer.record(Artifact(None, old, Status.ERROR, "sqlite",
                                       message="unsupported: a Berkeley DB / ndb rpm database (RPM 4.15 and older, "
                                               "SUSE) is not read; rpm -qa on the node lists it"))
            return {"status": "unsupported", "source": old, "packages": None}
        ctx.writer.record(Artifact(None, RPMDBS[0], Status.ABSENT, "sqlite", message="no rpm database on this host"))
        return {"status": "absent", "source": None, "packages": None}
    try:
        with hostfs.open_regular(ctx.root, path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > RPMDB_LIMIT:
                ctx.writer.record(Artifact(None, path, Status.ERROR, "sqlite", size=size,
                                           message=f"not read: {size} bytes, over the {RPMDB_LIMIT}-byte bound"))
                return {"status": "error", "source": path, "packages": None}
            packages, note = _rpm_packages(f.fileno(), ctx.deadline)
    except OSError as e:
        a = ctx.writer.record(from_oserror(path, "sqlite", e))
        return {"status": a.status.value, "source": path, "packages": None}
    except Exception as e:  # sqlite3.Error (corrupt, not a database, interrupted) or sqlite3 missing
        ctx.writer.record(Artifact(None, path, Status.ERROR, "sqlite", message=f"{type(e).__name__}: {e}"))
        return {"status": "error", "source": path, "packages": None}
    notes = [n for n in (note, _wal_note(ctx.root, path)) if n]
    a = ctx.writer.write_json(f"{REL}/rpm-packages.json", packages, source=path, method="sqlite-immutable",
                              notes=tuple(notes))
    return {"status": a.status.value, "source": path, "packages": len(packages)}


def _wal_note(root, path: str) -> str | None:
    """rpm keeps its database in WAL mode: transactions not yet checkpointed sit in ``-wal``, which an
    immutable read does not see. Say so when that file is not empty."""
    try:
        size = os.lstat(hostfs.resolve(root, path + "-wal")).st_size
    except OSError:
        return None
    return (f"{path}-wal holds {size} bytes not yet checkpointed: the transactions in it (the latest rpm/dnf run) "
            "are not in this reading (read-only, immutable)") if size else None


def _rpm_packages(fd: int, deadline: float | None) -> tuple[list[dict], str | None]:
    """``[{"name", "epoch", "version", "release", "arch"}]`` of NVIDIA packages in the sqlite database open on
    ``fd``, and a note when the row or time bound cut the scan. Raises sqlite3.Error, ImportError."""
    import sqlite3  # the standard library's; a Python built without it records the error
    stop = time.monotonic() + RPM_SECONDS
    if deadline is not None:
        stop = min(stop, deadline)
    conn = sqlite3.connect(f"file:/proc/self/fd/{fd}?mode=ro&immutable=1", uri=True)
    try:
        conn.set_progress_handler(lambda: 1 if time.monotonic() > stop else 0, 10_000)
        out, note, rows = [], None, 0
        try:
            for (blob,) in conn.execute("SELECT blob FROM Packages"):
                rows += 1
                if rows > MAX_ROWS:
                    note = f"truncated: only the first {MAX_ROWS} packages were looked at"
                    break
                h = header(blob) if isinstance(blob, bytes) else None
                if h and h.get("name") and nvidia_package(h["name"]) and len(out) < MAX_PACKAGES:
                    out.append(h)
        except sqlite3.OperationalError as e:
            if "interrupt" not in str(e):
                raise
            note = f"truncated: the read was stopped at its time bound after {rows} packages"
        return out, note
    finally:
        conn.close()


HEADER_TAGS = {1000: "name", 1001: "version", 1002: "release", 1003: "epoch", 1022: "arch"}
STRING, INT32 = 6, 4


def header(blob: bytes) -> dict | None:
    """``{"name", "epoch", "version", "release", "arch"}`` of one rpm header blob (None when malformed)."""
    if len(blob) < 8:
        return None
    il, dl = struct.unpack(">II", blob[:8])
    start = 8 + 16 * il
    if il > 10_000 or start + dl > len(blob):
        return None
    store = blob[start:start + dl]
    out: dict = dict.fromkeys(("name", "epoch", "version", "release", "arch"))
    for i in range(il):
        tag, typ, off, count = struct.unpack(">iIiI", blob[8 + 16 * i: 24 + 16 * i])
        key = HEADER_TAGS.get(tag)
        if key is None or off < 0 or off >= len(store):
            continue
        if typ == STRING and key != "epoch":
            end = store.find(b"\0", off)
            out[key] = store[off:end if end >= 0 else len(store)].decode("utf-8", "replace")
        elif typ == INT32 and key == "epoch" and off + 4 <= len(store):
            out[key] = struct.unpack(">i", store[off:off + 4])[0]
    return out


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


def rpm_versions(packages: list) -> dict:
    """``{name: "[epoch:]version-release"}`` (``name.arch`` when a name has two architectures)."""
    names = [p.get("name") for p in packages if isinstance(p, dict)]
    out = {}
    for p in packages:
        if not isinstance(p, dict) or not p.get("name"):
            continue
        key = f"{p['name']}.{p.get('arch')}" if names.count(p["name"]) > 1 else p["name"]
        evr = f"{p.get('version')}-{p.get('release')}" if p.get("release") else str(p.get("version"))
        out[key] = f"{p['epoch']}:{evr}" if p.get("epoch") not in (None, 0) else evr
    return out


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

