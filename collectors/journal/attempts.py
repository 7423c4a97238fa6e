"""The journal's reading in a child process, started at once and waited for later, and read again
when a file shrank under it.

:class:`Pending` forks the child (:func:`collectors.journal.isolate.start`) as soon as it is made,
so that the collectors after the journal run in this process while the child reads (issue 18:
on bench L the journal is 12-15 s of CPU in the child and its two readers, the containers 8 s
here). :meth:`Pending.finish` waits for it and records what it made. When the child died (SIGBUS:
a file shrank under libsystemd's mmap), each file smaller than when the collection found it is
set aside as truncated while read and the others are read again, up to :data:`RETRIES` times.
"""
from __future__ import annotations

import os
import signal

from forensics import hostfs
from forensics.artifact import Artifact, Status
import collectors.journal.isolate as isolate
from .files import METHOD, _File
from .fileset import COPY_PREFIX

RETRIES = 3  #: readings of the journal again after a child died with files shrunk


def _size(f: _File) -> int | None:
    try:
        return os.stat(hostfs.resolve(f.root, f.path)).st_size
    except OSError:
        return None


def _cut_record(f: _File, was: int, now: int | None, died: str) -> dict:
    return {"source": f.source, "size": now, "sha256": None, "header": None, "opened": False, "errno": None,
            "truncated": True,
            "error": f"truncated while it was read: it shrank from {was} to {now} bytes under libsystemd's mmap "
                     f"(journald's vacuum, a full disk) and the reader died ({died}); its entries are not in "
                     "this bundle"}


def _forget_partial(ctx, outputs: tuple[str, ...]) -> None:
    """Remove what a reader that died may have left in the bundle (rewritten by the next reading):
    ``outputs`` (bundle-relative) and the copies of deleted journal files (:mod:`collectors.journal.fileset`)."""
    try:
        left = [n for n in os.listdir(ctx.writer.dir) if n.startswith(COPY_PREFIX)]
    except (OSError, AttributeError, TypeError):
        left = []
    for rel in (*outputs, *left):
        try:
            os.unlink(os.path.join(ctx.writer.dir, rel))
        except (OSError, AttributeError, TypeError):
            pass


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _start(read, *args) -> tuple[int, int]:
    """:func:`collectors.journal.isolate.start` of ``read(*args)`` in a child that ignores SIGINT,
    SIGTERM and SIGHUP: sent to the whole process group (a terminal's Ctrl-C) they are the parent's to answer
    (:func:`forensics.ops.pipeline.interruptible`: it waits for this child, and kills it on a second
    one); the child would die of the handler it inherited. Blocked around the fork, so that none
    comes before the child ignores them (the parent's are delivered when unblocked). The child leads a
    process group, so that a second interruption kills its readers with it (:func:`isolate.kill`)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        return isolate.start(_shielded, old, read, *args, group=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _shielded(mask, read, *args):
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return read(*args)


class Pending:
    """``read(ctx, files, source)`` running in a child from now on; ``outputs``: the bundle files a
    child that died may have left. :meth:`finish` gives ``(files.json records, the exception the
    selection raised or None)`` once the reading is over."""

    def __init__(self, ctx, files: list[_File], source: str, read, outputs: tuple[str, ...]):
        self.ctx, self.files, self.source, self.read, self.outputs = ctx, files, source, read, outputs
        self.before = {f: _size(f) for f in files}
        self.child = _start(read, ctx, files, source)

    def finish(self) -> tuple[list[dict], Exception | None]:
        """Wait for the child (and read again after it died with files shrunk); record its manifest
        records, and an ``error`` one per file cut and when no file shrank. Raises what the child's
        ``read`` raised; an interruption while waiting kills the child first."""
        ctx, files, before = self.ctx, self.files, self.before
        cut: dict[_File, dict] = {}
        got: dict[str, dict] = {}
        failed = None
        for _attempt in range(RETRIES + 1):
            left = [f for f in files if f not in cut]
            if not left:
                break
            child, self.child = self.child or _start(self.read, ctx, left, self.source), None
            result, died = isolate.finish(*child)
            if died is None:
                records, artifacts, failed = result
                got = {r["source"]: r for r in records}
                for a in artifacts:
                    ctx.writer.record(a)
                break
            _forget_partial(ctx, self.outputs)
            shrunk = {f: _cut_record(f, before[f], _size(f), died) for f in left
                      if before[f] is not None and (_size(f) or 0) < before[f]}
            if not shrunk:
                ctx.writer.record(Artifact(None, self.source, Status.ERROR, METHOD,
                                           message=f"the journal reader died ({died}) and no journal file shrank "
                                                   "meanwhile; the journal's entries are not in this bundle"))
                got = {f.source: {"source": f.source, "size": before[f], "opened": False,
                                  "error": f"reader died ({died})", "errno": None} for f in left}
                break
            cut.update(shrunk)
        for rec in cut.values():
            ctx.writer.record(Artifact(None, rec["source"], Status.ERROR, METHOD, message=rec["error"]))
        return [got.get(f.source) or cut.get(f) or {"source": f.source, "opened": False,
                                                    "error": "not read: the reader died too often"}
                for f in files], failed
