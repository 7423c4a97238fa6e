"""NVIDIA Fabric Manager (NVSwitch systems): its systemd unit, whether it is enabled, its config and its log.

- Unit ``nvidia-fabricmanager.service`` in ``/etc/systemd/system`` (which overrides), ``/usr/lib/systemd/system``
  or ``/lib/systemd/system``; a unit in /etc linked to ``/dev/null`` is masked (systemctl(1) ``mask``; the fix
  in NVIDIA/gpu-operator#356 was ``systemctl unmask``). Enabled: a link of that name in a ``*.wants`` or
  ``*.requires`` directory of those three (systemd.unit(5) "[Install] WantedBy="). Links are read, never
  followed.
- Config ``/usr/share/nvidia/nvswitch/fabricmanager.cfg`` (``KEY=VALUE`` lines, ``#`` comments):
  ``LOG_FILE_NAME`` (default ``/var/log/fabricmanager.log``; empty: logs go to the console, stderr),
  ``LOG_USE_SYSLOG=1`` (logs go to syslog instead of the file), ``LOG_LEVEL`` (0 none .. 4 INFO) -- the
  Fabric Manager user guide's config reference, as quoted in public deployment docs.
- The GPU Operator runs Fabric Manager in its driver container: the same files under ``/run/nvidia/driver``.
- Log lines: ``[Feb 27 2025 15:10:02] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 on
  NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61`` (leptonai/gpud@15b320f7
  ``components/accelerator/nvidia/fabric-manager/testdata/fabricmanager.log``, a real log; gpud's
  ``log_parser.go`` reads the stamp as Go layout ``Jan 02 2006 15:04:05``). An entry may run on over lines that
  have no stamp (``Message payload details:...``). The stamp has no zone: it is read in the node's zone.
  Levels as the config names them: CRITICAL, ERROR, WARNING, INFO (and DEBUG).
"""
from __future__ import annotations

import errno
import posixpath
import re
from datetime import datetime

from forensics import hostfs
from forensics.artifact import Status
from forensics.redact import TEXT_NOTE, redact_bytes
from forensics.redact_config import store_config
from forensics.timeutil import iso_z, localize

REL = "nvidia_host/fabricmanager"
UNIT = "nvidia-fabricmanager.service"
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
DEFAULT_LOG = "/var/log/fabricmanager.log"
DRIVER_ROOT = "/run/nvidia/driver"
SMALL = 1 << 16
LOG_LIMIT = 1 << 20        #: bytes of the log's tail kept
MAX_WANTS_DIRS = 256
MAX_LINES = 200            #: warning-or-worse entries kept in the fact (the latest)


def acquire(ctx) -> dict:
    """Copy the unit, config and log tail (redacted) into ``nvidia_host/fabricmanager/``; returns ``{"unit":
    {"path", "link", "masked"}|None, "enabled_by": [link paths]|None, "configs": [{"source", "path",
    "log_file", "log_to_syslog", "log_level", "root"}], "logs": [{"source", "root"}]}``."""
    out = {"unit": _unit(ctx), "enabled_by": _enabled_by(ctx), "configs": [], "logs": []}
    for root in ("", DRIVER_ROOT):
        if root and not hostfs.exists(ctx.root, root):
            continue
        cfg = _config(ctx, root)
        out["configs"].append(cfg)
        log = cfg.get("log_file") if cfg.get("status") == "collected" else DEFAULT_LOG
        if log and log.startswith("/") and (not root or hostfs.exists(ctx.root, root + log)):
            _log(ctx, root + log, root)
            out["logs"].append({"source": root + log, "root": root or "/"})
    return out


def _unit(ctx) -> dict | None:
    for d in UNIT_DIRS:
        path = f"{d}/{UNIT}"
        try:
            link = hostfs.readlink(ctx.root, path)
        except OSError:
            continue
        masked = link in ("/dev/null", "../../../dev/null")
        rec = {"path": path, "link": link, "masked": masked}
        if not masked:
            store_config(ctx, path, f"{REL}/{UNIT}", "unit", SMALL)
        return rec
    return None


