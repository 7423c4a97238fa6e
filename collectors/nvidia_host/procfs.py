"""The loaded NVIDIA kernel modules, from files the kernel keeps in memory: ``/proc/driver/nvidia/{version,
params,registry}``, the names under ``/proc/driver/nvidia/gpus/`` and ``/proc/driver/nvidia-nvswitch/devices/``,
``/sys/module/<module>/{version,taint,initstate,refcnt}`` and ``parameters/*``, and ``/proc/devices``.

What is never read, on purpose: ``/proc/driver/nvidia/gpus/*/information`` and ``power``, and
``/proc/driver/nvidia/warnings/*``. Their read handlers call into the resource manager (``rm_get_gpu_uuid``,
``rm_get_vbios_version``... in ``kernel-open/nvidia/nv-procfs.c``), which can hang on a broken GPU;
``nvidia-bug-report.sh --safe-mode`` skips them for that reason, and still reads ``version``, ``params`` and
``registry`` (NVIDIA's script, as shipped in bottlerocket-os/bottlerocket-admin-container@a226b193
``nvidia-bug-report.sh``: "Skipped in safe mode", "driver may be unresponsive"). The directories are only
listed (names), never their files opened.

Formats, from the open kernel modules (NVIDIA/open-gpu-kernel-modules@1739a20e ``kernel-open/nvidia/nv-procfs.c``):
``version`` is ``NVRM version: %s\\n`` (``pNVRM_ID``) then ``GCC version:  %s\\n``; the id reads
``NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@...)  <date>`` for the open
modules and ``NVIDIA UNIX x86_64 Kernel Module  580.95.05  <date>`` for the proprietary ones. ``params`` is one
``%s: %u`` line per parameter, then ``RegistryDwords: "%s"`` and five more quoted strings. ``/sys/module/<m>/
version`` is ``MODULE_VERSION(NV_VERSION_STRING)`` (``nv.c``); ``taint`` holds ``P`` for a proprietary module
(kernel Documentation/admin-guide/tainted-kernels.rst). ``/proc/devices`` is ``Character devices:`` then
``%3d %s`` lines, a blank line, ``Block devices:`` (proc(5)). Its ``nvidia-nvswitch`` entry is no sign of
NVSwitch hardware: ``nvswitch_init()`` registers that major whenever nvidia.ko loads on a 64-bit CPU
(``kernel-open/nvidia/linux_nvswitch.c``, called from ``nvlink_drivers_init`` in ``nv.c``); the probed switches
are the names under ``/proc/driver/nvidia-nvswitch/devices/`` (``nvswitch_procfs_init``).
"""
from __future__ import annotations

import re

from forensics import hostfs
from forensics.artifact import Artifact, Status, errno_name, from_oserror

PROC = "/proc/driver/nvidia"
PROC_FILES = ("version", "params", "registry")
GPUS_DIR = PROC + "/gpus"
NVSWITCH_DIR = "/proc/driver/nvidia-nvswitch/devices"
#: the modules of the driver (nvidia_peermem: GPUDirect RDMA), as /sys/module names them
MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
MODULE_FILES = ("version", "taint", "initstate", "refcnt")
SMALL = 1 << 16            #: bytes copied of one procfs/sysfs file
PARAM_LIMIT = 4096         #: bytes read of one module parameter's value
MAX_PARAMS = 512           #: parameters read per module
MAX_NAMES = 4096           #: names kept of one directory listing
REL = "nvidia_host"


