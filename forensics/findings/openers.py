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
from ..excerpt import excerpt
from ..timeutil import local_iso, parse_iso
from .. import neighbours
from .scope import key_words, pod_key
from .verdicts import Cause, Scope, cite


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
    #: the symptom class (forensics.neighbours.SYMPTOM_CLASSES) of the line that opened it
    symptom_class: str = "unknown"
    #: ``namespace/name`` of the pods and the runtime ids of the containers its evidence names
    pods: set = field(default_factory=set)
    containers: set = field(default_factory=set)

    def scope(self) -> Scope:
        """What the cause rules judge this incident by (:class:`~forensics.findings.verdicts.Scope`)."""
        return Scope(self.symptom_class, frozenset(self.pods), frozenset(self.containers))

    def join(self, evidence: list[dict], note: str, symptom_class: str, pods=(), containers=()) -> None:
        """Add another line's evidence (and its pods) to this incident; an ``unknown`` class takes the line's."""
        self.evidence.extend(evidence)
        self.notes.append(note)
        if self.symptom_class == "unknown":
            self.symptom_class = symptom_class
        self.pods |= {p for p in pods if p}
        self.containers |= {c for c in containers if c}


#: the event kinds openers read, gathered in one pass over the timeline
KINDS = ("journal.nvml-error", "journal.healthy", "journal.symptom", "container.log-error", "container.log-healthy",
         "container.log-symptom", "container.created", "kernel.xid", "kernel.gpu-lost", "kernel.oom-kill",
         "kube.container-terminated")


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
    #: the node's GPU containers (exposure rows with a GPU): an OOM kill of one of them opens an incident
    gpu_rows: list[dict] = field(default_factory=list)
    _kinds: dict | None = field(default=None, repr=False)

    def of_kind(self, kind: str) -> list[Event]:
        """The events of ``kind`` (one of :data:`KINDS`), in timeline order."""
        if self._kinds is None:
            self._kinds = {k: [] for k in KINDS}
            for e in self.events:
                if e.kind in self._kinds and "same-line" not in e.flags:
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
        cls = "device-unhealthy" if m.get("detector") == "allocatable-zero" else "unknown"
        if host is not None:
            host.join(ev, f"also: {m.get('symptom')}", cls)
            continue
        if start is None:
            p = signs.coverage.get("prometheus")
            start = p.start if p and p.start else end
            note = ["the last good sample is older than Prometheus retention: the window starts where retention does"]
        else:
            note = []
        inc = Incident("I?", m.get("symptom") or m.get("detector") or "metrics", start, end, "metrics",
                       m.get("detector"), evidence=ev, notes=note, symptom_class=cls)
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


def _cite(e: Event) -> dict:
    """The evidence record of a line that opened or explains an incident, its summary the line's own words
    with the error clause whole (:func:`forensics.excerpt.excerpt`)."""
    c = cite(e)
    if e.attrs.get("message"):
        c["summary"] = excerpt(str(e.attrs["message"]))
    return c


def _class_of(e: Event) -> str:
    """The symptom class a line shows: ``nvml-unknown`` for the EPERM family (journal.nvml-error,
    container.log-error, a broken container), else its signature's (:data:`forensics.neighbours.SYMPTOM_OF`)."""
    if e.kind in ("journal.nvml-error", "container.log-error"):
        return "nvml-unknown"
    return neighbours.SYMPTOM_OF.get(str(e.attrs.get("signature")), "unknown")


def _opens(e: Event) -> bool:
    """Whether a line opens an incident: the EPERM family, or a symptom of :data:`forensics.neighbours.OPENS_INCIDENT`."""
    if e.kind in ("journal.nvml-error", "container.log-error"):
        return True
    return e.kind in ("journal.symptom", "container.log-symptom") and e.attrs.get("signature") in neighbours.OPENS_INCIDENT


def _host_of(out: list[Incident], at: datetime, cls: str) -> Incident | None:
    """An incident already open whose window holds ``at`` and whose symptom is the same class (or unknown)."""
    return next((inc for inc in out if inc.start <= at <= inc.end and same_class(inc.symptom_class, cls)), None)


def same_class(a: str, b: str) -> bool:
    """Two symptom classes that may be one outage: equal, or one of them unknown (a window given with
    ``--incident``, a metric) that a line then names."""
    return a == b or "unknown" in (a, b)


