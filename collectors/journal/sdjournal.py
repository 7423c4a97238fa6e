"""The project's one binding of libsystemd's journal reader (sd-journal(3)), over the node's own
``libsystemd.so.0`` through :mod:`ctypes`: no compiled code of its own, so that the same module reads
the journal in the installed tool and in the single-file collector (scripts/build-collector.py) on a
node with nothing but python3 (issue 29: one binding; issue 30: no compiled code).

It offers what collectors/journal and ``watch`` call, with the names and return types of
systemd-python's ``systemd.journal`` (src/systemd/_reader.c and journal.py upstream), which it replaced:
``Reader(files=[fd, ...])`` and the low-level methods ``_next``/``_previous`` -> bool, ``_get`` -> bytes
(KeyError when absent), ``_get_all`` -> {field: bytes, or a list of bytes for a repeated field},
``_get_realtime`` -> int µs, ``_get_monotonic`` -> (int µs, 16-byte boot id), ``_get_cursor`` -> str,
``seek_cursor``, ``test_cursor`` -> bool, ``query_unique`` -> set of bytes values; a negative return from
libsystemd raises ``OSError`` with that errno.

For ``gpu-forensics watch`` (forensics/ops/watch/triggers.py) it also follows a journal:
``Reader(path=DIR, flags=OS_ROOT)`` (sd_journal_open_directory(3)) or ``Reader()`` (sd_journal_open(3),
the local journal), ``fileno``/``reliable_fd``/``get_timeout_ms``/``process`` (sd_journal_get_fd(3)) and
``get_previous`` / iteration giving entries as dicts of text fields (a list for a repeated field) with
``__REALTIME_TIMESTAMP`` as a UTC datetime.

The calls made once per entry or per field (those given ``None`` in the table below: ``sd_journal_next``,
``_previous``, ``sd_journal_get_data``, ``sd_journal_get_realtime_usec``, ``sd_journal_enumerate_data``/``_unique``)
have no ``argtypes``: they are always given ctypes objects (the journal as a ``c_void_p``, ``byref``s made once
per reader), and a call without ctypes' conversions costs about half as much; their callers test the result
inline rather than through ``_check`` (one frame less per entry). Importing raises ``OSError`` where the library
cannot be loaded and ``AttributeError`` where it lacks a call (libsystemd before 230).
"""
from __future__ import annotations

import ctypes
import datetime as _datetime
import os
import time

#: sd-journal.h: SD_JOURNAL_OS_ROOT; sd_journal_process(3)'s answers
OS_ROOT = 1 << 4
NOP, APPEND, INVALIDATE = 0, 1, 2

lib = ctypes.CDLL("libsystemd.so.0", use_errno=True)
_p, _sz, _u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64
for _name, _args in {
        "sd_journal_open_files_fd": [ctypes.POINTER(_p), ctypes.POINTER(ctypes.c_int), ctypes.c_uint, ctypes.c_int],
        "sd_journal_open_files": [ctypes.POINTER(_p), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int],
        "sd_journal_open_directory": [ctypes.POINTER(_p), ctypes.c_char_p, ctypes.c_int],
        "sd_journal_open": [ctypes.POINTER(_p), ctypes.c_int], "sd_journal_get_fd": [_p],
        "sd_journal_reliable_fd": [_p], "sd_journal_process": [_p],
        "sd_journal_get_timeout": [_p, ctypes.POINTER(_u64)],
        "sd_journal_close": [_p], "sd_journal_next": None, "sd_journal_previous": None,
        "sd_journal_seek_head": [_p], "sd_journal_seek_tail": [_p], "sd_journal_seek_realtime_usec": [_p, _u64],
        "sd_journal_get_data": None, "sd_journal_enumerate_data": None, "sd_journal_restart_data": [_p],
        "sd_journal_get_realtime_usec": None,
        "sd_journal_get_monotonic_usec": [_p, ctypes.POINTER(_u64), ctypes.c_char * 16],
        "sd_journal_get_cursor": [_p, ctypes.POINTER(ctypes.c_char_p)],
        "sd_journal_seek_cursor": [_p, ctypes.c_char_p], "sd_journal_test_cursor": [_p, ctypes.c_char_p],
        "sd_journal_add_match": [_p, ctypes.c_char_p, _sz], "sd_journal_add_disjunction": [_p],
        "sd_journal_add_conjunction": [_p], "sd_journal_flush_matches": [_p],
        "sd_journal_set_data_threshold": [_p, _sz], "sd_journal_get_data_threshold": [_p, ctypes.POINTER(_sz)],
        "sd_journal_query_unique": [_p, ctypes.c_char_p], "sd_journal_restart_unique": [_p],
        "sd_journal_enumerate_unique": None}.items():
    if _args is not None:
        getattr(lib, _name).argtypes = _args
    getattr(lib, _name).restype = None if _name in ("sd_journal_close", "sd_journal_restart_data",
                                                    "sd_journal_flush_matches", "sd_journal_restart_unique") \
        else ctypes.c_int
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [_p]
#: ``ctypes.string_at`` without its Python frame (the C function it calls), where this Python has it
string_at = getattr(ctypes, "_string_at", ctypes.string_at)
_NEXT, _PREVIOUS, _GET_DATA, _REALTIME, _ENUM_DATA = (lib.sd_journal_next, lib.sd_journal_previous, lib.sd_journal_get_data,
                                                      lib.sd_journal_get_realtime_usec, lib.sd_journal_enumerate_data)


