"""The kubelet's static CPU manager (or an in-place pod resize) rewriting a running container's resources.

The path (docs/sources.md "CPU manager and container updates"; kubernetes/kubernetes#77073, NVIDIA/nvidia-docker#966, #515): the CPU manager's
``reconcileState`` calls the CRI ``UpdateContainerResources`` with the container's cpuset; containerd
hands it to ``runc update``, which rewrites the whole device cgroup from runc's own config (v1: deny all,
then allow; v2: a new device program), so devices the NVIDIA hook added outside the spec are dropped,
under either cgroup driver. ``nvidia-smi`` then fails with "Failed to initialize NVML: Unknown Error",
about 10 s after start. containerd logs each call at info level (``UpdateContainerResources for "<id>"
with Linux: ...``, its CRI instrumented service); the kubelet logs its side only at V(4).
"""
from __future__ import annotations

from ...engines.containerd import CRI_NAMESPACE
from .. import scope as S
from ..verdicts import (Cause, Evidence, Happened, Mechanism, Rule, Window, coverage_of, explains, first_seen,
                        weigh)

KIND = "cpu-manager"
TITLE = "the kubelet's CPU manager (or a pod resize) rewriting the container's device rules"
EXPLAINS = frozenset({"nvml-unknown", "device-unhealthy", "unknown"})


def policy(ev: Evidence) -> tuple[str | None, str]:
    """``(cpuManagerPolicy, where it was read)`` from the kubelet fact; ``(None, why)`` when not shown."""
    cfg = ((ev.facts.get("kubelet") or {}).get("config") or {})
    p = cfg.get("cpuManagerPolicy") if isinstance(cfg, dict) else None
    if isinstance(p, dict):
        return (str(p["value"]) if p.get("value") else None), str(p.get("source") or "the kubelet's config")
    return None, "the kubelet's configuration is not in the bundle"


def _updates(window: Window, ev: Evidence, ids: set[str] | None) -> list:
    start, end = window
    return [e for e in ev.events if e.kind == "runtime.update-resources" and start <= e.at <= end
            and e.attrs.get("result") in ("requested", "ok")
            and (ids is None or any(str(e.attrs.get("id") or "").startswith(i[:12]) for i in ids))]


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the runtime logged an ``UpdateContainerResources`` for one of the incident's containers
    inside the window, and that container's GPU came outside the OCI spec (hook or envvar injection);
    inferred: the CPU manager is static and the container hook-injected, but the runtime's log covers only
    part of the window; excluded: the runtime's log covers the window and shows no update of the
    incident's containers, or the kubelet's policy is ``none`` as its config shows (and no update line),
    or the incident's GPU is in the OCI spec (runc update re-applies it); undetermined: neither the
    runtime's log nor the kubelet's config is in the bundle."""
    rows, where, named = S.rows(ev)
    ids = {str(r.get("id")) for r in rows if r.get("id")} | {str(c) for c in ev.scope.containers} if named else None
    hits = _updates(window, ev, ids)
    pol, src = policy(ev)
    if hits:
        h = first_seen(hits, f"The runtime updated the resources of {where} (UpdateContainerResources, "
                       f"cpuManagerPolicy {pol or 'unknown'}: {src})")
    else:
        h = coverage_of(("journal",), ev, window, "holds no UpdateContainerResources line of these containers (containerd "
                        "logs every call at info level)")
        if h.state == "no" and not _cri_logged(ev, rows):  # only containerd's CRI logs the call: silence says nothing
            h = Happened("unknown", f"The runtime of {where} does not log resource updates (only containerd's CRI "
                         "service does; docker update, a runc update and CRI-O's are not seen in the journal), so "
                         "its silence says nothing.", gaps=h.gaps)
        if pol == "none" and h.state != "no":
            h = Happened("no", f"The kubelet's cpuManagerPolicy is none ({src}), so its CPU manager makes no such update, "
                         "and no runtime line shows one.", gaps=h.gaps)
    return weigh(KIND, h, mechanism(ev, rows, where, pol, src), {"cpuManagerPolicy": pol, "source": src})


def _cri_logged(ev: Evidence, rows: list[dict]) -> bool:
    """True when every container of ``rows`` (at least one) was made by containerd's CRI (namespace k8s.io and
    the CRI's own ``io.kubernetes.cri.*`` annotations: ``ctr`` or ``nerdctl`` in that namespace are not the
    CRI), whose instrumented service logs each UpdateContainerResources at info level; an update by another
    client (``runc update``, ``ctr``) is logged by none."""
    ids = {r.get("id") for r in rows}
    recs = [c for c in ev.records() if c.id in ids]
    return bool(recs) and all(c.engine in ("containerd", None) and c.namespace == CRI_NAMESPACE
                              and any(str(k).startswith("io.kubernetes.cri.") for k in c.annotations) for c in recs)


def mechanism(ev: Evidence, rows: list[dict], where: str, pol: str | None, src: str) -> Mechanism:
    """runc update drops what the hook added: shown for a hook-injected container, ruled out for one whose
    GPU is in the spec, else fits."""
    if (no := explains(EXPLAINS, ev.scope, TITLE)) is not None:
        return no
    gpu = [r for r in rows if r.get("gpu_injection") not in ("none", None)]
    hook = [r for r in gpu if r.get("gpu_injection") == "hook"]
    if hook:
        said = (f"The GPU of {where} came outside the OCI spec (hook), and runc update rewrites the device cgroup from "
                f"the spec alone (cpuManagerPolicy {pol or 'unknown'}: {src}).")
        # shown only with the static policy read from the node; else an in-place resize is the only caller
        return Mechanism("shown" if pol == "static" else "fits", said)
    if gpu and all(r.get("gpu_injection") in ("cdi", "spec") for r in gpu):
        return Mechanism("ruled-out", f"The GPU of {where} is in the OCI spec ({', '.join(sorted({r['gpu_injection'] for r in gpu}))}), "
                         "so runc update re-applies it.")
    return Mechanism("fits", f"How {where} got its GPU is not shown, so whether runc update drops it is unknown.")


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Pass the device specs (compatWithCPUManager) or use CDI, so runc update keeps the GPU."""
    return {"what": "Put the GPU into the OCI spec so runc update keeps it: the NVIDIA device plugin's "
                    "--pass-device-specs=true (Helm: compatWithCPUManager=true) or CDI (deviceListStrategy cdi-cri), "
                    "then recreate the pod",
            "commands": ["kubectl -n kube-system get ds -o yaml | grep -n -E 'PASS_DEVICE_SPECS|pass-device-specs|"
                         "DEVICE_LIST_STRATEGY'",
                         "grep -n -E 'cpuManagerPolicy|cpu-manager-policy' /var/lib/kubelet/config.yaml"],
            "why": "The static CPU manager updates a container's cpuset through runc, which rebuilds its device rules "
                   "from the spec; a GPU added by the hook is not in it.",
            "sources": ["https://github.com/kubernetes/kubernetes/issues/77073",
                        "https://github.com/NVIDIA/nvidia-docker/issues/966"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "kubelet", "exposure: containers"), judge, remedy, severity="config")
