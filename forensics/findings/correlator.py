"""Correlator: incidents and their windows, the verdict of each candidate cause, and the gaps.

It iterates two lists: the incident openers (:data:`forensics.findings.openers.OPENERS`: what opens an
incident) and the cause rules (:data:`forensics.findings.verdicts.RULES`: one verdict per cause for
every incident). Input is only what was read from the bundle (events, coverage, node facts, the
manifest's ``--incident`` windows), so the same bundle always gives the same findings.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from datetime import timedelta, timezone, tzinfo

from . import openers, verdicts
from .openers import Incident, Signs
from .verdicts import Evidence, Window
from ..events import Coverage, Event
from ..timeutil import ZONE_UNCERTAINTY, iso_z, parse_iso

__all__ = ["Incident", "correlate", "incidents_from", "window_text"]


def incidents_from(signs: Signs) -> list[Incident]:
    """The incidents every opener in :data:`~forensics.findings.openers.OPENERS` finds in ``signs``,
    sorted by their end and numbered (:func:`forensics.findings.openers.open_incidents`). Raises
    ``ValueError`` for a malformed ``--incident`` window."""
    return openers.open_incidents(signs)


def correlate(manifest: dict, events: list[Event], coverage: list[Coverage], preconditions: dict,
              broken: list[dict] | None = None, metrics: dict | None = None,
              tz: tzinfo | None = None, basis: dict | None = None) -> tuple[list[Incident], dict[str, Coverage]]:
    """Open the incidents and weigh every cause in :data:`forensics.findings.verdicts.RULES` for each.

    ``events`` must be sorted by time (each rule then sees only its window, from
    :data:`~forensics.findings.verdicts.REQUESTER_LOOKBACK` before it; out of order, every rule reads them all);
    ``coverage``: what the collectors' readings give (one per source; a later one replaces an earlier one
    of the same name); ``broken`` lists exposure rows of containers that lost their GPU; ``metrics`` is
    the metrics Reading's ``facts["metrics"]``; ``tz`` the node's zone (UTC when ``None``); ``basis`` a
    precondition's name -> where it was read (:attr:`~forensics.findings.verdicts.Evidence.basis`). Returns
    ``(incidents with causes, coverage by source)``. Raises ``ValueError`` for a malformed manifest
    incident.
    """
    collected = (manifest.get("collection") or {}).get("start")
    cov = {c.source: c for c in coverage}
    signs = Signs(manifest.get("incidents") or [], events, cov, broken or [],
                  parse_iso(collected) if collected else None, metrics or {}, tz or timezone.utc)
    incidents = incidents_from(signs)
    times = [e.at for e in events]
    ordered = all(a <= b for a, b in zip(times, times[1:]))
    boots = [e for e in events if e.kind == "journal.boot"]
    node = manifest.get("node_facts") or {}
    # a zone-less time of a node whose zone is unknown may lie ±14 h away: such rules look that far
    wide = ZONE_UNCERTAINTY if any(c.uncertain for c in cov.values()) else timedelta(0)
    for inc in incidents:
        near = events
        if ordered:  # the rules look at the window, and for a reload's requester a little before and after it
            lo = bisect_left(times, inc.start - max(verdicts.REQUESTER_LOOKBACK, wide))
            near = events[lo:bisect_right(times, inc.end + max(verdicts.REQUESTER_LOOKAHEAD, wide), lo)]
        evidence = Evidence(near, cov, preconditions, node, boots, basis or {})
        inc.causes = [rule(Window(inc.start, inc.end), evidence) for rule in verdicts.RULES.values()]
    return incidents, cov


def window_text(inc: Incident) -> str:
    """``2026-09-02T04:04:58Z .. 2026-09-02T04:05:27Z``"""
    return f"{iso_z(inc.start)} .. {iso_z(inc.end)}"
