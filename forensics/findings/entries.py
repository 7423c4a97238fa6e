"""``timeline[]`` of the analysis (schema ``gpu-forensics/analysis/v1``) as a view over its events: each entry,
the dict analysis.json holds for one event, is made when it is read and never held. On a busy node the held
entries were a quarter of ``analyze``'s peak memory (issue 30: 15,444 entries, 7 MB of dicts, times and flag
lists beside the events they repeat); the reports read the timeline once each, an entry at a time."""
from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import tzinfo

from ..events import Event
from ..timeutil import iso_z, local_iso


def entry(e: Event, tz: tzinfo) -> dict:
    """The ``timeline[]`` entry of ``e``: ``{"at"`` (UTC, ISO 8601 ``Z``), ``"local"`` (the node's zone ``tz``),
    ``"source", "kind", "summary", "attrs", "evidence", "original", "flags"}`` (a new list; ``attrs`` and
    ``evidence`` are the event's own)."""
    return {"at": iso_z(e.at), "local": local_iso(e.at, tz), "source": e.source, "kind": e.kind,
            "summary": e.summary, "attrs": e.attrs, "evidence": e.evidence, "original": e.original,
            "flags": list(e.flags)}


class Timeline(Sequence):
    """A read-only sequence of :func:`entry` dicts over ``events`` (in time order), made anew at each read: an
    entry changed by its reader changes nothing here. Equal to a list of the same entries (analysis.json read
    back); :func:`copy.deepcopy` gives that list. ``json.dumps`` does not take it: analysis.json is written by
    :func:`reports.render.to_json`, which does."""

    __slots__ = ("_events", "_tz")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, events: list[Event], tz: tzinfo):
        self._events, self._tz = events, tz

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [entry(e, self._tz) for e in self._events[i]]
        return entry(self._events[i], self._tz)

    def __iter__(self):
        tz = self._tz
        return (entry(e, tz) for e in self._events)

    def __eq__(self, other) -> bool:
        if not isinstance(other, (list, tuple, Timeline)):
            return NotImplemented
        return len(self) == len(other) and all(x == y for x, y in zip(self, other))

    def __deepcopy__(self, memo) -> list[dict]:
        return [copy.deepcopy(x, memo) for x in self]

    def __repr__(self) -> str:
        return f"<Timeline of {len(self)} entries>"