#: whether this libsystemd closes the descriptors given to sd_journal_open_files_fd (:meth:`_Reader.close`)
_CLOSES_FDS = None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _check(r: int) -> int:
    if r < 0:
        raise OSError(-r, os.strerror(-r))
    return r


class _Reader:
    """sd_journal over the given open file descriptors (sd_journal_open_files_fd(3); the fds are
    closed by :meth:`close`, as systemd-python's reader owns the files it was given)."""

    def __init__(self, flags=None, path=None, files=None, namespace=None):
        if namespace is not None or (files is not None and path is not None):
            raise ValueError("this binding opens files=[fd, ...], path=DIR or the local journal")
        self._j, self._fds = _p(), [int(f) for f in files or ()]
        if files is not None:
            fds = (ctypes.c_int * len(self._fds))(*self._fds)
            _check(lib.sd_journal_open_files_fd(ctypes.byref(self._j), fds, len(self._fds), 0))
        elif path is not None:
            _check(lib.sd_journal_open_directory(ctypes.byref(self._j), os.fsencode(path), flags or 0))
        else:
            _check(lib.sd_journal_open(ctypes.byref(self._j), flags or 0))
        # what the per-entry calls write into, made once (see the module's docstring)
        self._t, self._d, self._n = _u64(), _p(), _sz()
        self._bt, self._bd, self._bn = ctypes.byref(self._t), ctypes.byref(self._d), ctypes.byref(self._n)
        self._names: dict[str, tuple[bytes, int]] = {}

    def fileno(self) -> int:
        return _check(lib.sd_journal_get_fd(self._j))

    def reliable_fd(self) -> bool:
        return bool(_check(lib.sd_journal_reliable_fd(self._j)))

    def get_timeout_ms(self) -> int:
        """Milliseconds to poll before calling :meth:`process`, -1 for no limit (as _reader.c computes it
        from sd_journal_get_timeout's CLOCK_MONOTONIC µs)."""
        t = _u64()
        _check(lib.sd_journal_get_timeout(self._j, ctypes.byref(t)))
        if t.value == 2 ** 64 - 1:
            return -1
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return (t.value - now + 999) // 1000 if t.value > now else 0

    def process(self) -> int:
        return _check(lib.sd_journal_process(self._j))

    def close(self) -> None:
        """sd_journal_close(3), and the descriptors given where this libsystemd leaves them open. systemd
        252 closes them itself, at sd_journal_close and as soon as a walk drops a damaged file ("Can't
        iterate through"), as systemd-python relies on; closing them here too closed a descriptor that
        had been given the same number meanwhile (a reader opened again on the file), and libsystemd then
        aborted ("Assertion 'close_nointr(fd) != -EBADF' failed"). Which it is, the first close tells."""
        global _CLOSES_FDS
        if self._j:
            lib.sd_journal_close(self._j)
            self._j = _p()
            if _CLOSES_FDS is None and self._fds:
                _CLOSES_FDS = not _is_open(self._fds[0])
            for fd in () if _CLOSES_FDS else self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _step(self, move, skip: int) -> bool:
        for _ in range(skip):
            r = move(self._j)
            if r <= 0:
                if r < 0:
                    raise OSError(-r, os.strerror(-r))
                return False
        return True

    def _next(self, skip: int = 1) -> bool:
        if skip == 1:  # the walk's step: one call
            r = _NEXT(self._j)
            if r < 0:
                raise OSError(-r, os.strerror(-r))
            return r > 0
        return self._step(_NEXT, skip)

    def _previous(self, skip: int = 1) -> bool:
        return self._step(_PREVIOUS, skip)

    def seek_head(self) -> None:
        _check(lib.sd_journal_seek_head(self._j))

    def seek_tail(self) -> None:
        _check(lib.sd_journal_seek_tail(self._j))

    def _get(self, field: str) -> bytes:
        name = self._names.get(field)
        if name is None:
            name = self._names[field] = (field.encode(), len(field) + 1)
        r = _GET_DATA(self._j, name[0], self._bd, self._bn)
        if r < 0:
            if r == -2:  # ENOENT
                raise KeyError(field)
            raise OSError(-r, os.strerror(-r))
        return string_at(self._d.value + name[1], self._n.value - name[1])

    def _get_all(self) -> dict:
        out: dict = {}
        lib.sd_journal_restart_data(self._j)
        while _check(_ENUM_DATA(self._j, self._bd, self._bn)):
            k, _, v = string_at(self._d.value, self._n.value).partition(b"=")
            key = k.decode()
            if key in out:
                out[key] = (out[key] if isinstance(out[key], list) else [out[key]]) + [v]
            else:
                out[key] = v
        return out

    def _get_realtime(self) -> int:
        r = _REALTIME(self._j, self._bt)
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        return self._t.value

    def _get_monotonic(self) -> tuple:
        t, boot = _u64(), (ctypes.c_char * 16)()
        _check(lib.sd_journal_get_monotonic_usec(self._j, ctypes.byref(t), boot))
        return t.value, bytes(boot)

    def _get_cursor(self) -> str:
        c = ctypes.c_char_p()
        _check(lib.sd_journal_get_cursor(self._j, ctypes.byref(c)))
        try:
            return c.value.decode()
        finally:
            _libc.free(ctypes.cast(c, _p))

    def seek_cursor(self, cursor: str) -> None:
        _check(lib.sd_journal_seek_cursor(self._j, cursor.encode()))

    def test_cursor(self, cursor: str) -> bool:
        return _check(lib.sd_journal_test_cursor(self._j, cursor.encode())) > 0

    def add_match(self, match) -> None:
        b = match.encode() if isinstance(match, str) else bytes(match)
        _check(lib.sd_journal_add_match(self._j, b, len(b)))

    def add_disjunction(self) -> None:
        _check(lib.sd_journal_add_disjunction(self._j))

    def add_conjunction(self) -> None:
        _check(lib.sd_journal_add_conjunction(self._j))

    def flush_matches(self) -> None:
        lib.sd_journal_flush_matches(self._j)

    def seek_realtime(self, usec: int) -> None:
        _check(lib.sd_journal_seek_realtime_usec(self._j, int(usec)))

    @property
    def data_threshold(self) -> int:
        n = _sz()
        _check(lib.sd_journal_get_data_threshold(self._j, ctypes.byref(n)))
        return n.value

    @data_threshold.setter
    def data_threshold(self, size: int) -> None:
        _check(lib.sd_journal_set_data_threshold(self._j, size))

    def query_unique(self, field: str) -> set:
        _check(lib.sd_journal_query_unique(self._j, field.encode()))
        out, skip, enum = set(), len(field) + 1, lib.sd_journal_enumerate_unique
        lib.sd_journal_restart_unique(self._j)
        while _check(enum(self._j, self._bd, self._bn)):
            out.add(string_at(self._d.value + skip, self._n.value - skip))
        return out


class Reader(_Reader):
    """systemd-python's ``Reader`` as collectors/journal and ``watch`` use it: ``seek_realtime`` also takes a
    datetime or float seconds (journal.py upstream)."""

    def seek_realtime(self, realtime) -> None:
        if isinstance(realtime, _datetime.datetime):
            realtime = int(realtime.timestamp() * 1000000)
        elif not isinstance(realtime, int):
            realtime = int(realtime * 1000000)
        super().seek_realtime(realtime)

    def _entry(self) -> dict:
        e = {k: [x.decode("utf-8", "replace") for x in v] if isinstance(v, list) else v.decode("utf-8", "replace")
             for k, v in self._get_all().items()}
        e["__REALTIME_TIMESTAMP"] = _datetime.datetime.fromtimestamp(self._get_realtime() / 1e6,
                                                                     _datetime.timezone.utc)
        return e

    def get_previous(self, skip: int = 1) -> dict:
        return self._entry() if self._previous(skip) else {}

    def get_next(self, skip: int = 1) -> dict:
        return self._entry() if self._next(skip) else {}

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        e = self.get_next()
        if not e:
            raise StopIteration
        return e
