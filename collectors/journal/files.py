"""The journal files of a host, once found (:func:`collectors.journal._find`): probing each alone
with libsystemd, and hashing them.

:func:`_probe` opens one file read-only through :mod:`forensics.hostfs` and reads its first and
last entry with a reader of its own (:mod:`collectors.journal.sdjournal`), because ``Reader(path=)`` silently skips a
bad file and ``Reader(files=[...])`` fails whole if one is bad (docs/sources.md "Journal files and fields");
a file it cannot open is explained from its header (:mod:`collectors.journal.header`).
:func:`_final` says whether a file can still grow; :func:`_hash_all` takes the SHA-256 of the
opened files while :mod:`collectors.journal` selects their entries.
"""
from __future__ import annotations

import errno
import hashlib
import os
import time
from dataclasses import dataclass

from forensics import hostfs
from forensics.artifact import Artifact, Status, errno_name, from_oserror
from .header import header, why_unreadable

METHOD = "journal-reader"
CHUNK = 2 << 20
try:  # at import, as before privileges are dropped (a collection run as nobody in the tests)
    import collectors.journal.sdjournal as _SDJ
    _WHY = None
except (ImportError, OSError, AttributeError) as _e:  # a node whose libsystemd.so.0 is missing or unusable
    _SDJ, _WHY = None, f"{type(_e).__name__}: {_e}"


def sdj():
    """:mod:`collectors.journal.sdjournal`, the binding of the node's ``libsystemd.so.0``. Raises
    ``ImportError`` when it could not be loaded (the library missing or unloadable): :func:`unusable`
    says why, and the node's journalctl is read instead."""
    if _SDJ is None:
        raise ImportError(f"libsystemd cannot be loaded: {_WHY}")
    return _SDJ


def unusable() -> str | None:
    """Why this process cannot read journal files through libsystemd (one line), or ``None`` when it can."""
    return _WHY


@dataclass(frozen=True)
class _File:
    source: str  # as the manifest shows it: the host path, or the --journal-dir path
    root: str    # read under this root with forensics.hostfs
    path: str


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
        rec.update(size=size, header=header(os.pread(fh.fileno(), 512, 0), size))
        dup = os.dup(fh.fileno())
        try:
            r = sdj().Reader(files=[dup])  # owns dup from here on
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
                         message=why_unreadable(e, rec["header"], rec["size"]))
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


def _hash_all(records: list[dict], fds: list[int], deadline: float | None = None) -> None:
    """Set ``size`` and ``sha256`` of each record from its file; a read error is kept in the
    record's ``hash_error`` (the file's entries were still read), and so is ``not hashed: time
    budget`` for the files left once ``deadline`` (``time.monotonic()``) has passed."""
    for rec, fd in zip(records, fds):
        if deadline is not None and time.monotonic() >= deadline:
            rec["hash_error"] = "not hashed: time budget"
            continue
        try:
            rec["size"], rec["sha256"] = _hash(fd)
        except OSError as e:
            rec["hash_error"] = f"{errno_name(e.errno)}: {e.strerror or e}"
