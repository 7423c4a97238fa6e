"""A journal file damaged mid-way: what a walk past the damage read, and what it could not.

libsystemd follows a match through the entry arrays of the matched DATA objects; at the first object
of that chain it cannot read (a torn write, a bad sector: "Attempt to move to object of unexpected
type") it drops the whole file from the reader and the walk ends as if the file had no more entries
(src/libsystemd/sd-journal/sd-journal.c ``real_journal_next``: "Can't iterate through %s, ignoring";
``journalctl`` prints it at ``SYSTEMD_LOG_LEVEL=debug``). The walk over every entry goes by the file's
own entry array instead, which skips an entry object it cannot read (systemd 252 and later), so the
readers (:mod:`collectors.journal.reader`) walk every entry from there and test the matches here
(:func:`matches`). What that walk could not read is told by the entries' sequence numbers (journal-file.c
gives each entry appended to a file one above the last) against the file's header (``n_entries``,
``tail_entry_seqnum``, ``tail_entry_realtime``: journal-def.h ``struct Header``): :class:`Walked`
keeps the jumps, :meth:`Walked.record` turns them into the ``damaged`` records of coverage.json that
:func:`holes` makes coverage holes of. Nothing here touches the host or the bundle.
"""
from __future__ import annotations

import struct

from forensics.events import Hole
from forensics.timeutil import from_usec, iso_z

#: the stderr line of libsystemd (any release since 2013) when it drops a file from a walk
DROPPED = b"Can't iterate through "


def matches(get, groups) -> bool:
    """Whether an entry matches any of ``groups`` as libsystemd's matches do (each group: ``(field,
    value)`` pairs, one field's values ORed, different fields ANDed; no group: every entry). ``get(field)``
    gives the field's first value as bytes, ``None`` when absent (journald writes none of the matched
    fields twice)."""
    if not groups:
        return True
    for group in groups:
        by: dict[str, set[bytes]] = {}
        for f, v in group:
            by.setdefault(f, set()).add(str(v).encode())
        if all(get(f) in vs for f, vs in by.items()):
            return True
    return False


def counts(head: bytes) -> tuple[int | None, int | None, int | None, int | None, int | None]:
    """``(n_entries, head_entry_seqnum, tail_entry_seqnum, head_entry_realtime, tail_entry_realtime)``
    (times µs UTC) from a journal file's first 208 bytes (journal-def.h ``struct Header``); ``None``s
    when shorter or not a journal."""
    if len(head) < 208 or head[:8] != b"LPKSHHRH":
        return None, None, None, None, None
    n, tail_seq, head_seq = struct.unpack_from("<QQQ", head, 152)
    head_rt, tail_rt = struct.unpack_from("<QQ", head, 184)
    return n, head_seq, tail_seq, head_rt, tail_rt


class Walked:
    """The entries a walk over every entry of one file read, as jumps in their sequence numbers."""

    def __init__(self, head: bytes):
        """``head``: the file's header bytes when the walk starts (its first entry's number and time)."""
        _, seq, _, rt, _ = counts(head)
        self.read = 0
        #: (seqnum, realtime µs) of the last entry read; before the first, the one before the file's first
        self.prev: tuple[int, int] | None = (seq - 1, rt) if seq else None
        self.jumps: list[tuple[tuple[int, int] | None, tuple[int, int]]] = []

    def saw(self, seqnum: int, realtime: int) -> None:
        if self.prev is not None and seqnum != self.prev[0] + 1:
            self.jumps.append((self.prev, (seqnum, realtime)))
        self.prev, self.read = (seqnum, realtime), self.read + 1

    def record(self, source: str, head: bytes, why: str) -> dict:
        """The ``damaged`` record of ``source`` (``head``: its header bytes now): ``source``, ``why``,
        ``entries`` (the header's count), ``read``, ``lost`` (``entries - read``, ``None`` when the header
        is unusable) and ``holes``: ``[{from_usec, to_usec, lost}]``, the spans between the last entry read
        before a jump in sequence numbers and the first after (``to_usec`` the file's last entry when the
        walk got no further), when the jumps add up to ``lost``; else one hole over all the jumps with
        ``lost`` for the whole file (journald gives the user journals' entries numbers from the same
        count, so a jump alone is no loss)."""
        n, _, tail_seq, _, tail_rt = counts(head)
        lost = None if n is None else max(0, n - self.read)
        jumps = list(self.jumps)
        if self.prev is not None and tail_seq is not None and tail_seq > self.prev[0]:
            jumps.append((self.prev, (tail_seq + 1, tail_rt or self.prev[1])))
        spans = [{"from_usec": a[1], "to_usec": b[1], "lost": b[0] - a[0] - 1} for a, b in jumps if a]
        if not lost:
            spans = []
        elif sum(s["lost"] for s in spans) != lost:
            spans = [{"from_usec": spans[0]["from_usec"] if spans else None,
                      "to_usec": spans[-1]["to_usec"] if spans else tail_rt, "lost": lost}]
        return {"source": source, "why": why, "entries": n, "read": self.read, "lost": lost, "holes": spans}


def sentence(d: dict) -> str:
    """One line on a ``damaged`` record: the file, why, and what could not be read, when and how many."""
    out = f"{d.get('source')}: damaged ({d.get('why')}); read past the damage by walking every entry"
    if d.get("lost") is None:
        return out + "; how many entries could not be read, and from when to when, is unknown"
    if not d["lost"]:
        return out + f": all {d.get('read')} entries read"
    spans = "; ".join(f"{_at(h.get('from_usec'))} to {_at(h.get('to_usec'))}: {h.get('lost')} entries"
                      for h in d.get("holes") or ())
    return out + f": {d['lost']} of {d.get('entries')} entries could not be read" + (f" ({spans})" if spans else "")


def _at(usec) -> str:
    try:
        return iso_z(from_usec(usec)) if usec else "the file's start"
    except (TypeError, ValueError, OverflowError, OSError):
        return "an unknown time"


def holes(damaged, problems: list) -> list[Hole]:
    """The coverage holes of coverage.json's ``damaged`` records (those with a start and an end); a
    malformed record is reported in ``problems``."""
    out = []
    for d in damaged if isinstance(damaged, list) else ():
        try:
            for h in d.get("holes") or ():
                if h.get("from_usec") and h.get("to_usec") and h["to_usec"] > h["from_usec"]:
                    out.append(Hole(from_usec(h["from_usec"]), from_usec(h["to_usec"]),
                                    f"{d['source']} is damaged: {h['lost']} entries from {_at(h['from_usec'])} to "
                                    f"{_at(h['to_usec'])} could not be read"))
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError, OSError) as e:
            problems.append({"artifact": "journal/coverage.json", "message": f"unusable damaged record: {e!r}"})
    return out


def per_file(records) -> list[dict]:
    """``records`` (a source's ``damage``) one per file: each pass that met the damage made one; the one
    that read most is kept, in the order first met."""
    out: dict[str, dict] = {}
    for d in records:
        if d["source"] not in out or (d["read"] or 0) > (out[d["source"]]["read"] or 0):
            out[d["source"]] = d
    return list(out.values())