def from_journal(out: list[Incident], signs: Signs) -> None:
    """Incidents from error lines in the journal (the EPERM family's NVML/CUDA lines, and the symptom lines
    of :data:`forensics.neighbours.OPENS_INCIDENT` the runtime and the kubelet log), in place.

    An error line opens an incident for its pod (or unit) unless an earlier incident of the same symptom
    class already holds it or no healthy marker for that pod came since the previous error of that class
    (it is the same outage). The window runs from the last healthy marker for the same pod to the first
    error; without one it starts at the journal's first entry and a note says so.
    """
    healthy: dict[str, list[Event]] = {}  # per pod (or unit), in timeline order
    for h in signs.of_kind("journal.healthy"):
        healthy.setdefault(h.attrs.get("pod") or h.attrs.get("unit") or h.attrs.get("identifier"), []).append(h)
    last_error: dict[tuple, datetime] = {}
    lines = sorted((e for k in ("journal.nvml-error", "journal.symptom") for e in signs.of_kind(k) if _opens(e)),
                   key=lambda e: e.at)
    for err in lines:
        key = err.attrs.get("pod") or err.attrs.get("unit") or err.attrs.get("identifier") or "?"
        cls = _class_of(err)
        good = [h for h in healthy.get(key, ()) if h.at <= err.at]
        last_good = good[-1] if good else None
        if (key, cls) in last_error and (last_good is None or last_good.at < last_error[(key, cls)]):
            continue  # the same outage goes on
        last_error[(key, cls)] = err.at
        pods = {err.attrs["pod"]} if "/" in str(err.attrs.get("pod") or "") else set()
        if host := _host_of(out, err.at, cls):
            host.join([_cite(err)], f"also: {_said(err)} ({key})", cls, pods)
            continue
        j = signs.coverage.get("journal")
        start = last_good.at if last_good else (j.start if j and j.start else err.at)
        inc = Incident(f"I{len(out) + 1}", f"{_said(err)} ({key})", start, err.at, "journal",
                       evidence=[_cite(err)] + ([cite(last_good)] if last_good else []), symptom_class=cls, pods=pods)
        if not last_good:
            inc.notes.append("no healthy marker before the first error: the window starts at the journal's first entry")
        out.append(inc)


def _said(e: Event) -> str:
    """The line's own words, whole enough to read: the error clause is never cut (forensics.excerpt)."""
    return excerpt(str(e.attrs.get("message") or e.summary))


def _pod_key(attrs: dict) -> str:
    return pod_key(attrs.get("namespace") or attrs.get("pod_namespace"), attrs.get("pod") or attrs.get("id"))


def from_containers(out: list[Incident], signs: Signs) -> None:
    """Open incidents from container evidence (issue 3's detector, issue 26's symptoms), in place.

    - a container log's first error line, per symptom class (the EPERM family's NVML/CUDA error, or a
      symptom of :data:`forensics.neighbours.OPENS_INCIDENT`: a version mismatch, CUDA 802, an ECC or an
      illegal-address error, a lost GPU): window from the last clean line before it (else the
      container's creation) to that line;
    - a container whose device nodes exist but whose probe gives EPERM or whose cgroup rules no longer
      allow its GPU (``signs.broken``: exposure rows with ``created``): window from its last clean log
      line (else its creation) to its first error line (else the collection time).
    An existing incident of the same class whose window lies inside the new one already brackets the same
    outage more tightly: the container is added to its evidence instead of opening a wider incident.
    """
    healthy = signs.of_kind("container.log-healthy")
    created = {e.attrs.get("id"): e for e in signs.of_kind("container.created")}
    by_pod = {_pod_key(e.attrs): e for e in created.values()}
    candidates: list[tuple[datetime | None, datetime | None, str, list[dict], str, str]] = []
    seen: set[tuple] = set()
    errors = sorted((e for k in ("container.log-error", "container.log-symptom") for e in signs.of_kind(k)
                     if _opens(e)), key=lambda e: e.at)
    for err in errors:
        key, cls = _pod_key(err.attrs), _class_of(err)
        if (key, cls) in seen:
            continue
        seen.add((key, cls))
        good = [h for h in healthy if _pod_key(h.attrs) == key and h.at <= err.at]
        start_ev = good[-1] if good else by_pod.get(key)
        candidates.append((start_ev.at if start_ev else None, err.at,
                           f"{_said(err)} ({key_words(key)}, container log)",
                           [_cite(err)] + ([cite(start_ev)] if start_ev else []), cls, key))
    for row in signs.broken:
        key = _pod_key(row)
        if (key, "nvml-unknown") in seen:
            continue
        seen.add((key, "nvml-unknown"))
        c = by_pod.get(key) or created.get(row.get("id"))
        good = [h for h in healthy if _pod_key(h.attrs) == key]
        start = good[-1].at if good else (c.at if c else None)
        candidates.append((start, signs.collected_at,
                           f"GPU no longer usable in {key_words(key)}: {row.get('reason') or 'broken'}",
                           [{"artifact": f"containers/{row.get('id')}", "summary": row.get("reason") or "broken"}],
                           "nvml-unknown", key))
    for start, end, symptom, ev, cls, key in candidates:
        if start is None or end is None:
            continue
        fits = [inc for inc in out if same_class(inc.symptom_class, cls)]
        inner = [inc for inc in fits if start <= inc.start and inc.end <= end]
        holding = [inc for inc in fits if inc.start <= end <= inc.end]
        if inner or holding:
            (inner or holding)[0].join(ev, f"also: {symptom}", cls, {key})
            continue
        out.append(Incident("I?", symptom, start, end, "containers", evidence=ev, symptom_class=cls, pods={key}))


