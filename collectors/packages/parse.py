"""Line grammars of the Debian package logs (dpkg.log, apt history.log, unattended-upgrades.log),
and the streaming reader that turns a stored (possibly gzip) file into numbered lines.

The grammars are pure functions over one line of text (no I/O, no time zone): they return a small
record or ``None`` for a line without a valid timestamp, and never raise for any input text. Times
come back naive (local wall clock, as written); :mod:`collectors.packages` localizes them with the
node's zone.

Formats (see docs/sources.md "Package logs"):
- dpkg.log: ``YYYY-MM-DD HH:MM:SS <message>`` [dpkg lib/dpkg/log.c log_message(); man dpkg ``--log``].
- history.log: ``Tag: value`` stanzas, dates as ``%F  %T`` (two spaces)
  [apt apt-pkg/deb/dpkgpm.cc WriteHistoryTag()].
- unattended-upgrades.log: Python logging ``'%(asctime)s %(levelname)s %(message)s'``, local time with
  comma milliseconds [mvo5/unattended-upgrades unattended-upgrade _setup_logging].
"""
from __future__ import annotations

import functools
import gzip
import re
import sys
import zlib
from datetime import datetime
from typing import Iterator, NamedTuple

MAX_LINE = 1 << 20          #: bytes; a longer line is reported and skipped, never held whole
MAX_LINE_PROBLEMS = 20      #: line problems listed one by one per file; the rest are counted

#: dpkg.log actions logged by log_action(): ``<action> <pkg> <installed-version> <available-version>``
DPKG_PKG_ACTIONS = ("install", "upgrade", "remove", "purge", "configure", "trigproc", "disappear")

_DPKG = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (.*))?\Z", re.S)
_HIST_DATE = re.compile(r"(\d{4}-\d\d-\d\d)\s+(\d\d:\d\d:\d\d)\Z")
_UU = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[,.](\d{1,6}))? ([A-Z]+)(?: (.*))?\Z", re.S)
#: dpkg writes ``<none>`` for a missing version; it is localised on some hosts (``<aucune>``)
_NONE = re.compile(r"<[^<>\s]*>\Z")

#: history.log tag -> the action recorded for each package in it
HISTORY_PACKAGE_TAGS = {"Install": "install", "Upgrade": "upgrade", "Downgrade": "downgrade",
                        "Remove": "remove", "Purge": "purge", "Reinstall": "reinstall",
                        "Disappeared": "disappeared"}

#: messages u-u logs once at the start of every run (the order changed between versions)
UU_OPENERS = ("Starting unattended upgrades script", "Initial blacklist", "Initial whitelist", "Allowed origins are")
UU_PACKAGES = "Packages that will be upgraded:"
UU_RESULTS = (("All upgrades installed", "installed"),
              ("Installing the upgrades failed", "failed"),
              ("No packages found that can be upgraded unattended", "nothing-to-do"))


class DpkgLine(NamedTuple):
    """One dpkg.log line. ``action`` is ``unknown`` (and ``parsed`` False) when the message matches
    no grammar; versions are ``None`` for ``<none>``; ``package`` keeps its ``:arch`` (for
    ``conffile`` it is the conffile path); ``state`` is the status state, the conffile decision
    (``install``/``keep``) or the startup words (``archives unpack``)."""

    when: datetime
    time_text: str
    action: str
    package: str | None
    old_version: str | None
    new_version: str | None
    state: str | None
    parsed: bool


class UuLine(NamedTuple):
    """One unattended-upgrades.log line: local time (with microseconds), level, message."""

    when: datetime
    time_text: str
    level: str
    message: str


_ISO_SECONDS = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def _naive(text: str, fmt: str) -> datetime | None:
    try:
        m = _ISO_SECONDS.fullmatch(text) if fmt == "%Y-%m-%d %H:%M:%S" else None
        # the dpkg.log form, 100k lines on a long-lived node: strptime is ten times slower
        when = datetime(*map(int, m.groups())) if m else datetime.strptime(text, fmt)
    except ValueError:  # 2019-02-30 and the like
        return None
    # Years 1 and 9999 are refused: no package log holds them, and the node's UTC offset would carry
    # them out of datetime's range when the line is localized.
    return when if 1 < when.year < 9999 else None


@functools.lru_cache(maxsize=1024)
def _seconds(text: str) -> datetime | None:
    """``YYYY-MM-DD HH:MM:SS`` -> naive datetime, or ``None`` (:func:`_naive`); memoised, because the
    lines of one dpkg or unattended-upgrades run share their seconds."""
    return _naive(text, "%Y-%m-%d %H:%M:%S")


