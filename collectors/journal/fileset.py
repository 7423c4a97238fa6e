"""Reading many journal files a few at a time, and the heavy pass on both cores (issue 15 item 14, issue 18).

:class:`_FileSet` is the source :func:`collectors.journal.selection.select` reads when the files
were probed one by one (:mod:`collectors.journal.files`). It never holds more than one file's
libsystemd readers at once: each file is opened (from the descriptor the probe kept) when a pass
reaches it and closed when the pass leaves it, so memory does not grow with the number of files
(two readers for each of 5,000 files took 1.3-1.6 GB). What a reader over all files would give,
it computes from the files one by one:

- ``unique``: the union of each file's values;
- ``edge`` (the first or last entry of the journal, or of one boot): each file's own, then the one
  libsystemd's reader over all files would show first (last), chosen in the files' order with
  ``journal_file_compare_locations()`` of src/libsystemd/sd-journal/journal-file.c (systemd v252):
  same sequence-number source: the sequence number; same boot: the monotonic time; else the
  realtime, then the XOR hash; an entry that compares equal keeps the earlier file's copy.
  All five are in the entry's cursor (``s=``, ``i=``, ``b=``, ``m=``, ``t=``, ``x=``).

:meth:`_FileSet.keep_each` runs one rule over every entry of a scan in :data:`WORKERS` forked
children (each a contiguous share of the files, each file still one reader at a time), and hands
back the kept entries in the files' order, so the kept set and its order are those of one process
reading file after file. A child killed by a signal (SIGBUS: a file shrank under libsystemd's mmap)
kills this process with the same signal, for :func:`collectors.journal.acquire` to handle.

libsystemd refuses to open a file that has no name any more (EIDRM), and journald deletes archived
files whenever it rotates: such a file is read from a copy of what the descriptor the probe kept
still holds, made in the bundle being written (``.journal-copy-*``, removed when read).
"""
from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import tempfile
import time

from .reader import _ReaderSource, cursor_fields

#: children that read a pass's files at once: the CPUs this process may run on (``sched_getaffinity``: a
#: container's cpuset, ``taskset``), at most 8; each keeps its own mapped pages under the same limit
#: (:class:`collectors.journal.pages._Pages`), and they share the collection's deadline
WORKERS = max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
COPY_PREFIX = ".journal-copy-"
KEPT_OPEN = 1  #: files whose readers :meth:`_FileSet.scan` keeps open between the scans of time windows
FOLDED = ("_BOOT_ID", "_SYSTEMD_UNIT")  #: the fields whose values :meth:`_FileSet.unique` gives
#: matches whose first and last entry :meth:`_FileSet.edge` gives besides the journal's and each boot's
EDGE_GROUPS = ((("_TRANSPORT", "kernel"),),)


def compare(a: str, b: str) -> int:
    """libsystemd's order of two entries of different files from their cursors (<0, 0, >0);
    see the module's docstring."""
    x, y = cursor_fields(a), cursor_fields(b)
    num = (lambda d, k: int(d.get(k, "0"), 16))
    if all(x.get(k) == y.get(k) for k in "sibmtx"):
        return 0
    if x.get("s") == y.get("s"):
        r = (num(x, "i") > num(y, "i")) - (num(x, "i") < num(y, "i"))
        if r:
            return r
    if x.get("b") == y.get("b"):
        r = (num(x, "m") > num(y, "m")) - (num(x, "m") < num(y, "m"))
        if r:
            return r
    for k in "tx":
        r = (num(x, k) > num(y, k)) - (num(x, k) < num(y, k))
        if r:
            return r
    return 0


