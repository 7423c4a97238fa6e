"""NVIDIA PCI functions from sysfs (``/sys/bus/pci/devices/<domain:bus:dev.fn>``, vendor ``0x10de``), read-only.

Attributes and their text (kernel Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/pci-sysfs.c):
``vendor``, ``device``, ``subsystem_vendor``, ``subsystem_device`` (``0x10de``), ``class`` (``0x030200``: a
3D controller; ``0x030000`` VGA; ``0x068000`` a bridge, which is how NVSwitches show: ``PCI_CLASS_BRIDGE_NVSWITCH
0x0680`` in the open modules' ``nvswitch_export.h``), ``numa_node`` (``-1`` when none), ``enable`` (``1``: the
function is enabled), ``current_link_speed`` (``16.0 GT/s PCIe``; older kernels ``8 GT/s``; ``Unknown`` when the
device does not answer), ``current_link_width``/``max_link_width`` (a number), ``max_link_speed``,
``power/runtime_status`` (``active``, ``suspended``..., drivers/base/power/sysfs.c). ``driver`` is a link to
``.../bus/pci/drivers/<name>``: only its text is read (readlink), never followed. These are the files
nvidia-bug-report.sh reads for each ``0x10de`` function; none of them calls into the NVIDIA driver (the link
attributes read PCI configuration space directly; ``runtime_status`` is the PM core's own state).

sysfs layout: each ``/sys/bus/pci/devices/<addr>`` is a relative symlink into ``/sys/devices/pci.../<addr>``
(``../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0``). It is resolved with :func:`forensics.hostfs.resolve`,
the way the kernel would inside ``--root``; a link whose target is not a directory under ``/sys/devices`` inside
the root (an absolute link elsewhere, a ``..`` chain, a planted directory) is refused and recorded, never read.
"""
from __future__ import annotations

import os
import re

from forensics import hostfs
from forensics.artifact import Artifact, Status, errno_name, from_oserror

PCI_DIR = "/sys/bus/pci/devices"
VENDOR_NVIDIA = "0x10de"
ATTRS = ("device", "class", "subsystem_vendor", "subsystem_device", "numa_node", "enable",
         "current_link_speed", "current_link_width", "max_link_speed", "max_link_width", "power/runtime_status")
ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
MAX_FUNCTIONS = 4096       #: PCI functions looked at (a big host has a few hundred)
VALUE_LIMIT = 256          #: bytes read of one attribute
NVSWITCH_CLASS = "0x0680"  #: class prefix of an NVSwitch (bridge, other)


def acquire(ctx) -> dict:
    """Walk ``/sys/bus/pci/devices`` and read the attributes of every function whose vendor is NVIDIA's.

    Returns ``{"status": listing outcome, "seen": functions looked at, "functions": [record], "refused":
    [{"address", "target", "why"}], "cut": sentence|None}``, a record being ``{"address", "sysfs": the resolved
    path inside the root, "vendor", <ATTRS>: text|None, "driver": basename|None, "unread": {attr: "absent"|
    errno name}}``. A refused link, an unreadable vendor and an attribute that cannot be read (other than
    absent) are manifest records too. Stops at the time budget (``cut`` says so)."""
    out = {"status": None, "seen": 0, "functions": [], "refused": [], "cut": None}
    try:
        names = hostfs.listdir(ctx.root, PCI_DIR)
    except OSError as e:
        a = ctx.writer.record(from_oserror(PCI_DIR, "listdir", e))
        out["status"] = a.status.value
        return out
    out["status"] = "listed"
    if len(names) > MAX_FUNCTIONS:
        out["cut"] = f"{len(names)} entries, the first {MAX_FUNCTIONS} looked at"
    for name in names[:MAX_FUNCTIONS]:
        if ctx.expired():
            out["cut"] = f"the time budget was spent after {out['seen']} of {len(names)} functions"
            ctx.writer.record(Artifact(None, PCI_DIR, Status.TRUNCATED, "sysfs", message=out["cut"]))
            break
        if not ADDRESS.fullmatch(name):
            continue
        out["seen"] += 1
        rec = _function(ctx, name, out["refused"])
        if rec is not None:
            out["functions"].append(rec)
    return out


