"""Reading entries: through libsystemd on the probed files, or through the node's own journalctl.

Both sources offer what :func:`collectors.journal.selection.select` needs: ``scan`` (entries
matching journal field matches, optionally within a time window), ``full`` and ``cursor`` (of the
entry a scan stands on), ``unique`` (the values of a field) and ``edge`` (the first or last entry,
optionally of a match). :class:`_ReaderSource` reads the files :mod:`collectors.journal.files`
opened, file by file, and keeps the pages libsystemd maps in check (:class:`_Pages`), and reads past
a damage where libsystemd stops (:meth:`_ReaderSource._salvage`); :class:`collectors.journal.journalctl._JournalctlSource`
runs ``journalctl -o json`` (journalctl(1)) for files this process's libsystemd cannot read.
"""
from __future__ import annotations

import base64
import os
import re
import resource
import time

import collectors.journal.unique as unique
import collectors.journal.damage as damage
from .files import METHOD, sdj
from .pages import _Pages

DATA_THRESHOLD = 1 << 20  # libsystemd cuts field values longer than this (default 64 KiB)


def _value(v: bytes):
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(v).decode()}


def cursor_fields(cursor: str) -> dict:
    """The parts of a journal cursor (``s=``, ``i=``, ``b=``, ``m=``, ``t=``, ``x=``: sd_journal_get_cursor(3);
    hex text) by their letter."""
    return dict(p.split("=", 1) for p in cursor.split(";") if "=" in p)


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


