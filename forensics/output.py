"""Claiming a bundle's output path, and the faults of writing it (used by :class:`forensics.bundle.BundleWriter`).

A collection claims ``<out>.incomplete/`` with one ``mkdir`` (atomic: of two collections racing on
one ``--out`` only one gets it) and writes its ``INCOMPLETE`` marker there: the first line says what
it is, then ``pid:``, ``started:`` and, once it is known, ``reason:`` (why the collection stopped).
The finished bundle takes its final name without replacing anything (``renameat2`` with
``RENAME_NOREPLACE``, rename(2); ``link`` for an archive), so a bundle whose hash was printed is never
overwritten by a later one. The manifest is written here in pieces (:func:`manifest_pieces`) and its
own hash taken the same way (:func:`canonical_pieces`), without the whole text in memory.
"""
from __future__ import annotations

import ctypes
import json
import errno
import hashlib
import os
import re
import stat
import time
import tarfile
from datetime import datetime, timezone
from pathlib import Path

INCOMPLETE = "INCOMPLETE"
MARKER = "collection did not finish; this bundle is not complete\n"
#: outputs refused before anything is written: kernel file systems, where "writing a file" is a
#: kernel interface (a mkdir under /sys/fs/cgroup makes a cgroup), never a place for evidence
PSEUDO = ("/proc", "/sys")
_FD = re.compile(r"/proc/(?:self|\d+)/fd/(\d+)")  #: a descriptor's link, as /dev/stdout resolves


class BundleWriteError(OSError):
    """The bundle could not be written (full disk, read-only output, /proc or /sys).
    ``kept`` is the partial bundle directory left behind (marked ``INCOMPLETE`` with the reason),
    or ``None`` when nothing could be kept. Exit code 5 (:mod:`forensics.ops.cli`)."""

    def __init__(self, message: str, err: int | None = None, kept: Path | None = None):
        super().__init__(err, message)
        self.message, self.kept = message, kept

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return BundleWriteError, (self.message, self.errno, self.kept)


def describe(e: OSError) -> str:
    """``strerror (ENAME)`` of an ``OSError`` in one line."""
    name = errno.errorcode.get(e.errno or 0)
    return f"{e.strerror or e}" + (f" ({name})" if name else "")


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the descriptor ``fd`` (write(2) may take less than it is given, so
    it is called until nothing is left). Raises ``OSError``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def refuse_pseudo(out: Path, flag: str = "--out") -> None:
    """Raise :class:`BundleWriteError` when ``out`` (given as ``flag``) lies under /proc or /sys (after symlinks),
    unless it is a pipe or a socket: ``/dev/stdout`` of a process whose output is piped resolves to
    ``/proc/<pid>/fd/pipe:[…]``, a stream the user gave, not a kernel file."""
    real = os.path.realpath(out)
    closed = _FD.fullmatch(real)
    if closed and not os.path.exists(out):  # /dev/stdout of a process started with >&-
        raise BundleWriteError(f"{out}: file descriptor {closed.group(1)} is not open; give {flag} a file "
                               "(e.g. /var/tmp/...)", errno.EBADF)
    for p in PSEUDO:
        if (real == p or real.startswith(p + "/")) and not _stream(out):
            raise BundleWriteError(f"{out}: the output is under {p}, a kernel file system; "
                                   f"give {flag} on a real disk (e.g. /var/tmp/...)", errno.EINVAL)


def _stream(path: Path) -> bool:
    """Whether ``path`` (links followed) is a pipe or a socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def refuse_nonempty(out: Path, flag: str = "--out") -> None:
    """Raise ``FileExistsError`` (its text the line to show) unless ``out`` is absent or an empty
    folder: a file, a link, or a folder holding a bundle or reports is never written into (``demo``)."""
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise FileExistsError(f"{flag} {out}: exists and is not a folder; give a new folder, e.g. {flag} /tmp/demo-2")
    try:
        names = sorted(os.listdir(out))
    except OSError as e:
        raise FileExistsError(f"{flag} {out}: {describe(e)}") from None
    if names:
        raise FileExistsError(f"{flag} {out}: not empty (it holds {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}); "
                              "give a new or empty folder, so that no earlier bundle or report is written over")


def claim(dir_: Path) -> None:
    """Make ``dir_`` (the ``.incomplete`` directory) and its marker. Raises ``FileExistsError`` with
    what is there and what to do when it exists (another collection running, or one that stopped),
    :class:`BundleWriteError` when it cannot be made."""
    try:
        dir_.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise FileExistsError(leftover(dir_)) from None
    except OSError as e:
        raise BundleWriteError(f"cannot write the bundle at {dir_}: {describe(e)}", e.errno) from None
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        (dir_ / INCOMPLETE).write_text(f"{MARKER}pid: {os.getpid()}\nstarted: {stamp}\n")
    except OSError as e:
        raise BundleWriteError(f"cannot write the bundle at {dir_}: {describe(e)}", e.errno) from None


def marker(dir_: Path) -> dict:
    """The ``key: value`` lines of ``dir_``'s INCOMPLETE marker (empty when unreadable)."""
    try:
        text = (dir_ / INCOMPLETE).read_text(errors="replace")[:4096]
    except OSError:
        return {}
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def _alive(pid: str | None) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return int(pid) != os.getpid()


