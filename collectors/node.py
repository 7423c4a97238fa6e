"""Node facts: hostname, IANA time zone, boot time and boot ID, kernel, os-release, systemd version.

Sources (all read under ``--root``):
- ``/etc/hostname`` (hostname(5));
- the node's zone, from what the node itself says, in this order (:func:`zone`): the ``/etc/localtime``
  TZif bytes (RFC 8536) inside the root, the zone name in its link text (``.../zoneinfo/Area/City``,
  localtime(5); ``timedatectl set-timezone`` writes that link) even when the target is not inside
  ``--root``, ``/etc/timezone`` (Debian), ``ZONE=`` in ``/etc/sysconfig/clock`` (RHEL-likes). The TZif
  bytes are stored (``node/localtime``, or the root's ``/usr/share/zoneinfo/NAME`` as ``node/zoneinfo``)
  so that analysis converts zone-less logs with the node's own rules on any machine; a name with no
  TZif inside the root is read back by name from the analysing machine's tzdata, and says so;
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

from forensics import debstatus, hostfs, rpmdb
from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.engines import ENGINES
from forensics.source import CollectContext, Reading
from forensics.events import NodeFacts
from forensics.timeutil import iso_z, tz_by_name, tz_from_tzif, parse_iso

FILES = [  # (host path, bundle path)
    ("/etc/hostname", "node/hostname"),
    ("/etc/timezone", "node/timezone"),
    ("/etc/sysconfig/clock", "node/sysconfig-clock"),
    ("/etc/localtime", "node/localtime"),
    ("/etc/machine-id", "node/machine-id"),
    ("/etc/os-release", "node/os-release"),
    ("/proc/stat", "node/proc-stat"),
    ("/proc/sys/kernel/random/boot_id", "node/boot_id"),
    ("/proc/sys/kernel/osrelease", "node/osrelease"),
    ("/proc/version", "node/proc-version"),
]
#: packages whose installed version is evidence (from /var/lib/dpkg/status)
VERSIONED = ("systemd", "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1",
             "libnvidia-container-tools", "snapd", "unattended-upgrades", "kubelet",
             *(n for e in ENGINES.values() if e.version for n in e.version.packages))  # containerd's, Docker's...
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
    facts.tz_name, facts.tz_source, zone_rules = zone(ctx)
    facts.boot_id = _first_line(ctx, "/proc/sys/kernel/random/boot_id")
    facts.kernel = _first_line(ctx, "/proc/sys/kernel/osrelease")
    try:
        stat_text = hostfs.read_text(ctx.root, "/proc/stat")
        m = re.search(r"^btime (\d+)$", stat_text, re.M)
        facts.boot_time = iso_z(datetime.fromtimestamp(int(m.group(1)), timezone.utc)) if m else None
    except (OSError, ValueError, OverflowError):  # a btime past year 9999 (a corrupt copy of /proc/stat)
        facts.boot_time = None
    facts.utc_offset = datetime.now(timezone.utc).astimezone(zone_rules).strftime("%z") if zone_rules else None
    facts.package_versions, facts.package_db = _package_versions(ctx)
    facts.systemd_version, facts.systemd_version_basis = _systemd_version(ctx, facts.package_versions,
                                                                          facts.package_db)


def _first_line(ctx: CollectContext, path: str) -> str | None:
    try:
        text = hostfs.read_text(ctx.root, path, limit=4096).strip()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


#: a zone name as tzdata spells its keys (``Asia/Tokyo``, ``Etc/GMT+5``, ``America/Argentina/Buenos_Aires``)
ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*")


def zone(ctx: CollectContext) -> tuple[str | None, str | None, object | None]:
    """``(IANA name, source sentence, tzinfo)`` of the node's zone, each None when the node did not say.

    Order (what the node itself says): the ``/etc/localtime`` TZif inside the root (its name from the
    link text, else /etc/timezone, else /etc/sysconfig/clock); the zone name in the ``/etc/localtime``
    link text when its target is not inside the root (the text is read with readlink on the
    root-relative path, never followed out); ``/etc/timezone``; ``ZONE=`` of ``/etc/sysconfig/clock``.
    A name without TZif bytes takes them from the root's ``/usr/share/zoneinfo/NAME`` (stored as
    ``node/zoneinfo``), else from the collecting machine's tzdata by name (for ``utc_offset`` only:
    analysis loads it again by name, :func:`facts`). Raises nothing."""
    try:
        target = hostfs.readlink(ctx.root, "/etc/localtime")
    except OSError:
        target = None
    linked = _zone_key(target.split("zoneinfo/", 1)[1]) if target and "zoneinfo/" in target else None
    named = [(n, src) for n, src in ((linked, f"/etc/localtime -> {target}"),
                                     (_zone_key(_first_line(ctx, "/etc/timezone")), "/etc/timezone"),
                                     (_sysconfig_zone(ctx), "/etc/sysconfig/clock ZONE=")) if n]
    name, said = named[0] if named else (None, None)
    try:
        with hostfs.open_regular(ctx.root, "/etc/localtime") as f:
            data = f.read(1 << 20)
    except OSError:
        pass  # absent, unreadable, or a link whose target is not inside --root
    else:
        try:
            rules = tz_from_tzif(data, name)
        except ValueError:  # glibc reads a damaged /etc/localtime as UTC, whatever /etc/timezone says
            says = f" ({said} says {name})" if said else ""
            return None, f"/etc/localtime is not a TZif file{says}: zone unknown", None
        link = f", link -> {target}" if target else ""
        named_by = f"; name from {said}" if said and not linked else ""
        return name, f"/etc/localtime (TZif bytes{link}){named_by}", rules
    if name is None:
        return None, None, None
    if linked:
        said += " (the target is not inside --root: zone name from the link text)"
    art = ctx.writer.copy(ctx.root, f"/usr/share/zoneinfo/{name}", "node/zoneinfo", limit=1 << 20)
    if art.status is Status.COLLECTED:
        try:
            return name, f"{said}; rules from /usr/share/zoneinfo/{name} inside --root", \
                tz_from_tzif((ctx.writer.dir / art.path).read_bytes(), name)
        except (OSError, ValueError):
            pass
    try:
        rules = tz_by_name(name)
    except ValueError:
        rules = None
    return name, f"{said}; no TZif for {name} inside --root", rules


def _zone_key(text: str | None) -> str | None:
    """``text`` as a tzdata key (``posix/`` dropped), or None when it is not one (``..``, spaces, empty)."""
    text = (text or "").strip()
    text = text[6:] if text.startswith("posix/") else text
    return text if ZONE_NAME.fullmatch(text) and ".." not in text else None


def _sysconfig_zone(ctx: CollectContext) -> str | None:
    """``ZONE="America/New_York"`` of /etc/sysconfig/clock (RHEL 6 and its descendants' initscripts)."""
    try:
        text = hostfs.read_text(ctx.root, "/etc/sysconfig/clock", limit=4096)
    except OSError:
        return None
    m = re.search(r'^\s*ZONE\s*=\s*"?([^"\n]*)"?\s*$', text, re.M)
    return _zone_key(m.group(1)) if m else None


#: where the node collector keeps the versioned packages' rpm headers (a node without dpkg: RHEL, Fedora, SUSE)
RPM_COPY = "node/rpm-packages.json"


def _package_versions(ctx: CollectContext) -> tuple[dict, str | None]:
    """``({package: version}, the database read)`` of the installed :data:`VERSIONED` packages: from
    /var/lib/dpkg/status, which is also stored whole (bounded) as ``node/dpkg-status``; on a node without it,
    from rpm's database (:mod:`forensics.rpmdb`; ``[epoch:]version-release``), their headers stored as
    :data:`RPM_COPY` (the database's own absence or trouble is the nvidia_host collector's record)."""
    art = ctx.writer.copy(ctx.root, debstatus.PATH, debstatus.COPY, limit=debstatus.LIMIT)
    if art.status in (Status.COLLECTED, Status.TRUNCATED):
        return parse_dpkg_status(ctx.writer.dir / art.path), debstatus.PATH
    if art.status is not Status.ABSENT:
        return {}, None
    got, packages = rpmdb.collect(ctx, VERSIONED.__contains__, RPM_COPY, len(VERSIONED) * 4, record=False)
    return (rpmdb.versions(packages), got["source"]) if packages is not None else ({}, None)


#: the package states (the last word of dpkg's ``Status:``) whose version is the one installed: configured, or
#: configured but for its triggers (dpkg(1) "installed", "triggers-awaited", "triggers-pending")
INSTALLED_STATES = (" installed", " triggers-awaited", " triggers-pending")


def parse_dpkg_status(path) -> dict:
    """``{package: version}`` for installed :data:`VERSIONED` packages in a dpkg status file
    (deb822 stanzas: ``Package:``, ``Status: install ok installed``, ``Version:``; :data:`INSTALLED_STATES`)."""
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
            elif line.startswith("Status: "):  # dpkg(1) states: configured, or only its triggers still to run
                installed = line.strip().endswith(INSTALLED_STATES)
    if pkg in VERSIONED and installed and ver:
        out[pkg] = ver
    return out


def _systemd_version(ctx: CollectContext, versions: dict, db: str | None) -> tuple[str | None, str | None]:
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
        return versions["systemd"], db
    return None, None


def facts(bundle: Bundle) -> NodeFacts:
    """Read the node facts back from the bundle (never from the host).

    The zone comes from the stored TZif bytes (``node/localtime``, else ``node/zoneinfo``), else from
    the zone name the node gave (``tz_name``), by name, from the analysing machine's tzdata
    (``tz_source`` says so). When the node said nothing, the zone is UTC only as a reading convention:
    ``tz_unknown`` is True and ``tz_name`` says ``"UTC (node zone unknown)"`` so that nobody mistakes it
    for the node's. Bundles before ``tz_source`` recorded ``tz_basis``: read as the same.
    """
    meta = bundle.manifest.get("node_facts") or {}
    nf = NodeFacts(hostname=bundle.manifest.get("node") or meta.get("hostname"), tz_name=meta.get("tz_name"),
                   boot_id=meta.get("boot_id"), kernel=meta.get("kernel"),
                   systemd_version=meta.get("systemd_version"))
    said = meta.get("tz_source") or meta.get("tz_basis")
    for rel, what in (("node/localtime", "/etc/localtime (TZif bytes)"), ("node/zoneinfo", "TZif bytes kept")):
        try:
            nf.tz = tz_from_tzif(bundle.path(rel).read_bytes(), nf.tz_name)
        except (OSError, ValueError):
            continue
        nf.tz_source = said or what
        break
    else:
        try:
            nf.tz = tz_by_name(nf.tz_name or "")
            nf.tz_source = f"{said or 'zone name ' + str(nf.tz_name)}: rules by name from the analysing machine's " \
                           "tzdata"
        except ValueError:
            nf.tz_name, nf.tz_unknown, nf.tz_source = "UTC (node zone unknown)", True, said
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