class _ReaderSource:
    """Entries through libsystemd, on descriptors of files already probed one by one; the pages
    it maps are kept in check by :class:`_Pages`."""

    method = METHOD
    deadline: float | None = None  #: time.monotonic() bound; scan raises TimeoutError past it
    CHECK_EVERY = 64  #: entries between two looks at the resident file pages (a pread of /proc/self/statm)
    drop_at_scan = True  #: let the pages go before each scan (False for a reader opened for one scan)
    #: at most this many distinct MESSAGE values holding a text are matched in :meth:`scan_texts`
    #: (libsystemd tries every term of an OR at each step); past it, every entry is read
    MAX_VALUES = 4096
    TERMS = 16  #: MESSAGE values matched in one walk of :meth:`_where`
    MAX_FOUND = 20_000  #: entries found by value past which :meth:`scan_texts` reads every entry

    def __init__(self, fds: list[int], spans: list[tuple] | None = None):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if 3 * len(fds) + 64 > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 3 * len(fds) + 64), hard))
        self.fds, self.spans = list(fds), spans
        self.damage: list[dict] = []  #: :mod:`collectors.journal.damage` records of the files walked past damage
        self.all = self.r = self._open(self.fds)  # raises OSError when the files cannot be read together
        # and a reader of its own for each file, opened now: libsystemd refuses to open a file that
        # has been unlinked (EIDRM), and journald deletes archived files (vacuum) whenever it rotates
        self.one: dict[int, object] = {self.fds[0]: self.all} if len(self.fds) == 1 else {}
        try:
            for fd in self.fds if len(self.fds) > 1 else ():
                self.one[fd] = self._open([fd])
        except BaseException:
            self.close()
            raise
        self.pages = _Pages(fds)
        #: a reader of one file keeps a descriptor of its own for :mod:`collectors.journal.unique`
        #: (the caller's may be closed once the reader is open: a copy of a deleted file)
        self.fd = os.dup(self.fds[0]) if len(self.fds) == 1 else None

    @staticmethod
    def _open(fds: list[int]):
        dups = [os.dup(fd) for fd in fds]
        try:
            r = sdj().Reader(files=dups)  # owns the dups from here on
        except BaseException:
            for d in dups:
                os.close(d)
            raise
        r.data_threshold = DATA_THRESHOLD
        return r

    def close(self) -> None:
        for r in {id(r): r for r in (self.all, *self.one.values())}.values():
            r.close()
        if hasattr(self, "pages"):
            self.pages.close()
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)
            self.fd = None

    def _holding(self, start: int, end: int) -> list[int]:
        """The files that may hold entries from ``start`` to ``end`` (µs): a final file (see
        :func:`collectors.journal.files._final`) by its first and last entry, a file that may still be written from its
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

    def _match(self, groups, also: list[bytes] = ()) -> None:
        """Match any of ``groups`` (see :meth:`scan`), each ANDed with ``also`` ORed (``FIELD=value``
        data of one field), when given."""
        r = self.r
        r.flush_matches()
        for i, group in enumerate(groups or ([()] if also else [])):
            if i:
                r.add_disjunction()
            for v in also:
                r.add_match(v)
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
        self.pages.check(force=self.drop_at_scan)
        for fd in self._holding(start, end) if start is not None and end is not None else self.fds:
            if self.deadline is not None and time.monotonic() >= self.deadline:  # per file, and every CHECK_EVERY entries
                raise TimeoutError("the collection's time budget was spent (--time-budget)")
            self.r = self.one[fd]
            try:
                yield from self._walk(fd, groups, start, end)
            finally:
                self.r = self.all

    def _walk(self, fd: int, groups, start, end):
        """:meth:`scan` in file ``fd``; past a damage libsystemd's matches stop at, by :meth:`_salvage`."""
        r = self.r
        self._match(groups)
        r.seek_realtime(start) if start is not None else r.seek_head()
        n, last = 0, None
        while r._next():
            n += 1
            if n % self.CHECK_EVERY == 0:
                self._tick()
            t = r._get_realtime()
            if end is not None and t > end:
                return
            last = (t, last[1] + 1 if last and last[0] == t else 1)
            yield _Lazy(r, t)
        if self._dropped(r, fd):
            for r in self._salvage(fd, groups, start, end, last):
                yield _Lazy(r, r._get_realtime())

    @staticmethod
    def _dropped(r, fd: int) -> bool:
        """Whether libsystemd dropped file ``fd`` from reader ``r`` at an object it could not read (see
        :mod:`collectors.journal.damage`): the reader finds no entry at all where the header counts some."""
        r.flush_matches()
        r.seek_tail()
        return not r._previous() and bool(damage.counts(os.pread(fd, 208, 0))[0])

    @staticmethod
    def _first(r, field_: str) -> bytes | None:
        try:
            return r._get(field_)
        except KeyError:
            return None

    def _salvage(self, fd: int, groups, start, end, after=None, skip=frozenset()):
        """Stand on each entry of ``groups`` from ``start`` to ``end`` (µs, or ``None``) in file ``fd``
        (the reader, one per entry) by walking every entry of the file, through new readers, but those
        the walk by matches gave already (up to the ``k``-th entry of time ``t`` when ``after`` is ``(t, k)``)
        and the cursors in ``skip``; where that walk too ends, on from the first later entry a seek by
        time reaches (:meth:`_past`), over every entry or else by the matches, and back from it to the
        damage, until the file's last entry (``tail_entry_seqnum`` of its header) was read or nothing gets
        past. What it read and could not read goes to :attr:`damage` (:meth:`collectors.journal.damage.Walked.record`)."""
        walked, floor, same = damage.Walked(os.pread(fd, 208, 0)), 0, [0]

        def wanted(r, c: str, t: int, back: bool = False) -> bool:
            if (start is not None and t < start) or (end is not None and t > end) or c in skip \
                    or not damage.matches(lambda f: self._first(r, f), groups):
                return False
            if after is not None and t <= after[0]:
                same[0] += t == after[0] and not back
                return not back and t == after[0] and same[0] > after[1]
            return True

        r = self.r = self._open([fd])
        opened = [r]
        try:
            r.seek_head()
            while True:
                while r._next():
                    if walked.read % self.CHECK_EVERY == 0:
                        self._tick()
                    c, t = r._get_cursor(), r._get_realtime()
                    if (i := self._seqnum(c)) <= floor:  # read before a seek went past the damage
                        continue
                    walked.saw(i, t)
                    if wanted(r, c, t):
                        yield r
                if walked.prev is None or walked.prev[0] >= (damage.counts(os.pread(fd, 208, 0))[2] or 0):
                    break  # at the file's last entry (libsystemd may end a walk at a bad array without a word)
                got = self._past(fd, walked.prev[1]) or self._past(fd, walked.prev[1], groups)
                if got is None:
                    break
                back = self.r = self._sought(fd, *got)  # from the entry reached back to the damage
                opened.append(back)
                found = []
                while back._previous():
                    c, t = back._get_cursor(), back._get_realtime()
                    if t <= walked.prev[1] or (i := self._seqnum(c)) <= walked.prev[0]:
                        break
                    found.append((i, t))
                    if wanted(back, c, t, True):
                        yield back
                for i, t in sorted(found):
                    walked.saw(i, t)
                r = self.r = self._sought(fd, *got)
                opened.append(r)
                floor = walked.prev[0]
        finally:
            self.r = self.all
            for o in opened:
                o.close()
            self.damage.append(walked.record("", os.pread(fd, 208, 0), "libsystemd stopped a walk by journal "
                                             "matches at an object it could not read"))

    def _past(self, fd: int, after: int, groups=None) -> tuple[int, list | None] | None:
        """``(t, groups)``: the time (µs) of the first entry of file ``fd`` later than ``after`` that a seek by
        time reaches (of ``groups`` when given: by their entry arrays), bisecting the times up to the
        file's last entry; ``None`` when no seek gets past."""
        tail_rt = damage.counts(os.pread(fd, 208, 0))[4]
        lo, hi = after, tail_rt
        if not hi or hi <= lo or not self._reaches(fd, hi, groups):
            return None
        while hi - lo > 1:
            self._tick()
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._reaches(fd, mid, groups) else (mid, hi)
        return hi, groups

    def _sought(self, fd: int, t: int, groups=None):
        """A new reader of file ``fd`` with the matches of ``groups`` (when given), sought to time ``t`` (µs)."""
        r = self._open([fd])
        if groups:
            old, self.r = self.r, r
            try:
                self._match(groups)
            finally:
                self.r = old
        r.seek_realtime(t)
        return r

    def _reaches(self, fd: int, t: int, groups=None) -> bool:
        r = self._sought(fd, t, groups)
        try:
            return bool(r._next()) and r._get_realtime() >= t
        finally:
            r.close()

    def _tick(self) -> None:
        """What a scan does every :data:`CHECK_EVERY` entries: let the pages go past the limit, and
        raise TimeoutError past the deadline."""
        self.pages.check()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError("the collection's time budget was spent (--time-budget)")

    def scan_texts(self, groups, start, texts: tuple[bytes, ...], anchors: tuple[bytes, ...] | None = None,
                   wanted=None):
        """As :meth:`scan` from ``start`` (µs or ``None``) on, one file only, yielding only the entries
        whose MESSAGE (its first value, as libsystemd gives it) holds one of ``texts``: the test is
        made on the bytes, before anything is decoded (an ASCII text is in the bytes exactly when it
        is in their UTF-8 decoding with bad sequences replaced, which the rules read). ``anchors``:
        shorter texts one of which each of ``texts`` holds (:func:`collectors.journal.selection.anchors_for`):
        one regular-expression search for them passes over most MESSAGEs, and only those it finds
        are tested against ``texts``; the same entries come out.

        From the head (``start`` None), the file's distinct MESSAGE values are read first from its own
        index (:func:`collectors.journal.unique.holding`), those ``wanted(text)`` refuses dropped (a test of
        the MESSAGE text alone, decoded as the rules decode it, that every entry the caller keeps passes:
        a value that holds a text and can never be kept costs no walk); when at most :data:`MAX_VALUES` hold a text,
        only their entries are read (:meth:`_where`), in the same order, and tested as above all the
        same; then the entries appended since the values were read (the file is still written), as
        the walk over every entry reads them. Else (no exact values, too many) every entry of
        ``groups`` is read."""
        pre = re.compile(b"|".join(map(re.escape, anchors))).search if anchors else None
        at = tail = None
        if self.fd is not None and start is None:
            tail = self._tail()  # the entries up to it have their MESSAGE among the values read next
            values = unique.holding(self.fd, "MESSAGE", texts, self._tick, DATA_THRESHOLD) if tail else None
            if values is not None and wanted is not None:
                values = [v for v in values if wanted(v[8:].decode("utf-8", "replace"))]  # after b"MESSAGE="
            at = self._where(groups, values, tail) if values is not None and len(values) <= self.MAX_VALUES else None
        n, every = 0, self.CHECK_EVERY if at is None else 8  # each cursor is a seek of its own
        for r in self._steps(groups, start, at, tail):
            n += 1
            if n % every == 0:
                self._tick()
            try:
                msg = r._get("MESSAGE")
            except KeyError:
                continue
            if pre is not None and not pre(msg):
                continue
            for t in texts:
                if t in msg:
                    yield _Lazy(r, r._get_realtime())
                    break

    def _tail(self) -> str | None:
        """The cursor of the file's last entry now, or ``None`` (no entry, or a damaged file), through a
        reader of its own (see :meth:`_reopen`)."""
        r = self._open([self.fd])
        try:
            r.seek_tail()
            return r._get_cursor() if r._previous() else None
        finally:
            r.close()

    def _reopen(self) -> None:
        """A new reader of the one file: libsystemd drops a file from a reader at the first error a
        step meets in it (src/libsystemd/sd-journal/sd-journal.c ``real_journal_next``: "Can't iterate
        through %s, ignoring"), and the reader then finds no entry at all."""
        old, self.all = self.all, self._open([self.fd])
        self.r, self.one = self.all, {self.fds[0]: self.all}
        old.close()

    @staticmethod
    def _seqnum(cursor: str) -> int:
        return int(cursor_fields(cursor)["i"], 16)

    def _where(self, groups, values: list[bytes], tail: str) -> list[str] | None:
        """The cursors, in the file's order, of the entries of ``groups`` up to ``tail`` (a cursor)
        whose MESSAGE is one of ``values`` (``FIELD=value`` data), found :data:`TERMS` values at a time (each of ``groups``
        ANDed with those values ORed: libsystemd tries every term of an OR at each step, and each
        term's objects stay mapped while it walks); ``None`` past :data:`MAX_FOUND` entries. One
        file's entries are in the order of their sequence numbers (``i=`` of the cursor), which
        journal-file.c gives each appended entry one above the last (``journal_file_entry_seqnum``).
        ``None`` too when libsystemd dropped the file at a damaged object of a value's chain (then through
        a new reader, :meth:`_reopen`)."""
        r, found, n, last = self.r, {}, 0, self._seqnum(tail)
        for k in range(0, len(values), self.TERMS):
            self._tick()
            self._match(groups, values[k:k + self.TERMS])
            r.seek_head()
            while r._next():
                n += 1
                if n % self.CHECK_EVERY == 0:
                    self._tick()
                c = r._get_cursor()
                if (i := self._seqnum(c)) <= last:  # one appended since the values were read: see _step_to
                    found[c] = i
                if len(found) > self.MAX_FOUND:
                    return None
            if self._dropped(r, self.fd):  # damage on a value's chain: every entry is walked (a new reader)
                self._reopen()
                return None
        return sorted(found, key=found.get)

    def _steps(self, groups, start, at: list[str] | None, tail: str | None, skip=frozenset()):
        """Stand on each entry the walk of :meth:`scan_texts` tests (the reader, one per entry): with ``at`` ``None``,
        each entry of ``groups`` from ``start`` (except the cursors in ``skip``); else each cursor of
        ``at``, then each entry of ``groups`` after ``tail`` (appended since the values were read).
        A cursor of ``at`` that cannot be sought again (a damaged file: the seek goes by the file's
        entry array, the walk of ``groups`` by the entry arrays of their values) ends the walk by
        cursors, and each entry of ``groups`` from the head is tested, through a new reader
        (:meth:`_reopen`), but those tested already."""
        r = self.r
        if at is None:
            self._match(groups)
            r.seek_realtime(start) if start is not None else r.seek_head()
            last = None
            while r._next():
                if not skip or r._get_cursor() not in skip:
                    t = r._get_realtime()
                    last = (t, last[1] + 1 if last and last[0] == t else 1)
                    yield r
            if self.fd is not None and self._dropped(r, self.fd):
                yield from self._salvage(self.fd, groups, start, None, last, skip)
            return
        r.flush_matches()
        for n, c in enumerate(at):
            r.seek_cursor(c)
            if not r._next() or not r.test_cursor(c):
                self._reopen()
                yield from self._steps(groups, None, None, None, frozenset(at[:n]))
                return
            yield r
        self._match(groups)
        r.seek_cursor(tail)  # the next entry is the first of groups from tail on (sd_journal_seek_cursor(3))
        if r._next() and (not r.test_cursor(tail) or r._next()):
            yield r
            while r._next():
                yield r

    def full(self) -> dict:
        """The whole entry :meth:`scan` stands on (scan yields only the fields selection needs)."""
        return self._entry()

    def cursor(self) -> str:
        """The cursor of the entry :meth:`scan` stands on."""
        return self.r._get_cursor()

    def unique(self, field_: str) -> list[str]:
        return sorted(v.decode("utf-8", "replace") for v in self.all.query_unique(field_))

    def unique_holding(self, field_: str, texts: tuple[str, ...]) -> list[str]:
        """The values of ``field_`` that hold one of ``texts``, sorted: from each file's own index of them
        (:func:`collectors.journal.unique.holding_in`), else :meth:`unique`'s that hold one."""
        got = unique.holding_in(self.fds, field_, texts, self._tick, DATA_THRESHOLD)
        return got if got is not None else [v for v in self.unique(field_) if any(t in v for t in texts)]

    def edge(self, group=(), last=False) -> dict | None:
        self.pages.check(force=True)
        self.r = r = self.all
        self._match([group] if group else [])
        r.seek_tail() if last else r.seek_head()
        return self._entry() if (r._previous() if last else r._next()) else None