def dpkg_stamp(line: str) -> datetime | None:
    """The naive time of a dpkg.log line that :func:`parse_dpkg_line` reads as dated (its first 19
    characters, ``YYYY-MM-DD HH:MM:SS``, then a space or the line's end), else ``None``; memoised per second."""
    return _seconds(line[:19]) if line[19:20] in ("", " ") else None


def _version(token: str) -> str | None:
    return None if token[:1] == "<" and _NONE.match(token) else token


def parse_dpkg_line(line: str) -> DpkgLine | None:
    """Parse one dpkg.log line (without its newline). ``None`` when it has no valid timestamp."""
    m = _DPKG.match(line)
    stamp = m.group(1) if m else None
    when = _seconds(stamp) if m else None
    if when is None:
        return None
    rest = (m.group(2) or "").rstrip(" ")
    words = rest.split(" ")
    verb = words[0]
    if verb in DPKG_PKG_ACTIONS and len(words) == 4 and all(words[1:]):
        return DpkgLine(when, stamp, verb, words[1], _version(words[2]), _version(words[3]), None, True)
    if verb == "status" and len(words) == 4 and all(words[1:]):
        return DpkgLine(when, stamp, verb, words[2], None, _version(words[3]), words[1], True)
    if verb == "startup" and len(words) >= 2 and all(words[1:]):
        return DpkgLine(when, stamp, verb, None, None, None, " ".join(words[1:]), True)
    if verb == "conffile" and len(words) >= 3 and words[-1] in ("install", "keep"):
        path = rest[len("conffile "):-len(words[-1]) - 1]  # a conffile path may hold spaces
        if path:
            return DpkgLine(when, stamp, verb, path, None, None, words[-1], True)
    return DpkgLine(when, stamp, "unknown", None, None, None, None, False)


def parse_history_date(value: str) -> datetime | None:
    """``2026-11-30  01:47:38`` (apt writes two spaces; any run of blanks is accepted) -> naive
    local datetime, or ``None`` when it is not a valid date."""
    m = _HIST_DATE.match(value.strip())
    return _seconds(f"{m.group(1)} {m.group(2)}") if m else None


def split_history_tag(line: str) -> tuple[str, str] | None:
    """``Tag: value`` -> ``(tag, value)``; ``None`` for a line that is not a tag line."""
    tag, sep, value = line.partition(":")
    if not sep or not tag or not re.fullmatch(r"[A-Za-z][A-Za-z-]*", tag):
        return None
    return tag, value[1:] if value.startswith(" ") else value


def _shared(text: str | None) -> str | None:
    """One copy of a package's name, arch or version however many transactions name it (a long-lived
    node's history.log lists the same packages thousands of times: issue 30's memory)."""
    return None if text is None else sys.intern(text)


def parse_package_list(tag: str, value: str) -> tuple[list[dict], list[str]]:
    """Parse a history.log package list (``Install: a:amd64 (1.0), b:amd64 (2.0, automatic)``).

    Items are split on ``"), "``; ``, automatic`` sits inside the parentheses. Returns
    ``(packages, bad_items)``: each package is ``{"name", "arch", "action", "old", "new",
    "automatic"}`` (arch ``None`` when not written, e.g. ``Disappeared: pkg (1.0)``).
    """
    action = HISTORY_PACKAGE_TAGS.get(tag, tag.lower())
    packages, bad = [], []
    for item in value.strip().split("), "):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([^\s:()]+)(?::([^\s:()]+))? \(([^()]*)\)?", item)
        if not m:
            bad.append(item)
            continue
        parts = [p.strip() for p in m.group(3).split(",")]
        automatic = parts[-1] == "automatic"
        if automatic:
            parts.pop()
        old = new = None
        if len(parts) >= 2:
            old, new = parts[0], parts[1]
        elif parts and parts[0]:
            if action in ("install",):
                new = parts[0]
            elif action == "reinstall":
                old = new = parts[0]
            else:
                old = parts[0]
        packages.append({"name": _shared(m.group(1)), "arch": _shared(m.group(2)), "action": action,
                         "old": _shared(old), "new": _shared(new), "automatic": automatic})
    return packages, bad


def parse_uu_line(line: str) -> UuLine | None:
    """Parse one unattended-upgrades.log line; ``None`` when it has no valid timestamp (a
    continuation line of a multi-line message, or garbage)."""
    m = _UU.match(line)
    when = _seconds(m.group(1)) if m else None
    if when is None:
        return None
    text = m.group(1)
    if m.group(2):
        when = when.replace(microsecond=int(m.group(2).ljust(6, "0")))
        text = line[: m.end(2)]
    return UuLine(when, text, m.group(3), m.group(4) or "")


