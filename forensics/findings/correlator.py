"""Correlator: incidents and their windows, the verdict of each candidate cause, and the gaps.

Input is only what was read from the bundle (events, coverage, node facts, the manifest's
``--incident`` windows), so the same bundle always gives the same findings.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime

from . import verdicts
from ..events import Coverage, Event
from ..timeutil import iso_z, parse_iso

#: sources whose current file is appended to until collection, so silence after its last line is
#: evidence, provided that current file itself was collected (rotations alone prove nothing after them)
APPEND_ONLY = {"dpkg": "/var/log/dpkg.log", "apt": "/var/log/apt/history.log",
               "unattended-upgrades": "/var/log/unattended-upgrades/unattended-upgrades.log"}


@dataclass
class Incident:
    """An incident window: ``start`` = last known good, ``end`` = first known bad (UTC)."""

    id: str
    symptom: str
    start: datetime
    end: datetime
    origin: str
    label: str | None = None
    evidence: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    causes: list[verdicts.Cause] = field(default_factory=list)


def coverage_map(coverage: list[Coverage], collected_at: datetime | None,
                 collected_sources: set[str] = frozenset()) -> dict[str, Coverage]:
    """One Coverage per source name. An append-only package log whose current file was collected
    (its host path is in ``collected_sources``) covers up to the collection time: it would hold any
    later transaction."""
    out: dict[str, Coverage] = {}
    for c in coverage:
        if APPEND_ONLY.get(c.source) in collected_sources and c.start and collected_at:
            c = Coverage(c.source, c.start, max(c.end or collected_at, collected_at),
                         c.reason + "; the log was still being written at collection")
        out[c.source] = c
    return out


def incidents_from(manifest_incidents: list[dict], events: list[Event], cov: dict[str, Coverage],
                   broken: list[dict] | None = None, collected_at: datetime | None = None,
                   metric: list[dict] | None = None) -> list[Incident]:
    """Incidents from ``--incident`` (stored in the manifest) and from NVML/CUDA error lines.

    An error line opens an incident for its pod (or unit) unless an earlier incident already holds it
    or no healthy marker for that pod came since the previous error (it is the same outage). The
    window runs from the last healthy marker for the same pod to the first error; without one it
    starts at the journal's first entry and a note says so. Raises ``ValueError`` for a malformed
    manifest incident.
    """
    out: list[Incident] = []
    for i, spec in enumerate(manifest_incidents, 1):
        s, e = parse_iso(spec["start"]), parse_iso(spec["end"])
        out.append(Incident(f"I{i}", spec.get("symptom") or "GPU lost inside the pod (window given with --incident)",
                            s, e, "--incident", spec.get("label")))
    _from_metrics(out, metric or [], cov)
    kinds = _by_kind(events, ("journal.nvml-error", "journal.healthy", "container.log-error", "container.log-healthy",
                              "container.created"))
    healthy: dict[str, list[Event]] = {}  # per pod (or unit), in timeline order
    for h in kinds["journal.healthy"]:
        healthy.setdefault(h.attrs.get("pod") or h.attrs.get("unit") or h.attrs.get("identifier"), []).append(h)
    last_error: dict[str, datetime] = {}
    for err in kinds["journal.nvml-error"]:
        key = err.attrs.get("pod") or err.attrs.get("unit") or err.attrs.get("identifier") or "?"
        good = [h for h in healthy.get(key, ()) if h.at <= err.at]
        last_good = good[-1] if good else None
        if key in last_error and (last_good is None or last_good.at < last_error[key]):
            continue  # the same outage goes on
        last_error[key] = err.at
        if any(inc.start <= err.at <= inc.end for inc in out):
            continue
        j = cov.get("journal")
        start = last_good.at if last_good else (j.start if j and j.start else err.at)
        inc = Incident(f"I{len(out) + 1}", f"{err.attrs.get('message') or err.summary} ({key})", start, err.at,
                       "journal", evidence=[verdicts.cite(err)] + ([verdicts.cite(last_good)] if last_good else []))
        if not last_good:
            inc.notes.append("no healthy marker before the first error: the window starts at the journal's first entry")
        out.append(inc)
    _from_containers(out, kinds, broken or [], collected_at)
    for n, inc in enumerate(sorted(out, key=lambda x: x.end), 1):
        inc.id = f"I{n}"
    return sorted(out, key=lambda x: x.end)


def _from_metrics(out: list[Incident], metric: list[dict], cov: dict[str, Coverage]) -> None:
    """Incidents from Prometheus (collectors/metrics/ ``metric_incidents``), in place.

    A DCGM series that vanished while its exporter stayed up gives a tight window: its last sample
    to the first scrape without it. GPU capacity falling to 0 gives ``[last positive sample, first 0]``;
    when retention already holds only zeros its start is unknown, and a DCGM window ending before that
    first 0 dates the same outage: it is kept, and the capacity evidence joins it. A window inside one
    given with ``--incident`` joins that one instead.
    """
    tight = []
    for m in sorted(metric, key=lambda m: (m.get("start") is None, m.get("end") or "")):
        end = parse_iso(m["end"]) if m.get("end") else None
        start = parse_iso(m["start"]) if m.get("start") else None
        if end is None:
            continue
        ev = list(m.get("evidence") or [])
        host = next((inc for inc in out + tight if (start or end) <= inc.end and inc.start <= end
                     and (start is None or inc.start <= start)), None)
        if host is None and start is None:
            host = next((inc for inc in tight if inc.end <= end), None)
        if host is not None:
            host.evidence.extend(ev)
            host.notes.append(f"also: {m.get('symptom')}")
            continue
        if start is None:
            p = cov.get("prometheus")
            start = p.start if p and p.start else end
            note = ["the last good sample is older than Prometheus retention: the window starts where retention does"]
        else:
            note = []
        inc = Incident("I?", m.get("symptom") or m.get("detector") or "metrics", start, end, "metrics",
                       m.get("detector"), evidence=ev, notes=note)
        tight.append(inc)
    out.extend(tight)


def _by_kind(events: list[Event], kinds: tuple[str, ...]) -> dict[str, list[Event]]:
    """The events of each of ``kinds``, in their order, from one pass over ``events``."""
    out: dict[str, list[Event]] = {k: [] for k in kinds}
    for e in events:
        if e.kind in out:
            out[e.kind].append(e)
    return out


def _pod_key(attrs: dict) -> str:
    return f"{attrs.get('namespace') or attrs.get('pod_namespace') or ''}/{attrs.get('pod') or attrs.get('id') or '?'}"


def _from_containers(out: list[Incident], kinds: dict[str, list[Event]], broken: list[dict],
                     collected_at: datetime | None) -> None:
    """Open incidents from container evidence (issue 3's detector), in place.

    - a container log's first NVML/CUDA error: window from the last clean line before it (else the
      container's creation) to that error;
    - a container whose device nodes exist but whose probe gives EPERM or whose cgroup rules no
      longer allow its GPU (``broken``: exposure rows with ``created``): window from its last clean log
      line (else its creation) to its first error line (else the collection time).
    An existing incident whose window lies inside the new one already brackets the same outage more
    tightly: the container is added to its evidence instead of opening a wider incident.
    """
    errors, healthy = kinds["container.log-error"], kinds["container.log-healthy"]
    created = {e.attrs.get("id"): e for e in kinds["container.created"]}
    by_pod = {_pod_key(e.attrs): e for e in created.values()}
    candidates: list[tuple[datetime | None, datetime | None, str, list[dict]]] = []
    seen: set[str] = set()
    for err in errors:
        key = _pod_key(err.attrs)
        if key in seen:
            continue
        seen.add(key)
        good = [h for h in healthy if _pod_key(h.attrs) == key and h.at <= err.at]
        start_ev = good[-1] if good else by_pod.get(key)
        candidates.append((start_ev.at if start_ev else None, err.at,
                           f"{err.attrs.get('message') or 'NVML/CUDA error'} (pod {key}, container log)",
                           [verdicts.cite(err)] + ([verdicts.cite(start_ev)] if start_ev else [])))
    for row in broken:
        key = _pod_key(row)
        if key in seen:
            continue
        seen.add(key)
        c = by_pod.get(key) or created.get(row.get("id"))
        good = [h for h in healthy if _pod_key(h.attrs) == key]
        start = good[-1].at if good else (c.at if c else None)
        candidates.append((start, collected_at, f"GPU no longer usable in pod {key}: {row.get('reason') or 'broken'}",
                           [{"artifact": f"containers/{row.get('id')}", "summary": row.get("reason") or "broken"}]))
    for start, end, symptom, ev in candidates:
        if start is None or end is None:
            continue
        inner = [inc for inc in out if start <= inc.start and inc.end <= end]
        holding = [inc for inc in out if inc.start <= end <= inc.end]
        if inner or holding:
            (inner or holding)[0].evidence.extend(ev)
            (inner or holding)[0].notes.append(f"also: {symptom}")
            continue
        out.append(Incident("I?", symptom, start, end, "containers", evidence=ev))


def correlate(manifest: dict, events: list[Event], coverage: list[Coverage], preconditions: dict,
              broken: list[dict] | None = None, metric: list[dict] | None = None) -> tuple[list[Incident], dict[str, Coverage]]:
    """Weigh every cause in :data:`forensics.findings.verdicts.RULES` for every incident.

    ``events`` must be sorted by time (each rule then sees only its window, from
    :data:`~forensics.findings.verdicts.REQUESTER_LOOKBACK` before it; out of order, every rule reads them all);
    ``broken`` lists exposure rows of containers that lost their GPU. Returns ``(incidents with causes,
    coverage by source)``.
    """
    collected = (manifest.get("collection") or {}).get("start")
    done = {a.get("source") for a in manifest.get("artifacts", []) if a.get("status") == "collected"}
    cov = coverage_map(coverage, parse_iso(collected) if collected else None, done)
    incidents = incidents_from(manifest.get("incidents") or [], events, cov, broken,
                               parse_iso(collected) if collected else None, metric)
    times = [e.at for e in events]
    ordered = all(a <= b for a, b in zip(times, times[1:]))
    boots = [e for e in events if e.kind == "journal.boot"]
    for inc in incidents:
        near = events
        if ordered:  # the rules look at the window, and for a reload's requester a little before and after it
            lo = bisect_left(times, inc.start - verdicts.REQUESTER_LOOKBACK)
            near = events[lo:bisect_right(times, inc.end + verdicts.REQUESTER_LOOKAHEAD, lo)]
        inc.causes = [
            verdicts.daemon_reload(inc.start, inc.end, near, cov, preconditions),
            verdicts.package_transaction(inc.start, inc.end, near, cov),
            verdicts.reboot(inc.start, inc.end, boots, cov, (manifest.get("node_facts") or {}).get("boot_id")),
        ]
    return incidents, cov


def window_text(inc: Incident) -> str:
    """``2026-09-02T04:04:58Z .. 2026-09-02T04:05:27Z``"""
    return f"{iso_z(inc.start)} .. {iso_z(inc.end)}"
