"""A GPU hardware or node-level driver fault inside the window: an Xid whose resolution in NVIDIA's Xid
catalog is a GPU reset or a node reboot (79 fallen off the bus, 48 double-bit ECC, 95 uncontained ECC,
64 row-remapping failure, 74 NVLink, 119/120 GSP, ...; :mod:`forensics.xid` ``scope == "node"``), a GPU
that fell off the bus without an Xid (at probe time), a fatal PCIe error of an NVIDIA function, or an Xid
154 asking for a reset or a reboot.

Such a fault takes the GPU from every process on it: the pod's NVML calls fail ("Unable to determine the
device handle", "GPU is lost", "Unknown Error"), CUDA reports ECC or illegal-address errors, the device
plugin marks the GPU unhealthy. The remedy is the node's, not the pod's: cordon and drain, then the
catalog's action.
"""
from __future__ import annotations

from ..verdicts import Cause, Evidence, Mechanism, Rule, Window, explains, weigh
from .commands import drain, pci
from .gpu import KERNEL_SOURCES, faults, in_window, same_gpu, seen

KIND = "gpu-hardware-fault"
TITLE = "a GPU hardware fault"
EXPLAINS = frozenset({"gpu-lost", "ecc", "nvml-unknown", "app-fault", "no-device", "device-unhealthy",
                      "system-not-ready", "plugin-down", "unknown"})


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the kernel (or DCGM, or the device plugin) shows a node-level Xid, a GPU fallen off the
    bus or a fatal PCIe error of an NVIDIA function inside the window, on a GPU of the incident (or one
    the evidence cannot tie to another); excluded: a kernel log covers the window and shows none, or
    every fault names a GPU the incident's pods do not hold; undetermined: no kernel log covers the
    window. The catalog's resolution bucket of each Xid is in ``detail``, and where tools read the Xid
    differently the reason says so."""
    fs = faults(ev, ev.events)
    hits = in_window(fs, window, ("node",))
    h = seen(hits, window, ev, "logged no node-level Xid and no GPU falling off the bus")
    m = explains(EXPLAINS, ev.scope, TITLE) or (same_gpu(ev, hits) if hits else None) or Mechanism(
        "fits", "A GPU that fails takes the device from every process on it; which GPU the incident's pods hold is "
        "not shown, so it may be theirs.")
    detail = {"faults": [{"xid": f.xid, "gpu": f.gpu, "scope": f.scope, "at": f.event.at.isoformat(),
                          "mnemonic": getattr(f.entry, "mnemonic", None), "immediate": getattr(f.entry, "immediate", None)}
                         for f in hits[:20]]}
    return weigh(KIND, h, m, detail)


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Cordon and drain, then the catalog's action for the Xid (reset the GPU, restart the machine,
    contact support), with the GPU's PCI address when the line gives it."""
    faults_ = cause.detail.get("faults") or []
    actions = sorted({f.get("immediate") for f in faults_ if f.get("immediate")})
    gpus = sorted({p for f in faults_ if (p := pci(f.get("gpu")))})
    node = ev.node.get("hostname") or (ev.facts.get("kube") or {}).get("node", {}).get("name")
    cmds = drain(node)
    if "RESTART_BM" in actions or any(f.get("xid") == 79 for f in faults_):
        cmds.append("sudo systemctl reboot   # the catalog's RESTART_BM: a GPU off the bus comes back only after a reboot")
    elif gpus:
        cmds += [f"sudo nvidia-smi -r -i {g}   # the catalog's RESET_GPU, once no process uses it" for g in gpus]
    cmds.append("sudo nvidia-bug-report.sh --safe-mode   # for the hardware vendor (safe mode: skips nvidia-smi)")
    return {"what": "Cordon and drain the node, then " + (", ".join(actions) if actions else "reset the GPU or reboot")
            + " as NVIDIA's Xid catalog says; if the fault recurs, the GPU or its PCIe link needs the vendor (RMA)",
            "commands": cmds,
            "why": "A node-level Xid leaves the GPU unusable for every pod until it is reset; new pods scheduled "
                   "there fail the same way.",
            "sources": ["https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"]}


RULE = Rule(KIND, TITLE, EXPLAINS, KERNEL_SOURCES + ("prometheus", "podlogs", "host_gpu", "kubelet"), judge, remedy,
            severity="node")