def uu_result(level: str, message: str) -> str | None:
    """The run outcome a u-u message states: ``installed``, ``failed``, ``nothing-to-do`` or
    ``None``. Messages are gettext-translated, so an ERROR/CRITICAL level alone also means
    ``failed``."""
    for text, result in UU_RESULTS:
        if message.startswith(text):
            return result
    return "failed" if level in ("ERROR", "CRITICAL") else None


def uu_opener(message: str) -> str | None:
    """The opening message (one of :data:`UU_OPENERS`) that ``message`` starts with, else ``None``."""
    return next((o for o in UU_OPENERS if message.startswith(o)), None)


def uu_packages(message: str) -> list[str] | None:
    """The package names of ``Packages that will be upgraded: a b c``, else ``None``."""
    if not message.startswith(UU_PACKAGES):
        return None
    return message[len(UU_PACKAGES):].split()


def rotation_key(name: str, base: str) -> tuple | None:
    """Sort key putting the oldest rotation first, or ``None`` when ``name`` is not ``base`` or
    one of its rotations (``base.N``, ``base.N.gz`` for any N, logrotate ``dateext``
    ``base-YYYYMMDD[.gz]``). Numeric order: ``.10`` is older than ``.9``."""
    m = re.fullmatch(re.escape(base) + r"(?:\.(\d+)|-(\d{8,10}))?(\.gz)?", name)
    if not m:
        return None
    plain = 0 if m.group(3) else 1
    if m.group(1):
        return (1, -int(m.group(1)), plain)
    if m.group(2):
        return (0, int(m.group(2)), plain)
    return (2, 0, plain)


def package_name(package: str | None) -> str | None:
    """``hello:amd64`` -> ``hello``."""
    return package.split(":", 1)[0] if package else None


# -- stored files as lines ------------------------------------------------------------------------
class LineProblems:
    """Per-file line problems: the first few listed, the rest counted (memory stays bounded)."""

    def __init__(self, rel: str, problems: list):
        self.rel, self.problems, self.listed, self.more = rel, problems, 0, 0

    def add(self, line: int, message: str) -> None:
        if self.listed >= MAX_LINE_PROBLEMS:
            self.more += 1
        else:
            self.listed += 1
            self.problems.append({"artifact": self.rel, "line": line, "message": message})

    def flush(self) -> None:
        if self.more:
            self.problems.append({"artifact": self.rel, "message": f"{self.more} more line problems not listed"})


def current(rel: str) -> bool:
    """True for a log's current file (``dpkg.log``, ``history.log``), not a rotation (``.1``, ``.2.gz``)."""
    return not re.search(r"\.(\d+|gz)$", rel)


def read_lines(path, rel: str, problems: list) -> Iterator[tuple[int, str]]:
    """``(1-based line number, text without newline)`` of a stored file, gzip-decompressed as a
    stream when the bytes are gzip. Problems (not gzip, empty, non-UTF-8, over-long lines, read
    errors) are appended to ``problems``; lines read before an error are still yielded. An empty
    current log (``dpkg.log``: no rotation number, not compressed) is no problem: logrotate leaves it so,
    and nothing was written since (its coverage says so, :func:`collectors.packages.read`)."""
    n, bad_utf8, broken = 0, [], False
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            gz = magic == b"\x1f\x8b"
            if rel.endswith(".gz") and magic and not gz:
                problems.append({"artifact": rel, "message": "named .gz but not gzip data; not read"})
                return
            if gz and not rel.endswith(".gz"):
                problems.append({"artifact": rel, "message": "gzip data under a plain name; decompressed"})
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
            while b := stream.readline(MAX_LINE + 1):
                n += 1
                if len(b) > MAX_LINE and not b.endswith(b"\n"):
                    size = len(b) + _skip_rest(stream)
                    problems.append({"artifact": rel, "line": n,
                                     "message": f"line of {size} bytes (over {MAX_LINE}) not read"})
                    continue
                b = b[:-1] if b.endswith(b"\n") else b
                b = b[:-1] if b.endswith(b"\r") else b
                try:
                    text = b.decode("utf-8")
                except UnicodeDecodeError:
                    text = b.decode("utf-8", "replace")
                    bad_utf8.append(n)
                yield n, text
    except (OSError, EOFError, zlib.error) as e:
        broken = True
        problems.append({"artifact": rel, "line": n + 1,
                         "message": f"read stopped at line {n + 1}: {type(e).__name__}: {e}"})
    if n == 0 and not broken and not current(rel):
        problems.append({"artifact": rel, "message": "empty file: no lines"})
    if bad_utf8:
        problems.append({"artifact": rel, "line": bad_utf8[0], "message":
                         f"{len(bad_utf8)} lines hold bytes that are not UTF-8 (replaced by U+FFFD)"})


def _skip_rest(stream) -> int:
    skipped = 0
    while chunk := stream.readline(1 << 16):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped
