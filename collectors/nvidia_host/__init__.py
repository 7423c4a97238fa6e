"""The host's NVIDIA driver state, from files that touch no GPU (issue 26; docs/sources.md "NVIDIA kernel and driver wordings", "Fabric manager").

Read-only, bounded, each artifact with its outcome: the loaded kernel module (``/proc/driver/nvidia/version``,
``params``, ``registry``, the names under ``gpus/``; ``/sys/module/nvidia*``), ``/proc/devices``, the NVIDIA PCI
functions in sysfs, the user-space driver (library file names, dpkg and rpm databases) and Fabric Manager (unit,
config, log tail). Nothing here opens a device, loads NVML or reads a file whose handler calls into the driver
(:mod:`.procfs` says which and why). ``--nvidia-smi`` (off by default) adds ``nvidia-smi -q`` on a live node,
never waited on past its bound (:mod:`.smi`).

Bundle layout::

    nvidia_host/proc/driver/nvidia/{version,params,registry}   copies
    nvidia_host/proc/devices                                   copy
    nvidia_host/sys/module/<module>/{version,taint,initstate,refcnt}
    nvidia_host/dpkg-status-nvidia      the NVIDIA stanzas of /var/lib/dpkg/status
    nvidia_host/rpm-packages.json       the NVIDIA headers of rpmdb.sqlite
    nvidia_host/fabricmanager/...       nvidia-fabricmanager.service, fabricmanager.cfg, fabricmanager.log (tail,
                                        redacted); driver-root/ for the GPU Operator's driver container
    nvidia_host/nvidia-smi-q.txt        --nvidia-smi only, redacted
    nvidia_host/facts.json              listings (gpus/, nvswitch devices/, library dirs, unit links), the PCI
                                        functions' attributes, module parameters, and each source's outcome

The ``host_gpu`` fact (:func:`read`); every value is None when the node did not show it::

    {"module": {"loaded": True|False|None, "version": "570.158.01"|None, "kind": "open"|"proprietary"|None,
                "gcc": str|None, "line": the NVRM line|None, "source": "/proc/driver/nvidia/version",
                "reason": why loaded is False/None|None},
     "sys_module": {"nvidia": {"loaded": bool|None, "version", "taint", "initstate", "refcnt",
                               "source": "/sys/module/nvidia"}, "nvidia_uvm": {...}, ...},
     "params": {"values": {name: int|str}|None, "source": "/proc/driver/nvidia/params"},
     "module_parameters": {"nvidia": {"NVreg_...": text}, ...},
     "userspace": {"versions": ["570.195.03"], "libraries": [paths], "dirs": {dir: listing status},
                   "source": sentence},
     "packages": {name: version},            installed NVIDIA packages (dpkg, rpm "[epoch:]version-release")
     "packages_other": {name: {"version", "status"}},   known to dpkg but not installed (half-configured...)
     "packages_source": [paths read],
     "pci": [{"address": "0000:3b:00.0", "device": "0x2330", "class": "0x030200", "subsystem": "10de:16c1",
              "numa_node": 0, "runtime_status": "active", "driver": "nvidia", "enable": True,
              "link": {"current_speed", "current_width", "max_speed", "max_width"}, "sysfs", "unread"}],
     "pci_source": {"status": listing status, "seen": n, "refused": [...], "cut": sentence|None},
     "proc_devices": {"nvidia": 195, "nvidia-uvm": 510, ...}|None,
     "gpus_dir": ["0000:3b:00.0", ...]|None,
     "nvswitch": True|False|None, "nvswitch_basis": sentence,
     "fabric_manager": {"unit": path|None, "masked": bool|None, "enabled": bool|None, "enabled_by": [links],
                        "config": path|None, "log_file": path|None, "log_to_syslog": bool|None,
                        "log": {"source", "status", "entries": [{"at", "original", "level", "message", "flags"}],
                                "warnings_or_worse": n}|None,
                        "version": str|None, "version_source": "package <name>"|None},
     "nvidia_smi": {"ran": bool, "status", "error", "reason", "exit", "pid", "state", "timeout_s", "elapsed_s",
                    "driver_version", "cuda_version", "gpus": [...], "first_line", "source": "nvidia-smi -q"},
     "sources": {host path or command: status}}

A facts-only snapshot: no events (the kernel's own NVRM lines are the journal's), no judgement.
"""
from __future__ import annotations

import json

