"""Acquire the kernel's lines of the syslog files under /var/log: which files, read how far, stored how.

Files (:data:`FAMILIES`, each with its rotations, newest first): ``kern.log`` (Debian/Ubuntu rsyslog,
``kern.* -/var/log/kern.log``; logrotate ``kern.log.1``, ``kern.log.2.gz``: ``compress``, ``delaycompress``),
``messages`` (RHEL's ``*.info;mail.none;authpriv.none;cron.none /var/log/messages``; logrotate ``dateext``:
``messages-20260830``, uncompressed unless ``compress`` is set), and ``syslog`` (Ubuntu's ``*.*;auth,authpriv.none
-/var/log/syslog``, which holds the kernel's lines too) only when no ``kern.log*`` file could be read.
Rotation names as logrotate(8) writes them: ``NAME.N[.gz]`` and ``NAME-YYYYMMDD[.gz]`` (``dateext``).

Bounds: a plain file is read to its last :data:`FILE_LIMIT` bytes (from a line boundary:
:func:`forensics.tailcopy.seek_tail`), a ``.gz`` to its first :data:`FILE_LIMIT` decompressed bytes (at most
:data:`GZ_COMPRESSED_LIMIT` compressed bytes and :data:`GZ_TIME_LIMIT_S` seconds: a file of empty gzip members,
the limits of collectors/podlogs), all files together to :data:`TOTAL_LIMIT` bytes, newest first; one line is
kept to :data:`LINE_LIMIT` bytes. Nothing is followed: a symlink at the file's name is refused (an error
record), and the file is opened by :func:`forensics.hostfs.open_regular` (``O_NOFOLLOW``, a regular file only).
"""
from __future__ import annotations

import os
import re
import stat
import time
import zlib
from datetime import datetime, timezone

from forensics import hostfs, tailcopy
from forensics.artifact import Artifact, Status, from_oserror
from forensics.redact import TEXT_NOTE, redact_bytes
from forensics.source import CollectContext
from forensics.timeutil import iso_z

from .syslog import HEAD

LOG_DIR = "/var/log"
FAMILIES = ("kern.log", "messages", "syslog")
PREFIX = "kernlog"
FILE_LIMIT = 64 << 20           #: bytes of text read from one file (a .gz: decompressed)
TOTAL_LIMIT = 256 << 20         #: bytes of text read from all the files together
GZ_COMPRESSED_LIMIT = 64 << 20  #: compressed bytes read from one .gz
GZ_TIME_LIMIT_S = 10.0          #: seconds spent on one .gz
LINE_LIMIT = 16 << 10           #: bytes kept of one line (a printk record is at most 1024 bytes of text)
MAX_FILES = 20                  #: newest files read of each family
CHUNK = 1 << 20


def rotation_key(name: str, base: str) -> tuple | None:
    """Sort key of ``base`` and its rotations, oldest first (``base-YYYYMMDD`` by date, then ``base.N`` by
    N descending, then ``base``); None for any other name (``kern.log.bak``, ``messages.swp``)."""
    m = re.fullmatch(re.escape(base) + r"(?:\.(\d{1,4})|-(\d{8,10}))?(\.gz)?", name)
    if not m or (m.group(3) and not (m.group(1) or m.group(2))):
        return None
    if m.group(2):
        return (0, int(m.group(2)))
    return (1, -int(m.group(1))) if m.group(1) else (2, 0)


def stored_name(name: str) -> str:
    """The bundle path of the kernel lines of ``/var/log/<name>``: ``kernlog/kern.log.2.gz.kernel``."""
    return f"{PREFIX}/{name}.kernel"


def acquire(ctx: CollectContext) -> list[dict]:
    """Store the kernel lines of every file of :data:`FAMILIES` (the module docstring) and return one entry
    per file tried, for ``kernlog/files.json``: ``family, source, path`` (bundle path or None) and, for a
    file opened, ``mtime`` (ISO UTC), ``size``, ``gz``, ``read`` (bytes of text read), ``head_skipped``
    (bytes not read at the start), ``end_read`` (its end was read), ``lines``, ``kernel_lines``, ``first`` /
    ``last`` (time text of its first and last dated line, of any program). Every outcome is also a manifest
    record. Raises nothing for a missing, unreadable or odd host file."""
    names = ctx.listdir(LOG_DIR)
    entries: list[dict] = []
    left = [TOTAL_LIMIT]
    for base in FAMILIES:
        if base == "syslog" and any(e["family"] == "kern.log" and e["path"] for e in entries):
            break
        found = sorted({n for n in (names or [base]) if rotation_key(n, base)} or {base},
                       key=lambda n, b=base: rotation_key(n, b), reverse=True)
        for name in found[:MAX_FILES]:
            entries.append(_take(ctx, base, name, left))
        for name in found[MAX_FILES:]:
            ctx.writer.record(Artifact(None, f"{LOG_DIR}/{name}", Status.TRUNCATED, "filter",
                                       message=f"not read: only the newest {MAX_FILES} files of {base} are read"))
    return entries


