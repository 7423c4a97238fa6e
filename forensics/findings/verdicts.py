"""What every cause rule speaks: the verdicts, the :class:`Cause` a rule returns, the incident
:class:`Window` and :class:`Evidence` it weighs, the :class:`Rule` that holds one cause whole, and
:func:`weigh`, the one place where "did it happen" and "could it do this here" become a verdict
(docs/design.md "Verdicts").

A rule answers two questions for one incident, each from the evidence it declared (``Rule.needs``):

- :class:`Happened`: did the cause happen inside the window? ``yes`` (a source shows it), ``no`` (a
  source that covers the whole window shows none), ``possibly`` (a source shows it, but not dated
  inside the window: a zone-less time of a node whose zone is unknown, a state read at collection),
  ``partly`` (the sources cover part of the window and show none there), ``unknown`` (no source covers
  any of it);
- :class:`Mechanism`: could it produce this incident's symptom in this incident's pods on this node?
  ``shown`` (the node's evidence shows the preconditions hold), ``fits`` (nothing shows they fail:
  unknown without contradiction), ``disputed`` (two sources disagree: the contradiction is named),
  ``ruled-out`` (the node's own evidence shows it could not: a reload under the cgroupfs driver, a
  version mismatch for an EPERM, an application's Xid for a GPU the pod does not hold).

:func:`weigh` turns the pair into the verdict: confirmed = happened and (shown or fits); inferred =
happened but disputed, possibly happened (undated), or the mechanism shown while the source of the
trigger covers only part of the window; excluded = a covering source shows none, or it could not have done it here (even when it
happened: the reason says both); undetermined = the rest. A wrong "excluded" is worse than an honest
"undetermined": only a covering source or the node's own evidence excludes, never a default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, NamedTuple

from ..events import Coverage, Event
from ..timeutil import human, iso_z
from .record import Record
from .requester import REQUESTER_LOOKAHEAD, REQUESTER_LOOKBACK, cite

__all__ = ["CONFIRMED", "INFERRED", "EXCLUDED", "UNDETERMINED", "Cause", "Window", "Scope", "Evidence", "Rule",
           "Happened", "Mechanism", "weigh", "REQUESTER_LOOKAHEAD", "REQUESTER_LOOKBACK", "cite", "covers",
           "gap_sentence", "explains", "MECHANISMS", "symptom_lines", "coverage_of", "first_seen"]

CONFIRMED, INFERRED, EXCLUDED, UNDETERMINED = "confirmed", "inferred", "excluded", "undetermined"
#: how well a mechanism supports a cause that fits, best first (the headline ranks by the verdict, then
#: by this, then by the rules' order); a cause made without one ranks as ``fits``
MECHANISMS = {"shown": 0, "fits": 1, "disputed": 2}


@dataclass
class Cause:
    """A candidate cause with its verdict, for one incident. ``at`` is UTC or ``None``; ``evidence``
    items are ``{"artifact", "line"|"cursor", "summary", "at"}``; ``gaps`` are sentences naming what a
    source did not cover; ``contradictions`` are sentences naming two sources that disagree;
    ``mechanism`` is the :class:`Mechanism` state the verdict rests on (``shown``, ``fits``,
    ``disputed``, ``ruled-out``); ``remedy`` is the rule's remedy for a cause that fits (``{"what",
    "commands", "why", "sources"}``) or ``None``; ``detail`` holds what the rule found, as data (the Xid
    and its catalog entry, the versions that differ, ...), for the report's tables."""

    kind: str
    verdict: str
    reason: str
    at: datetime | None = None
    requested_by: dict | None = None
    evidence: list[dict] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)
    mechanism: str | None = None
    remedy: dict | None = None
    detail: dict = field(default_factory=dict)


class Window(NamedTuple):
    """An incident window, UTC: ``start`` = last known good, ``end`` = first known bad."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Scope:
    """What one incident is about: its ``symptom`` class (a key of
    :data:`forensics.neighbours.SYMPTOM_CLASSES`; ``unknown`` when no line names it), the ``pods``
    (``"namespace/name"``) and ``containers`` (runtime ids) its opening evidence names. Empty: the incident
    names none, and a rule then judges the node's GPU containers, saying so."""

    symptom: str = "unknown"
    pods: frozenset = frozenset()
    containers: frozenset = frozenset()


