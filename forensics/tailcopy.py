"""Keep the end of an oversized log: where a bounded copy starts, and the note that says what was cut.

An append-only log (dpkg.log, apt's history.log) holds its newest lines, the ones near an incident,
at its end; a copy bounded to ``limit`` bytes keeps the last ``limit`` bytes of it instead of the
first, starting at a line boundary, and records what it skipped in one manifest note
(:func:`note`), which :func:`head_cut` reads back, so that a reader can report the lines before the
first kept one as not kept rather than as never written. Used by
:meth:`forensics.bundle.BundleWriter.copy` (``tail=True``).
"""
from __future__ import annotations

import os
import re

__all__ = ["seek_tail", "note", "head_cut", "size_text", "PREFIX"]

CHUNK = 1 << 20
PREFIX = "head not copied:"
_NOTE = re.compile(r"head not copied: the first (\d+) bytes were skipped, over the bound of (\d+) bytes")


def seek_tail(f, limit: int) -> int:
    """Position the binary file ``f`` (open, at any offset) where a copy of at most ``limit`` bytes
    of its end starts, and return that offset: the number of bytes skipped (0 when the file holds no
    more than ``limit`` bytes, as ``fstat`` gives its size now).

    The copy starts at the first line boundary at or after ``size - limit``: just after a newline,
    or where a run of NUL bytes ends (a hole: what ``truncate`` or a crash before the data reached
    the disk leaves in a log; the line after it is a whole line). With no boundary in the last
    ``limit`` bytes (one line longer than the bound) the copy is empty: it starts at the end.
    Reads at most ``limit + 1`` bytes, :data:`CHUNK` at a time. Raises ``OSError`` from the reads."""
    size = os.fstat(f.fileno()).st_size
    if size <= limit:
        return 0
    pos = size - limit
    f.seek(pos - 1)
    prev = f.read(1)
    if prev == b"\n":
        return pos
    while pos < size:
        chunk = f.read(min(CHUNK, size - pos))
        if not chunk:
            break
        at = _boundary(chunk, prev == b"\0")
        if at is not None:
            f.seek(pos + at)
            return pos + at
        pos += len(chunk)
        prev = chunk[-1:]
    f.seek(size)
    return size


def _boundary(chunk: bytes, after_nul: bool) -> int | None:
    """The first line boundary inside ``chunk`` (an index > 0 or 0 after a NUL), or None."""
    nl = chunk.find(b"\n")
    best = nl + 1 if nl >= 0 else None
    z = 0 if after_nul else chunk.find(b"\0")
    if z >= 0 and (best is None or z < best):
        rest = chunk[z:].lstrip(b"\0")
        if rest:
            end = len(chunk) - len(rest)
            best = end if best is None else min(best, end)
    return best


def note(skipped: int, limit: int) -> str:
    """The manifest note of a copy whose first ``skipped`` bytes were not copied (``limit``: the bound)."""
    return (f"{PREFIX} the first {skipped} bytes were skipped, over the bound of {limit} bytes ({size_text(limit)}); "
            f"the copy starts at offset {skipped} of the file, a line boundary")


def head_cut(notes) -> tuple[int, int] | None:
    """``(bytes skipped = offset of the first kept byte, bound in bytes)`` from a record's ``notes``
    when :func:`note` wrote one there, else None."""
    for n in notes:
        if m := _NOTE.match(n):
            return int(m[1]), int(m[2])
    return None


def size_text(n: int) -> str:
    """``67108864 -> '64 MiB'``; a size that is no whole number of MiB stays in bytes."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"
