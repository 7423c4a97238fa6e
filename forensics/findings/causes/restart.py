"""A restart (or failure) of the container runtime or the kubelet inside the window: containerd, dockerd,
CRI-O, k3s or the kubelet, as PID 1's own unit lines show it (``Stopping``/``Started``/``Failed with
result``/``Scheduled restart job``).

A runtime restart leaves running containers as they are (containerd's shims and runc's cgroups outlive
the daemon), so it does not take a running pod's GPU; it explains what happens around it: containers that
could not be created, a device plugin that had to register again, capacity that dipped. A kubelet restart
under the static CPU manager makes it reconcile every container (UpdateContainerResources), which is
weighed as its own cause (:mod:`.cpu_manager`).
"""
from __future__ import annotations

from ..verdicts import Cause, Evidence, Mechanism, Rule, Window, coverage_of, explains, first_seen, weigh
from .cpu_manager import policy

KIND = "runtime-restart"
TITLE = "a restart of the container runtime or the kubelet"
EXPLAINS = frozenset({"create-failed", "plugin-down", "device-unhealthy", "no-driver", "nvml-unknown", "unknown"})
#: the units whose restart this rule weighs
UNITS = ("containerd.service", "docker.service", "crio.service", "kubelet.service", "k3s.service",
         "k3s-agent.service", "rke2-server.service", "rke2-agent.service", "snap.microk8s.daemon-containerd.service",
         "snap.microk8s.daemon-kubelite.service")
ACTIONS = ("stopping", "stopped", "starting", "started", "failed", "restart-scheduled")


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: PID 1 logged a stop, start, failure or scheduled restart of the runtime or the kubelet
    inside the window, and the symptom is one a restart produces; excluded: the journal covers the window
    and logged none, or the symptom is an NVML error of a running pod and no kubelet restart under the
    static CPU manager could explain it (a runtime restart leaves running containers' device rules alone);
    undetermined: no journal covers the window."""
    start, end = window
    hits = [e for e in ev.events if e.kind == "journal.unit" and start <= e.at <= end
            and e.attrs.get("unit") in UNITS and e.attrs.get("action") in ACTIONS]
    if hits:
        units = sorted({e.attrs["unit"] for e in hits})
        h = first_seen(hits, f"PID 1 logged {hits[0].attrs.get('action')} of {hits[0].attrs.get('unit')}"
                       + (f" (units: {', '.join(units)})" if len(units) > 1 else ""))
    else:
        h = coverage_of(("journal",), ev, window, "PID 1 logged no stop, start or failure of the runtime or the kubelet")
    return weigh(KIND, h, mechanism(ev, hits))


def mechanism(ev: Evidence, hits: list) -> Mechanism:
    """What a restart does to this incident's symptom."""
    if (no := explains(EXPLAINS, ev.scope, TITLE)) is not None:
        return no
    if ev.scope.symptom != "nvml-unknown":
        return Mechanism("fits", "While the runtime or the kubelet is down no container is created and the device "
                         "plugin must register again.")
    kubelet = any(e.attrs.get("unit") in ("kubelet.service", "k3s.service", "k3s-agent.service") for e in hits)
    pol, src = policy(ev)
    if kubelet and pol != "none":
        return Mechanism("fits", f"After a restart the kubelet's CPU manager reconciles every container "
                         f"(cpuManagerPolicy {pol or 'unknown'}: {src}); whether that rewrote device rules is the "
                         "CPU-manager cause's question.")
    return Mechanism("ruled-out", "A restart of the runtime leaves running containers and their device rules as they "
                     "are (the shims and runc's cgroups outlive the daemon), so it does not take a running pod's GPU"
                     + (f"; the kubelet's cpuManagerPolicy is none ({src})." if kubelet else "."))


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Read why the unit stopped."""
    return {"what": "Read why the runtime or the kubelet stopped or failed (its own last lines before the stop)",
            "commands": ["systemctl status containerd kubelet --no-pager",
                         "journalctl -u containerd -u kubelet --since '-2h' --no-pager | tail -n 100"],
            "why": "While it is down no pod is created and the device plugin re-registers; a crash loop keeps GPUs "
                   "unallocatable.", "sources": []}


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "kubelet"), judge, remedy, severity="node")