def acquire(ctx) -> dict:
    """Copy the /proc and /sys files of the loaded modules into ``nvidia_host/proc/...`` and
    ``nvidia_host/sys/module/...`` (absent, unreadable or error records for the others) and return the facts
    of listings: ``{"procfs_mounted", "gpus_dir", "nvswitch_dir", "modules", "module_parameters"}``.
    A listing is ``{"status": "listed"|"absent"|"unreadable"|"error", "names": [...], "errno"}``; a module's
    entry ``{"present": bool|None}``; parameters ``{module: {"values": {name: text}, "failed": {name: errno
    name}}}``. Raises nothing for host files (a failure is a record)."""
    # /proc mounted (its own /proc/stat is there) tells "no driver loaded" from "no /proc at all" (a disk image)
    out = {"procfs_mounted": hostfs.exists(ctx.root, "/proc/stat")}
    for name in PROC_FILES:
        ctx.copy(f"{PROC}/{name}", f"{REL}/proc/driver/nvidia/{name}", limit=SMALL)
    ctx.copy("/proc/devices", f"{REL}/proc/devices", limit=SMALL)
    out["gpus_dir"] = listing(ctx, GPUS_DIR)
    out["nvswitch_dir"] = listing(ctx, NVSWITCH_DIR)
    out["modules"], out["module_parameters"] = {}, {}
    for mod in MODULES:
        base = f"/sys/module/{mod}"
        present = listing(ctx, base)
        out["modules"][mod] = {"present": {"listed": True, "absent": False}.get(present["status"])}
        if present["status"] != "listed":
            continue
        for f in MODULE_FILES:
            if f in present["names"]:
                ctx.copy(f"{base}/{f}", f"{REL}/sys/module/{mod}/{f}", limit=SMALL)
        if "parameters" in present["names"]:
            out["module_parameters"][mod] = _parameters(ctx, f"{base}/parameters")
    return out


def listing(ctx, path: str) -> dict:
    """The names in the host directory ``path`` (at most :data:`MAX_NAMES`) with the listing's outcome;
    an unreadable or failed listing is also a manifest record (an absent one only here: most are)."""
    try:
        names = hostfs.listdir(ctx.root, path)
    except OSError as e:
        a = from_oserror(path, "listdir", e)
        if a.status is not Status.ABSENT:
            ctx.writer.record(a)
        return {"status": a.status.value, "names": None, "errno": a.errno}
    return {"status": "listed", "names": names[:MAX_NAMES], "errno": None,
            **({"cut": f"{len(names)} names, the first {MAX_NAMES} kept"} if len(names) > MAX_NAMES else {})}


def _parameters(ctx, path: str) -> dict:
    """``{"values": {name: text}, "failed": {name: "EACCES"...}}`` of one module's ``parameters/``; a value that
    cannot be read is recorded too (never taken for an empty one)."""
    got = listing(ctx, path)
    values, failed = {}, {}
    for name in (got["names"] or [])[:MAX_PARAMS]:
        if ctx.budget_spent(f"{path}/{name}", "read"):
            failed[name] = "not read: time budget"
            continue
        try:
            values[name] = hostfs.read_text(ctx.root, f"{path}/{name}", limit=PARAM_LIMIT).rstrip("\n")
        except OSError as e:
            a = from_oserror(f"{path}/{name}", "read", e)
            failed[name] = errno_name(a.errno) or a.status.value
            if a.status is not Status.ABSENT:
                ctx.writer.record(a)
    return {"status": got["status"], "values": values, "failed": failed}


# -- reading the stored copies ---------------------------------------------------------------------------
VERSION_LINE = re.compile(r"^NVRM version: NVIDIA UNIX (?P<open>Open )?.*?Kernel Module(?: for \S+)? +(?P<ver>\S+)")
DRIVER_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)*")


def parse_version(text: str) -> dict:
    """``/proc/driver/nvidia/version`` text → ``{"version": "570.158.01"|None, "kind": "open"|"proprietary"|None,
    "line": the NVRM line|None, "gcc": text|None}``. The version is the token after the module's description
    when it looks like a driver version (a Jetson build prints ``TempVersion``: None, line kept)."""
    out = {"version": None, "kind": None, "line": None, "gcc": None}
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            out["line"] = line.strip()
            m = VERSION_LINE.match(line.strip())
            if m:
                out["kind"] = "open" if m.group("open") else "proprietary"
                out["version"] = m.group("ver") if DRIVER_VERSION.fullmatch(m.group("ver")) else None
        elif line.startswith("GCC version:"):
            out["gcc"] = line.split(":", 1)[1].strip() or None
    return out


def parse_params(text: str) -> dict:
    """``/proc/driver/nvidia/params`` text → ``{name: value}`` (numbers as int, quoted strings unquoted)."""
    out: dict = {}
    for line in text.splitlines():
        name, sep, value = line.partition(": ")
        if not sep or not name or " " in name:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            out[name] = value[1:-1]
        else:
            out[name] = int(value) if value.isascii() and value.isdigit() else value
    return out


NVIDIA_MAJOR = re.compile(r"^ *(?P<major>\d+) (?P<name>nvidia\S*)$", re.M)