@dataclass
class Evidence:
    """What a rule weighs for one incident.

    ``events``: the timeline's events from :data:`REQUESTER_LOOKBACK` before the window to
    :data:`REQUESTER_LOOKAHEAD` after it (±14 h when zone-less times are uncertain), in time order;
    ``coverage``: one :class:`~forensics.events.Coverage` per source name; ``node``: the manifest's node
    facts (``boot_id``, ...); ``boots``: every ``journal.boot`` event of the whole timeline; ``facts``: the
    collectors' facts (:class:`forensics.source.Facts`: a rule reads the keys it declares in
    :attr:`Rule.needs`); ``exposure``: the exposure section (its container rows are the node's GPU
    containers as the evidence shows them); ``scope``: the incident's :class:`Scope`; ``all_events``:
    the whole timeline (for facts older than the window: a module loaded at boot, a GPU's UUID line);
    ``window``: the incident's window.
    """

    events: list[Event] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    node: dict = field(default_factory=dict)
    boots: list[Event] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    exposure: dict = field(default_factory=dict)
    scope: Scope = field(default_factory=Scope)
    all_events: list[Event] | None = None
    #: the incident's window (UTC), for what depends on it beyond the events (which containers existed then)
    window: "Window | None" = None

    def everything(self) -> list[Event]:
        """The whole timeline when it was handed over, else the window's events."""
        return self.all_events if self.all_events is not None else self.events

    def records(self) -> list[Record]:
        """The node's container records (``facts["containers"]``), typed (:class:`Record`); an entry that is
        not an object is left out."""
        return [Record.of(c) for c in self.facts.get("containers") or [] if isinstance(c, dict)]


@dataclass
class Happened:
    """Did the cause happen inside the window: ``state`` ``yes|no|possibly|partly|unknown`` (module docstring),
    ``said`` one sentence (for ``yes``: what and when, with the artifact and line), ``at`` the first
    occurrence (UTC), ``evidence`` cited records, ``gaps`` sentences naming what the sources do not
    cover."""

    state: str
    said: str
    at: datetime | None = None
    evidence: list[dict] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    requested_by: dict | None = None


@dataclass
class Mechanism:
    """Could the cause produce this incident's symptom here: ``state``
    ``shown|fits|disputed|ruled-out`` (module docstring), ``said`` one sentence naming where each
    precondition was read (file, field) or that it is unknown, ``evidence`` cited records,
    ``contradictions`` the disagreements (for ``disputed``)."""

    state: str
    said: str
    evidence: list[dict] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)


def weigh(kind: str, happened: Happened, mechanism: Mechanism, detail: dict | None = None) -> Cause:
    """The verdict of one cause from its two answers (the table in the module docstring), with one reason
    that says both: what happened (or what covers the window) and whether it could have done it here."""
    h, m = happened, mechanism
    evidence = h.evidence + [e for e in m.evidence if e not in h.evidence]
    common = dict(at=h.at, requested_by=h.requested_by, evidence=evidence, gaps=list(h.gaps),
                  mechanism=m.state, detail=detail or {})
    if m.state == "ruled-out":  # it happened or not, it could not have done this here: that is the reason
        joined = (f"{h.said} It could not have caused this incident, though: {m.said}" if h.state == "yes"
                  else f"{h.said} {m.said}" if h.state == "no" else f"{m.said} ({h.said})")
        return Cause(kind, EXCLUDED, joined, **common)
    if h.state == "yes":
        if m.state == "disputed":
            return Cause(kind, INFERRED, f"{h.said} It is not confirmed as the cause, because the sources contradict "
                         f"each other: {'; '.join(m.contradictions)}.", contradictions=list(m.contradictions), **common)
        return Cause(kind, CONFIRMED, f"{h.said} {m.said}", **common)
    if h.state == "no":
        return Cause(kind, EXCLUDED, h.said, **common)
    if h.state == "possibly" or (h.state == "partly" and m.state == "shown"):
        return Cause(kind, INFERRED, f"{h.said} {m.said}", contradictions=list(m.contradictions), **common)
    return Cause(kind, UNDETERMINED, f"{h.said} {m.said}", contradictions=list(m.contradictions), **common)


@dataclass(frozen=True)
class Rule:
    """One cause, whole: its ``kind`` (``daemon-reload``), ``title`` as the report names it ("a systemd
    daemon-reload"), the symptom classes it ``explains`` (keys of
    :data:`forensics.neighbours.SYMPTOM_CLASSES`; ``unknown`` is always explainable), the evidence it
    ``needs`` (coverage sources and fact keys it reads: the "Causes checked" table names them), ``judge``
    (``judge(window, evidence) -> Cause``, through :func:`weigh`), ``remedy`` (``remedy(cause, evidence)
    -> {"what", "commands", "why", "sources"} | None`` for a cause that fits), ``sentence`` (the top of
    the report's sentence for a cause that fits, ``sentence(cause, when) -> str``; None: the reason) and
    ``severity`` (``node``: the node's GPU needs action, ``pod``: the pod's own fault, ``config``: the
    node's set-up; what the headline says to do first)."""

    kind: str
    title: str
    explains: frozenset
    needs: tuple
    judge: Callable[[Window, Evidence], Cause]
    remedy: Callable[[Cause, Evidence], dict | None] | None = None
    sentence: Callable[[Cause, str], str] | None = None
    severity: str = "config"


