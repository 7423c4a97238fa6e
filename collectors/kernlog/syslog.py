"""Syslog file lines: their framing, which of them are the kernel's, and their times.

Formats (rsyslog's reserved templates, https://www.rsyslog.com/doc/reference/templates/templates-reserved-names.html):

- ``RSYSLOG_TraditionalFileFormat`` ``%TIMESTAMP% %HOSTNAME% %syslogtag%%msg%``: ``Sep  2 04:05:13 gpu-node-3
  kernel: [  123.456789] NVRM: ...`` (RFC 3164 time: no year, no zone). Debian up to 11 and Ubuntu up to
  22.04 select it in /etc/rsyslog.conf (``$ActionFileDefaultTemplate RSYSLOG_TraditionalFileFormat``); RHEL's
  rsyslog.conf selects it for omfile (``module(load="builtin:omfile" Template="RSYSLOG_TraditionalFileFormat")``).
- ``RSYSLOG_FileFormat``, rsyslog's own default: ``2026-09-02T04:05:13.123456+02:00 gpu-node-3 kernel: ...``
  (RFC 3339 with microseconds and the offset). Debian 12 dropped the line above (release notes §5.1.8, "Changes to
  rsyslog affect log analyzers such as logcheck"), and so did newer Ubuntu.

The kernel's lines carry the tag ``kernel:`` (rsyslog's imklog, or imjournal for ``_TRANSPORT=kernel`` entries).
imklog leaves the kernel's own ``[    5.123456]`` stamp (seconds since boot) in the message unless
``ParseKernelTimestamp`` is on (https://www.rsyslog.com/doc/reference/parameters/imklog-parsekerneltimestamp.html,
default off); it is kept in the message. rsyslog writes control characters as ``#`` and three octal digits
(``$EscapeControlCharactersOnReceive``, default on): a journal entry with embedded newlines (the probe-time
"fallen off the bus" message read by imjournal) arrives as one line holding ``#012``, turned back into ``\\n``
here. A line written with ``logger -t kernel`` looks the same as the kernel's: a syslog file cannot tell them
apart (the journal can: ``_TRANSPORT``).

Times: an RFC 3339 stamp is exact. An RFC 3164 stamp is a wall time of the node's zone (``NodeFacts.tz``) whose
year is not written: :func:`bsd_years` takes it from the file's mtime (recorded at acquisition) and walks
backwards, one year less at each step back in the calendar (``Jan  1`` after ``Dec 31`` going forwards). A wall
time of a DST fold takes the occurrence that keeps the file in order (``dst-fold`` flag all the same).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from forensics.timeutil import localize

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: ``<time> <host> <tag>:`` of a syslog file line; ``iso``: RFC 3339, ``bsd``: RFC 3164 ``Mmm dd hh:mm:ss``
HEAD = re.compile(rb"(?:(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d))"
                  rb"|(?P<bsd>(?:" + "|".join(MONTHS).encode() + rb") [ \d]\d \d\d:\d\d:\d\d))"
                  rb" (?P<host>\S+) (?P<tag>[^\s:\[]+)(?:\[\d+\])?:")
_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")
_ESCAPED = re.compile(r"#01[12]")  #: rsyslog's escapes of a tab (#011) and a newline (#012)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: a step back in the calendar longer than this between two lines is a new year; shorter, a clock set back
YEAR_STEP = timedelta(days=1)
#: a line may be dated this much after its file's mtime before it is taken for the year before (clock skew)
MTIME_SLACK = timedelta(days=1)


def kernel_line(line: bytes) -> bool:
    """Whether a syslog file line carries the ``kernel:`` tag after a time and a host name (:data:`HEAD`)."""
    m = HEAD.match(line)
    return bool(m) and m.group("tag") == b"kernel"


def stamp(line: bytes) -> str | None:
    """The time text at the start of a syslog file line (``Sep  2 04:05:13`` or an RFC 3339 stamp), or None."""
    m = HEAD.match(line)
    return None if m is None else (m.group("iso") or m.group("bsd")).decode("ascii")


@dataclass
class Line:
    """One kernel line of a stored file: ``n`` its line number in the stored artifact, ``source_line`` in
    the host's file, ``when`` its time text, ``text`` the message after ``kernel:`` (``#012``/``#011``
    escapes undone, other control characters written ``\\xNN``: :func:`inert`), ``at`` UTC (None: no
    time could be read) and the reading's ``flags``."""

    n: int
    source_line: int | None
    when: str
    text: str
    at: datetime | None = None
    flags: tuple[str, ...] = ()