#: Xids whose symptom is an ECC error (catalog: 48 DBE, 63/64 row remapping, 92 SBE rate, 94/95 contained/uncontained)
_ECC_XIDS = frozenset({48, 63, 64, 92, 94, 95, 140})


def from_kernel(out: list[Incident], signs: Signs) -> None:
    """Incidents from the kernel's own word that a GPU failed: an Xid NVIDIA's catalog resolves at the node
    (a GPU reset, a reboot: forensics/xid.py ``scope == "node"``) or a GPU that fell off the bus, in place.
    The kernel dates the fault itself, so the window is that instant (the last known good is unknown, and
    a note says so); a fault inside an incident already open joins it. A node whose GPU died with no pod
    logging it still gets an incident (no false all-clear)."""
    from .. import xid
    for e in sorted(signs.of_kind("kernel.xid") + signs.of_kind("kernel.gpu-lost"), key=lambda e: e.at):
        n = e.attrs.get("xid")
        if e.kind == "kernel.xid" and not (isinstance(n, int) and xid.lookup(n).scope == "node"):
            continue
        cls = "ecc" if n in _ECC_XIDS else "gpu-lost" if n in (None, 79) else "unknown"
        what = f"{_said(e)} (kernel, GPU {e.attrs.get('pci') or 'unknown'})"
        if host := next((i for i in out if i.start <= e.at <= i.end), None):
            host.join([_cite(e)], f"also: {what}", cls)
            continue
        out.append(Incident("I?", what, e.at, e.at, "kernel", evidence=[_cite(e)], symptom_class=cls,
                            notes=["the kernel dates the fault itself: the window is that instant (the last known "
                                   "good time before it is unknown)"]))


def from_oom(out: list[Incident], signs: Signs) -> None:
    """Incidents from OOM kills of GPU containers (a ``kernel.oom-kill`` whose cgroup names one of the node's
    GPU containers, or the kubelet's ``OOMKilled`` of a GPU pod), in place: the window is the kill's
    instant, or it joins an incident already open around it."""
    ids = {str(r.get("id")): r for r in signs.gpu_rows if r.get("id")}
    pods = {_pod_key(r) for r in signs.gpu_rows}
    for e in sorted(signs.of_kind("kernel.oom-kill") + signs.of_kind("kube.container-terminated"), key=lambda e: e.at):
        a = e.attrs
        if e.kind == "kernel.oom-kill":
            cid = str(a.get("container_id") or "")
            row = next((r for i, r in ids.items() if cid and (i.startswith(cid[:12]) or cid.startswith(i[:12]))), None)
            if row is None:
                continue
            key, cont = _pod_key(row), {str(row.get("id"))}
        elif str(a.get("reason")) == "OOMKilled" and (key := _pod_key(a)) in pods:
            cont = set()
        else:
            continue
        what = f"OOM kill in {key_words(key)}: {_said(e)}"
        if host := _host_of(out, e.at, "oom"):
            host.join([_cite(e)], f"also: {what}", "oom", {key}, cont)
            continue
        out.append(Incident("I?", what, e.at, e.at, e.source, evidence=[_cite(e)], symptom_class="oom", pods={key},
                            containers=cont, notes=["the kill dates itself: the window is that instant"]))


#: the incident openers, in the order they run
OPENERS: list[Callable[[list[Incident], Signs], None]] = [from_given, from_metrics, from_journal, from_containers,
                                                          from_kernel, from_oom]


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
