"""The distinct values of one field in one journal file, from the file's own index of them.

A journal file stores each distinct ``FIELD=value`` once, as a DATA object, and chains every DATA
object of a field from that field's FIELD object (systemd's docs/JOURNAL_FILE_FORMAT.md, "Field
Objects": ``head_data_offset``, and ``next_field_offset`` of each DATA object; journal-file.c links a
new DATA object there as it appends it).
libsystemd walks that chain for ``sd_journal_query_unique(3)`` / ``sd_journal_enumerate_unique(3)``,
as ``journalctl -F`` does, without touching an entry. On bench L that reads the MESSAGE values of an
84 MB file in 0.14 s, where reading MESSAGE entry by entry takes 0.7-1.1 s (issue 18).

A reader's ``query_unique`` (:mod:`collectors.journal.sdjournal`) gives the values as one set, with no
chance to let the mapped pages go in between (a 84 MB file: 105 MB peak RSS), so :func:`holding` walks them
itself through the same binding's library, one value at a time, and hands the caller's ``tick`` a turn
every :data:`TICK` values.
"""
from __future__ import annotations

import ctypes
from bisect import bisect_right
from itertools import accumulate

TICK = 16      #: values between two calls of the caller's ``tick`` (pages, time budget)
CHUNK = 1024   #: values searched together (one ``find`` per text over their joined bytes)


def _lib():
    """The binding's libsystemd (:data:`collectors.journal.sdjournal.lib`), or ``None`` where it cannot be loaded."""
    try:
        from .sdjournal import lib
    except (ImportError, OSError, AttributeError):
        return None
    return lib


def _usable(field: bytes, texts: tuple[bytes, ...]) -> bool:
    """True when a text found in a joined run of ``FIELD=value`` data can only lie inside one value:
    no text holds the separator NUL or ``=``, and none fits inside ``FIELD`` itself."""
    return bool(texts) and all(t and b"\0" not in t and b"=" not in t and t not in field for t in texts)


def _found(chunk: list[bytes], texts: tuple[bytes, ...]) -> list[bytes]:
    """The items of ``chunk`` that hold one of ``texts`` (see :func:`_usable`), in ``chunk``'s order."""
    buf = b"\0".join(chunk)
    ends, hit = None, set()
    for t in texts:
        at = buf.find(t)
        while at >= 0:
            if ends is None:
                ends = list(accumulate(len(v) + 1 for v in chunk))
            k = bisect_right(ends, at)
            hit.add(k)
            at = buf.find(t, ends[k])
    return [chunk[k] for k in sorted(hit)]


def holding(fd: int, field: str, texts: tuple[bytes, ...], tick, threshold: int) -> list[bytes] | None:
    """The distinct ``FIELD=value`` data of ``field`` in the journal file open as ``fd`` whose value
    holds one of ``texts``, each once, or ``None`` when they cannot be had exactly: libsystemd cannot
    be loaded, the file cannot be opened again through /proc/self/fd, the enumeration fails midway
    (a corrupt chain), no value at all comes (a file too old to have FIELD objects reads as empty), a
    value may have been cut at ``threshold`` bytes (libsystemd's data threshold: a match on a cut
    value finds no entry), or a text could straddle two values (:func:`_usable`). ``tick()`` is
    called every :data:`TICK` values; what it raises ends the enumeration and is raised."""
    lib, name = _lib(), field.encode()
    if lib is None or not _usable(name, texts):
        return None
    j = ctypes.c_void_p()
    paths = (ctypes.c_char_p * 2)(b"/proc/self/fd/%d" % fd, None)
    if lib.sd_journal_open_files(ctypes.byref(j), paths, 0) < 0:
        return None
    try:
        lib.sd_journal_set_data_threshold(j, threshold)
        if lib.sd_journal_query_unique(j, name) < 0:
            return None
        prefix, data, size = name + b"=", ctypes.c_void_p(), ctypes.c_size_t()
        from .sdjournal import string_at as at
        enum, pd, ps = lib.sd_journal_enumerate_unique, ctypes.byref(data), ctypes.byref(size)
        out, chunk, n = [], [], 0
        while True:
            r = enum(j, pd, ps)
            if r <= 0:
                if r < 0:
                    return None
                break
            v = at(data.value, size.value)
            if len(v) >= threshold - 64 or not v.startswith(prefix):
                return None
            chunk.append(v)
            n += 1
            if n % TICK == 0:
                tick()
            if len(chunk) == CHUNK:
                out += _found(chunk, texts)
                chunk = []
        out += _found(chunk, texts) if chunk else []
        return out if n else None
    finally:
        lib.sd_journal_close(j)


def holding_in(fds: list[int], field: str, texts: tuple[str, ...], tick, threshold: int) -> list[str] | None:
    """The values (text after ``FIELD=``, decoded with bad bytes replaced) of ``field`` that hold one of
    ``texts`` in any of the journal files open as ``fds``, sorted, read by :func:`holding` file by file, which
    lets the mapped pages go as it walks (a field with values all over a file, like ``UNIT=``'s container
    scopes, otherwise maps most of it: 80 MB for bench L's); ``None`` when one file's cannot be had exactly."""
    want, got, skip = tuple(t.encode() for t in texts), set(), len(field) + 1
    for fd in fds:
        values = holding(fd, field, want, tick, threshold)
        if values is None:
            return None
        got.update(v[skip:].decode("utf-8", "replace") for v in values)
    return sorted(got)
