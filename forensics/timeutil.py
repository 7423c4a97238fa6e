"""Time handling at the edges: parse a source's text in the source's zone, store UTC, render in the
node's zone with its offset.

Zone-less logs (dpkg.log, apt history.log, unattended-upgrades.log) are read in the node's zone,
built from the node's own ``/etc/localtime`` TZif bytes kept in the bundle (RFC 8536), never from
the analysing machine's zone.
"""
from __future__ import annotations

import io
import os
import re
import time
import zoneinfo
from bisect import bisect_right
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Callable, Iterable

from dateutil import parser as _dparser
from dateutil import tz as _dtz

UTC = timezone.utc
#: how far a zone-less time read as UTC may lie from the true instant when the node's zone is unknown:
#: UTC offsets in use run from -12:00 to +14:00 (tzdata: Etc/GMT+12, Pacific/Kiritimati)
ZONE_UNCERTAINTY = timedelta(hours=14)
#: how far from an incident window a windowed reading (forensics/source.py ``WINDOWED``) still makes events: the
#: rules look up to ZONE_UNCERTAINTY (a zone-less time of an unknown zone) plus a requester's 5 minutes around a
#: window, and a zone-less line's text is its UTC time give or take any zone's offset (at most 14 h); 48 h holds both
WINDOW_REACH = timedelta(hours=48)
#: the gap every zone-less time carries on such a node (package coverage and verdicts say it alike)
ZONE_UNKNOWN_NOTE = "node time zone unknown: dpkg/apt times uncertain by ±14 h"


def tz_from_tzif(data: bytes, name: str | None = None) -> tzinfo:
    """Build a tzinfo from TZif bytes (``/etc/localtime``; RFC 8536). Raises ``ValueError`` when the
    bytes are not a TZif file."""
    if not data.startswith(b"TZif"):
        raise ValueError("not a TZif file")
    return _dtz.tzfile(io.BytesIO(data), filename=name)


def tz_by_name(name: str) -> tzinfo:
    """The IANA zone ``name`` (``Asia/Tokyo``) from the analysing machine's own tzdata
    (:class:`zoneinfo.ZoneInfo`; the name only, for a node whose TZif bytes were not kept). Raises
    ``ValueError`` for a name that is not a zone key there (unknown, absolute, ``..``, odd bytes)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError, OSError) as e:
        raise ValueError(f"no zone {name!r} in this machine's tzdata: {e}") from None


_LOCALIZED: dict[tuple[int, datetime], tuple[tzinfo, tuple[datetime, tuple[str, ...]]]] = {}
_HOURS: dict[tuple[int, datetime], tuple[tzinfo, datetime | None]] = {}
_HOUR = timedelta(hours=1)


def localize(naive: datetime, zone: tzinfo) -> tuple[datetime, tuple[str, ...]]:
    """See :func:`_localize`; memoised, because the lines of one dpkg run share their seconds, and by
    the wall-clock hour where no transition is near (:func:`_steady_hour`), because a dpkg.log of
    100,000 lines has tens of thousands of distinct seconds. (dateutil's tzfile is not hashable, so
    the keys hold the zone's identity, checked on each hit.)"""
    key = (id(zone), naive)
    hit = _LOCALIZED.get(key)
    if hit is not None and hit[0] is zone:
        return hit[1]
    hour = naive.replace(minute=0, second=0, microsecond=0)
    steady = _HOURS.get((id(zone), hour))
    if steady is None or steady[0] is not zone:
        if len(_HOURS) >= 4096:
            _HOURS.clear()
        steady = _HOURS[(id(zone), hour)] = (zone, _steady_hour(hour, zone))
    if steady[1] is not None:
        out: tuple[datetime, tuple[str, ...]] = (steady[1] + (naive - hour), ())
    else:
        out = _localize(naive, zone)
    if len(_LOCALIZED) >= 4096:
        _LOCALIZED.clear()
    _LOCALIZED[key] = (zone, out)
    return out


def _steady_hour(hour: datetime, zone: tzinfo) -> datetime | None:
    """The UTC time of the wall-clock ``hour`` (naive, on the hour) when the zone keeps one UTC offset
    from it to the next hour, else ``None``: :func:`_localize` of both ends neither folded nor in a
    gap, and one hour apart in UTC too. Then every wall time in ``[hour, hour + 1 h)`` is that UTC time
    plus its distance from ``hour``, unflagged, provided the zone's transitions lie more than an hour
    apart: true of every zone in tzdata (the closest two transitions of any of the 599 zones of
    tzdata 2025 are more than 6 h apart), tests/test_times_dst.py compares it with :func:`_localize`
    across real folds and gaps. ``None`` also at the ends of datetime's range."""
    try:
        (start, f0), (end, f1) = _localize(hour, zone), _localize(hour + _HOUR, zone)
    except OverflowError:
        return None
    return start if not f0 and not f1 and end - start == _HOUR else None


def _localize(naive: datetime, zone: tzinfo) -> tuple[datetime, tuple[str, ...]]:
    """Interpret a zone-less wall-clock time in ``zone`` and return ``(UTC datetime, flags)``.

    Flags: ``dst-fold`` when the wall time occurred twice (the first occurrence is taken),
    ``dst-gap`` when it never occurred (shifted forward, as dateutil's ``resolve_imaginary`` does).
    """
    local = naive.replace(tzinfo=zone, fold=0)
    utc = local.astimezone(UTC)
    # dateutil's datetime_exists(local), sharing the conversion to UTC: the wall time survives a round trip
    if utc.astimezone(zone).replace(tzinfo=None) != local.replace(tzinfo=None):
        return _dtz.resolve_imaginary(local).astimezone(UTC), ("dst-gap",)
    return utc, ("dst-fold",) if _dtz.datetime_ambiguous(local) else ()


def parse_iso(text: str) -> datetime:
    """Parse ISO 8601 text that carries an offset (or ``Z``) into UTC.

    Raises ``ValueError`` for unparsable text, a time without a zone (a time given on the command
    line must say which zone it is in), or one that leaves the years 1..9999 once in UTC
    (``9999-12-31T23:59-01:00``).
    """
    dt = _dparser.isoparse(text.strip())
    if dt.tzinfo is None:
        raise ValueError(f"time {text!r} has no UTC offset; write e.g. 2026-07-11T12:34+09:00")
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"time {text!r} is out of range once converted to UTC") from None


