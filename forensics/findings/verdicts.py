"""The cause rules, read like the postmortem (../shared/DESIGN.md "Verdicts"), and their registry.

Every rule has one signature, ``rule(window, evidence) -> Cause``: the incident :class:`Window`
(UTC; ``start`` is the last known good, ``end`` the first known bad) and the :class:`Evidence` the
correlator gathered for it (the events near the window, the coverage of every source, the
preconditions, the node facts). It returns a :class:`Cause`: the verdict (``confirmed | inferred |
excluded | undetermined``), the evidence it rests on, the gaps that limit it, and one sentence for the
reader. A cause is never stated with more certainty than the evidence allows. The correlator weighs
every rule in :data:`RULES`, in its order, for every incident.

How to add a cause rule:

1. one function here, ``def disk_full(window: Window, ev: Evidence) -> Cause``, whose docstring says
   what confirmed, inferred, excluded and undetermined mean for that cause, and which returns
   ``Cause("disk-full", ...)`` (use :func:`cite`, :func:`covers` and :func:`gap_sentence`);
2. one registry line: ``"disk-full": disk_full`` in :data:`RULES` (and, if the report should name it
   in words, ``"disk-full": "a full disk"`` in :data:`TITLES`; else it is named by its kind);
3. one test file, ``tests/test_rule_disk_full.py``, calling the rule with a window and an
   :class:`Evidence` built from real-looking events and coverage, one test per verdict.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, NamedTuple

from ..events import Coverage, Event
from ..timeutil import ZONE_UNCERTAINTY, ZONE_UNKNOWN_NOTE, human, iso_z
from .requester import REQUESTER_LOOKAHEAD, REQUESTER_LOOKBACK, cite, describe_requester, requester

__all__ = ["CONFIRMED", "INFERRED", "EXCLUDED", "UNDETERMINED", "Cause", "Window", "Evidence", "RULES", "TITLES",
           "REQUESTER_LOOKAHEAD", "REQUESTER_LOOKBACK", "cite", "covers", "gap_sentence", "describe_requester",
           "requester", "daemon_reload", "package_transaction", "reboot"]

CONFIRMED, INFERRED, EXCLUDED, UNDETERMINED = "confirmed", "inferred", "excluded", "undetermined"


@dataclass
class Cause:
    """A candidate cause with its verdict. ``at`` is UTC or ``None``; ``evidence`` items are
    ``{"artifact", "line"|"cursor", "summary", "at"}``; ``gaps`` are sentences naming what a
    source did not cover; ``contradictions`` are sentences naming two sources that disagree (direct
    evidence of the cause against a precondition read from another source)."""

    kind: str
    verdict: str
    reason: str
    at: datetime | None = None
    requested_by: dict | None = None
    evidence: list[dict] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)


class Window(NamedTuple):
    """An incident window, UTC: ``start`` = last known good, ``end`` = first known bad."""

    start: datetime
    end: datetime


@dataclass
class Evidence:
    """What a rule weighs for one window.

    ``events``: the timeline's events from :data:`REQUESTER_LOOKBACK` before the window to
    :data:`REQUESTER_LOOKAHEAD` after it, in time order (the whole timeline when it was not in order);
    ``coverage``: one :class:`~forensics.events.Coverage` per source name; ``preconditions``: a name
    (``systemd_cgroup``, ``gpu_outside_spec``) -> True/False/None; ``node``: the manifest's node facts
    (``boot_id``, ...); ``boots``: every ``journal.boot`` event of the whole timeline (a boot's first
    entry dates its start only when an earlier boot precedes it); ``basis``: a precondition's name ->
    where its value was read, or why it is unknown (``systemd_cgroup_basis`` of collectors/runtime_config).
    """

    events: list[Event] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    preconditions: dict = field(default_factory=dict)
    node: dict = field(default_factory=dict)
    boots: list[Event] = field(default_factory=list)
    basis: dict = field(default_factory=dict)


def _in(events: list[Event], kind: str, start: datetime, end: datetime) -> list[Event]:
    return [e for e in events if e.kind == kind and start <= e.at <= end]


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


def daemon_reload(window: Window, ev: Evidence) -> Cause:
    """``systemctl daemon-reload`` (or SIGHUP to PID 1) inside the window.

    confirmed: a PID-1 reload line in the window, and no precondition is known to fail;
    inferred: a PID-1 reload line in the window while a precondition reads as failing (direct evidence
    beats a setting: the sources contradict each other, and ``contradictions`` says which), or no
    reload line, but the journal does not cover the window and the mechanism fits;
    excluded: no reload line in the window, and the journal covers the window or a precondition fails
    (e.g. the cgroupfs driver, where a reload rebuilds no container's device rules); never when a
    reload line is in the window;
    undetermined: there is no journal at all. When systemd logged no caller, the requester is read from the
    timeline, package history included: ``gaps`` then also names dpkg's and apt's gaps in the
    :data:`REQUESTER_LOOKBACK` before the reload (a package log cut at the size bound, a missing rotation).
    ``ev.preconditions`` maps a name (``systemd_cgroup``, ``gpu_outside_spec``) to True/False/None
    (None: unknown, never read as failing); ``ev.basis`` says where each was read.
    """
    (start, end), events, cov, preconditions = window, ev.events, ev.coverage, ev.preconditions
    j = cov.get("journal")
    failed = [k for k, v in preconditions.items() if v is False]
    unknown = [k for k, v in preconditions.items() if v is None]
    gaps = [g for g in [gap_sentence("journal", j, start, end)] if g]
    pre_note = (f" Preconditions not yet assessed from the bundle: {', '.join(_based(k, ev) for k in unknown)}."
                if unknown else "")
    reloads = _in(events, "journal.reload", start, end)
    if failed and not reloads:
        return Cause("daemon-reload", EXCLUDED, f"A reload cannot revoke the GPU here: {', '.join(failed)} "
                     f"does not hold.", gaps=gaps)
    if reloads:
        first = reloads[0]
        asked = [requester(r, events) for r in reloads]
        req = asked[0]
        more = ""
        cited = [cite(e) for e in reloads]
        if len(reloads) > 1:  # each reload is cited with its own requester; the first is the one reported
            each = "; ".join(f"{iso_z(r.at)} (line {r.evidence.get('line')}), {describe_requester(q, others=False)}"
                             for r, q in zip(reloads, asked))
            more = (f" ({len(reloads)} reloads in the window; the first one revokes the device rules, so it is the "
                    f"one reported, and each later one rebuilds the same rules: {each})")
            for c, q in zip(cited, asked):
                c["requested_by"] = {k: v for k, v in q.items() if k != "_evidence"}
        by = describe_requester(req)
        if req["basis"] != "caller-line":  # who asked is read from package history too: its gaps before the reload
            gaps += [g for n in ("dpkg", "apt") if n in cov
                     and (g := gap_sentence(n, cov[n], first.at - REQUESTER_LOOKBACK, first.at))]
        if j and j.start and j.start > start:
            more += (f"; the journal starts only at {human(j.start)}, so an earlier reload in the window "
                     "cannot be seen and this one may not be the first")
        said = (f"PID 1 logged the reload at {human(first.at)}, inside the window{more} "
                f"({first.evidence.get('artifact')} line {first.evidence.get('line')}); {by}.")
        against = [f"{_based(k, ev)} does not hold, yet PID 1 logged a daemon-reload inside the window "
                   f"({first.evidence.get('artifact')} line {first.evidence.get('line')})" for k in failed]
        if against:  # the reload happened; whether it could revoke the GPU is what the sources dispute
            said += (f" It is not excluded, and not confirmed as the cause, because the sources contradict each "
                     f"other: {'; '.join(against)}.")
        return Cause("daemon-reload", INFERRED if against else CONFIRMED, said + pre_note,
                     at=first.at, requested_by=req, evidence=cited + req.pop("_evidence", []),
                     gaps=gaps, contradictions=against)
    if j is None or j.start is None:
        return Cause("daemon-reload", UNDETERMINED, "No journal could be read, so no source can show or rule "
                     "out a reload in the window.", gaps=gaps)
    if covers(j, start, end):
        return Cause("daemon-reload", EXCLUDED, f"The journal covers the whole window ({iso_z(j.start)} .. "
                     f"{iso_z(j.end)}) and PID 1 logged no reload in it.", gaps=gaps)
    if j.start > start:
        hole = f"the journal starts only at {human(j.start)} (older entries rotated away), so from {human(start)} " \
               f"until then a reload can be neither shown nor ruled out"
    else:
        hole = f"the journal ends at {human(j.end)}, before the window closes"
    return Cause("daemon-reload", INFERRED,
                 f"PID 1 logged no reload in the part of the window the journal covers, but {hole}; "
                 f"a reload there fits the symptom.{pre_note}", gaps=gaps)


def _based(name: str, ev: Evidence) -> str:
    """A precondition's name with where it was read: ``systemd_cgroup (default (runtime runc); read from
    /etc/containerd/config.toml)``, or the bare name when no basis is known."""
    return f"{name} ({ev.basis[name]})" if ev.basis.get(name) else name


def package_transaction(window: Window, ev: Evidence) -> Cause:
    """A package transaction (apt stanza, dpkg action, unattended-upgrades run) inside the window.

    confirmed: dpkg.log, apt history.log or the unattended-upgrades log shows one inside it (a
    dpkg ``startup`` line alone is none), its time read in the node's known zone; inferred: one lies
    within :data:`~forensics.timeutil.ZONE_UNCERTAINTY` (±14 h) of the window while the node's zone is
    unknown (events flagged ``tz-unknown``): inside the widened window, never confirmed on time alone;
    excluded: dpkg.log or history.log covers the whole window with no hole in it
    (:func:`covers`), its times are certain, and it shows none; undetermined: no package log covers it,
    or the only counter-evidence is zone-less times of a node whose zone is unknown (``uncertain``
    coverage: the gap says so). Without a package log nothing points either way.
    """
    (start, end), events, cov = window, ev.events, ev.coverage
    kinds = ("package.transaction", "package.dpkg-action", "package.unattended-run")
    pad = ZONE_UNCERTAINTY
    near = [e for e in events if e.kind in kinds and start - pad <= e.at <= end + pad
            and not (e.kind == "package.dpkg-action" and e.attrs.get("action") == "startup")]
    hits = [e for e in near if "tz-unknown" not in e.flags and start <= e.at <= end]
    loose = [e for e in near if "tz-unknown" in e.flags]
    names = [n for n in ("dpkg", "apt", "unattended-upgrades") if n in cov]
    covering = [n for n in ("dpkg", "apt") if covers(cov.get(n), start, end)]
    gaps = [g for n in names if (g := gap_sentence(n, cov.get(n), start, end))]
    zone = sorted({c.uncertain for n in names if (c := cov.get(n)) and c.uncertain})
    gaps += zone
    if hits:
        first = hits[0]
        return Cause("package-transaction", CONFIRMED, f"{len(hits)} package log entries fall inside the window, the "
                     f"first at {iso_z(first.at)}: {first.summary}.{_ships(hits)}", at=first.at,
                     evidence=[cite(e) for e in hits[:20]], gaps=gaps)
    if loose:
        first = loose[0]
        return Cause("package-transaction", INFERRED, f"{len(loose)} package log entries lie within ±14 h of the "
                     f"window, the first read as {iso_z(first.at)}: {first.summary}. The node's time zone is unknown, "
                     "so these zone-less times may fall inside the window or not; nothing else dates them."
                     f"{_ships(loose)}", at=first.at, evidence=[cite(e) for e in loose[:20]],
                     gaps=gaps or [ZONE_UNKNOWN_NOTE])
    if covering and not any(cov[n].uncertain for n in covering):
        spans = "; ".join(f"{n} from {iso_z(cov[n].start)}" for n in covering)
        return Cause("package-transaction", EXCLUDED, f"Package history covers the whole window ({spans}) and "
                     "records no install, upgrade or removal inside it.", gaps=gaps)
    if covering:
        return Cause("package-transaction", UNDETERMINED, "Package history records no install, upgrade or removal "
                     "within ±14 h of the window, but its times carry no zone and the node's time zone is unknown, "
                     "so it cannot rule one out.", gaps=gaps)
    return Cause("package-transaction", UNDETERMINED, "No package log covers the window, so a transaction inside it "
                 "can be neither shown nor ruled out.", gaps=gaps or ["no dpkg or apt history in the bundle"])


def _ships(hits: list[Event]) -> str:
    """The sentence naming the packages with systemd units among ``hits``, or ``""``."""
    units = sorted({p for e in hits for p in (e.attrs.get("ships_units") if isinstance(e.attrs.get("ships_units"), list)
                                              else ([e.attrs.get("package")] if e.attrs.get("ships_units") else []))})
    return (f" Packages with systemd units changed ({', '.join(units[:5])}); their maintainer scripts run "
            "`systemctl daemon-reload`.") if units else ""


def reboot(window: Window, ev: Evidence) -> Cause:
    """A reboot inside the window: a boot whose first entry (journal) or btime (/proc/stat) falls in it.

    confirmed: the running boot's btime, or a new boot's first journal entry, falls inside the window;
    excluded: the running boot began before the window and was still running at collection (a single
    boot spans the window), or the journal covers the window and shows no new boot; undetermined:
    neither the boot time nor the journal covers it. Never inferred. A boot's first entry in the
    journal is its start only when an earlier boot precedes it in the journal (``ev.boots``): the
    oldest boot in a rotated journal began before its first surviving entry, and the running boot
    (``ev.node["boot_id"]``, from /proc) is dated by btime instead.
    """
    (start, end), cov, running_boot_id = window, ev.coverage, ev.node.get("boot_id")
    all_boots = [e for e in ev.boots if e.kind == "journal.boot"]
    norm = lambda b: (b or "").replace("-", "").lower()  # noqa: E731
    boots = [e for i, e in enumerate(all_boots) if i > 0 and start < e.at <= end
             and not (running_boot_id and norm(e.attrs.get("boot_id")) == norm(running_boot_id))]
    b = cov.get("boot")
    if b and b.start and start < b.start <= end:
        return Cause("reboot", CONFIRMED, f"The running boot started {iso_z(b.start)}, inside the window.",
                     at=b.start, evidence=[{"artifact": "node/proc-stat", "summary": b.reason, "at": iso_z(b.start)}])
    if boots:
        return Cause("reboot", CONFIRMED, f"The journal shows a new boot at {iso_z(boots[0].at)}, inside the window.",
                     at=boots[0].at, evidence=[cite(e) for e in boots])
    if covers(b, start, end):
        return Cause("reboot", EXCLUDED, f"A single boot spans the window: {b.reason}, and it was still running at "
                     "collection.", evidence=[{"artifact": "node/proc-stat", "summary": b.reason, "at": iso_z(b.start)}])
    j = cov.get("journal")
    if covers(j, start, end):
        return Cause("reboot", EXCLUDED, "The journal covers the window and shows no new boot inside it.")
    return Cause("reboot", UNDETERMINED, "Neither the boot time nor the journal covers the window.",
                 gaps=[g for g in [gap_sentence("journal", j, start, end), gap_sentence("boot", b, start, end)] if g])


#: the cause rules, by the kind of the Cause each returns; the correlator weighs them in this order
RULES: dict[str, Callable[[Window, Evidence], Cause]] = {
    "daemon-reload": daemon_reload,
    "package-transaction": package_transaction,
    "reboot": reboot,
}
#: how the report's verdict sentences name each cause (a kind missing here is named by its kind)
TITLES = {"daemon-reload": "a systemd daemon-reload", "package-transaction": "a package transaction",
          "reboot": "a reboot"}
