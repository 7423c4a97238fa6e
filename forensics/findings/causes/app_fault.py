"""A fault of the application's own GPU code inside the window: an Xid that NVIDIA's catalog resolves as
the application's (13 graphics engine exception, 31 GPU memory page fault, 43 stopped processing, 68/69,
and the contained 94, whose ECC error stays within one application; :mod:`forensics.xid` ``scope ==
"application"``). The GPU stays healthy; the process that faulted must be restarted, and the code
fixed.
"""
from __future__ import annotations

from ..verdicts import Cause, Evidence, Mechanism, Rule, Window, explains, weigh
from .gpu import KERNEL_SOURCES, faults, in_window, same_gpu, seen

KIND = "application-fault"
TITLE = "a fault of the application's own GPU code"
EXPLAINS = frozenset({"app-fault", "ecc", "unknown"})


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the kernel (or DCGM) shows an application-level Xid inside the window, on a GPU of the
    incident or one the evidence cannot tie to another; excluded: a kernel log covers the window and
    shows none, the Xid names another pod's GPU, or the symptom is not one an application fault produces
    (an Xid 13 does not make /dev/nvidia* unopenable); undetermined: no kernel log covers the window."""
    fs = faults(ev, ev.events)
    hits = in_window(fs, window, ("application",))
    h = seen(hits, window, ev, "logged no application-level Xid", process=True)
    m = explains(EXPLAINS, ev.scope, TITLE) or (same_gpu(ev, hits) if hits else None) or Mechanism(
        "fits", "The catalog resolves these Xids as the application's: the faulting process stops, the GPU stays "
        "healthy.")
    detail = {"faults": [{"xid": f.xid, "gpu": f.gpu, "pid": f.event.attrs.get("pid"),
                          "process": f.event.attrs.get("process"), "mnemonic": getattr(f.entry, "mnemonic", None)}
                         for f in hits[:20]]}
    return weigh(KIND, h, m, detail)


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Restart the application and debug its GPU code; the node needs nothing."""
    return {"what": "Restart the pod's application (RESTART_APP in NVIDIA's catalog) and debug its GPU code; the node "
                    "and its GPU need no action",
            "commands": ["compute-sanitizer --tool memcheck <the application>   # in a debug run of the same image",
                         "CUDA_LAUNCH_BLOCKING=1 <the application>   # report the failing kernel where it fails"],
            "why": "Application-level Xids come from the process's own kernels (an out-of-bounds access, a bad "
                   "address); the GPU stays healthy and other pods are unaffected.",
            "sources": ["https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"]}


RULE = Rule(KIND, TITLE, EXPLAINS, KERNEL_SOURCES + ("prometheus", "kubelet"), judge, remedy, severity="pod")
