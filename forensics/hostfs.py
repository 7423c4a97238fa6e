"""Read-only access to the host's files under ``--root``, never following a link out of it.

The tool runs as root on a production node and reads trees it does not own (a container's root file
system belongs to whoever built the image). Every path is therefore resolved component by component,
the way the kernel would resolve it after ``chroot(root)``: absolute symlink targets restart at
``root``, ``..`` never climbs above ``root``, and the final file is checked with ``lstat`` to be a regular
file before it is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (and again with ``fstat`` after), so a FIFO
or a device named like a log is never opened and never blocks the collector. Nothing here writes, creates or changes anything on the host: files
and directories are opened with ``O_NOATIME`` when running as root, so not even their atime moves;
the one exception is a symlink met on the way, whose atime the kernel updates when its target is read
(readlink has no O_NOATIME; unavoidable).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_SYMLINKS = 40  # the kernel's own limit (MAXSYMLINKS, fs/namei.c)


class NotRegularFile(OSError):
    """The path exists but is not a regular file (FIFO, socket, device, directory)."""


def resolve(root: str | os.PathLike, path: str) -> Path:
    """Resolve ``path`` (as seen on the host, e.g. ``/etc/localtime``) inside ``root``.

    Returns the real path on this machine, which is always ``root`` or below it. Symlinks are
    followed, but an absolute target is taken relative to ``root`` and ``..`` stops at ``root``.
    Missing components are kept as-is, so the caller's ``open`` reports ENOENT.

    Raises ``OSError(ELOOP)`` after :data:`MAX_SYMLINKS` links.
    """
    return Path(_resolve(root, path))


def _resolve(root: str | os.PathLike, path: str) -> str:
    """:func:`resolve` as a plain string (what ``os.open`` takes; no pathlib on the per-file path)."""
    root_s = os.path.abspath(root)
    base = "" if root_s == "/" else root_s  # paths below root are base + "/" + ...
    parts = [p for p in str(path).split("/") if p not in ("", ".")]
    parts.reverse()  # a stack: the next component is parts[-1]
    resolved: list[str] = []
    reals: list[str] = [base]  # reals[i]: the real path of resolved[:i] (plain strings: pathlib is slow)
    hops = 0
    while parts:
        name = parts.pop()
        if name == "..":
            if resolved:
                resolved.pop()
                reals.pop()
            continue
        candidate = reals[-1] + "/" + name
        try:
            st = os.lstat(candidate)
        except OSError:
            resolved.append(name)
            resolved.extend(p for p in reversed(parts) if p != "..")  # missing: let open() report it
            break
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(path))
            target = os.readlink(candidate)
            tparts = [p for p in target.split("/") if p not in ("", ".")]
            if target.startswith("/"):
                resolved = []
                reals = [base]
            parts.extend(reversed(tparts))
            continue
        resolved.append(name)
        reals.append(candidate)
    return root_s if not resolved else base + "/" + "/".join(resolved)


def readlink(root: str | os.PathLike, path: str) -> str | None:
    """Return the target text of the symlink at ``path`` under ``root`` (its parent resolved
    safely), or ``None`` when it is not a symlink. Raises ``OSError`` when it does not exist."""
    parent = resolve(root, os.path.dirname(path.rstrip("/")) or "/")
    p = parent / os.path.basename(path.rstrip("/"))
    st = os.lstat(p)
    return os.readlink(p) if stat.S_ISLNK(st.st_mode) else None


def open_regular(root: str | os.PathLike, path: str):
    """Open the regular file at ``path`` under ``root`` for binary reading.

    Returns a file object. Raises ``OSError`` (ENOENT, EACCES, ELOOP, ...) or
    :class:`NotRegularFile` when the final component is a FIFO, socket, device or directory: that is
    seen by ``lstat`` before anything is opened (opening a device can act on it), and checked again with
    ``fstat`` on what was opened. ``O_NONBLOCK`` guarantees that even a FIFO swapped in between
    ``lstat`` and ``open`` never blocks; it is cleared again once the file is known to be regular.
    """
    real = _resolve(root, path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if os.geteuid() == 0:
        # Leave atime alone: evidence of when a file was last read belongs to the host, not to us.
        # (O_NOATIME needs file ownership or CAP_FOWNER, so only root asks for it.)
        flags |= getattr(os, "O_NOATIME", 0)
    try:
        # a FIFO or device is refused before it is opened: opening one can act (a watchdog arms, a tape rewinds)
        st = os.lstat(real)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):  # a link: O_NOFOLLOW's ELOOP says it
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", str(path))
        fd = os.open(real, flags)
    except FileNotFoundError:
        link = _link_target(root, path)
        if link is None:
            raise
        raise FileNotFoundError(errno.ENOENT, f"a symlink to {link[:300]!r}, which is not there under the root (a link is "
                                "followed inside the root only, as the node sees it from its own root)", str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "char device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "other"


def listdir(root: str | os.PathLike, path: str) -> list[str]:
    """Sorted names in the directory at ``path`` under ``root``. Raises ``OSError``.

    The directory is opened (after :func:`resolve`) with ``O_DIRECTORY|O_NOFOLLOW``, so a final
    component swapped for a symlink in between is refused (ELOOP/ENOTDIR), and as root with
    ``O_NOATIME``, so that listing it leaves its atime alone; the names are read from that descriptor.
    (Resolving a symlink on the way, like any readlink, updates the link's own atime: unavoidable.)"""
    real = _resolve(root, path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = None
    if os.geteuid() == 0 and getattr(os, "O_NOATIME", 0):
        try:
            fd = os.open(real, flags | os.O_NOATIME)
        except PermissionError:  # root without CAP_FOWNER: list it all the same
            fd = None
    if fd is None:
        fd = os.open(real, flags)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def _link_target(root, path: str) -> str | None:
    """The target text of ``path`` when that name is a symlink (its parent resolved under ``root``), else None."""
    try:
        return readlink(root, path)
    except OSError:
        return None


def present(root: str | os.PathLike, path: str) -> bool:
    """True when the name ``path`` is there under ``root`` (its parent resolved safely), whatever it is: a
    symlink counts whether or not its target is under the root. For a collector that copies a file only when
    it is there, so that a link leading out of the root is recorded (absent, saying so) rather than skipped."""
    try:
        parent = _resolve(root, os.path.dirname(path.rstrip("/")) or "/")
        os.lstat(parent + "/" + os.path.basename(path.rstrip("/")))
        return True
    except OSError:
        return False


def exists(root: str | os.PathLike, path: str) -> bool:
    """True when ``path`` under ``root`` exists (after safe resolution)."""
    try:
        os.lstat(_resolve(root, path))
        return True
    except OSError:
        return False


def read_upto(f, limit: int) -> bytes:
    """What ``f.read(limit)`` returns (at most ``limit`` bytes; fewer only at end of file) for a binary
    file object ``f`` of a regular file, read in pieces sized by its ``fstat`` size (a first piece of
    size + 1 bytes, then :data:`PIECE` bytes at a time; /proc files say 0), so that a bound of
    megabytes does not allocate megabytes for a file of a few hundred bytes. Raises ``OSError``."""
    want = min(limit, os.fstat(f.fileno()).st_size + 1)
    first = f.read(want)
    if len(first) < want or len(first) >= limit:  # end of file (read(n) is short only there), or the bound
        return first
    pieces, got = [first], len(first)
    while got < limit:
        want = min(PIECE, limit - got)
        b = f.read(want)
        pieces.append(b)
        got += len(b)
        if len(b) < want:
            break
    return b"".join(pieces)


PIECE = 1 << 16  #: bytes read at a time by :func:`read_upto` past a file's stated size


def read_text(root: str | os.PathLike, path: str, limit: int = 1 << 20) -> str:
    """Read at most ``limit`` bytes of a small text file under ``root`` as UTF-8 (errors replaced).
    Raises ``OSError`` / :class:`NotRegularFile` like :func:`open_regular`."""
    with open_regular(root, path) as f:
        return read_upto(f, limit).decode("utf-8", "replace")
