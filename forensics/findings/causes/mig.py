"""A MIG reconfiguration (or GPU reset) inside the window: nvidia-mig-manager applying a new MIG geometry
destroys the GPU instances running pods use; their NVML calls then fail ("Unknown Error", "GPU is lost")
or see no device. The MIG manager pauses the GPU operands (``nvidia.com/gpu.deploy.*`` labels set to
``paused-for-mig-change``) but not workload pods, and sets ``nvidia.com/mig.config.state`` to
``pending``, then ``success`` or ``failed`` (docs/sources.md "NVIDIA kernel and driver wordings"; gpu-operator
assets/state-mig-manager/0410_configmap.yaml).

Evidence: PID 1's lines of the MIG manager's units (``nvidia-mig-manager.service``, mig-parted), the
MIG manager pod's log lines inside the window, and the node's ``nvidia.com/mig.config.state`` label
(Kubernetes API: a state at collection, undated).
"""
from __future__ import annotations

from ..verdicts import Cause, Evidence, Happened, Mechanism, Rule, Window, coverage_of, explains, first_seen, weigh

KIND = "mig-reconfiguration"
TITLE = "a MIG reconfiguration"
EXPLAINS = frozenset({"nvml-unknown", "gpu-lost", "no-device", "device-unhealthy", "create-failed", "unknown"})
STATE_LABEL = "nvidia.com/mig.config.state"


def _mig(e) -> bool:
    a = e.attrs
    if e.kind == "journal.unit":
        return "mig" in str(a.get("unit") or "") and a.get("action") in ("starting", "started", "stopped", "finished",
                                                                         "failed", "deactivated")
    if e.kind in ("container.log-symptom", "container.log-error", "container.log-healthy"):
        return "mig-manager" in f"{a.get('pod')}/{a.get('container')}"
    return e.kind == "kube.event" and "mig" in str(a.get("message") or "").lower()


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the MIG manager ran (its unit, its pod's log, a MIG event) inside the window; inferred:
    the node's MIG config state is ``pending``/``failed``/``rebooting`` at collection, undated; excluded:
    the journal covers the window and shows no MIG manager run, or the node is shown not to use MIG (no
    MIG label, no nvidia-caps device); undetermined: no source covers the window."""
    start, end = window
    hits = [e for e in ev.events if start <= e.at <= end and _mig(e)]
    labels = ((ev.facts.get("kube") or {}).get("node") or {}).get("labels") or {}
    state = labels.get(STATE_LABEL) if isinstance(labels, dict) else None
    if hits:
        h = first_seen(hits, f"The MIG manager was at work: {hits[0].summary}")
    elif state in ("pending", "failed", "rebooting"):
        h = Happened("possibly", f"The node's {STATE_LABEL} is {state} at collection (Kubernetes API), but nothing dates "
                     "the change.")
    else:
        h = coverage_of(("journal",), ev, window, "shows no MIG manager run")
    return weigh(KIND, h, mechanism(ev, labels, hits, state))


def mechanism(ev: Evidence, labels: dict, hits: list, state: str | None = None) -> Mechanism:
    """MIG changes only reach pods that use MIG devices."""
    if (no := explains(EXPLAINS, ev.scope, TITLE)) is not None:
        return no
    devices = ((ev.facts.get("host_gpu") or {}).get("proc_devices") or {})
    mig_label = any(str(k).startswith("nvidia.com/mig") for k in labels) if isinstance(labels, dict) else False
    if not hits and isinstance(labels, dict) and labels and not mig_label and isinstance(devices, dict) \
            and devices and "nvidia-caps" not in devices:
        return Mechanism("ruled-out", "The node shows no MIG: no nvidia.com/mig.* label (Kubernetes API) and no "
                         "nvidia-caps device in /proc/devices.")
    return Mechanism("shown" if hits or state else "fits", "Applying a MIG geometry destroys the GPU instances running pods "
                     "use; the MIG manager does not stop workload pods first.")


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Recreate the pods after a MIG change; schedule MIG changes on drained nodes."""
    return {"what": "Recreate the GPU pods after the MIG change, and change MIG geometry only on a drained node",
            "commands": ["kubectl get node -o jsonpath='{.metadata.labels}' | tr ',' '\\n' | grep mig",
                         "nvidia-smi mig -lgi"],
            "why": "A new MIG geometry replaces the GPU instances the running pods were given.",
            "sources": ["https://github.com/NVIDIA/mig-parted"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "kube", "podlogs", "host_gpu"), judge, remedy, severity="config")
