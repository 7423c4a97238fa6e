"""The NVIDIA driver not ready when a GPU container was created: containerd's ``failed to generate spec:
lstat /run/nvidia/driver/dev/nvidiactl: no such file or directory`` (NVIDIA/gpu-operator#377: the
containerised driver not up, or the driver root wrong) and nvidia-container-cli's ``nvml error: driver not
loaded`` (NVIDIA/nvidia-container-toolkit#260), from the runtime's and the kubelet's journal, the pods' logs
and the Kubernetes events (wordings in forensics/neighbours.py). Such a container never runs: the pod shows
``CreateContainerError`` / ``RunContainerError``, not a running pod without its GPU.
"""
from __future__ import annotations

from ..scope import gpu_free
from ..verdicts import (Cause, Evidence, Happened, Mechanism, Rule, Window, coverage_of, explains, first_seen,
                        symptom_lines, weigh)

KIND = "driver-not-ready"
TITLE = "the NVIDIA driver not ready when the container was created"
EXPLAINS = frozenset({"create-failed", "no-driver", "no-device", "plugin-down", "unknown"})
SIGNATURES = ("spec-device-missing", "nvml-driver-not-loaded")


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the runtime, the kubelet or an event says a device node was missing or the driver was not
    loaded when a container was created, inside the window; inferred: the host shows no loaded module at
    collection (undated); excluded: the journal covers the window with no such
    line, or the symptom is a running pod's; undetermined: no source covers the window."""
    hits = symptom_lines(window, ev, SIGNATURES)
    mod = ((ev.facts.get("host_gpu") or {}).get("module") or {})
    if hits:
        h = first_seen(hits, f"A GPU container could not be created because the driver was not there: {hits[0].summary}")
    elif isinstance(mod, dict) and mod.get("loaded") is False:
        src = mod.get("source") or "/proc/driver/nvidia/version"
        h = Happened("possibly", f"No NVIDIA kernel module was loaded at collection ({src} absent), but nothing dates "
                     "when it went.")
    else:
        h = coverage_of(("journal",), ev, window, "holds no create failure for a missing driver")
    none = None if hits else gpu_free(ev)
    m = explains(EXPLAINS, ev.scope, TITLE) or (none and Mechanism(
        "ruled-out", f"No container waits for an NVIDIA driver here: {none}.")) or Mechanism(
        "shown" if hits else "fits", "A container that cannot be created with its GPU never runs; the kubelet retries "
        "it until the driver is there.")
    return weigh(KIND, h, m)


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Get the driver up (or the driver root right), then let the kubelet retry."""
    return {"what": "Get the driver up before GPU pods start: the GPU Operator's driver pod Running and validated, or "
                    "the driver root given to the toolkit and device plugin set to where the driver really is (/ for a "
                    "host driver, /run/nvidia/driver for the operator's)",
            "commands": ["ls -l /run/nvidia/driver/dev/nvidiactl /dev/nvidiactl", "lsmod | grep nvidia",
                         "kubectl get pods -A -o wide | grep -i -E 'driver|toolkit|validator'"],
            "why": "containerd builds the spec from device nodes under the driver root; with the driver not up there "
                   "are none.", "sources": ["https://github.com/NVIDIA/gpu-operator/issues/377"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "podlogs", "kube", "host_gpu"), judge, remedy, severity="node")