def _function(ctx, addr: str, refused: list) -> dict | None:
    """The record of ``addr`` when its vendor is NVIDIA's, else None (a refused link is appended to ``refused``)."""
    entry = f"{PCI_DIR}/{addr}"
    where = _device_dir(ctx.root, entry)
    if where is None or isinstance(where, tuple):
        why = where[1] if isinstance(where, tuple) else "unresolvable"
        target = _link_text(ctx.root, entry)
        refused.append({"address": addr, "target": target, "why": why})
        ctx.writer.record(Artifact(None, entry, Status.ERROR, "sysfs", message=f"refused: {why}",
                                   notes=(f"link -> {target}",) if target else ()))
        return None
    vendor = _read(ctx, f"{entry}/vendor")
    if isinstance(vendor, dict) or vendor != VENDOR_NVIDIA:
        return None
    rec: dict = {"address": addr, "sysfs": where, "vendor": vendor, "driver": None, "unread": {}}
    for attr in ATTRS:
        got = _read(ctx, f"{entry}/{attr}")
        rec[attr] = None if isinstance(got, dict) else got
        if isinstance(got, dict):
            rec["unread"][attr] = got["why"]
    try:
        target = hostfs.readlink(ctx.root, f"{entry}/driver")
        rec["driver"] = os.path.basename(target.rstrip("/")) if target else None
    except OSError as e:
        a = from_oserror(f"{entry}/driver", "readlink", e)
        rec["unread"]["driver"] = errno_name(a.errno) or a.status.value
        if a.status is not Status.ABSENT:  # absent: no driver bound, a fact of its own
            ctx.writer.record(a)
    return rec


def _device_dir(root, entry: str):
    """The root-relative path of the device directory ``entry`` resolves to, when it is a directory under
    ``/sys/devices`` inside the root; ``(None, why)`` otherwise."""
    try:
        real = os.path.realpath(hostfs.resolve(root, entry))
    except OSError as e:
        return None, f"{errno_name(e.errno) or 'error'} while resolving it"
    base = os.path.realpath(root)
    rel = "/" + os.path.relpath(real, base) if real != base else "/"
    if rel.startswith("/..") or not rel.startswith("/sys/devices/"):
        return None, f"it resolves to {rel}, not a device directory under /sys/devices"
    if not os.path.isdir(real) or os.path.islink(real):
        return None, f"{rel} is not a directory"
    return rel


def _link_text(root, entry: str) -> str | None:
    try:
        return hostfs.readlink(root, entry)
    except OSError:
        return None


def _read(ctx, path: str):
    """The stripped text of a sysfs attribute, or ``{"why": "absent"|errno name}`` (recorded unless absent)."""
    try:
        return hostfs.read_text(ctx.root, path, limit=VALUE_LIMIT).strip()
    except OSError as e:
        a = from_oserror(path, "read", e)
        if a.status is not Status.ABSENT:
            ctx.writer.record(a)
        return {"why": "absent" if a.status is Status.ABSENT else (errno_name(a.errno) or a.status.value)}


def fact(raw: dict) -> list[dict]:
    """The ``pci`` list of ``host_gpu`` from the acquired records: ``[{"address", "device", "class", "subsystem":
    "VVVV:DDDD"|None, "numa_node": int|None, "runtime_status", "driver", "enable": bool|None, "link": {"current_speed",
    "current_width": int|None, "max_speed", "max_width": int|None}, "sysfs", "unread"}]``; texts as sysfs wrote them."""
    out = []
    for r in raw.get("functions") or []:
        sv, sd = r.get("subsystem_vendor") or "", r.get("subsystem_device") or ""
        hexes = sv.startswith("0x") and sd.startswith("0x")
        out.append({"address": r.get("address"), "device": r.get("device"), "class": r.get("class"),
                    "subsystem": f"{sv[2:]}:{sd[2:]}" if hexes else None,
                    "numa_node": _int(r.get("numa_node")), "runtime_status": r.get("power/runtime_status"),
                    "driver": r.get("driver"), "enable": {"1": True, "0": False}.get(r.get("enable") or ""),
                    "link": {"current_speed": r.get("current_link_speed"),
                             "current_width": _int(r.get("current_link_width")),
                             "max_speed": r.get("max_link_speed"), "max_width": _int(r.get("max_link_width"))},
                    "sysfs": r.get("sysfs"), "unread": r.get("unread") or {}})
    return out


def is_nvswitch(rec: dict) -> bool:
    """An NVIDIA function of the NVSwitch class (0x0680xx, bridge/other)."""
    return isinstance(rec.get("class"), str) and rec["class"].lower().startswith(NVSWITCH_CLASS)


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