def leftover(dir_: Path) -> str:
    """One line on an existing ``.incomplete`` directory: a running collection's, or a leftover. A claim is a
    mkdir and then the marker, so a marker without a pid is waited for (up to 2 s) before it is read as a
    leftover: two collections started together must not call the running one "left"."""
    m = marker(dir_)
    for _ in range(20):
        if m.get("pid"):
            break
        time.sleep(0.1)
        m = marker(dir_)
    if _alive(m.get("pid")):
        return (f"{dir_} is being written by another collection (pid {m['pid']}, started {m.get('started', '?')}); "
                "wait for it to finish or choose another --out")
    if not m and not os.path.lexists(dir_):  # gone while it was looked at: the other collection finished with it
        return (f"{dir_} was being written by another collection, which finished meanwhile (its bundle is at this "
                "--out); choose another --out")
    why = f" ({m['reason']})" if m.get("reason") else ""
    return (f"{dir_} is left from a collection that did not finish{why}: it is a partial bundle, kept as evidence; "
            "move it away (or delete it) to reuse this --out, or choose another --out")


def mark(dir_: Path, reason: str) -> None:
    """Add ``reason:`` to ``dir_``'s INCOMPLETE marker (re-creating it when missing). Best effort: on a
    full disk the marker made at the start stays as it was."""
    m = marker(dir_)
    m["reason"] = " ".join(reason.split())
    body = MARKER + "".join(f"{k}: {v}\n" for k, v in m.items())
    try:
        with open(dir_ / INCOMPLETE, "r+" if (dir_ / INCOMPLETE).exists() else "w") as fh:
            fh.write(body)
            fh.truncate()
    except OSError:
        pass