class _FileSet:
    """Entries of several probed files (descriptors ``fds``, spans as for
    :meth:`collectors.journal.reader._ReaderSource._holding`), one file's readers open at a time;
    ``tmpdir``: where a deleted file is copied and the children's kept entries are spooled (the
    bundle being written); ``names``: the files' sources, named when the time budget stops a pass."""

    method = _ReaderSource.method
    deadline: float | None = None

    def __init__(self, fds: list[int], spans: list[tuple] | None = None, tmpdir=None, names: list[str] | None = None):
        self.fds, self.spans, self.tmpdir = list(fds), spans, tmpdir
        self.names = dict(zip(self.fds, names or ()))  #: fd -> the file's source, for what a pass did not read
        self.cur: _ReaderSource | None = None
        self.copies: dict[int, str] = {}
        self._values: dict[str, set[str]] = {f: set() for f in FOLDED}
        self._edges: dict[tuple, dict] = {}
        self.folded = 0  #: leading files whose values and edges are taken (:meth:`_fold`)
        self.damage: list[dict] = []  #: the files walked past damage (:mod:`collectors.journal.damage`)
        self.open_: dict[int, _ReaderSource] = {}  #: fd -> a source kept open for the next scans (:meth:`_reader`)

    def _took(self, src: _ReaderSource, fd: int) -> None:
        """Keep what ``src`` (reading file ``fd`` alone) walked past damage, named by the file's source."""
        self.damage += [{**d, "source": str(self.names.get(fd, fd))} for d in src.damage]

    # -- one file at a time ---------------------------------------------------------------------
    def _open(self, fd: int) -> _ReaderSource:
        if fd in self.copies:
            return self._open_path(self.copies[fd])
        try:
            return _ReaderSource([fd])
        except OSError as e:
            if e.errno != errno.EIDRM:
                raise
        with tempfile.NamedTemporaryFile(dir=self.tmpdir, prefix=COPY_PREFIX, suffix=".journal", delete=False) as out:
            self.copies[fd] = out.name
            with os.fdopen(os.dup(fd), "rb") as src:
                src.seek(0)
                shutil.copyfileobj(src, out, 1 << 20)
        return self._open_path(self.copies[fd])

    @staticmethod
    def _open_path(path: str) -> _ReaderSource:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return _ReaderSource([fd])
        finally:
            os.close(fd)  # the reader owns a dup

    def _holding(self, start, end) -> list[int]:
        return _ReaderSource._holding(self, start, end)

    def _expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def scan(self, groups, start=None, end=None):
        """As :meth:`collectors.journal.reader._ReaderSource.scan`, each file through readers
        opened for it alone and closed when its entries are done."""
        windowed = start is not None and end is not None
        todo = self._holding(start, end) if windowed else self.fds
        for i, fd in enumerate(todo):
            try:
                if self._expired():
                    raise TimeoutError
                src = self.cur = self._reader(fd) if windowed else self._open(fd)
                src.deadline, src.drop_at_scan = self.deadline, False  # opened for this scan: nothing to let go
                try:
                    if self.folded < len(self.fds) and self.fds[self.folded] == fd:
                        self._fold(src)
                    yield from src.scan(groups, start, end)
                finally:
                    self.cur = None
                    if not windowed:  # a whole file's pass: its pages go with its reader
                        self._took(src, fd)
                        src.close()
            except TimeoutError:
                raise TimeoutError(spent(len(todo) - i, len(todo), self.names.get(fd, fd))) from None

    def _reader(self, fd: int) -> _ReaderSource:
        """The source of file ``fd`` for a scan of a time window: one of the last :data:`KEPT_OPEN` opened (the
        requester windows, in time order, scan the same few files one after the other: opening and closing a
        reader for each of their ~3,600 scans on bench L cost a third of their time; a window touches few pages),
        else a new one. A whole file's pass opens its own and closes it, letting its pages go."""
        src = self.open_.pop(fd, None)
        if src is None:
            src = self._open(fd)
            while len(self.open_) >= KEPT_OPEN:
                self._let_go(next(iter(self.open_)))
        self.open_[fd] = src  # the most recent last
        return src

    def _let_go(self, fd: int) -> None:
        src = self.open_.pop(fd)
        self._took(src, fd)
        src.close()

    def full(self) -> dict:
        return self.cur.full()

    def cursor(self) -> str:
        return self.cur.cursor()

    def close(self) -> None:
        for fd in list(self.open_):
            self._let_go(fd)
        for path in self.copies.values():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.copies.clear()

    def _fold(self, src: _ReaderSource) -> None:
        """Take the next file's values and edges (``src`` reads it) into what :meth:`unique` and
        :meth:`edge` answer; files are taken in their order only."""
        for field_ in FOLDED:
            self._values[field_].update(src.unique(field_))
        groups = [(), *((("_BOOT_ID", b),) for b in src.unique("_BOOT_ID")), *EDGE_GROUPS]
        for group in groups:
            for last in (False, True):
                e = src.edge(list(group), last)
                best = self._edges.get((group, last))
                if e is not None and (best is None or (compare(e["__CURSOR"], best["__CURSOR"]) > 0 if last else
                                                       compare(e["__CURSOR"], best["__CURSOR"]) < 0)):
                    self._edges[(group, last)] = e
        self.folded += 1

    def _fold_all(self) -> None:
        """Fold the files no scan has reached yet, while the time budget lasts."""
        while self.folded < len(self.fds) and not self._expired():
            src = self._open(self.fds[self.folded])
            try:
                self._fold(src)
            finally:
                src.close()

    def unique(self, field_: str) -> list[str]:
        """The values of ``field_`` (one of :data:`FOLDED`) in any file, sorted."""
        self._fold_all()
        return sorted(self._values[field_])

    def unique_holding(self, field_: str, texts: tuple[str, ...]) -> list[str]:
        """The values of ``field_`` that hold one of ``texts`` in any file, sorted (each file's through its reader:
        :meth:`collectors.journal.reader._ReaderSource.unique_holding`)."""
        got = set()
        for fd in self.fds:
            if self._expired():
                raise TimeoutError(spent(1, 1, self.names.get(fd, fd)))
            src = self._open(fd)  # a whole file's walk: its pages go with its reader, as in scan
            src.deadline = self.deadline
            try:
                got.update(src.unique_holding(field_, texts))
            finally:
                self._took(src, fd)
                src.close()
        return sorted(got)

    def edge(self, group=(), last=False) -> dict | None:
        """The first (``last``: last) entry of the journal (``group`` empty), of one boot
        (``[("_BOOT_ID", id)]``) or of a match of :data:`EDGE_GROUPS` over all files, as one reader over
        all of them shows it (see the module's docstring)."""
        self._fold_all()
        return self._edges.get((tuple(tuple(m) for m in group), last))

    # -- one rule over every entry, on both cores -------------------------------------------------
    def keep_each(self, groups, since, rule, problems: list[str], what: str, texts: tuple[str, ...] | None = None,
                  anchors: tuple[str, ...] | None = None, wanted=None):
        """``(rule name, whole entry)`` for each entry of ``scan(groups, since)`` for which
        ``rule(entry)`` names a rule (only entries whose MESSAGE holds one of ``texts`` are given to it,
        when given; ``anchors``: shorter texts one of which each of ``texts`` holds, searched for
        first, see :func:`collectors.journal.selection.anchors_for`; ``wanted``: a test of the MESSAGE text alone that
        every entry ``rule`` keeps passes, applied to the file's MESSAGE values, see
        :meth:`collectors.journal.reader._ReaderSource.scan_texts`), in the files' order; the files are shared among
        :data:`WORKERS` forked children. A read error or the time budget ends a file's scan, noted in
        ``problems`` as ``what: reading stopped early: ...``."""
        shares = _shares(self.fds, WORKERS)
        spools = [tempfile.TemporaryFile(dir=self.tmpdir) for _ in shares]
        try:
            results = _in_children([(self._keep_share, (share, groups, since, rule, spool.fileno(), what, texts, anchors,
                                                       wanted))
                                    for share, spool in zip(shares, spools)])
            for (kept, probs, damaged), spool in zip(results, spools):
                problems.extend(probs)
                self.damage += damaged
                for name, off, length in kept:
                    yield name, json.loads(os.pread(spool.fileno(), length, off))
        finally:
            for spool in spools:
                spool.close()

    def _keep_share(self, fds, groups, since, rule, out_fd, what, texts, anchors=None, wanted=None):
        part = _FileSet(fds, None, self.tmpdir)
        part.names = self.names
        part.deadline, part.copies, part.folded = self.deadline, dict(self.copies), 1 << 62  # no folding there
        try:
            return self._keep_files(part, fds, groups, since, rule, out_fd, what, texts, anchors, wanted)
        finally:  # the copies this share made (a file deleted meanwhile); the caller's stay
            part.copies = {fd: path for fd, path in part.copies.items() if self.copies.get(fd) != path}
            part.close()

    def _keep_files(self, part, fds, groups, since, rule, out_fd, what, texts, anchors=None, wanted=None):
        kept, probs, end = [], [], 0
        for i, fd in enumerate(fds):
            try:
                for e in _one(part, fd, groups, since, texts, anchors, wanted):
                    name = rule(e)
                    if name:
                        b = json.dumps(part.full()).encode() + b"\n"
                        os.write(out_fd, b)
                        kept.append((name, end, len(b)))
                        end += len(b)
            except TimeoutError:  # the budget ends this share: say where
                probs.append(f"{what}: reading stopped early: {spent(len(fds) - i, len(fds), self.names.get(fd, fd))}")
                break
            except OSError as err:
                probs.append(f"{what}: reading stopped early: {self.names.get(fd, fd)}: {err}")
        return kept, probs, part.damage


