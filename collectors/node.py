"""Node facts: hostname, IANA time zone, boot time and boot ID, kernel, os-release, systemd version.

Sources (all read under ``--root``):
- ``/etc/hostname`` (hostname(5)); ``/etc/timezone`` (Debian) and the ``/etc/localtime`` symlink
  target (``.../zoneinfo/Area/City``, localtime(5)) for the IANA name; the ``/etc/localtime`` TZif
  bytes themselves (RFC 8536) are stored so that analysis converts zone-less logs with the node's own
  rules, on any machine;
- ``/proc/stat`` ``btime`` (boot time, seconds since the epoch; proc(5)) and
  ``/proc/sys/kernel/random/boot_id`` (the journal's ``_BOOT_ID``);
- ``/proc/sys/kernel/osrelease`` (kernel), ``/etc/os-release`` (os-release(5));
- systemd's version: ``systemctl --version`` on a live node, else the ``systemd`` stanza of
  ``/var/lib/dpkg/status`` (dpkg-query(1) field format), else the journal's start-up banner (read by
  collectors/journal/).
"""
from __future__ import annotations

import re
import shlex
import subprocess
from datetime import datetime, timezone

from forensics import hostfs
from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.source import CollectContext, Reading
from forensics.events import NodeFacts
from forensics.timeutil import iso_z, tz_from_tzif, parse_iso

FILES = [  # (host path, bundle path)
    ("/etc/hostname", "node/hostname"),
    ("/etc/timezone", "node/timezone"),
    ("/etc/localtime", "node/localtime"),
    ("/etc/machine-id", "node/machine-id"),
    ("/etc/os-release", "node/os-release"),
    ("/proc/stat", "node/proc-stat"),
    ("/proc/sys/kernel/random/boot_id", "node/boot_id"),
    ("/proc/sys/kernel/osrelease", "node/osrelease"),
    ("/proc/version", "node/proc-version"),
]
#: packages whose installed version is evidence (from /var/lib/dpkg/status)
VERSIONED = ("systemd", "containerd", "containerd.io", "runc", "nvidia-container-toolkit",
             "nvidia-container-toolkit-base", "libnvidia-container1", "libnvidia-container-tools", "snapd",
             "unattended-upgrades", "kubelet")
STATUS_LIMIT = 64 << 20
NAME = "node"
OPTIONS: list = []  #: none (``--node`` is the pipeline's: ``ctx.node.hostname_override``)


def acquire(ctx: CollectContext) -> None:
    """Copy the node-fact files into ``node/`` and fill ``ctx.node`` (:class:`forensics.source.HostFacts`:
    hostname, tz_name, utc_offset, boot_time, boot_id, kernel, systemd_version, package_versions)."""
    w = ctx.writer
    for src, rel in FILES:
        w.copy(ctx.root, src, rel, method="copy", limit=1 << 20)
    facts = ctx.node
    facts.hostname = _first_line(ctx, "/etc/hostname")
    facts.tz_name, facts.tz_basis = _tz_name(ctx)
    facts.boot_id = _first_line(ctx, "/proc/sys/kernel/random/boot_id")
    facts.kernel = _first_line(ctx, "/proc/sys/kernel/osrelease")
    try:
        stat_text = hostfs.read_text(ctx.root, "/proc/stat")
        m = re.search(r"^btime (\d+)$", stat_text, re.M)
        facts.boot_time = iso_z(datetime.fromtimestamp(int(m.group(1)), timezone.utc)) if m else None
    except (OSError, ValueError, OverflowError):  # a btime past year 9999 (a corrupt copy of /proc/stat)
        facts.boot_time = None
    try:
        with hostfs.open_regular(ctx.root, "/etc/localtime") as f:
            zone = tz_from_tzif(f.read(1 << 20))
        facts.utc_offset = datetime.now(timezone.utc).astimezone(zone).strftime("%z")
    except (OSError, ValueError):
        facts.utc_offset = None
    facts.package_versions = _dpkg_versions(ctx)
    facts.systemd_version, facts.systemd_version_basis = _systemd_version(ctx, facts.package_versions)


def _first_line(ctx: CollectContext, path: str) -> str | None:
    try:
        text = hostfs.read_text(ctx.root, path, limit=4096).strip()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


