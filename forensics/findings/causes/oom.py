"""An OOM kill of one of the incident's containers inside the window.

Evidence (docs/sources.md "OOM"): the kernel's ``oom-kill:constraint=...,task_memcg=...`` and ``Memory cgroup out
of memory: Killed process ...`` lines (the container id read from the cgroup path), the cgroup's own
counter (v2 ``memory.events`` ``oom_kill``, v1 ``memory.oom_control``: undated, it says only that a kill
happened in the container's life), and the kubelet's ``reason: OOMKilled`` with its ``finishedAt``
(Kubernetes API). An OOM kill ends a process; it never takes the GPU from the processes that live on,
so it explains an OOM, not an NVML error.
"""
from __future__ import annotations

from .. import scope as S
from ..verdicts import (Cause, Evidence, Happened, Mechanism, Rule, Window, coverage_of, explains, first_seen,
                        weigh)

KIND = "oom-kill"
TITLE = "an OOM kill"
EXPLAINS = frozenset({"oom", "unknown"})


def _mine(e, ids: set[str] | None, pods: set[str]) -> bool:
    a = e.attrs
    if e.kind == "kube.container-terminated":
        return str(a.get("reason")) == "OOMKilled" and (ids is None or S.pod_key(a.get("namespace"), a.get("pod")) in pods)
    if e.kind == "kernel.oom-kill":
        cid = str(a.get("container_id") or "")
        return ids is None or bool(cid and any(cid.startswith(i[:12]) or i.startswith(cid[:12]) for i in ids if i))
    return False


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the kernel or the kubelet shows an OOM kill of one of the incident's containers inside the
    window; inferred: the container's cgroup counts an OOM kill (``oom_kill`` > 0) that no line dates;
    excluded: a kernel log covers the window and shows none of theirs, or the symptom is not an OOM (an NVML
    error is no OOM kill's doing); undetermined: no kernel log covers the window."""
    rows, where, named = S.rows(ev)
    ids = ({str(r.get("id")) for r in rows if r.get("id")} | {str(c) for c in ev.scope.containers}) if named else None
    start, end = window
    hits = [e for e in ev.events if start <= e.at <= end and "same-line" not in e.flags
            and _mine(e, ids, set(ev.scope.pods))]
    counted = _counted(ev, rows)
    if hits:
        h = first_seen(hits, f"An OOM kill of {where}: {hits[0].summary}")
    elif counted:
        h = Happened("possibly", f"The memory cgroup of {', '.join(counted)} counts an OOM kill (oom_kill > 0), which "
                     "no kernel or kubelet line in the window dates.")
    else:
        h = coverage_of(("kernel", "kern.log", "kmsg"), ev, window, f"logged no OOM kill of {where}")
    m = explains(EXPLAINS, ev.scope, TITLE) or Mechanism(
        "shown" if hits or counted else "fits", "An OOM kill ends the container's process; the kubelet restarts it "
        "(reason OOMKilled, exit code 137).")
    return weigh(KIND, h, m)


def _counted(ev: Evidence, rows: list[dict]) -> list[str]:
    """The incident's containers whose memory cgroup counts an OOM kill (the record's ``memory``)."""
    ids = {r.get("id") for r in rows}
    out = []
    for c in ev.records():
        kills = (c.memory or {}).get("oom_kill")
        if c.id in ids and isinstance(kills, int) and not isinstance(kills, bool) and kills > 0:
            out.append(f"{c.pod_namespace or ''}/{c.pod or str(c.id)[:12]} ({c.memory.get('source')}: oom_kill {kills})")
    return out


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Raise the memory limit, or find what grew."""
    return {"what": "Give the container the memory it needs (resources.limits.memory) or find what grew; a GPU job "
                    "holds host memory for pinned buffers and data loaders too",
            "commands": ["kubectl get pod -A -o wide | grep -i oomkilled",
                         "kubectl describe pod -n <namespace> <pod> | grep -A3 -i 'last state'"],
            "why": "The kernel killed the process for exceeding its cgroup's memory limit; the GPU was not involved.",
            "sources": ["https://docs.openshift.com/container-platform/4.14/support/troubleshooting/"
                        "investigating-pod-issues.html"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("kernel", "kern.log", "kube", "containers: memory.events"), judge, remedy,
            severity="pod")
