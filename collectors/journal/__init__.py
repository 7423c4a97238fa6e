"""The systemd journal: acquire the entries that explain a daemon-reload, and read them back as events.

Acquisition opens the host's journal files read-only with libsystemd (``systemd.journal.Reader`` on
file descriptors obtained through :mod:`forensics.hostfs`), probing each file alone first, because
``Reader(path=)`` silently skips a bad file and ``Reader(files=[...])`` fails whole if one is bad
(../shared/research/formats.md §1.1). Only selected entries are stored, found with journal field
matches (``_PID=1``, ``_SYSTEMD_UNIT=``, ``SYSLOG_IDENTIFIER=``) and time seeks, never by reading
every entry's text. What each message means lives in :mod:`collectors.journal.wording`.

Bundle files (all under ``journal/``):

- ``files.json``: one record per journal file: ``source``, ``size``, ``sha256``, ``header`` (flags,
  state, sizes, head/tail time), ``opened``, ``error``, ``errno``, and for a file that opened with
  entries ``first_usec`` / ``last_usec`` (its first and last entry, µs UTC, as read at the probe);
  ``hash_error`` when the file opened but could not be read to its end for the hash.
- ``entries.jsonl``: one selected entry per line with all its fields as the journal stores them
  (text as str, non-UTF-8 as ``{"base64": ...}``, repeated fields as lists; unless ``--no-redact``,
  with the credentials :func:`forensics.redact.redact_bytes` recognises replaced, the same policy as
  for pod logs), ``__CURSOR``,
  ``__REALTIME_TIMESTAMP`` and ``__MONOTONIC_TIMESTAMP`` as int µs (UTC epoch / since boot), and
  ``_GF_SELECTED_BY``: the rules that selected it (``pid1``, ``unit``, ``requester``, ``nvml``,
  ``healthy``, ``boot``, ``coverage``).
- ``boots.json``: ``[{boot_id, first, last, first_usec, last_usec, first_cursor, last_cursor}]``.
- ``coverage.json``: first/last entry over all files (µs, ISO UTC, cursor), ``since``,
  ``files_found``, ``files_read``, ``files_failed``, ``method``, ``problems``.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import re
import resource
import stat
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone

from systemd import journal as _sdj

from forensics import hostfs
from forensics.redact import TEXT_NOTE, redact_bytes, redact_text
from forensics.artifact import Artifact, Status, errno_name, from_oserror
from forensics.source import CollectContext, Option, Reading
from forensics.timeutil import from_usec, iso_z, parse_iso
from . import wording as w


def _since(text: str, _values) -> datetime:
    try:
        return parse_iso(text)
    except ValueError as e:
        raise ValueError(f"--since: {e}") from None


def _existing(paths: list[str], _values) -> list[str]:
    for p in paths:
        if not os.path.exists(p):
            raise ValueError(f"--journal-dir {p}: no such file or directory")
    return paths


NAME = "journal"
#: extra journal directories or files (paths on this machine, not under --root)
JOURNAL_DIRS = Option("--journal-dir", "journal_dirs", "extra journal directory or file to read (besides those "
                      "under --root)", metavar="DIR", action="append", default=(), check=_existing,
                      record=lambda ps: [str(p) for p in ps])
#: a datetime (UTC when naive): entries before it are not scanned
SINCE = Option("--since", "since", "only scan journal entries at or after this ISO 8601 time", check=_since,
               record=iso_z)
OPTIONS = [JOURNAL_DIRS, SINCE]

HOST_DIRS = ("/var/log/journal", "/run/log/journal")
FILES, ENTRIES, BOOTS, COVERAGE = ("journal/files.json", "journal/entries.jsonl", "journal/boots.json",
                                   "journal/coverage.json")
METHOD = "journal-reader"
MACHINE_ID = re.compile(r"[0-9a-f]{32}")
CHUNK = 2 << 20
DATA_THRESHOLD = 1 << 20  # libsystemd cuts field values longer than this (default 64 KiB)


@dataclass(frozen=True)
class _File:
    source: str  # as the manifest shows it: the host path, or the --journal-dir path
    root: str    # read under this root with forensics.hostfs
    path: str


def acquire(ctx: CollectContext) -> None:
    """Select the reload-related journal entries of the host under ``ctx.root`` (and of each
    :data:`JOURNAL_DIRS` directory or file) into ``journal/`` of ``ctx.writer``'s bundle.

    Records every journal file it could not open as an ``error`` / ``unreadable`` artifact, and an
    ``absent`` one for ``/var/log/journal`` when no journal exists. Raises nothing for bad input.
    """
    files, dirs, refused = _find(ctx)
    if not files and not refused:
        where = ", ".join(dirs) if dirs else " or ".join(HOST_DIRS)
        ctx.writer.record(Artifact(None, HOST_DIRS[0], Status.ABSENT, METHOD,
                                   message=f"no journal files (*.journal, *.journal~) in {where}"))
    if not files:
        return
    records, good, spans = [], [], []
    for f in files:
        rec, fh, failed = _probe(f)
        records.append(rec)
        if fh:
            good.append(fh)
            spans.append((rec.get("first_usec"), rec.get("last_usec"), _final(f, rec)))
        else:
            ctx.writer.record(failed)
    ctx.log(f"journal: {len(files)} files, {len(files) - len(good)} not readable by this libsystemd")
    # the SHA-256 of every opened file (a gigabyte on a big node) is taken on the other core while
    # the entries are selected: os.pread and hashlib let go of the GIL
    opened = [rec for rec in records if rec["opened"]]
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="journal-hash") as pool:
            hashed = pool.submit(_hash_all, opened, [fh.fileno() for fh in good])
            try:
                src = _ReaderSource([fh.fileno() for fh in good], spans) if good else _fallback(ctx, files)
                if src is not None:
                    src.deadline = ctx.deadline
                    with closing(src):
                        _store(ctx, src, ", ".join(dirs), len(files), len(files) - len(good) if good else 0)
            except OSError as e:
                ctx.writer.record(Artifact(None, ", ".join(dirs), Status.ERROR, METHOD, errno=e.errno,
                                           message=f"opening the readable journal files together failed: {e}"))
            hashed.result()
    finally:  # the pool has waited for the hashes; files.json is written even when selection failed
        for fh in good:
            fh.close()
        ctx.writer.write_json(FILES, records, source=", ".join(dirs), method=METHOD)


# -- finding and probing files ---------------------------------------------------------------------
def _is_journal(name: str) -> bool:
    return name.endswith(".journal") or name.endswith(".journal~")


def _find(ctx) -> tuple[list[_File], list[str], bool]:
    """Journal files under the host's journal directories and ``--journal-dir`` paths, each once;
    the directories read; whether a directory could not be listed (recorded as an artifact)."""
    places = [(str(ctx.root), d, d, False) for d in HOST_DIRS]
    places += [("/", os.path.abspath(p), str(p), True) for p in ctx.value(JOURNAL_DIRS)]
    found, dirs, seen, refused = [], [], set(), False

    def add(root, path, shown):
        try:
            st = os.stat(hostfs.resolve(root, path))
        except OSError:
            st = None  # let _probe report it
        key = (st.st_dev, st.st_ino) if st else (root, path)
        if key not in seen:
            seen.add(key)
            found.append(_File(shown, root, path))

    for root, path, shown, given in places:
        try:
            real = hostfs.resolve(root, path)
            if given and stat.S_ISREG(os.stat(real).st_mode):
                dirs.append(shown)
                add(root, path, shown)
                continue
            names = os.listdir(real)
        except OSError as e:
            if given or e.errno not in (errno.ENOENT, errno.ENOTDIR):  # a missing host directory is normal
                refused = refused or e.errno not in (errno.ENOENT, errno.ENOTDIR)
                ctx.writer.record(from_oserror(shown, METHOD, e))
            continue
        dirs.append(shown)
        for name in sorted(names):
            sub = f"{path}/{name}"
            if _is_journal(name):
                add(root, sub, f"{shown}/{name}")
            elif MACHINE_ID.fullmatch(name) and os.path.isdir(hostfs.resolve(root, sub)):
                try:
                    inner = sorted(os.listdir(hostfs.resolve(root, sub)))
                except OSError as e:
                    refused = True
                    ctx.writer.record(from_oserror(f"{shown}/{name}", METHOD, e))
                    continue
                for n in inner:
                    if _is_journal(n):
                        add(root, f"{sub}/{n}", f"{shown}/{name}/{n}")
    return found, dirs, refused


def _probe(f: _File):
    """Hash ``f`` and open it alone. Returns ``(record, open file or None, failed Artifact or None)``."""
    rec = {"source": f.source, "size": None, "sha256": None, "header": None, "opened": False,
           "error": None, "errno": None}
    try:
        fh = hostfs.open_regular(f.root, f.path)
    except OSError as e:
        a = from_oserror(f.source, METHOD, e)
        try:
            rec["size"] = os.stat(hostfs.resolve(f.root, f.path)).st_size
        except OSError:
            pass
        rec.update(error=a.message, errno=a.errno)
        return rec, None, a
    try:
        size = os.fstat(fh.fileno()).st_size
        rec.update(size=size, header=w.header(os.pread(fh.fileno(), 512, 0), size))
        dup = os.dup(fh.fileno())
        try:
            r = _sdj.Reader(files=[dup])  # owns dup from here on
        except BaseException:
            os.close(dup)
            raise
        with r:
            r.seek_head()
            if r._next():
                r._get_all()
                rec["first_usec"] = r._get_realtime()
                r.seek_tail()
                rec["last_usec"] = r._get_realtime() if r._previous() else None
        rec["opened"] = True
        return rec, fh, None
    except (OSError, ValueError) as e:
        try:
            rec["size"], rec["sha256"] = _hash(fh.fileno())
        except OSError:
            pass
        fh.close()
        code = getattr(e, "errno", None)
        if code in (errno.EPERM, errno.EACCES):
            a = from_oserror(f.source, METHOD, e)
        else:
            a = Artifact(None, f.source, Status.ERROR, METHOD, errno=code,
                         message=w.why_unreadable(e, rec["header"], rec["size"]))
        rec.update(error=a.message, errno=a.errno)
        return rec, None, a


def _final(f: _File, rec: dict) -> bool:
    """Whether no entry can be added to ``f`` any more: it is archived, or it has a rotated name
    (``system@...journal``, ``...journal~``; journald and journal-remote only write the file with
    the plain name)."""
    name = os.path.basename(f.path)
    return (rec.get("header") or {}).get("state") == "archived" or "@" in name or name.endswith("~")


def _hash(fd: int) -> tuple[int, str]:
    """``(bytes read, SHA-256 hex)`` of the file open at ``fd``, read with pread (the descriptor's
    offset is left alone). Raises ``OSError`` when a read fails."""
    h, off, buf = hashlib.sha256(), 0, bytearray(CHUNK)
    view = memoryview(buf)
    while n := os.preadv(fd, [buf], off):
        h.update(view[:n])
        off += n
    return off, h.hexdigest()


def _hash_all(records: list[dict], fds: list[int]) -> None:
    """Set ``size`` and ``sha256`` of each record from its file; a read error is kept in the
    record's ``hash_error`` (the file's entries were still read)."""
    for rec, fd in zip(records, fds):
        try:
            rec["size"], rec["sha256"] = _hash(fd)
        except OSError as e:
            rec["hash_error"] = f"{errno_name(e.errno)}: {e.strerror or e}"


# -- reading entries: libsystemd, or the node's own journalctl ---------------------------------------
def _value(v: bytes):
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(v).decode()}


class _Lazy:
    """The entry a Reader stands on, read field by field (valid until the Reader moves on)."""

    def __init__(self, r, realtime: int):
        self.r, self.d = r, {"__REALTIME_TIMESTAMP": realtime}

    def get(self, field_: str, default=None):
        if field_ not in self.d:
            try:
                self.d[field_] = _value(self.r._get(field_))
            except KeyError:
                self.d[field_] = None
        return default if self.d[field_] is None else self.d[field_]


class _Pages:
    """Keeps the journal files' pages that libsystemd has mapped from piling up in this process.

    libsystemd maps journal files in 8 MiB windows and keeps up to 64 of them; a pass over most of
    a big journal touches most of its pages, and every touched page counts in the collector's RSS
    (about 300 MB on a 1.2 GB journal) although the kernel could drop it at will. When the
    process's resident file pages (``shared`` in /proc/self/statm, proc(5)) have grown by
    :data:`LIMIT`, :meth:`check` calls ``madvise(MADV_DONTNEED)`` (madvise(2)) on the mappings of
    the journal files (found in /proc/self/maps by device and inode): for a read-only shared file
    mapping this only unmaps the pages from this process; the page cache, the files and libsystemd's
    view are untouched, and a later read faults the page back in. Does nothing where /proc or
    madvise cannot be used."""

    LIMIT = 8 << 20

    def __init__(self, fds: list[int]):
        self.keys = set()
        for fd in fds:
            st = os.fstat(fd)
            self.keys.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self.madvise = libc.madvise
        except (OSError, AttributeError):
            self.madvise = None
        self.page = os.sysconf("SC_PAGE_SIZE")
        try:
            self.statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.statm, self.madvise = None, None
        self.base = self._resident()
        self.dropped = 0  #: times the pages were dropped (for the bench and the tests)

    def _resident(self) -> int:
        if self.statm is None:
            return 0
        try:
            return int(os.pread(self.statm, 128, 0).split()[2]) * self.page
        except (OSError, ValueError, IndexError):
            return 0

    def close(self) -> None:
        if self.statm is not None:
            os.close(self.statm)
            self.statm = None

    def check(self, force: bool = False) -> None:
        """Drop the journal pages when the resident file pages have grown past the limit (or now,
        with ``force``)."""
        if self.madvise is None or (not force and self._resident() - self.base < self.LIMIT):
            return
        try:
            with open("/proc/self/maps", "rb") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) < 5:
                        continue
                    major, _, minor = parts[3].partition(b":")
                    if (int(major, 16), int(minor, 16), int(parts[4])) in self.keys:
                        start, _, end = parts[0].partition(b"-")
                        self.madvise(int(start, 16), int(end, 16) - int(start, 16), 4)  # MADV_DONTNEED
        except (OSError, ValueError):
            return
        self.dropped += 1
        self.base = self._resident()


class _ReaderSource:
    """Entries through libsystemd, on descriptors of files already probed one by one; the pages
    it maps are kept in check by :class:`_Pages`."""

    method = METHOD
    deadline: float | None = None  #: time.monotonic() bound; scan raises TimeoutError past it
    CHECK_EVERY = 64  #: entries between two looks at the resident file pages (a pread of /proc/self/statm)

    def __init__(self, fds: list[int], spans: list[tuple] | None = None):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if 3 * len(fds) + 64 > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 3 * len(fds) + 64), hard))
        self.fds, self.spans = list(fds), spans
        self.all = self.r = self._open(self.fds)  # raises OSError when the files cannot be read together
        # and a reader of its own for each file, opened now: libsystemd refuses to open a file that
        # has been unlinked (EIDRM), and journald deletes archived files (vacuum) whenever it rotates
        self.one: dict[int, object] = {}
        try:
            for fd in self.fds:
                self.one[fd] = self._open([fd])
        except BaseException:
            self.close()
            raise
        self.pages = _Pages(fds)

    @staticmethod
    def _open(fds: list[int]):
        dups = [os.dup(fd) for fd in fds]
        try:
            r = _sdj.Reader(files=dups)  # owns the dups from here on
        except BaseException:
            for d in dups:
                os.close(d)
            raise
        r.data_threshold = DATA_THRESHOLD
        return r

    def close(self) -> None:
        for r in (self.all, *self.one.values()):
            r.close()
        if hasattr(self, "pages"):
            self.pages.close()

    def _holding(self, start: int, end: int) -> list[int]:
        """The files that may hold entries from ``start`` to ``end`` (µs): a final file (see
        :func:`_final`) by its first and last entry, a file that may still be written from its
        first entry on; any file whose last entry is older than its first (the clock went back
        within it: older journald releases and journal-remote append a boot whose clock starts
        behind to the same file)."""
        if not self.spans:
            return self.fds
        return [fd for fd, (first, last, final) in zip(self.fds, self.spans)
                if first is None or last is None or first > last or
                (first <= end and (not final or last >= start))]

    def _entry(self) -> dict:
        e = {k: [_value(x) for x in v] if isinstance(v, list) else _value(v) for k, v in self.r._get_all().items()}
        e["__REALTIME_TIMESTAMP"] = self.r._get_realtime()
        e["__MONOTONIC_TIMESTAMP"] = self.r._get_monotonic()[0]
        e["__CURSOR"] = self.r._get_cursor()
        return e

    def _match(self, groups) -> None:
        r = self.r
        r.flush_matches()
        for i, group in enumerate(groups):
            if i:
                r.add_disjunction()
            for field_, value in group:
                r.add_match(f"{field_}={value}")

    def scan(self, groups, start=None, end=None):
        """Entries matching any of ``groups`` (each: ``(field, value)`` pairs, same field ORed,
        different fields ANDed) from ``start`` to ``end`` (µs). Each is a :class:`_Lazy` view that
        reads a field only when asked: reading every field of every PID 1 line costs about five
        times as much as reading its MESSAGE.

        Entries come file by file, each file in journal order (nothing that scans depends on the
        order across files), through the file's own reader: the seeks of a reader over all files
        touch pages in every file. The pages a pass touched are let go (:class:`_Pages`) before
        the next. A time window reads only the files that may hold it (:meth:`_holding`)."""
        self.pages.check(force=True)
        for fd in self._holding(start, end) if start is not None and end is not None else self.fds:
            self.r = self.one[fd]
            try:
                yield from self._walk(groups, start, end)
            finally:
                self.r = self.all

    def _walk(self, groups, start, end):
        r = self.r
        self._match(groups)
        r.seek_realtime(start) if start is not None else r.seek_head()
        n = 0
        while r._next():
            n += 1
            if n % self.CHECK_EVERY == 0:
                self.pages.check()
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    raise TimeoutError("the collection's time budget was spent (--time-budget)")
            t = r._get_realtime()
            if end is not None and t > end:
                return
            yield _Lazy(r, t)

    def full(self) -> dict:
        """The whole entry :meth:`scan` stands on (scan yields only the fields selection needs)."""
        return self._entry()

    def cursor(self) -> str:
        """The cursor of the entry :meth:`scan` stands on."""
        return self.r._get_cursor()

    def unique(self, field_: str) -> list[str]:
        return sorted(v.decode("utf-8", "replace") for v in _sdj._Reader.query_unique(self.all, field_))

    def edge(self, group=(), last=False) -> dict | None:
        self.pages.check(force=True)
        self.r = r = self.all
        self._match([group] if group else [])
        r.seek_tail() if last else r.seek_head()
        return self._entry() if (r._previous() if last else r._next()) else None


class _JournalctlSource:
    """Entries through the node's own ``journalctl -o json`` (for files this libsystemd cannot read)."""

    method = "journalctl"

    def __init__(self, argv: list[str], paths: list[str], tmpdir=None):
        self.base = argv + [f"--file={p}" for p in paths] + ["--no-pager", "--all"]
        self.tmpdir = tmpdir  #: where journalctl's stderr is kept (the bundle being written; never the node's /tmp)

    def _lines(self, args, first_only=False):
        with tempfile.TemporaryFile(dir=self.tmpdir) as err:
            p = subprocess.Popen(self.base + args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
            try:
                for line in p.stdout:
                    yield line
                    if first_only:
                        p.kill()
                        break
            finally:
                p.stdout.close()
                rc = p.wait()
            if rc not in (0, -9):
                err.seek(0)
                raise OSError(f"journalctl exited {rc}: {err.read(500).decode(errors='replace').strip()}")

    def _entry(self, line: bytes) -> dict:
        e = {}
        for k, v in json.loads(line).items():
            if k in ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP"):
                e[k] = int(v)
            elif k == "__CURSOR" or not k.startswith("__"):
                e[k] = self._conv(v)
        return e

    def _conv(self, v):
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            return {"base64": base64.b64encode(bytes(v)).decode()}
        return [self._conv(x) for x in v] if isinstance(v, list) else v

    @staticmethod
    def _matches(groups):
        out = []
        for i, group in enumerate(groups):
            out += (["+"] if i else []) + [f"{f}={v}" for f, v in group]
        return out

    def scan(self, groups, start=None, end=None):
        args = ["-o", "json"]
        args += ["--since", f"@{start // 10**6}.{start % 10**6:06d}"] if start is not None else []
        args += ["--until", f"@{end // 10**6}.{end % 10**6:06d}"] if end is not None else []
        for line in self._lines(args + self._matches(groups)):
            self._last = self._entry(line)
            yield self._last

    def full(self) -> dict:
        return self._last

    def cursor(self) -> str:
        return self._last["__CURSOR"]

    def close(self) -> None:
        pass

    def unique(self, field_: str) -> list[str]:
        values = (line.rstrip(b"\n") for line in self._lines(["-F", field_]))
        return sorted(v.decode("utf-8", "replace") for v in values if v)

    def edge(self, group=(), last=False) -> dict | None:
        args = ["-o", "json"] + (["-n", "1"] if last else []) + self._matches([group] if group else [])
        lines = list(self._lines(args, first_only=not last))
        return self._entry(lines[-1]) if lines else None


def _fallback(ctx, files: list[_File]):
    """A journalctl source when no file opened here; records why when there is none."""
    jc = next((p for p in ("/usr/bin/journalctl", "/bin/journalctl") if hostfs.exists(ctx.root, p)), None)
    why = None
    if jc is None:
        why = "no journalctl on the node (/usr/bin/journalctl, /bin/journalctl) to fall back on"
    elif ctx.live:
        return _JournalctlSource([str(hostfs.resolve(ctx.root, jc))],
                                 [str(hostfs.resolve(f.root, f.path)) for f in files], getattr(ctx.writer, "dir", None))
    elif os.geteuid() != 0:
        why = "running the node's journalctl under chroot needs root"
    else:
        host = [f.path for f in files if f.root == str(ctx.root)]
        if host:
            return _JournalctlSource(["chroot", str(ctx.root), jc], host, getattr(ctx.writer, "dir", None))
        why = "the unreadable files are outside --root, so the node's journalctl cannot reach them"
    ctx.writer.record(Artifact(None, ENTRIES, Status.ERROR, METHOD,
                               message=f"none of the {len(files)} journal files could be opened, and {why}"))
    return None


# -- selecting and storing -------------------------------------------------------------------------
def _store(ctx, src, source: str, n_files: int, n_failed: int) -> None:
    given = ctx.value(SINCE)
    since_dt = given.replace(tzinfo=given.tzinfo or timezone.utc) if isinstance(given, datetime) else None
    since = int(since_dt.timestamp() * 1_000_000) if since_dt else None
    problems: list[str] = []
    redact = ctx.redact
    with w.Spool(dir=getattr(ctx.writer, "dir", None)) as spool:  # in the bundle being written
        try:
            sel, boots, first, last = w.select(src, since, problems, spool)
        except (OSError, subprocess.SubprocessError) as e:
            ctx.writer.record(Artifact(None, source, Status.ERROR, src.method,
                                       message=f"reading the journal failed: {e}"))
            return
        with ctx.writer.create(ENTRIES, source=source, method=src.method,
                               notes=_notes(since_dt, problems, redact)) as out:
            for e in sel.entries():
                out.write(json.dumps(redact_entry(e) if redact else e, sort_keys=True) + "\n")
    ctx.writer.write_json(BOOTS, boots, source=source, method=src.method)
    ctx.writer.write_json(COVERAGE, {**w.edge_record(first, "first"), **w.edge_record(last, "last"),
                                     "since": iso_z(since_dt),
                                     "files_found": n_files, "files_read": n_files - n_failed,
                                     "files_failed": n_failed,
                                     "method": src.method, "problems": problems},
                          source=source, method=src.method)


def _notes(since_dt, problems: list[str], redact: bool) -> list[str]:
    notes = ["selected by journal matches: PID 1 reload/reexec/SIGHUP/banner lines and start/stop lines of units "
             "that matter; entries from the requesting PID, package-manager units and sudo systemctl "
             f"{w.BEFORE_US // 10**6} s before to {w.AFTER_US // 10**6} s after each reload; NVML/CUDA errors and "
             "healthy probe lines of kubelet, containerd, docker, nvidia* and dcgm* units; first and last entry "
             "of each boot and of the journal"]
    if since_dt is not None:
        notes.append(f"entries filtered to {iso_z(since_dt)} and later")
    if any("time budget" in p for p in problems):
        notes.append("truncated: the time budget ran out while scanning; entries after that point were not read")
    if redact:
        notes.append(f"credentials redacted in field values: {TEXT_NOTE}")
    return notes


def redact_entry(e: dict) -> dict:
    """A stored entry with credentials in its field values redacted (the pod-log policy,
    :func:`forensics.redact.redact_text` without the ``-p`` rule), base64 values included;
    ``__`` fields (cursor, timestamps) and ``_GF_SELECTED_BY`` are left as they are. Raises nothing."""
    def one(v):
        if isinstance(v, str):
            return redact_text(v, p_flag=False)
        if isinstance(v, list):
            return [one(x) for x in v]
        if isinstance(v, dict) and isinstance(v.get("base64"), str):
            try:
                raw = base64.b64decode(v["base64"])
            except ValueError:
                return v
            return {"base64": base64.b64encode(redact_bytes(raw)).decode()}
        return v
    return {k: v if k.startswith("__") or k == "_GF_SELECTED_BY" else one(v) for k, v in e.items()}


# -- reading the bundle back ---------------------------------------------------------------------
def read(bundle, node) -> Reading:
    """Turn the bundle's ``journal/`` files into events (kinds ``journal.*`` in
    :data:`forensics.events.KINDS`), the journal's coverage, and facts: ``systemd_version`` and
    ``systemd_version_basis``, ``boots`` (``[{boot_id, first, last}]``), ``journal_first``,
    ``journal_last`` (ISO UTC). Reads only the bundle; ``node`` is not needed by this source.

    Never raises for bad content: a malformed line or file is skipped and reported in
    ``Reading.problems``.
    """
    out = Reading()
    cov, boots = _load(bundle, COVERAGE, out, dict), _load(bundle, BOOTS, out, list)
    for f in _load(bundle, FILES, out, list):
        if isinstance(f, dict) and not f.get("opened"):
            out.problems.append({"artifact": FILES,
                                 "message": f"{f.get('source')} was not read: {f.get('error')}"})
    lines, pid1 = {}, []
    for n, e in _stored(bundle, out):
        rules = e.get("_GF_SELECTED_BY") if isinstance(e.get("_GF_SELECTED_BY"), list) else []
        at = from_usec(e["__REALTIME_TIMESTAMP"])
        evidence = {"artifact": ENTRIES, "cursor": e["__CURSOR"], "line": n}
        lines[e["__CURSOR"]] = n
        if "pid1" in rules:
            pid1.append((at, e, evidence))
        out.events += w.entry_events(at, e, rules, evidence)
    events, version = w.manager_events(sorted(pid1, key=lambda x: (x[0], x[2]["line"])))
    out.events += events + w.boot_events(boots, lines, out.problems)
    out.events.sort(key=lambda ev: ev.at)
    refused = [f"{a.source}: {a.status.value}" + (f" ({a.message})" if a.message else "")
               for a in bundle.artifacts() if a.method in (METHOD, "journalctl") and not a.path]
    out.coverage.append(w.coverage(cov, refused, out.problems))
    out.facts.update({"systemd_version": version[0] if version else None,
                      "systemd_version_basis": version[1] if version else None,
                      "boots": [{k: b.get(k) for k in ("boot_id", "first", "last")}
                                for b in boots if isinstance(b, dict)],
                      "journal_first": cov.get("first"), "journal_last": cov.get("last")})
    return out


def _load(bundle, rel: str, out: Reading, kind: type):
    if not bundle.find(rel):
        return kind()
    try:
        data = json.loads(bundle.path(rel).read_text())
        if isinstance(data, kind):
            return data
        out.problems.append({"artifact": rel, "message": f"expected a JSON {kind.__name__}"})
    except (OSError, ValueError, RecursionError) as e:
        out.problems.append({"artifact": rel, "message": f"unreadable: {e}"})
    return kind()


def _stored(bundle, out: Reading):
    """``(line number, entry)`` for each well-formed line of entries.jsonl; others are reported."""
    if not bundle.find(ENTRIES):
        return
    try:
        with open(bundle.path(ENTRIES), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                try:
                    e = json.loads(line)
                    if not (isinstance(e, dict) and isinstance(e.get("__REALTIME_TIMESTAMP"), int)
                            and isinstance(e.get("__CURSOR"), str)):
                        raise ValueError("not an entry with __REALTIME_TIMESTAMP and __CURSOR")
                    from_usec(e["__REALTIME_TIMESTAMP"])
                except (ValueError, OverflowError, OSError, RecursionError) as err:
                    out.problems.append({"artifact": ENTRIES, "line": n, "message": f"line {n} skipped: {err}"})
                    continue
                yield n, e
    except OSError as err:
        out.problems.append({"artifact": ENTRIES, "message": f"unreadable: {err}"})