from forensics import debstatus, rpmdb
from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.events import NodeFacts
from forensics.source import CollectContext, Option, Reading
from . import fabric, pci, procfs, smi, userspace

NAME = "nvidia_host"
FACTS = "nvidia_host/facts.json"

NVIDIA_SMI = Option("--nvidia-smi", "nvidia_smi", action="store_true", default=False, record=True,
                    help="also run `nvidia-smi -q` on the live node (at most 20 s, never waited on past that; "
                         "recorded as left running if it hangs). Off by default: on a hung GPU nvidia-smi can "
                         "block unkillable in the kernel (D state), which is why nvidia-bug-report.sh's "
                         "--safe-mode skips it")
NVIDIA_SMI_TIMEOUT = Option(None, "nvidia_smi_timeout", default=20.0,
                            help="seconds nvidia-smi -q may run (programs and tests)")
OPTIONS = [NVIDIA_SMI, NVIDIA_SMI_TIMEOUT]


def acquire(ctx: CollectContext) -> None:
    """Copy and list the host's driver state into ``nvidia_host/`` (module docstring), then write
    ``nvidia_host/facts.json`` with every source's outcome, even when a step raised (the exception then
    propagates to the pipeline, which records it)."""
    w = ctx.writer
    start = len(w.artifacts)
    facts: dict = {}
    try:
        facts.update(procfs.acquire(ctx))
        facts["pci"] = pci.acquire(ctx)
        facts.update(userspace.acquire(ctx))
        facts["fabric_manager"] = fabric.acquire(ctx)
        facts["nvidia_smi"] = smi.acquire(ctx, bool(ctx.value(NVIDIA_SMI)), float(ctx.value(NVIDIA_SMI_TIMEOUT)))
    finally:
        facts["sources"] = {a.source: _outcome(a) for a in w.artifacts[start:]}
        w.write_json(FACTS, facts, source=NAME, method="generated")


def _outcome(a: Artifact) -> dict:
    return {"status": a.status.value, "path": a.path, "errno": a.errno, "message": a.message}


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """The ``host_gpu`` fact (module docstring) from the stored copies and ``facts.json``; without
    ``facts.json`` (a bundle from before this collector, or a collection cut short) no fact, and a problem
    unless the collector was simply absent."""
    r = Reading()
    facts = bundle.json(FACTS, r.problems)
    if facts is None:
        if not bundle.find(FACTS) and any(a.source == f"collector:{NAME}" for a in bundle.artifacts()):
            r.problems.append({"artifact": FACTS, "message": "absent: the nvidia_host collector did not finish"})
        return r
    r.facts["host_gpu"] = host_gpu(bundle, facts, _records(facts).get, node)
    return r


def _records(facts: dict) -> dict[str, Artifact]:
    """``{source: Artifact}`` of this collector's own records, as facts.json keeps them (another collector may
    record the same host path, e.g. /proc/devices, under its own bundle path)."""
    out = {}
    for source, o in (facts.get("sources") or {}).items():
        try:
            out[source] = Artifact(o.get("path"), source, Status(o.get("status")), "", errno=o.get("errno"),
                                   message=o.get("message"))
        except (AttributeError, ValueError):
            continue
    return out


def host_gpu(bundle: Bundle, facts: dict, outcome, node: NodeFacts) -> dict:
    """Assemble the fact from ``facts.json`` and the stored files; ``outcome(source)`` is a manifest record."""
    pci_list = pci.fact(facts.get("pci") or {})
    out = {"module": procfs.module_fact(bundle, facts, outcome),
           "sys_module": procfs.sys_modules_fact(bundle, facts, outcome),
           "params": _params(bundle, outcome),
           "module_parameters": {m: p.get("values") for m, p in (facts.get("module_parameters") or {}).items()},
           "userspace": userspace.libraries_fact(facts.get("libraries") or {}),
           "pci": pci_list,
           "pci_source": {k: (facts.get("pci") or {}).get(k) for k in ("status", "seen", "refused", "cut")},
           "proc_devices": _stored(bundle, outcome, "/proc/devices", procfs.parse_proc_devices),
           "gpus_dir": (facts.get("gpus_dir") or {}).get("names"),
           "sources": {s: o.get("status") for s, o in (facts.get("sources") or {}).items()}}
    out.update(_packages(bundle, facts, outcome))
    out["nvswitch"], out["nvswitch_basis"] = _nvswitch(facts, pci_list)
    out["fabric_manager"] = _fabric(bundle, facts.get("fabric_manager") or {}, outcome, node, out["packages"])
    out["nvidia_smi"] = _smi(bundle, facts.get("nvidia_smi") or {}, outcome)
    return out