def _enabled_by(ctx) -> list[str] | None:
    """The ``*.wants``/``*.requires`` links named after the unit; None when /etc/systemd/system is unlistable."""
    found = []
    for d in UNIT_DIRS:
        try:
            names = hostfs.listdir(ctx.root, d)
        except OSError as e:
            if d == UNIT_DIRS[0] and e.errno != errno.ENOENT:  # unlistable, not absent: unknown
                return None
            continue
        for n in [n for n in names if n.endswith((".wants", ".requires"))][:MAX_WANTS_DIRS]:
            try:
                if hostfs.readlink(ctx.root, f"{d}/{n}/{UNIT}") is not None:
                    found.append(f"{d}/{n}/{UNIT}")
            except OSError:
                pass
    return found


CFG_LINE = re.compile(r"^\s*(?P<key>[A-Z_][A-Z0-9_]*)\s*=\s*(?P<value>.*?)\s*$", re.M)


def _config(ctx, root: str) -> dict:
    src = root + CONFIG
    kept: list[bytes] = []
    rel = f"{REL}/driver-root" if root else REL
    a = store_config(ctx, src, f"{rel}/fabricmanager.cfg", "env", SMALL, kept=kept)
    rec = {"source": src, "root": root or "/", "status": a.status.value, "log_file": None, "log_to_syslog": None,
           "log_level": None}
    if a.status in (Status.COLLECTED, Status.TRUNCATED) and kept:
        rec.update(parse_config(kept[0].decode("utf-8", "replace")))
    return rec


def parse_config(text: str) -> dict:
    """``{"log_file": path|None, "log_to_syslog": bool|None, "log_level": int|None}`` from fabricmanager.cfg
    (a missing LOG_FILE_NAME is the default path; an empty one means the console: None)."""
    values = {m.group("key"): m.group("value") for m in CFG_LINE.finditer(text)}  # a "#" line never matches
    log = values.get("LOG_FILE_NAME", DEFAULT_LOG)
    level = values.get("LOG_LEVEL")
    return {"log_file": log or None, "log_to_syslog": {"1": True, "0": False}.get(values.get("LOG_USE_SYSLOG", "")),
            "log_level": int(level) if level and level.isdigit() else None}


def _log(ctx, src: str, root: str) -> None:
    def transform(data: bytes):
        out = redact_bytes(data) if ctx.redact else data
        return out, ((f"credentials redacted ({TEXT_NOTE})",) if out != data else ())
    rel = f"{REL}/driver-root" if root else REL
    ctx.copy(src, f"{rel}/{posixpath.basename(src)}", limit=LOG_LIMIT, tail=True,
                    transform=transform)


# -- reading ---------------------------------------------------------------------------------------------
STAMP = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [ 0-9]\d \d{4} \d{2}:\d{2}:\d{2})\] \[(?P<level>[A-Z]+)\]"
                   r"(?: \[tid (?P<tid>\d+)\])? ?(?P<msg>.*)$")
WORSE = ("CRITICAL", "ERROR", "WARNING", "FATAL")


def log_entries(text: str, node) -> tuple[list[dict], int, int]:
    """``(entries, warning-or-worse count, lines without a stamp at the top)``; each entry of level WARNING or
    worse is ``{"at": ISO UTC|None, "original": stamp text, "level", "message", "flags": [...]}`` (continuation
    lines joined with ``\\n``); only the last :data:`MAX_LINES` are kept. ``node`` gives the zone (``tz``,
    ``tz_unknown`` -> flag ``tz-unknown``)."""
    entries: list[dict] = []
    current, inside = None, False
    orphans = worse = 0
    for line in text.splitlines():
        m = STAMP.match(line)
        if m is None:
            if current is not None and line.strip():
                current["message"] += "\n" + line.rstrip()
            elif not inside and line.strip():
                orphans += 1  # the tail copy may start inside an entry
            continue
        current, inside = None, True
        if m.group("level") not in WORSE:
            continue
        worse += 1
        current = {"at": None, "original": m.group("ts"), "level": m.group("level"), "message": m.group("msg"),
                   "flags": []}
        try:
            naive = datetime.strptime(m.group("ts"), "%b %d %Y %H:%M:%S")
        except ValueError:
            current["flags"].append("bad-time")
        else:
            at, flags = localize(naive, node.tz)
            current["at"] = iso_z(at)
            current["flags"] += list(flags) + (["tz-unknown"] if node.tz_unknown else [])
        entries.append(current)
    return entries[-MAX_LINES:], worse, orphans
