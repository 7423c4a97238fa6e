"""A report's file, written whole or not at all (:func:`put`): into ``<name>.part`` beside it, renamed over it
once complete; a link the user named stays a link, and this process's own standard output or error is written
at its place (:func:`target`). Used by :mod:`reports.render` for every report and the suggested rules."""
from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

from forensics import output

NAME_MAX = 255  #: bytes of a file name (Linux's file systems): a ``.part`` name is cut to fit


def target(path: Path) -> tuple[str, Path, int | None]:
    """How :func:`put` writes ``path``: ``("fd", path, 1 or 2)`` when it is this process's standard output or
    error and a file or a pipe (``--html /dev/stdout`` with ``> page.html``, ``>> log`` or ``| less``: written
    at that descriptor's place, never truncated nor reopened); ``("through", target, None)`` for a target that
    exists and is no regular file (a pipe, a terminal, /dev/null); else ``("file", target, None)``: the regular
    file, or the name to create, at the end of ``path``'s links (a link the user named stays a link)."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISCHR(st.st_mode):
        for fd in (1, 2):
            try:
                own = os.fstat(fd)
            except OSError:
                continue
            if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
                return "fd", path, fd
    try:
        end = Path(os.path.realpath(path)) if path.is_symlink() else path
    except OSError:  # a name too long, a folder it may not look into: put's own open says so
        end = path
    if st is not None and not stat.S_ISREG(st.st_mode):
        return "through", end, None
    return "file", end, None


def put(path: Path, parts) -> None:
    """Write the pieces ``parts`` to ``path`` (UTF-8), making its directory: text, or bytes already in
    UTF-8 (the picture as the chart's child sent it, the page's end from its spill file), written as
    they are. Where it goes is :func:`target`'s. A file is written whole or not at all: into
    ``<name>.part`` beside it (created afresh, never through a link), renamed over it once complete and
    removed when writing stops (an error, a signal), so that an interrupted ``run`` never leaves half a report
    that reads as the whole one; a report replaced keeps its mode. Where no ``.part`` can be made (a folder
    the report may not be created in) an existing report is written over in place, once the new one is whole
    in memory. ``OSError`` names ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kind, dest, own = target(path)
    part: Path | None = dest
    try:
        if own is not None:
            fd = os.dup(own)
        elif kind == "through":  # a pipe, a terminal, a device: opened as it is
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        else:
            fd, part = _open_part(dest)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        with (io.BytesIO() if part is None else open(fd, "wb", closefd=False)) as out:
            for piece in parts:
                out.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
            if part is None:  # in place: the old report stays until the new one is whole
                os.ftruncate(fd, 0)
                output.write_all(fd, out.getbuffer())
        os.close(fd)
        fd = -1
        if part is not None and part != dest:
            os.replace(part, dest)
    except BaseException as e:
        if fd >= 0:
            os.close(fd)
        if part is not None and part != dest:
            part.unlink(missing_ok=True)
        if isinstance(e, OSError):  # the report's, whatever file it came from (a spill file beside it)
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def _open_part(target: Path) -> tuple[int, Path | None]:
    """``(fd, part)``: ``<target>.part`` created afresh for :func:`put` (a stale one, or a link someone put
    there, removed first: never written through), with the mode of the ``target`` it will replace; where it
    cannot be created (``EACCES``, ``EPERM``, ``EROFS``) but ``target`` is a regular file, ``target`` itself,
    opened to be written over, and ``None``."""
    name = os.fsencode(target.name)[: NAME_MAX - len(b".part")] + b".part"
    part = target.with_name(os.fsdecode(name))
    try:
        old = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        old = None
    try:
        part.unlink(missing_ok=True)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if old is None or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        return os.open(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC), None
    if old is not None:
        os.fchmod(fd, old)  # a private report stays private
    return fd, part