#: one ``<number><unit>`` of a duration (systemd.time(7) spellings: ``2h``, ``90min``, ``1h30m``, ``2 days``)
_SPAN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(weeks?|w|days?|d|hours?|hr|h|minutes?|min|m|seconds?|sec|s)", re.I)
_UNIT_S = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_span(text: str) -> timedelta | None:
    """``2h``, ``90m``, ``1h30m``, ``2 days``, ``1.5d`` as a :class:`timedelta` (units w, d, h, m(in),
    s(ec) and their words, as systemd.time(7) spells them), or ``None`` when ``text`` is not one. Raises
    ``ValueError`` for one longer than a :class:`timedelta` holds (999,999,999 days)."""
    pos, total, t = 0, 0.0, text.strip()
    while pos < len(t):
        m = _SPAN.match(t, pos)
        if not m:
            return None
        unit = m.group(2).lower()
        total += float(m.group(1)) * _UNIT_S["m" if unit.startswith("mi") else unit[0]]
        pos = m.end()
    try:
        return timedelta(seconds=total) if t else None
    except OverflowError:  # "99999999999d"
        raise ValueError(f"duration {text!r} is too long") from None


#: what a time on the command line may be (the usage errors name them)
WHEN_FORMS = ("ISO 8601 with an offset (2026-07-11T12:34+09:00), a date or time without one read in the "
              "node's zone (2026-07-11, 2026-07-11T12:34), a clock time there (14:00, yesterday 23:00), now, "
              "today, yesterday, or a time ago (-2h, 2d, 90m ago)")
#: a clock time as people type it: ``14:00``, ``9:05:30``, ``today 14:00``, ``yesterday 23:00``
_CLOCK = re.compile(r"(?:(today|yesterday)\s+)?([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?", re.I)


