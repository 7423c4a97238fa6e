"""The NVIDIA fabric manager down, failed or at another version than the driver, on an NVSwitch system.

On NVSwitch systems (HGX A100/H100) CUDA fails with error 802 ``system not yet initialized``
(``cudaErrorSystemNotReady``) until the fabric manager has set up the NVLink fabric (docs/sources.md "Fabric manager";
pytorch/pytorch#35710; DCGM ``DCGM_FR_CUDA_FM_NOT_INITIALIZED``). Its packages are per driver version
(``nvidia-fabricmanager-570``), and one that does not match the loaded driver will not start.

Evidence: PID 1's lines of ``nvidia-fabricmanager.service`` (failed, stopped), the fabric manager's own
error lines (its unit's journal output, /var/log/fabricmanager.log in the host_gpu fact), and the host's
versions (host_gpu: the fabric manager package against the loaded module).
"""
from __future__ import annotations

import re

from ...excerpt import excerpt
from ...timeutil import parse_iso
from ..verdicts import Cause, Evidence, Happened, Mechanism, Rule, Window, coverage_of, explains, first_seen, weigh

KIND = "fabric-manager"
TITLE = "the NVIDIA fabric manager not running"
EXPLAINS = frozenset({"system-not-ready", "no-device", "unknown"})
UNIT = "nvidia-fabricmanager.service"
#: (the host_gpu fact's ``nvswitch`` is read from the NVSwitch PCI functions, not /proc/devices: nvidia.ko
#: registers the nvidia-nvswitch major on every 64-bit host, collectors/nvidia_host)
_VER = re.compile(r"\d{3}\.\d+(?:\.\d+)?")


def _fm(ev: Evidence) -> dict:
    h = ev.facts.get("host_gpu") or {}
    return h.get("fabric_manager") if isinstance(h.get("fabric_manager"), dict) else {}


def _versions(ev: Evidence) -> tuple[str | None, str | None]:
    """``(fabric manager version, loaded module version)`` from host_gpu, each None when not shown."""
    h = ev.facts.get("host_gpu") or {}
    fm = _fm(ev).get("version")
    mod = (h.get("module") or {}).get("version") if isinstance(h.get("module"), dict) else None
    return (str(fm) if fm else None), (str(mod) if mod else None)


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the fabric manager's unit failed or stopped, or it logged an error, inside the window, on
    an NVSwitch system (or one whose NVSwitches are not shown); inferred: its version differs from the
    loaded driver's at collection, undated; excluded: the node has no NVSwitch as its devices show (the
    fabric manager has nothing to do), or the journal covers the window with no such line; undetermined:
    no source covers the window."""
    start, end = window
    hits = [e for e in ev.events if start <= e.at <= end and (
        (e.kind == "journal.unit" and e.attrs.get("unit") == UNIT and e.attrs.get("action") in ("failed", "stopped",
                                                                                                 "stopping"))
        or (e.kind in ("journal.symptom", "container.log-symptom") and e.attrs.get("signature") == "fabric-manager-error"))]
    logged = _log_errors(ev, window)
    fm, mod = _versions(ev)
    # its package is per driver version and must match it exactly (nvidia-fabricmanager-570 570.158.01-1)
    differ = bool(fm and mod and _VER.search(fm) and _VER.search(mod)
                  and _VER.search(fm).group(0) != _VER.search(mod).group(0))
    if hits:
        h = first_seen(hits, f"The fabric manager: {hits[0].summary}")
    elif logged:
        h = Happened("yes", f"The fabric manager's log says, inside the window: {logged[0]}.", at=None)
    elif differ:
        h = Happened("possibly", f"The fabric manager ({fm}) is not the loaded driver's version ({mod}) at collection; "
                     "it does not start against another driver, but nothing dates when that began.")
    else:
        h = coverage_of(("journal",), ev, window, "shows no failure of the fabric manager")
    return weigh(KIND, h, mechanism(ev), {"fabric_manager": fm, "driver": mod})


def _log_errors(ev: Evidence, window: Window) -> list[str]:
    """The fabric manager log's ERROR, CRITICAL and FATAL lines (host_gpu ``fabric_manager.log.entries``,
    collectors/nvidia_host/fabric.py) dated inside the window; a zone-less stamp of a node whose zone is
    unknown (flag ``tz-unknown``) is not dated."""
    log = _fm(ev).get("log") if isinstance(_fm(ev).get("log"), dict) else {}
    out = []
    for line in log.get("entries") or []:
        if not isinstance(line, dict) or line.get("level") not in ("ERROR", "CRITICAL", "FATAL") \
                or "tz-unknown" in (line.get("flags") or []):
            continue
        try:
            at = parse_iso(line["at"]) if line.get("at") else None
        except (ValueError, TypeError):
            at = None
        if at and window.start <= at <= window.end:
            out.append(excerpt(str(line.get("message") or "")))
    return out


def mechanism(ev: Evidence) -> Mechanism:
    """Only an NVSwitch system needs the fabric manager."""
    if (no := explains(EXPLAINS, ev.scope, TITLE)) is not None:
        return no
    nvs = (ev.facts.get("host_gpu") or {}).get("nvswitch")
    if nvs is False:
        why = (ev.facts.get("host_gpu") or {}).get("nvswitch_basis") or "no NVSwitch PCI function"
        return Mechanism("ruled-out", f"The node shows no NVSwitch ({why}), so the fabric manager has nothing to set up.")
    if nvs is True:
        why = (ev.facts.get("host_gpu") or {}).get("nvswitch_basis") or "host_gpu"
        return Mechanism("shown", f"The node has NVSwitches ({why}): without the fabric manager CUDA fails with error "
                         "802, system not yet initialized.")
    return Mechanism("fits", "Whether the node has NVSwitches is not shown.")


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Install the fabric manager of the driver's version and start it."""
    return {"what": "Install the fabric manager of exactly the loaded driver's version and start it; CUDA works once "
                    "the fabric is registered",
            "commands": ["systemctl status nvidia-fabricmanager --no-pager", "cat /proc/driver/nvidia/version",
                         "dpkg -l | grep -i fabricmanager",
                         "tail -n 50 /var/log/fabricmanager.log"],
            "why": "On NVSwitch systems CUDA returns 802 (system not yet initialized) until the fabric manager has "
                   "set up the NVLink fabric; its package must match the driver.",
            "sources": ["https://github.com/pytorch/pytorch/issues/35710",
                        "https://github.com/NVIDIA/gpu-operator/issues/610"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "host_gpu"), judge, remedy, severity="node")
