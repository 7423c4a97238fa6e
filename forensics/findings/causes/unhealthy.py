"""The device plugin marked a GPU unhealthy inside the window (NVIDIA/k8s-device-plugin ``internal/rm/
health.go``: ``XidCriticalError: Xid=N on Device=...; marking device as unhealthy.``, ``Marking all devices
as unhealthy``; ``internal/plugin/server.go``: ``'nvidia.com/gpu' device marked unhealthy``), or GPU
allocatable fell while capacity stayed (the kubelet counts unhealthy devices in capacity only;
docs/sources.md "Device plugin health").

Marking a GPU unhealthy changes what the kubelet allocates: new pods stay Pending or fail admission ("no
healthy devices present"); it takes nothing from a running container. The plugin acts on an Xid, which the
GPU fault rules weigh; the plugin stays so until it restarts ("there is no way to recover from the
Unhealthy state").
"""
from __future__ import annotations

from datetime import datetime

from ...timeutil import parse_iso
from ..verdicts import Cause, Evidence, Happened, Mechanism, Rule, Window, explains, first_seen, weigh

KIND = "device-unhealthy"
TITLE = "the device plugin marking a GPU unhealthy"
EXPLAINS = frozenset({"device-unhealthy", "create-failed", "plugin-down", "unknown"})


def _dropped(e) -> bool:
    a = e.attrs
    return e.kind == "metrics.capacity-change" and a.get("series") == "allocatable" and isinstance(a.get("new"), (int, float)) \
        and isinstance(a.get("old"), (int, float)) and a["new"] < a["old"]


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the plugin's log marks a GPU unhealthy, or Prometheus shows GPU allocatable falling,
    inside the window; excluded: the plugin's log (kept from before the window, not cut) and Prometheus
    show neither, or the symptom is a running pod's (an NVML error in a running container is not the
    plugin's doing); undetermined: neither source covers the window."""
    start, end = window
    hits = [e for e in ev.events if start <= e.at <= end and (
        (e.kind in ("container.log-symptom", "journal.symptom") and e.attrs.get("signature") == "device-unhealthy")
        or _dropped(e))]
    if hits:
        h = first_seen(hits, f"{hits[0].summary}")
    else:
        h = _coverage(window, ev)
    m = explains(EXPLAINS, ev.scope, TITLE) or Mechanism(
        "shown" if hits else "fits", "An unhealthy GPU is no longer allocated: new GPU pods stay Pending or fail "
        "admission (\"no healthy devices present\") until the plugin restarts.")
    return weigh(KIND, h, m)


def _coverage(window: Window, ev: Evidence) -> Happened:
    """``no`` when a device plugin's log kept from before the window (not cut) shows no marking, or
    Prometheus covers the window with allocatable steady; else ``unknown``."""
    start, _end = window
    logs = [p for p in ev.facts.get("podlogs") or [] if isinstance(p, dict) and "device-plugin" in
            f"{p.get('pod')}/{p.get('container')}".lower()]
    whole = [p for p in logs if not p.get("truncated") and (t := _first(p)) and t <= start]
    if whole:
        p = whole[0]
        return Happened("no", f"The device plugin's log ({p.get('namespace')}/{p.get('pod')}, kept whole from before "
                        "the window) marks no GPU unhealthy in it.")
    prom = ev.coverage.get("prometheus")
    if prom and prom.start and prom.start <= start and prom.end and prom.end >= window.end:
        return Happened("no", "Prometheus covers the window and GPU allocatable did not fall in it.")
    return Happened("unknown", "Neither the device plugin's log nor Prometheus covers the window.",
                    gaps=["device plugin log: not in the bundle or cut" if not logs else "device plugin log: starts inside "
                          "the window or was cut"])


def _first(p: dict) -> datetime | None:
    line = p.get("first_line") or p.get("last_healthy") or p.get("first_error")
    try:
        return parse_iso(line["at"]) if isinstance(line, dict) and line.get("at") else None
    except (ValueError, TypeError):
        return None


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Find the Xid the plugin acted on; restart the plugin once the GPU is sound."""
    return {"what": "Read the Xid the plugin acted on (the GPU fault causes weigh it); once the GPU is reset or "
                    "replaced, restart the device plugin's pod so it reports the GPU healthy again",
            "commands": ["kubectl get node -o jsonpath='{.status.allocatable}'",
                         "kubectl -n kube-system logs -l app.kubernetes.io/name=nvidia-device-plugin --tail=50 | "
                         "grep -i -E 'unhealthy|Xid'"],
            "why": "The plugin never marks a GPU healthy again by itself (k8s-device-plugin server.go FIXME).",
            "sources": ["https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/rm/health.go"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("podlogs", "prometheus"), judge, remedy, severity="node")