def parse_proc_devices(text: str) -> dict[str, int]:
    """``{name: major}`` of the NVIDIA character devices in ``/proc/devices`` (the block section ignored):
    ``nvidia`` or, in older drivers, ``nvidia-frontend`` (195), ``nvidia-uvm``, ``nvidia-caps``,
    ``nvidia-nvswitch``, ``nvidia-nvlink``, ``nvidia-caps-imex-channels`` (dynamic majors)."""
    head, found, rest = text.partition("Character devices:")
    body = rest.split("\n\n", 1)[0] if found else ""  # the character section ends at the blank line
    return {d.group("name"): int(d.group("major")) for d in NVIDIA_MAJOR.finditer(body)}


def module_fact(bundle, facts: dict, outcome) -> dict:
    """The ``module`` part of ``host_gpu``: is the module loaded, which version and kind, and where that was
    read. ``outcome(source)`` gives the manifest record of a host path (or None). Loaded is True when
    ``version`` was copied; False when it is absent while /proc is mounted and neither /proc/devices (an
    ``nvidia``/``nvidia-frontend`` major) nor /sys/module/nvidia says otherwise; None when /proc is not mounted
    (a disk image), the file could not be read, or those sources disagree (a partial copy of /proc): then
    ``reason`` says why."""
    src = f"{PROC}/version"
    out = {"loaded": None, "version": None, "kind": None, "gcc": None, "line": None, "source": src, "reason": None}
    rec = outcome(src)
    if rec is not None and rec.status in (Status.COLLECTED, Status.TRUNCATED) and rec.path:
        out.update(parse_version(_text(bundle, rec.path)))
        out["loaded"] = True
        if out["line"] is None:
            out["reason"] = f"{src} holds no 'NVRM version:' line"
    elif rec is not None and rec.status is Status.ABSENT and facts.get("procfs_mounted"):
        others = _other_witnesses(bundle, facts, outcome)
        if others:
            out["reason"] = (f"{src} is absent, yet {' and '.join(others)}: the sources disagree "
                             "(a partial copy of /proc?)")
        else:
            out["loaded"], out["reason"] = False, f"{src} is absent while /proc is mounted (/proc/stat is there)"
    elif rec is not None and rec.status is Status.ABSENT:
        out["reason"] = "/proc is not mounted under --root (no /proc/stat): a disk image or a stopped node"
    else:
        out["reason"] = _said(rec, src)
    return out


def _other_witnesses(bundle, facts: dict, outcome) -> list[str]:
    """The sources that show the nvidia module loaded although its /proc directory is absent."""
    said = []
    dev = outcome("/proc/devices")
    if dev is not None and dev.status in (Status.COLLECTED, Status.TRUNCATED) and dev.path:
        majors = parse_proc_devices(_text(bundle, dev.path))
        named = [f"{n} {majors[n]}" for n in ("nvidia", "nvidia-frontend") if n in majors]
        if named:
            said.append(f"/proc/devices lists {', '.join(named)}")
    if ((facts.get("modules") or {}).get("nvidia") or {}).get("present"):
        said.append("/sys/module/nvidia is there")
    return said


def sys_modules_fact(bundle, facts: dict, outcome) -> dict:
    """``{module: {"loaded": bool|None, "version", "taint", "initstate", "refcnt", "source"}}`` from /sys/module
    (``loaded`` None when /sys/module/<m> could not be listed)."""
    out = {}
    for mod, seen in (facts.get("modules") or {}).items():
        rec = {"loaded": seen.get("present"), "source": f"/sys/module/{mod}"}
        for f in MODULE_FILES:
            a = outcome(f"/sys/module/{mod}/{f}")
            ok = a is not None and a.status in (Status.COLLECTED, Status.TRUNCATED) and a.path
            rec[f] = (_text(bundle, a.path).strip() or None) if ok else None
        out[mod] = rec
    return out


def _text(bundle, rel: str) -> str:
    try:
        return bundle.path(rel).read_text("utf-8", "replace")
    except OSError:
        return ""


def _said(rec: Artifact | None, src: str) -> str:
    """A reason sentence for a source that was not read: its status, errno and message."""
    if rec is None:
        return f"{src}: no record of it in the bundle (not tried)"
    bits = [rec.status.value]
    if rec.errno:
        bits.append(errno_name(rec.errno))
    return f"{src}: {' '.join(bits)}" + (f" ({rec.message})" if rec.message else "")