def _renameat2():
    try:
        f = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return f


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (``FileExistsError``), atomically where the
    file system offers ``RENAME_NOREPLACE`` (rename(2); ext4, xfs, btrfs, tmpfs), else by a check
    just before the rename."""
    f = _renameat2()
    if f is not None:
        at_fdcwd, noreplace = -100, 1
        if f(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), noreplace) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(code, os.strerror(code), str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def canonical_pieces(head: dict, artifacts: list):
    """The text :func:`forensics.bundle.canonical_sha256` hashes, for ``head`` plus ``"artifacts"``, in pieces: the
    same bytes as ``json.dumps(manifest, sort_keys=True, separators=(",", ":"))`` (a dict is
    ``{`` + ``"key":value`` joined by ``,`` + ``}``), without the whole text in memory."""
    compact = {"sort_keys": True, "separators": (",", ":")}
    for i, key in enumerate(sorted([*head, "artifacts"])):
        yield ("{" if i == 0 else ",") + json.dumps(key) + ":"
        if key == "artifacts":
            yield "["
            for j, a in enumerate(artifacts):
                yield ("," if j else "") + json.dumps(a.to_json(), **compact)
            yield "]"
        else:
            yield json.dumps(head[key], **compact)
    yield "}"


def manifest_pieces(head: dict, artifacts: list):
    """manifest.json in pieces: sorted keys, two-space indent, one artifact record per line."""
    for i, key in enumerate(sorted([*head, "artifacts"])):
        yield ("{\n  " if i == 0 else ",\n  ") + json.dumps(key) + ": "
        if key == "artifacts":
            yield "["
            for j, a in enumerate(artifacts):
                yield ("," if j else "") + "\n    " + json.dumps(a.to_json(), sort_keys=True)
            yield "\n  ]" if artifacts else "]"
        else:
            yield json.dumps(head[key], indent=2, sort_keys=True).replace("\n", "\n  ")
    yield "\n}\n"


def write_manifest(path: Path, head: dict, artifacts: list) -> str:
    """Write manifest.json (:func:`manifest_pieces`) at ``path``, whole or not at all: into
    ``<path>.tmp``, renamed over ``path`` once written (rename(2) is atomic), so that a full disk, a
    signal or a kill while writing leaves the manifest that was there. Returns its SHA-256 (hex).
    Raises ``OSError`` (the ``.tmp`` removed)."""
    digest = hashlib.sha256()
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            for piece in manifest_pieces(head, artifacts):
                b = piece.encode()
                fh.write(b)
                digest.update(b)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


RESERVE = ".manifest-reserve"  #: the file holding a partial bundle's manifest space (:class:`Reserve`)
HEAD_ROOM = 16 << 10           #: bytes held for the manifest's head (node facts, argv: about 4 KiB), and held ahead
UNDER_WAY = "collection under way, or stopped before it could say why (killed)"  #: the first manifest's reason


def record_size(artifact) -> int:
    """Bytes the record of ``artifact`` takes in manifest.json (:func:`manifest_pieces`)."""
    return len(json.dumps(artifact.to_json(), sort_keys=True)) + 6


class Reserve:
    """Space held in a bundle directory ``dir_`` for its manifest, so that a partial bundle's manifest
    always parses and lists what it holds: one is written as soon as the directory is claimed
    (:meth:`open`), each later one replaces it whole (:func:`write_manifest`), and the file
    :data:`RESERVE` is grown with posix_fallocate(3) as records are made (its blocks are its own: a
    full disk cannot take them), given back (:meth:`release`) just before the last one is written."""

    def __init__(self, dir_: Path):
        self.path, self.need, self.held = dir_ / RESERVE, HEAD_ROOM, 0
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        failed = self.grow(0)
        if failed:
            self.release()
            raise failed

    @classmethod
    def open(cls, manifest: Path, head: dict) -> "Reserve":
        """Write the first manifest (``head``, no records) at ``manifest`` and hold room beside it.
        Raises :class:`BundleWriteError` (the directory marked with it) when the disk has no room."""
        try:
            write_manifest(manifest, head, [])
            return cls(manifest.parent)
        except OSError as e:
            err = BundleWriteError(f"cannot write the bundle at {manifest.parent}: {describe(e)}", e.errno, manifest.parent)
            mark(manifest.parent, err.message)
            raise err from None

    def grow(self, size: int) -> OSError | None:
        """Count ``size`` more bytes of manifest; hold :data:`HEAD_ROOM` beyond them when short. The
        ``OSError`` when it cannot (a full disk), else ``None``."""
        self.need += size
        if self.need > self.held and self.fd is not None:
            try:
                os.posix_fallocate(self.fd, 0, self.need + HEAD_ROOM)
            except OSError as e:
                return e
            self.held = self.need + HEAD_ROOM
        return None

    def release(self) -> int:
        """Remove the file; the bytes it held (0 when released already). Never raises."""
        held, self.held = (self.held if self.fd is not None else 0), 0
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            try:
                os.unlink(self.path)
            except OSError:
                pass
        return held


def write_partial_manifest(path: Path, head: dict, artifacts: list, room: int) -> None:
    """A partial bundle's manifest at ``path`` (:func:`write_manifest`); when the disk is too full for all
    of it, as many of the first records as ``room`` bytes (the reserve given back) hold, ``incomplete_reason``
    saying so; else the manifest there stays (it parses). Never raises ``OSError``."""
    try:
        write_manifest(path, head, artifacts)
        return
    except OSError:
        pass
    room -= sum(len(p.encode()) for p in manifest_pieces(head, [])) + 200
    k = 0
    while k < len(artifacts) and room >= record_size(artifacts[k]):
        room -= record_size(artifacts[k])
        k += 1
    head = {**head, "incomplete_reason": f"{head.get('incomplete_reason')}; manifest.json lists the first {k} of "
                                         f"{len(artifacts)} records (the disk was full)"}
    try:
        write_manifest(path, head, artifacts[:k])
    except OSError:
        pass


def archive(dir_: Path, out: Path) -> None:
    """Archive the bundle directory ``dir_`` (its INCOMPLETE marker left out) into ``<out>.part``, and
    give it the name ``out`` only once complete, never replacing anything (``link``); the ``.part``
    is removed either way. Raises ``FileExistsError`` when ``out`` exists, ``OSError`` when writing fails."""
    tmp = out.with_name(out.name + ".part")
    try:
        with tarfile.open(tmp, "w:gz") as tf:
            tf.add(dir_, arcname=out.name[: -len(".tar.gz")],
                   filter=lambda m: None if m.name.endswith("/" + INCOMPLETE) else m)
        os.link(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