def parse_stored(data: bytes) -> list[Line]:
    """The lines of a stored kernel-lines artifact (``<line number>\\t<line>``, the module docstring of
    :mod:`collectors.kernlog`), times not yet read. Lines of another shape are skipped."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        num, tab, line = raw.partition(b"\t")
        m = HEAD.match(line) if tab else None
        if m is None or m.group("tag") != b"kernel":
            continue
        text = line[m.end():].decode("utf-8", "replace")
        text = text[1:] if text.startswith(" ") else text
        if "#01" in text:
            text = _ESCAPED.sub(lambda e: "\t" if e.group() == "#011" else "\n", text)
        out.append(Line(n, int(num) if num.isdigit() else None, (m.group("iso") or m.group("bsd")).decode(),
                        inert(text)))
    return out


def inert(text: str) -> str:
    """``text`` with control characters other than tab and newline written ``\\xNN`` (a terminal escape in a
    log line stays text)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def parse_iso(text: str) -> datetime | None:
    """An RFC 3339 stamp (``2026-09-02T04:05:13.123456+02:00``, fractions cut to microseconds) as UTC, or None."""
    m = _ISO.fullmatch(text)
    if not m:
        return None
    frac = (m.group(2) or "")[:6].ljust(6, "0")
    try:
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{'+00:00' if m.group(3) == 'Z' else m.group(3)}") \
            .astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None


def _calendar(text: str, year: int) -> datetime | None:
    """``Sep  2 04:05:13`` in ``year`` (naive), or None (``Feb 29`` of a common year, a 25th hour)."""
    try:
        return datetime(year, MONTHS.index(text[:3]) + 1, int(text[4:6]), int(text[7:9]), int(text[10:12]),
                        int(text[13:15]))
    except ValueError:
        return None


def bsd_years(texts: list[str], mtime_local: datetime | None) -> list[int | None]:
    """The year of each RFC 3164 time of one file (``texts`` in file order), walking back from the last one.

    The last line is in the year of the file's mtime (``mtime_local``: naive, in the node's zone), or the
    year before when it would then fall more than :data:`MTIME_SLACK` after the mtime; going backwards,
    each step later in the calendar by more than :data:`YEAR_STEP` (``Dec 31`` before ``Jan  1``) is the
    year before. None for every line without ``mtime_local`` (no year can be read)."""
    if mtime_local is None:
        return [None] * len(texts)
    out: list[int | None] = [None] * len(texts)
    year, nxt = mtime_local.year, None
    for i in range(len(texts) - 1, -1, -1):
        ref = _calendar(texts[i], 2000)  # a leap year: every written day exists
        if ref is None:
            continue
        if nxt is None:
            last = _calendar(texts[i], year)
            if last is None or last > mtime_local + MTIME_SLACK:
                year -= 1
        elif ref - nxt > YEAR_STEP:
            year -= 1
        out[i], nxt = year, ref
    return out


def read_times(lines: list[Line], mtime: datetime | None, zone: tzinfo, zone_unknown: bool) -> None:
    """Set ``at`` and ``flags`` of the lines of one stored file (file order): RFC 3339 stamps exactly; RFC
    3164 ones in ``zone`` with the year of :func:`bsd_years` (``mtime``: the file's, UTC), flagged
    ``tz-unknown`` when ``zone_unknown`` (read as UTC), ``dst-fold`` / ``dst-gap`` as
    :func:`forensics.timeutil.localize` says. ``at`` stays None for a time that cannot be read."""
    bsd = [i for i, ln in enumerate(lines) if not ln.when[:1].isdigit()]
    local = mtime.astimezone(zone).replace(tzinfo=None) if mtime else None
    years = bsd_years([lines[i].when for i in bsd], local)
    year_of = dict(zip(bsd, years))
    prev = None
    for i, ln in enumerate(lines):
        if i not in year_of:
            ln.at = parse_iso(ln.when)
        elif year_of[i] is not None and (wall := _calendar(ln.when, year_of[i])) is not None:
            try:
                ln.at, ln.flags = localize(wall, zone)
            except OverflowError:
                continue
            if "dst-fold" in ln.flags and prev is not None and ln.at < prev:
                later = wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
                ln.at = later if later >= prev else ln.at  # the second pass through the folded hour
            ln.flags += ("tz-unknown",) if zone_unknown else ()
        prev = ln.at or prev