def explains(rule_explains: frozenset, scope: Scope, title: str) -> Mechanism | None:
    """``None`` when a cause of this kind can produce the incident's symptom class, else the ``ruled-out``
    :class:`Mechanism` that says it cannot (the class is known and not among ``rule_explains``)."""
    from ..neighbours import SYMPTOM_CLASSES
    if scope.symptom in ("unknown", None) or scope.symptom in rule_explains:
        return None
    what = SYMPTOM_CLASSES.get(scope.symptom, scope.symptom)
    return Mechanism("ruled-out", f"{title[:1].upper()}{title[1:]} does not produce this incident's symptom: {what}.")


#: the kinds whose lines carry a neighbouring failure's signature (forensics/neighbours.py)
SYMPTOM_KINDS = ("journal.symptom", "container.log-symptom", "kube.event")


def symptom_lines(window: Window, ev: Evidence, signatures: tuple) -> list[Event]:
    """The lines of ``signatures`` (forensics/neighbours.py) inside ``window``: the journal's and the pod
    logs' symptom lines, and the Kubernetes events whose message shows one."""
    from ..neighbours import match
    start, end = window
    out = []
    for e in ev.events:
        if e.kind not in SYMPTOM_KINDS or not start <= e.at <= end:
            continue
        sig = e.attrs.get("signature") if e.kind != "kube.event" else (match(str(e.attrs.get("message") or "")) or (None,))[0]
        if sig in signatures:
            out.append(e)
    return out


def covers(cov: Coverage | None, start: datetime, end: datetime) -> bool:
    """True when the source's span holds the whole window and none of its holes
    (:attr:`~forensics.events.Coverage.holes`) overlaps it."""
    return bool(cov and cov.start and cov.end and cov.start <= start and cov.end >= end
                and not _holes_in(cov, start, end))


def _holes_in(cov: Coverage, start: datetime, end: datetime) -> list:
    return [h for h in cov.holes if h.start < end and h.end > start]


def gap_sentence(name: str, cov: Coverage | None, start: datetime, end: datetime) -> str | None:
    """Why ``name`` does not cover ``[start, end]``, or ``None`` when it does."""
    if cov is None or cov.start is None:
        return f"{name}: no data ({cov.reason if cov else 'not collected'})"
    if cov.start > start:
        return f"{name} holds data from {iso_z(cov.start)} only; the window starts {iso_z(start)} ({cov.reason})"
    if cov.end and cov.end < end:
        return f"{name} ends {iso_z(cov.end)}; the window ends {iso_z(end)}"
    if holes := _holes_in(cov, start, end):
        return f"{name} has a hole in the window: " + "; ".join(h.reason for h in holes)
    return None


def coverage_of(names: tuple, ev: Evidence, window: Window, what: str) -> Happened:
    """The :class:`Happened` of a cause the sources ``names`` would show and do not: ``no`` when one of them
    covers the whole window, ``partly`` when one covers part of it, ``unknown`` when none holds any of it;
    ``what`` is the clause for the sentence ("logged no Xid")."""
    start, end = window
    present = [n for n in names if (c := ev.coverage.get(n)) and c.start]
    gaps = [g for n in names if (g := gap_sentence(n, ev.coverage.get(n), start, end))]
    whole = [n for n in present if covers(ev.coverage[n], start, end) and not ev.coverage[n].uncertain]
    if whole:
        c = ev.coverage[whole[0]]
        return Happened("no", f"The {whole[0]} covers the whole window ({iso_z(c.start)} .. {iso_z(c.end)}) and {what} "
                        "in it.", gaps=[g for g in gaps if not g.startswith(whole[0])])
    part = [n for n in present if ev.coverage[n].end and ev.coverage[n].end >= start and ev.coverage[n].start <= end]
    if part:
        c = ev.coverage[part[0]]
        return Happened("partly", f"The {part[0]} {what} in the part of the window it covers ({iso_z(max(c.start, start))}"
                        f" .. {iso_z(min(c.end, end))}); before or after that nothing shows it either way.", gaps=gaps)
    if present:  # the source holds data, only not of the window (rotated away before it, or ended before it)
        c = ev.coverage[present[0]]
        when = (f"starts only at {human(c.start)} (older entries rotated away)" if c.start > end
                else f"ends at {human(c.end)}, before the window")
        return Happened("partly", f"The {present[0]} {when}, so in the window ({human(start)} .. {human(end)}) it can "
                        "neither show nor rule this out.", gaps=gaps)
    return Happened("unknown", f"No source that would show it covers the window ({', '.join(names)}).",
                    gaps=gaps or [f"{n}: not collected" for n in names])


def first_seen(hits: list[Event], what: str) -> Happened:
    """The ``yes`` :class:`Happened` of ``hits`` (non-empty, in time order): the first one dated and cited,
    with how many there are."""
    first = hits[0]
    where = first.evidence.get("artifact")
    line = first.evidence.get("line")
    pos = f"{where} line {line}" if line is not None else f"{where}, cursor {first.evidence.get('cursor')}"
    more = f" ({len(hits)} in the window)" if len(hits) > 1 else ""
    return Happened("yes", f"{what} at {human(first.at)}, inside the window{more} ({pos}).", at=first.at,
                    evidence=[cite(e) for e in hits[:20]])