def _take(ctx: CollectContext, base: str, name: str, left: list[int]) -> dict:
    path = f"{LOG_DIR}/{name}"
    entry = {"family": base, "source": path, "path": None}
    why = ("the time budget (--time-budget) was spent" if ctx.expired() else
           f"{TOTAL_LIMIT} bytes of kernel logs were already read (the bound over all files)" if left[0] <= 0 else None)
    if why:
        ctx.writer.record(Artifact(None, path, Status.TRUNCATED, "filter", message=f"not read: {why}"))
        return entry
    try:
        if stat.S_ISLNK(os.lstat(hostfs.resolve(ctx.root, LOG_DIR) / name).st_mode):
            ctx.writer.record(Artifact(None, path, Status.ERROR, "filter",
                                       message=f"symlink refused: {path} is a link, and links are not followed"))
            return entry
        f = hostfs.open_regular(ctx.root, path)
    except OSError as e:
        ctx.writer.record(from_oserror(path, "filter", e))
        return entry
    scan = _Scan()
    with f:
        st = os.fstat(f.fileno())
        gz = name.endswith(".gz")
        limit, skipped = min(FILE_LIMIT, left[0]), 0
        try:
            skipped = 0 if gz else tailcopy.seek_tail(f, limit)
            scan.feed(_gunzip(f, limit, scan, ctx.deadline) if gz else _plain(f, limit, scan, ctx.deadline))
        except OSError as e:  # EIO mid-file: what was read is kept
            scan.problem = f"reading stopped: {from_oserror(path, 'filter', e).message}"
    left[0] -= scan.read
    entry.update(mtime=_mtime(st), size=st.st_size, gz=gz,
                 read=scan.read, head_skipped=skipped, end_read=scan.end and not scan.problem, lines=scan.lines,
                 kernel_lines=len(scan.kept), first=scan.first, last=scan.last)
    entry["path"] = _store(ctx, entry, scan, limit)
    ctx.log(f"kernlog: {path}: {len(scan.kept)} kernel lines of {scan.lines}")
    return entry


def _mtime(st: os.stat_result) -> str | None:
    """The file's mtime as ISO UTC, or None for one datetime cannot hold (a forged year 60000)."""
    try:
        return iso_z(datetime.fromtimestamp(st.st_mtime, timezone.utc))
    except (OverflowError, OSError, ValueError):
        return None


def _store(ctx: CollectContext, entry: dict, scan: "_Scan", limit: int) -> str | None:
    """Write the kept lines of one file and its manifest record; the bundle path, or None when nothing
    could be read (recorded as an error)."""
    if scan.problem and not scan.read:
        ctx.writer.record(Artifact(None, entry["source"], Status.ERROR, "filter", message=scan.problem))
        return None
    data = b"".join(scan.kept)
    notes = [f"kernel lines only: {len(scan.kept)} of {scan.lines} lines read carry the `kernel:` tag; each is "
             "stored as `<line number in the file>\\t<line>` (the other programs' lines are not stored)",
             f"file mtime {entry['mtime']}, size {entry['size']} bytes (the year of `Mmm dd hh:mm:ss` times is "
             "taken from the mtime)"]
    if entry["gz"]:
        notes.append("decompressed from the .gz rotation")
    if entry["head_skipped"]:
        notes.append(tailcopy.note(entry["head_skipped"], limit) + "; line numbers count from there")
    if not scan.end:
        notes.append(f"truncated: only the first {scan.read} bytes{' (decompressed)' if entry['gz'] else ''} "
                     "were read")
    if scan.problem:
        notes.append(f"truncated: {scan.problem}")
    if scan.long:
        notes.append(f"{scan.long} lines longer than {LINE_LIMIT} bytes were cut to their first {LINE_LIMIT} bytes")
    if ctx.redact:
        data, said = redacted(data)
        notes += said
    cut = entry["head_skipped"] or not entry["end_read"]
    rel = stored_name(entry["source"].rsplit("/", 1)[1])
    ctx.writer.write_bytes(rel, data, entry["source"], "filter", tuple(notes),
                           status=Status.TRUNCATED if cut else Status.COLLECTED)
    return rel


