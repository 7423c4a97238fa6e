"""Keeping the pages libsystemd maps of the journal files from piling up in this process's RSS
(:class:`_Pages`, used by :class:`collectors.journal.reader._ReaderSource`)."""
from __future__ import annotations

import os


def _madvise():
    """libc's ``madvise`` through ctypes (loaded once), or ``None`` where it cannot be called."""
    global _MADVISE
    if _MADVISE is None:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _MADVISE = libc.madvise
        except (OSError, AttributeError):
            _MADVISE = False
    return _MADVISE or None


_MADVISE = None


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
        #: the inodes as /proc/self/maps writes them: only a line holding one is parsed (325 lines took
        #: 0.7 ms to parse, and the pages were dropped 1,180 times over bench L)
        self.inodes = tuple({b" %d" % ino for _, _, ino in self.keys})
        self.madvise = _madvise()
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

    @staticmethod
    def _lines_with(text: bytes, needles: tuple[bytes, ...]) -> list[bytes]:
        """The lines of ``text`` that hold one of ``needles``, each once, in order."""
        starts = set()
        for needle in needles:
            at = text.find(needle)
            while at >= 0:
                starts.add(text.rfind(b"\n", 0, at) + 1)
                end = text.find(b"\n", at)
                at = -1 if end < 0 else text.find(needle, end)
        out = []
        for start in sorted(starts):
            end = text.find(b"\n", start)
            out.append(text[start:] if end < 0 else text[start:end])
        return out

    def check(self, force: bool = False) -> None:
        """Drop the journal pages when the resident file pages have grown past the limit (or now,
        with ``force``)."""
        if self.madvise is None or (not force and self._resident() - self.base < self.LIMIT):
            return
        try:
            with open("/proc/self/maps", "rb") as f:
                maps = f.read()
            for line in self._lines_with(maps, self.inodes):
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