def parse_when(text: str, now: datetime, zone: Callable[[], tzinfo | None], *,
               base: datetime | None = None) -> tuple[datetime, str, datetime | None, tuple[str, ...]]:
    """A time given on the command line, to UTC: ``(utc, form, wall, flags)``.

    ``form`` is ``"offset"`` (ISO 8601 with an offset, :func:`parse_iso`), ``"relative"`` (``now``,
    ``-2h`` / ``2h`` / ``2h ago``: that long before ``now``; ``+30m``: that long after ``base``, the
    window's START), or ``"local"`` (a date or date-time without an offset, ``today``, ``yesterday``:
    the wall time ``wall`` in the node's zone, ``zone()`` called only then; ``flags`` as
    :func:`localize`'s: ``dst-gap``, ``dst-fold``). ``now`` is an aware datetime (the caller's clock, so
    that tests fix it). Raises ``ValueError`` for text of none of these forms (:data:`WHEN_FORMS`), a
    ``+DURATION`` without ``base``, and a zone-less time when ``zone()`` gives ``None``.
    """
    t = text.strip()
    low = t.lower()
    if low == "now":
        return now.astimezone(UTC), "relative", None, ()
    ago = low[:-3].strip() if low.endswith(" ago") else low
    sign = ago[:1] if ago[:1] in "+-" else ""
    span = parse_span(ago[1:] if sign else ago)
    if span is not None:
        if sign == "+" and ago == low and base is None:
            raise ValueError(f"time {text!r}: +DURATION counts from START, so it is for END only (START..+30m)")
        try:
            return (base + span if sign == "+" and ago == low else now.astimezone(UTC) - span), "relative", None, ()
        except OverflowError:  # "-3000000d": before the year 1
            raise ValueError(f"time {text!r} is out of range") from None
    clock = _CLOCK.fullmatch(low)
    if clock:
        return _clock_time(text, clock, now, zone, base)
    if low in ("today", "yesterday"):
        wall = None
    else:
        try:
            dt = _dparser.isoparse(t)
        except (ValueError, OverflowError):
            raise ValueError(f"time {text!r}: expected {WHEN_FORMS}") from None
        if dt.tzinfo is not None:
            return parse_iso(t), "offset", None, ()
        wall = dt
    rules = zone()
    if rules is None:
        raise ValueError(f"time {text!r} is read in the node's zone, and the node's time zone is unknown "
                         "(no /etc/localtime, /etc/timezone or /etc/sysconfig/clock under --root); write it with an "
                         "offset, e.g. 2026-07-11T12:34+09:00")
    if wall is None:
        day = now.astimezone(rules).date() - timedelta(days=1 if low == "yesterday" else 0)
        wall = datetime(day.year, day.month, day.day)
    try:
        utc, flags = localize(wall, rules)
    except OverflowError:
        raise ValueError(f"time {text!r} is out of range once converted to UTC") from None
    return utc, "local", wall, flags


def _clock_time(text: str, m: re.Match, now: datetime, zone: Callable[[], tzinfo | None],
                base: datetime | None) -> tuple[datetime, str, datetime, tuple[str, ...]]:
    """:func:`parse_when` of a clock time (:data:`_CLOCK`): that wall time today (or yesterday) in the
    node's zone. A bare START that lies after ``now`` is the day before's (``23:00`` typed at 01:00), flag
    ``day-before``; a bare END is on START's day, or the day after when it would come before START
    (``23:00..01:30``), flag ``day-after``. Raises ``ValueError`` when the node's zone is unknown."""
    rules = zone()
    if rules is None:
        raise ValueError(f"time {text!r} is read in the node's zone, and the node's time zone is unknown "
                         "(no /etc/localtime, /etc/timezone or /etc/sysconfig/clock under --root); write it with "
                         "a date and an offset, e.g. 2026-07-11T12:34+09:00")
    word, hh, mm, ss = m.groups()
    if word is None and base is not None:  # a bare END: on START's day
        day = base.astimezone(rules).date()
    else:
        day = now.astimezone(rules).date() - timedelta(days=1 if (word or "").lower() == "yesterday" else 0)
    wall = datetime(day.year, day.month, day.day, int(hh), int(mm), int(ss or 0))
    utc, flags = localize(wall, rules)
    moved = None
    if word is None and base is not None and utc < base:
        moved, wall = "day-after", wall + timedelta(days=1)
    elif word is None and base is None and utc > now:
        moved, wall = "day-before", wall - timedelta(days=1)
    if moved:
        utc, flags = localize(wall, rules)
        flags = (*flags, moved)
    return utc, "local", wall, flags


