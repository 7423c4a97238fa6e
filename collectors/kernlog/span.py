"""What span of time the stored kernel lines cover: ``Coverage("kern.log")`` with its holes, and
``Coverage("kmsg")``.

A syslog file is written by rsyslog for every program, so the first and last dated line of any program in a file
(``first``/``last`` in ``kernlog/files.json``) bound the time in which a kernel line would have been written
there; the kernel lines alone would shrink the span to the last Xid. The files of one log, oldest first, leave a
hole between two stored neighbours when something between them is not stored: a rotation number missing from the
listing (``kern.log.3.gz`` then ``kern.log.1``), a rotation that could not be read, the older one's end not read
(a ``.gz`` over the bound) or the newer one's head skipped (a plain file over the bound).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import PurePosixPath

from forensics.bundle import Bundle
from forensics.events import Coverage, Hole
from forensics.artifact import Status, errno_name
from forensics.timeutil import iso_z

from .files import FAMILIES, LOG_DIR, rotation_key

ZONE_NOTE = "node time zone unknown: kern.log times without a zone (Mmm dd hh:mm:ss) uncertain by ±14 h"


def syslog_coverage(bundle: Bundle, entries: list[dict], spans: dict[str, tuple], zone_less: bool,
                    tz_unknown: bool) -> Coverage:
    """``Coverage("kern.log")`` over the files read: ``entries`` the ``files.json`` entries (every file tried),
    ``spans`` ``{bundle path: (first, last)}`` (UTC or None) of each stored file, ``zone_less`` whether any
    time read was a zone-less one. Holes per log (the module docstring); the reason names the files, the logs
    not found or not readable, and what was not read."""
    stored = [e for e in entries if e.get("path") in spans]
    times = [t for e in stored for t in spans[e["path"]] if t is not None]
    absent = [f"{LOG_DIR}/{b}" for b in FAMILIES if not any(e["family"] == b for e in entries)]
    reason = "; ".join(_what(bundle, entries, spans) + ([f"not looked for: {', '.join(absent)} (kern.log was read)"]
                                                         if absent and stored else []))
    if not times:
        return Coverage("kern.log", None, None, reason or "no syslog file under /var/log holds a dated line")
    holes = [h for b in FAMILIES for h in _holes([e for e in entries if e["family"] == b], spans)]
    uncertain = ZONE_NOTE if zone_less and tz_unknown else None
    return Coverage("kern.log", min(times), max(times), reason + (f"; {uncertain}" if uncertain else ""),
                    tuple(sorted(holes)), uncertain)


def _what(bundle: Bundle, entries: list[dict], spans: dict) -> list[str]:
    """One clause per log: its stored files and their kernel lines, or why none was stored."""
    records = {a.source: a for a in bundle.artifacts()}
    out = []
    for base in FAMILIES:
        mine = _oldest_first([e for e in entries if e["family"] == base], base)
        if not mine:
            continue
        kept = [e for e in mine if e.get("path") in spans]
        if kept:
            lines = sum(e.get("kernel_lines") or 0 for e in kept)
            names = ", ".join(PurePosixPath(e["source"]).name for e in kept)
            out.append(f"{base}: {len(kept)} file{'s' if len(kept) > 1 else ''} read ({names}), {lines} kernel lines"
                       " (the other programs' lines are not stored)")
        for e in mine:
            if e not in kept:
                out.append(_failed(records.get(e["source"]), e["source"]))
    return out


def _failed(a, source: str) -> str:
    if a is None:
        return f"{source}: not collected (no record)"
    if a.status is Status.ABSENT:
        return f"{source} absent"
    if a.status is Status.UNREADABLE:
        return f"{source} unreadable ({errno_name(a.errno)}: {a.message})"
    return f"{source} {a.status.value}: {a.message}"


def _holes(entries: list[dict], spans: dict) -> list[Hole]:
    """The holes between the stored files of one log (``entries`` of one family, in any order)."""
    if not entries:
        return []
    base = entries[0]["family"]
    out, older, between, prev = [], None, [], None
    for e in _oldest_first(entries, base):
        name = PurePosixPath(e["source"]).name
        gone = _missing(prev, name, base) if prev else []
        between += [f"{', '.join(gone)} missing"] if gone else []
        prev = name
        if e.get("path") not in spans:
            between.append(f"{name} not read")
            continue
        if spans[e["path"]] == (None, None):  # no dated line: the hole, if any, runs to the next file
            continue
        if older is not None:
            why = list(between)
            why += [f"the end of {PurePosixPath(older['source']).name} was not read"] if not older.get("end_read") else []
            why += [f"the first {e['head_skipped']} bytes of {name} were not read"] if e.get("head_skipped") else []
            lo, hi = spans[older["path"]][1], spans[e["path"]][0]
            if why and lo and hi and lo < hi:
                out.append(Hole(lo, hi, f"no stored file holds {base} lines from {iso_z(lo)} to {iso_z(hi)}: "
                                        + "; ".join(why)))
        older, between = e, []
    return out


def _oldest_first(entries: list[dict], base: str) -> list[dict]:
    return sorted(entries, key=lambda e: rotation_key(PurePosixPath(e["source"]).name, base) or (9, 0))


def _missing(older: str, newer: str, base: str) -> list[str]:
    """Rotation numbers between two neighbouring names that the listing did not hold."""
    a, b = rotation_key(older, base), rotation_key(newer, base)
    if not a or not b or a[0] != 1:
        return []
    lo = 0 if b[0] == 2 else -b[1] if b[0] == 1 else None
    return [f"{base}.{n}" for n in range(lo + 1, -a[1])] if lo is not None else []


def kmsg_coverage(entry: dict | None, bundle: Bundle, first: datetime | None, first_seq: int | None,
                  end: datetime | None) -> Coverage:
    """``Coverage("kmsg")``: from the oldest record the ring buffer still held (``first``, UTC; ``first_seq`` its
    sequence number, the count of older records overwritten) to the read (``end``); ``uncertain`` when the node had
    been suspended (record times then run early)."""
    if entry is None:
        return Coverage("kmsg", None, None, "not read: the kernel ring buffer (/dev/kmsg) is read only when collecting "
                                            "the running host (--root /)")
    if not entry.get("path"):
        return Coverage("kmsg", None, None, _failed({a.source: a for a in bundle.artifacts()}.get(entry["source"]),
                                                    entry["source"]))
    if first is None:
        return Coverage("kmsg", None, None, "the ring buffer held no record with a time (or no boot time is known)")
    suspended = entry.get("suspended_s") if isinstance(entry.get("suspended_s"), (int, float)) else 0
    uncertain = (f"kmsg record times are btime + the kernel's timestamp, which stops during suspend: the node spent "
                 f"{suspended} s suspended since boot, so later records may be that much early") if suspended > 1 else None
    oldest = ("the boot's first record (sequence 0: none overwritten)" if first_seq == 0 else
              f"the oldest record the ring buffer still held (sequence {first_seq}: the {first_seq} before it were "
              "overwritten)")
    reason = (f"{oldest} to its read at {entry.get('read_at')}; {entry.get('kernel_records')} kernel records, "
              f"{entry.get('user_records')} written from user space; times approximate (btime + the record's "
              "timestamp since boot)")
    return Coverage("kmsg", first, end, reason + (f"; {uncertain}" if uncertain else ""), (), uncertain)