def spent(left: int, of: int, first) -> str:
    """What a pass the time budget stopped did not read: ``left`` of its ``of`` files, from ``first`` on."""
    return (f"the collection's time budget was spent (--time-budget): {left} of {of} files not read to their end, "
            f"from {first} on")


def _one(fs: _FileSet, fd: int, groups, since, texts=None, anchors=None, wanted=None):
    """The entries of ``fs.scan(groups, since)`` in file ``fd`` alone; with ``texts``, only those whose
    MESSAGE holds one of them (:meth:`collectors.journal.reader._ReaderSource.scan_texts`, which
    searches for ``anchors`` first)."""
    if texts is not None:
        if fs._expired():
            raise TimeoutError
        src = fs.cur = fs._open(fd)
        src.deadline, src.drop_at_scan = fs.deadline, False
        try:
            yield from src.scan_texts(groups, since, tuple(t.encode() for t in texts),
                                      tuple(a.encode() for a in anchors) if anchors else None, wanted)
        finally:
            fs.cur = None
            fs._took(src, fd)
            src.close()
        return
    saved, fs.fds = fs.fds, [fd]
    try:
        yield from fs.scan(groups, since)
    finally:
        fs.fds = saved


def _room_for(n: int) -> None:
    """Raise this process's soft limit of open files so that ``n`` probed files can stay open
    (each keeps its descriptor until the selection is done; a reader is opened on one at a time)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256 if hard == resource.RLIM_INFINITY else min(hard, n + 256)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


def _shares(fds: list[int], n: int) -> list[list[int]]:
    """``fds`` cut into at most ``n`` contiguous shares of about equal size in bytes."""
    sizes = [max(os.fstat(fd).st_size, 1) for fd in fds]
    total, out, acc = sum(sizes), [[]], 0
    for fd, size in zip(fds, sizes):
        if out[-1] and acc >= total * len(out) / n and len(out) < n:
            out.append([])
        out[-1].append(fd)
        acc += size
    return [s for s in out if s]


def _in_children(calls):
    """Run each ``(fn, args)`` in a forked child of its own, all at once; their results in order.
    Raises what a child's ``fn`` raised; a child killed by a signal kills this process with that
    signal (after the other children are reaped)."""
    import collectors.journal.isolate as isolate
    if len(calls) == 1:
        fn, args = calls[0]
        return [fn(*args)]
    started, outs = [], []
    try:
        for fn, args in calls:
            started.append(isolate.start(fn, *args))
        for s in started:
            try:
                outs.append(isolate.finish(*s))
            except Exception as e:  # what fn raised: the other children are still reaped first
                outs.append((e, "raised"))
    except BaseException:
        for pid, r in started[len(outs):]:
            isolate.kill(pid)
            os.close(r)
        raise
    for result, died in outs:
        if died is not None and died.startswith("SIG"):
            signal.signal(getattr(signal, died), signal.SIG_DFL)
            os.kill(os.getpid(), getattr(signal, died))
    for result, died in outs:
        if died == "raised":
            raise result
        if died is not None:
            raise RuntimeError(f"a journal reading child died ({died})")
    return [result for result, _ in outs]