def within(windows: Iterable[tuple[datetime, datetime]]) -> Callable[[datetime], bool]:
    """A test ``t -> bool``: is ``t`` inside one of the closed ``windows`` ``(lo, hi)``. The windows
    are merged and sorted once, so each test is one bisection instead of a scan of every window
    (a timeline asks it for every dpkg.log line). A window with ``lo > hi`` holds nothing. Any values
    that order as their times do serve: datetimes, or fixed-width time text (collectors/packages/events.py)."""
    merged: list[list[datetime]] = []
    for lo, hi in sorted(w for w in windows if w[0] <= w[1]):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    starts = [lo for lo, _ in merged]

    def inside(t: datetime) -> bool:
        i = bisect_right(starts, t)
        return i > 0 and t <= merged[i - 1][1]
    return inside


def iso_z(dt: datetime | None) -> str | None:
    """``2026-09-02T04:05:13Z`` (seconds precision, microseconds kept when present), or ``None``."""
    if dt is None:
        return None
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def local_iso(dt: datetime | None, zone: tzinfo) -> str | None:
    """The same instant in the node's zone with its offset: ``2026-09-02T13:05:13+09:00``."""
    if dt is None:
        return None
    return dt.astimezone(zone).isoformat()


def to_second(text) -> str:
    """An ISO 8601 time of analysis.json as people read it in a table: ``2026-09-02 13:05:13 +09:00`` (the
    offset it carries), ``2026-09-02 04:05:13 UTC`` for a ``Z`` or ``+00:00`` time; whole seconds (the
    fraction is dropped, not rounded, so the order stays). ``""`` for ``None`` or ``""``; text that is not
    such a time is returned as it is."""
    if not text:
        return ""
    t = str(text).strip()
    try:  # the C parser first: the times analysis.json writes (a report's tables hold ~30,000 of them on bench L)
        dt = datetime.fromisoformat(t)
    except ValueError:
        try:  # the other ISO 8601 forms dateutil reads (basic format, nanoseconds, ...)
            dt = _dparser.isoparse(t)
        except (ValueError, OverflowError):
            return str(text)
    off = dt.utcoffset()
    if off is None:
        return dt.strftime("%Y-%m-%d %H:%M:%S")
    if not off:
        return dt.strftime("%Y-%m-%d %H:%M:%S UTC")
    z = dt.strftime("%z")
    return f"{dt.strftime('%Y-%m-%d %H:%M:%S')} {z[:3]}:{z[3:5]}"


def from_usec(usec: int) -> datetime:
    """Journal ``__REALTIME_TIMESTAMP`` (µs since the epoch, UTC) to an aware UTC datetime."""
    return datetime.fromtimestamp(usec / 1_000_000, tz=UTC)


def human(dt: datetime | None, zone: tzinfo | None = None) -> str:
    """For sentences: ``2026-09-02 13:05:13 +09:00 (04:05:13 UTC)`` in the node's zone, or
    ``2026-09-02 04:05:13 UTC`` without one. Whole seconds; ``'unknown time'`` for ``None``."""
    if dt is None:
        return "unknown time"
    u = dt.astimezone(UTC).replace(microsecond=0)
    if zone is None:
        return u.strftime("%Y-%m-%d %H:%M:%S UTC")
    loc = u.astimezone(zone)
    off = loc.strftime("%z")
    same_day = loc.date() == u.date()
    return f"{loc.strftime('%Y-%m-%d %H:%M:%S')} {off[:3]}:{off[3:]} ({u.strftime('%H:%M:%S' if same_day else '%Y-%m-%d %H:%M:%S')} UTC)"


def sane_tz() -> str | None:
    """An invalid ``TZ`` (``UTC+24``, ``-24``: an offset of a day or more) makes the local zone
    unrepresentable and python-systemd fails at import; the node's zone is read from the node
    (collectors.node), never from this process's TZ, so such a TZ is replaced by UTC here, before any
    collector is imported. Returns the value ignored, or ``None``."""
    try:
        datetime.now().astimezone()
        return None
    except (ValueError, OverflowError, OSError):
        bad = os.environ.get("TZ")
        os.environ["TZ"] = "UTC"
        time.tzset()
        return bad