def redacted(data: bytes) -> tuple[bytes, list[str]]:
    """``data`` with credentials replaced (:func:`forensics.redact.redact_bytes`) and the note saying in how
    many lines (none when nothing changed)."""
    out = redact_bytes(data) if data else data
    changed = sum(a != b for a, b in zip(data.split(b"\n"), out.split(b"\n")))
    return out, [f"credentials redacted in {changed} lines ({TEXT_NOTE})"] if changed else []


class _Scan:
    """Lines fed as chunks of bytes: counted, kernel ones kept as ``<n>\\t<line>\\n``; ``first``/``last``
    the time text of the first and last dated line; ``end`` whether the source's end was reached;
    ``problem`` why reading stopped early (None: it did not)."""

    def __init__(self):
        self.kept: list[bytes] = []
        self.lines = self.long = self.read = 0
        self.first = self.last = self.problem = None
        self.end = False

    def feed(self, chunks) -> None:
        carry, skipping = b"", False
        for chunk in chunks:
            if skipping:  # the rest of a line over LINE_LIMIT
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk, skipping = chunk[nl + 1:], False
                self._line(carry)
                carry = b""
            parts = (carry + chunk).split(b"\n")
            carry = parts.pop()
            for line in parts:
                self._line(line)
            if len(carry) > LINE_LIMIT:
                carry, skipping = carry[:LINE_LIMIT + 1], True
        if carry:
            self._line(carry)

    def _line(self, line: bytes) -> None:
        self.lines += 1
        if len(line) > LINE_LIMIT:
            line = line[:LINE_LIMIT]
            self.long += 1
        m = HEAD.match(line)
        if m is None:
            return
        self.last = (m.group("iso") or m.group("bsd")).decode("ascii")
        self.first = self.first or self.last
        if m.group("tag") == b"kernel":
            self.kept.append(b"%d\t%s\n" % (self.lines, line))


def _plain(f, limit: int, scan: _Scan, deadline: float | None):
    """Chunks of the plain file ``f`` (positioned) up to ``limit`` bytes or until ``deadline``; sets
    ``scan.read``, ``scan.end`` and ``scan.problem``."""
    while scan.read < limit:
        if deadline is not None and time.monotonic() >= deadline:
            scan.problem = "stopped: the time budget (--time-budget) ran out"
            return
        b = f.read(min(CHUNK, limit - scan.read))
        if not b:
            scan.end = True
            return
        scan.read += len(b)
        yield b
    scan.end = not f.read(1)


def _gunzip(f, limit: int, scan: _Scan, deadline: float | None):
    """Decompressed chunks of every gzip member of ``f`` up to ``limit`` bytes, reading at most
    :data:`GZ_COMPRESSED_LIMIT` compressed bytes for at most :data:`GZ_TIME_LIMIT_S` seconds (or until
    ``deadline``); sets ``scan.read``, ``scan.end`` and ``scan.problem``."""
    until = time.monotonic() + GZ_TIME_LIMIT_S
    until = until if deadline is None else min(until, deadline)
    d, raw_total, raw, fed = zlib.decompressobj(wbits=31), 0, b"", False
    while True:
        if time.monotonic() >= until:
            scan.problem = "stopped: the time allowed for this file (or the run's time budget) ran out"
            return
        if not raw:
            raw = f.read(1 << 16)
            raw_total += len(raw)
            if not raw:  # the end of the file: whole when no member was left half read
                scan.end = not fed
                scan.problem = None if scan.end else f"the gzip stream ends early, after {scan.read} bytes"
                return
            if raw_total > GZ_COMPRESSED_LIMIT:
                scan.problem = f"stopped after reading {GZ_COMPRESSED_LIMIT} compressed bytes"
                return
        try:
            out = d.decompress(raw, limit - scan.read)
        except zlib.error as e:
            scan.problem = f"not a gzip stream after {scan.read} decompressed bytes ({e})"
            return
        raw, fed = d.unconsumed_tail, True
        if d.eof:  # the next member, if any
            raw, d, fed = d.unused_data, zlib.decompressobj(wbits=31), False
        scan.read += len(out)
        yield out
        if scan.read >= limit:
            scan.end = not raw and not fed and not f.read(1)
            return
