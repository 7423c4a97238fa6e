"""The times of the timeline picture (reports/chart.py): analysis.json's ISO 8601 text read as aware UTC
datetimes, the node's fixed UTC offset, and the zone's label on the x axis (``KST / UTC+09:00``).
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from forensics.excerpt import cut


#: the times a picture can hold: its margins and its zones' shifts reach past a date at the ends of Python's
#: calendar (a dpkg.log line dated 9999-12-31, a clock at year 1: OverflowError while drawing)
DRAWABLE = (datetime(100, 1, 1, tzinfo=timezone.utc), datetime(9900, 1, 1, tzinfo=timezone.utc))


def when(text) -> datetime | None:
    """``text`` (ISO 8601 with an offset or ``Z``) as an aware UTC datetime; ``None`` for none, for text
    without a zone or that does not parse, and for a time outside :data:`DRAWABLE` (left out of the picture)."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        dt = dt.astimezone(timezone.utc) if dt.tzinfo else None
    except (ValueError, OverflowError):
        return None
    return dt if dt is not None and DRAWABLE[0] <= dt < DRAWABLE[1] else None


def offset(text) -> timezone:
    """The fixed zone of ``+0900`` / ``-05:30`` (analysis.json's ``timezone.utc_offset``); UTC otherwise."""
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", str(text or "").strip())
    if not m:
        return timezone.utc
    delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
    return timezone(-delta if m.group(1) == "-" else delta)


def tzlabel(a: dict, tz: timezone) -> str:
    """``KST / UTC+09:00``: the zone's abbreviation when the analysing machine knows the zone and it
    matches the offset, else the offset alone."""
    off = tz.utcoffset(None)
    sign = "-" if off < timedelta(0) else "+"
    mins = abs(int(off.total_seconds())) // 60
    utc = f"UTC{sign}{mins // 60:02d}:{mins % 60:02d}"
    name = (a.get("timezone") or {}).get("name")
    try:
        from zoneinfo import ZoneInfo
        at = when(a.get("collected_at")) or datetime.now(timezone.utc)
        z = ZoneInfo(str(name))
        abbr = z.tzname(at)
        if abbr and abbr[0].isalpha() and z.utcoffset(at) == off:
            return f"{cut(abbr, 8)} / {utc}"
    except Exception:  # unknown or missing zone name: the offset says it all
        pass
    return utc