def _stored(bundle, outcome, source: str, parse):
    a = outcome(source)
    if a is None or a.status not in (Status.COLLECTED, Status.TRUNCATED) or not a.path:
        return None
    try:
        return parse(bundle.path(a.path).read_text("utf-8", "replace"))
    except OSError:
        return None


def _params(bundle, outcome) -> dict:
    src = f"{procfs.PROC}/params"
    return {"values": _stored(bundle, outcome, src, procfs.parse_params), "source": src}


def _packages(bundle, facts, outcome) -> dict:
    installed, other, sources = {}, {}, []
    got = _stored(bundle, outcome, debstatus.PATH, userspace.dpkg_packages)
    if got is not None:
        installed.update(got[0])
        other.update(got[1])
        sources.append(debstatus.PATH)
    rpm = facts.get("rpm") or {}
    rpm_list = _stored(bundle, outcome, rpm.get("source") or "", json.loads) if rpm.get("source") else None
    if isinstance(rpm_list, list):
        installed.update(rpmdb.versions(rpm_list))
        sources.append(rpm["source"])
    return {"packages": installed if sources else None, "packages_other": other if sources else None,
            "packages_source": sources}


def _nvswitch(facts: dict, pci_list: list) -> tuple[bool | None, str]:
    """NVSwitch hardware: an NVIDIA PCI function of class 0x0680, or a switch the driver probed
    (/proc/driver/nvidia-nvswitch/devices/<addr>). /proc/devices' nvidia-nvswitch is no evidence (:mod:`.procfs`)."""
    switches = [p["address"] for p in pci_list if pci.is_nvswitch(p)]
    probed = (facts.get("nvswitch_dir") or {}).get("names")
    if switches or probed:
        return True, (f"NVIDIA PCI functions of class 0x0680: {', '.join(switches)}" if switches else
                      f"{procfs.NVSWITCH_DIR}: {', '.join(probed)}")
    if (facts.get("pci") or {}).get("status") == "listed" and not (facts.get("pci") or {}).get("cut"):
        return False, ("no NVIDIA PCI function of class 0x0680 in /sys/bus/pci/devices (NVLink 5 systems, whose "
                       "switches are not on the host's PCI bus, do not show this way)")
    return None, "/sys/bus/pci/devices could not be read whole"


def _fabric(bundle, fm: dict, outcome, node, packages) -> dict:
    unit = fm.get("unit") or None
    enabled_by = fm.get("enabled_by")
    cfg = next((c for c in fm.get("configs") or [] if c.get("status") == "collected"), None)
    log = None
    for entry in fm.get("logs") or []:
        a = outcome(entry["source"])
        log = {"source": entry["source"], "status": a.status.value if a else None, "entries": [],
               "warnings_or_worse": None}
        if a is not None and a.status in (Status.COLLECTED, Status.TRUNCATED) and a.path:
            text = bundle.path(a.path).read_text("utf-8", "replace")
            log["entries"], log["warnings_or_worse"], _ = fabric.log_entries(text, node)
            break
    fm_pkg = next((n for n in sorted(packages or {}) if n.startswith(("nvidia-fabricmanager", "nvidia-fabric-manager"))
                   and not n.split(":")[0].endswith(("-dev", "-devel"))), None)
    return {"unit": unit and unit.get("path"), "masked": unit and unit.get("masked"),
            "enabled": None if unit is None or enabled_by is None else bool(enabled_by),
            "enabled_by": enabled_by, "config": cfg and cfg.get("source"),
            "log_file": cfg.get("log_file") if cfg else None, "log_to_syslog": cfg and cfg.get("log_to_syslog"),
            "log": log, "version": packages.get(fm_pkg) if fm_pkg else None,
            "version_source": f"package {fm_pkg}" if fm_pkg else None}


def _smi(bundle, run: dict, outcome) -> dict:
    out = {k: run.get(k) for k in ("ran", "status", "error", "reason", "exit", "pid", "state", "timeout_s",
                                   "elapsed_s")}
    out.update({"driver_version": None, "cuda_version": None, "gpus": [], "first_line": None, "source": smi.SOURCE})
    a = outcome(smi.SOURCE)
    if a is not None and a.path:
        try:
            out.update(smi.parse(bundle.path(a.path).read_text("utf-8", "replace")))
        except OSError:
            pass
    return out
