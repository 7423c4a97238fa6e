"""Correlator: incidents and their windows, the verdict of each candidate cause, and the gaps.

It iterates two lists: the incident openers (:data:`forensics.findings.openers.OPENERS`: what opens an
incident) and the cause rules (:data:`forensics.findings.causes.RULES`: one verdict per cause for every
incident, each judged for that incident's symptom and pods). Input is only what was read from the bundle (events, coverage, node facts, the
manifest's ``--incident`` windows), so the same bundle always gives the same findings.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from datetime import timedelta, timezone, tzinfo

from . import openers, verdicts
from .causes import RULES
from .openers import Incident, Signs
from .verdicts import Evidence, Window
from ..events import Coverage, Event
from ..timeutil import ZONE_UNCERTAINTY, iso_z, parse_iso

__all__ = ["Incident", "correlate", "incidents_from", "window_text", "windows_of"]


def incidents_from(signs: Signs) -> list[Incident]:
    """The incidents every opener in :data:`~forensics.findings.openers.OPENERS` finds in ``signs``,
    sorted by their end and numbered (:func:`forensics.findings.openers.open_incidents`). Raises
    ``ValueError`` for a malformed ``--incident`` window."""
    return openers.open_incidents(signs)


def correlate(manifest: dict, events: list[Event], coverage: list[Coverage], facts: dict | None = None,
              exposure: dict | None = None, metrics: dict | None = None,
              tz: tzinfo | None = None) -> tuple[list[Incident], dict[str, Coverage]]:
    """Open the incidents and weigh every cause in :data:`forensics.findings.causes.RULES` for each.

    ``events`` must be sorted by time (each rule then sees only its window, from
    :data:`~forensics.findings.verdicts.REQUESTER_LOOKBACK` before it; out of order, every rule reads them all);
    ``coverage``: what the collectors' readings give (one per source; a later one replaces an earlier one
    of the same name); ``facts``: the collectors' facts (:class:`forensics.source.Facts`); ``exposure``: the
    exposure section (its rows: which containers lost their GPU, how each got it); ``metrics`` is the
    metrics Reading's ``facts["metrics"]``; ``tz`` the node's zone (UTC when ``None``). Each cause that fits
    (confirmed or inferred) gets its rule's remedy. Returns ``(incidents with causes, coverage by source)``.
    Raises ``ValueError`` for a malformed manifest incident.
    """
    cov = {c.source: c for c in coverage}
    exposure = exposure or {}
    incidents = incidents_from(_signs(manifest, events, cov, exposure, metrics, tz))
    times = [e.at for e in events]
    ordered = all(a <= b for a, b in zip(times, times[1:]))
    boots = [e for e in events if e.kind == "journal.boot"]
    node = {**(manifest.get("node_facts") or {}), "hostname": manifest.get("node")}
    # a zone-less time of a node whose zone is unknown may lie ±14 h away: such rules look that far
    wide = ZONE_UNCERTAINTY if any(c.uncertain for c in cov.values()) else timedelta(0)
    for inc in incidents:
        near = events
        if ordered:  # the rules look at the window, and for a reload's requester a little before and after it
            lo = bisect_left(times, inc.start - max(verdicts.REQUESTER_LOOKBACK, wide))
            near = events[lo:bisect_right(times, inc.end + max(verdicts.REQUESTER_LOOKAHEAD, wide), lo)]
        evidence = Evidence(near, cov, node, boots, facts or {}, exposure, inc.scope(), events, Window(inc.start, inc.end))
        inc.causes = []
        for rule in RULES.values():
            cause = rule.judge(Window(inc.start, inc.end), evidence)
            if cause.verdict in ("confirmed", "inferred") and rule.remedy is not None:
                cause.remedy = rule.remedy(cause, evidence)
            inc.causes.append(cause)
    return incidents, cov


def _signs(manifest: dict, events: list[Event], cov: dict[str, Coverage], exposure: dict, metrics: dict | None,
           tz: tzinfo | None) -> Signs:
    collected = (manifest.get("collection") or {}).get("start")
    rows = [r for r in exposure.get("containers") or [] if isinstance(r, dict)]
    # a container broken only by inference from a reload opens no incident: the reload would then confirm itself
    broken = [r for r in rows if r.get("broken") and r.get("broken_basis") not in ("inferred", "bpf")]
    return Signs(manifest.get("incidents") or [], events, cov, broken,
                 parse_iso(collected) if collected else None, metrics or {}, tz or timezone.utc,
                 gpu_rows=[r for r in rows if r.get("gpu_injection") not in ("none", None)])


def windows_of(manifest: dict, events: list[Event], coverage: list[Coverage], exposure: dict | None = None,
               metrics: dict | None = None, tz: tzinfo | None = None) -> list[tuple]:
    """The ``(start, end)`` (UTC) of the incidents :func:`correlate` opens from the same arguments, without
    weighing a cause: what the package logs are then read for (forensics/source.py ``WINDOWED``). Raises
    ``ValueError`` for a malformed manifest incident."""
    cov = {c.source: c for c in coverage}
    return [(i.start, i.end) for i in incidents_from(_signs(manifest, events, cov, exposure or {}, metrics, tz))]


def window_text(inc: Incident) -> str:
    """``2026-09-02T04:04:58Z .. 2026-09-02T04:05:27Z``"""
    return f"{iso_z(inc.start)} .. {iso_z(inc.end)}"
