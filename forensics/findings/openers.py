"""Incident openers: what opens an incident, and its window (``start`` = last known good, ``end`` =
first known bad).

Every opener has one signature, ``opener(incidents, signs) -> None``: it reads the :class:`Signs`
(what collectors read from the bundle, and the exposure rows of containers that lost their GPU) and
adds incidents to the list, or joins its evidence to an incident already there that brackets the
same outage. :data:`OPENERS` lists them in the order they run (an earlier incident holds a later
one's evidence): windows given with ``--incident``, Prometheus, NVML/CUDA lines in the journal,
container logs and broken containers. A new opener is one function and one line in :data:`OPENERS`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Callable

from ..events import Coverage, Event
from ..timeutil import local_iso, parse_iso
from .verdicts import Cause, cite


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
    causes: list[Cause] = field(default_factory=list)


#: the event kinds openers read, gathered in one pass over the timeline
KINDS = ("journal.nvml-error", "journal.healthy", "container.log-error", "container.log-healthy", "container.created")


@dataclass
class Signs:
    """What the openers read.

    ``given``: the manifest's ``--incident`` windows (``{"start": ISO, "end": ISO, "label"}``);
    ``events``: the timeline, in time order; ``coverage``: one Coverage per source name; ``broken``:
    exposure rows of containers whose GPU is no longer usable; ``collected_at``: the collection's start
    (UTC); ``metrics``: the metrics Reading's ``facts["metrics"]`` (``{}`` without Prometheus);
    ``tz``: the node's zone, for the local times in symptoms.
    """

    given: list[dict] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    broken: list[dict] = field(default_factory=list)
    collected_at: datetime | None = None
    metrics: dict = field(default_factory=dict)
    tz: tzinfo = timezone.utc
    _kinds: dict | None = field(default=None, repr=False)

    def of_kind(self, kind: str) -> list[Event]:
        """The events of ``kind`` (one of :data:`KINDS`), in timeline order."""
        if self._kinds is None:
            self._kinds = {k: [] for k in KINDS}
            for e in self.events:
                if e.kind in self._kinds:
                    self._kinds[e.kind].append(e)
        return self._kinds[kind]


def from_given(out: list[Incident], signs: Signs) -> None:
    """The windows given with ``--incident`` (stored in the manifest), in their order. Raises
    ``ValueError`` for a malformed one."""
    for i, spec in enumerate(signs.given, 1):
        s, e = parse_iso(spec["start"]), parse_iso(spec["end"])
        out.append(Incident(f"I{i}", spec.get("symptom") or "GPU lost inside the pod (window given with --incident)",
                            s, e, "--incident", spec.get("label")))


def from_metrics(out: list[Incident], signs: Signs) -> None:
    """Incidents from Prometheus (:func:`metric_incidents`), in place.

    A DCGM series that vanished while its exporter stayed up gives a tight window: its last sample
    to the first scrape without it. GPU capacity falling to 0 gives ``[last positive sample, first 0]``;
    when retention already holds only zeros its start is unknown, and a DCGM window ending before that
    first 0 dates the same outage: it is kept, and the capacity evidence joins it. A window inside one
    given with ``--incident`` joins that one instead.
    """
    tight = []
    metric = metric_incidents(signs.metrics, signs.tz)
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
            p = signs.coverage.get("prometheus")
            start = p.start if p and p.start else end
            note = ["the last good sample is older than Prometheus retention: the window starts where retention does"]
        else:
            note = []
        inc = Incident("I?", m.get("symptom") or m.get("detector") or "metrics", start, end, "metrics",
                       m.get("detector"), evidence=ev, notes=note)
        tight.append(inc)
    out.extend(tight)


def metric_incidents(metrics: dict, tz: tzinfo = timezone.utc) -> list[dict]:
    """The incident windows Prometheus shows, from the metrics Reading's facts (collectors/metrics/):
    ``[{"start": ISO or None, "end": ISO, "detector", "symptom", "evidence": [...]}]``, DCGM windows
    first (:func:`_dcgm_vanished`), then capacity ones (:func:`_capacity_zero`). ``[]`` without them."""
    return _dcgm_vanished(metrics.get("dcgm_targets") or []) + _capacity_zero(metrics, tz)


def _dcgm_vanished(targets: list[dict]) -> list[dict]:
    """DCGM metrics that stopped while the exporter's target stayed up. The window is [the target's
    last DCGM sample, its first ``up == 1`` scrape after it]: that scrape is the first evidence of
    absence (the exporter answered, without DCGM metrics). Per target, so a loss that ended with an
    exporter restart (a new target) is still found."""
    out = []
    for t in targets:
        ups = [at for at, v in t["up_after"] if v == 1]
        if not ups or not t["gpus"]:
            continue
        names = ", ".join(f"GPU {g['gpu']} ({g['uuid']})" for g in t["gpus"])
        out.append({"start": t["last_seen"], "end": ups[0], "detector": "dcgm-vanished",
                    "symptom": f"DCGM metrics of {names} on {t['gpus'][0]['hostname']} stopped while dcgm-exporter "
                               f"target {t['job']} {t['instance']} stayed up (up=1)", "evidence": t["evidence"]})
    return out


def _n(v):
    return "none" if v is None else (int(v) if float(v).is_integer() else v)


def _value_at(first: dict | None, changes: list[dict], at: str) -> float | None:
    v = first["value"] if first and first["at"] <= at else None
    for c in changes:
        if c["at"] <= at:
            v = c["new"]
    return v


def _capacity_zero(metrics: dict, tz: tzinfo) -> list[dict]:
    """GPU capacity (or allocatable, while capacity stayed positive) falling to 0: the window is [last
    positive sample, first 0 sample]. Already 0 at the first sample held: the start is unknown."""
    out = []
    resource = metrics.get("resource")
    history = metrics.get("capacity_history") or {}
    changes = {kind: [c for c in metrics.get("capacity_changes") or [] if c["series"] == kind] for kind in history}
    capacity = ((history.get("capacity") or {}).get("first_sample"), changes.get("capacity", []))
    for kind, h in history.items():
        for c in [c for c in changes[kind] if c["new"] == 0 and (c["old"] or 0) > 0]:
            cap = _value_at(*capacity, c["at"]) if kind == "allocatable" else None
            if kind == "allocatable" and not cap:
                continue
            extra = f" while capacity stayed {_n(cap)} (device plugin reports the GPUs unhealthy)" if cap else ""
            out.append({"start": c["last_old_at"], "end": c["at"], "detector": f"{kind}-zero",
                        "symptom": f"{resource} {kind} fell from {_n(c['old'])} to 0{extra}",
                        "evidence": [c["evidence"]] if c["evidence"] else []})
        f = h["first_sample"]
        if kind == "capacity" and f and f["value"] == 0:
            when = local_iso(parse_iso(f["at"]), tz)
            oldest = (metrics.get("retention") or {}).get("oldest_sample")
            at_start = oldest and (parse_iso(f["at"]) - parse_iso(oldest)).total_seconds() <= 2 * 3600
            why = (f"capacity already 0 when retention starts on {when}" if at_start else
                   f"capacity already 0 at the first sample held for it, {when} (Prometheus holds data from "
                   f"{local_iso(parse_iso(oldest), tz) if oldest else 'an unknown time'})")
            out.append({"start": None, "end": f["at"], "detector": "capacity-zero",
                        "symptom": f"{resource} {why}", "evidence": [f["evidence"]] if f["evidence"] else []})
    return out


def from_journal(out: list[Incident], signs: Signs) -> None:
    """Incidents from NVML/CUDA error lines in the journal, in place.

    An error line opens an incident for its pod (or unit) unless an earlier incident already holds it
    or no healthy marker for that pod came since the previous error (it is the same outage). The
    window runs from the last healthy marker for the same pod to the first error; without one it
    starts at the journal's first entry and a note says so.
    """
    healthy: dict[str, list[Event]] = {}  # per pod (or unit), in timeline order
    for h in signs.of_kind("journal.healthy"):
        healthy.setdefault(h.attrs.get("pod") or h.attrs.get("unit") or h.attrs.get("identifier"), []).append(h)
    last_error: dict[str, datetime] = {}
    for err in signs.of_kind("journal.nvml-error"):
        key = err.attrs.get("pod") or err.attrs.get("unit") or err.attrs.get("identifier") or "?"
        good = [h for h in healthy.get(key, ()) if h.at <= err.at]
        last_good = good[-1] if good else None
        if key in last_error and (last_good is None or last_good.at < last_error[key]):
            continue  # the same outage goes on
        last_error[key] = err.at
        if any(inc.start <= err.at <= inc.end for inc in out):
            continue
        j = signs.coverage.get("journal")
        start = last_good.at if last_good else (j.start if j and j.start else err.at)
        inc = Incident(f"I{len(out) + 1}", f"{err.attrs.get('message') or err.summary} ({key})", start, err.at,
                       "journal", evidence=[cite(err)] + ([cite(last_good)] if last_good else []))
        if not last_good:
            inc.notes.append("no healthy marker before the first error: the window starts at the journal's first entry")
        out.append(inc)


def _pod_key(attrs: dict) -> str:
    return f"{attrs.get('namespace') or attrs.get('pod_namespace') or ''}/{attrs.get('pod') or attrs.get('id') or '?'}"


def from_containers(out: list[Incident], signs: Signs) -> None:
    """Open incidents from container evidence (issue 3's detector), in place.

    - a container log's first NVML/CUDA error: window from the last clean line before it (else the
      container's creation) to that error;
    - a container whose device nodes exist but whose probe gives EPERM or whose cgroup rules no
      longer allow its GPU (``signs.broken``: exposure rows with ``created``): window from its last
      clean log line (else its creation) to its first error line (else the collection time).
    An existing incident whose window lies inside the new one already brackets the same outage more
    tightly: the container is added to its evidence instead of opening a wider incident.
    """
    errors, healthy = signs.of_kind("container.log-error"), signs.of_kind("container.log-healthy")
    created = {e.attrs.get("id"): e for e in signs.of_kind("container.created")}
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
                           [cite(err)] + ([cite(start_ev)] if start_ev else [])))
    for row in signs.broken:
        key = _pod_key(row)
        if key in seen:
            continue
        seen.add(key)
        c = by_pod.get(key) or created.get(row.get("id"))
        good = [h for h in healthy if _pod_key(h.attrs) == key]
        start = good[-1].at if good else (c.at if c else None)
        candidates.append((start, signs.collected_at,
                           f"GPU no longer usable in pod {key}: {row.get('reason') or 'broken'}",
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


#: the incident openers, in the order they run
OPENERS: list[Callable[[list[Incident], Signs], None]] = [from_given, from_metrics, from_journal, from_containers]


def open_incidents(signs: Signs) -> list[Incident]:
    """Run every opener in :data:`OPENERS` over ``signs``; the incidents sorted by their end and
    numbered ``I1``, ``I2``, ... in that order. Raises ``ValueError`` for a malformed ``--incident``."""
    out: list[Incident] = []
    for opener in OPENERS:
        opener(out, signs)
    out.sort(key=lambda x: x.end)
    for n, inc in enumerate(out, 1):
        inc.id = f"I{n}"
    return out