def _tz_name(ctx: CollectContext) -> tuple[str | None, str | None]:
    try:
        target = hostfs.readlink(ctx.root, "/etc/localtime")
    except OSError:
        target = None
    if target and "zoneinfo/" in target:
        return target.split("zoneinfo/", 1)[1], f"/etc/localtime -> {target}"
    name = _first_line(ctx, "/etc/timezone")
    if name:
        return name, "/etc/timezone"
    return None, None


def _dpkg_versions(ctx: CollectContext) -> dict:
    """Installed versions of :data:`VERSIONED` packages, streamed from /var/lib/dpkg/status, which is
    also stored whole (bounded) as ``node/dpkg-status``."""
    art = ctx.writer.copy(ctx.root, "/var/lib/dpkg/status", "node/dpkg-status", limit=STATUS_LIMIT)
    if art.status not in (Status.COLLECTED, Status.TRUNCATED):
        return {}
    return parse_dpkg_status(ctx.writer.dir / art.path)


def parse_dpkg_status(path) -> dict:
    """``{package: version}`` for installed :data:`VERSIONED` packages in a dpkg status file
    (deb822 stanzas: ``Package:``, ``Status: install ok installed``, ``Version:``)."""
    out, pkg, ver, installed = {}, None, None, False
    with open(path, "rb") as f:
        for raw in f:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if not line.strip():
                if pkg in VERSIONED and installed and ver:
                    out[pkg] = ver
                pkg, ver, installed = None, None, False
            elif line.startswith("Package: "):
                pkg = line[9:].strip()
            elif line.startswith("Version: "):
                ver = line[9:].strip()
            elif line.startswith("Status: "):
                installed = line.strip().endswith(" installed")
    if pkg in VERSIONED and installed and ver:
        out[pkg] = ver
    return out


def _systemd_version(ctx: CollectContext, versions: dict) -> tuple[str | None, str | None]:
    if ctx.live:
        argv = ["systemctl", "--version"]
        try:
            out = subprocess.run(argv, capture_output=True, timeout=10, check=False).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            ctx.writer.record(Artifact(None, shlex.join(argv), Status.ERROR, "command", message=str(e)))
        else:
            with ctx.writer.create("node/systemctl-version.txt", shlex.join(argv), "command") as fh:
                fh.write(out.decode("utf-8", "replace"))
            m = re.match(r"systemd (\d+)(?: \(([^)]+)\))?", out.decode("utf-8", "replace"))
            if m:
                return (m.group(2) or m.group(1)), "systemctl --version"
    if "systemd" in versions:
        return versions["systemd"], "/var/lib/dpkg/status"
    return None, None


def facts(bundle: Bundle) -> NodeFacts:
    """Read the node facts back from the bundle (never from the host).

    The zone comes from the stored ``node/localtime`` TZif bytes; when those are missing the zone is
    UTC and ``tz_name`` says ``"UTC (node zone unknown)"`` so that nobody mistakes it for the node's.
    """
    meta = bundle.manifest.get("node_facts") or {}
    nf = NodeFacts(hostname=bundle.manifest.get("node") or meta.get("hostname"), tz_name=meta.get("tz_name"),
                   boot_id=meta.get("boot_id"), kernel=meta.get("kernel"),
                   systemd_version=meta.get("systemd_version"))
    p = bundle.path("node/localtime")
    try:
        nf.tz = tz_from_tzif(p.read_bytes(), nf.tz_name)
    except (OSError, ValueError):
        nf.tz_name = "UTC (node zone unknown)"
    if meta.get("boot_time"):
        nf.boot_time = parse_iso(meta["boot_time"])
    try:
        for line in bundle.path("node/os-release").read_text("utf-8", "replace").splitlines():
            k, _, v = line.partition("=")
            if k and v:
                nf.os_release[k.strip()] = v.strip().strip('"')
    except OSError:
        pass
    return nf


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """Node facts as a Reading: the boot time becomes the ``node`` source's coverage for reboots
    (a single boot spans everything after it until collection)."""
    r = Reading(facts={"package_versions": (bundle.manifest.get("node_facts") or {}).get("package_versions", {})})
    if node.boot_time:
        end = (bundle.manifest.get("collection") or {}).get("start")
        r.coverage.append(_boot_coverage(node, end))
    return r


def _boot_coverage(node: NodeFacts, end: str | None):
    from forensics.events import Coverage
    return Coverage("boot", node.boot_time, parse_iso(end) if end else None,
                    f"the running boot {node.boot_id or ''} started {iso_z(node.boot_time)} (/proc/stat btime)".replace("  ", " "))
