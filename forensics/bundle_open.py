"""Opening an untrusted bundle: a ``.tar.gz`` checked member by member and unpacked by hand, a
directory walked with ``lstat`` only, and files opened without following a link or blocking on a FIFO.

A bundle comes from a node that may be compromised and is opened on an engineer's machine, so
nothing here trusts the archive or tarfile's extraction filters (absent on Debian 12's python 3.11.2,
and passed by symlink chains on 3.11.7, CVE-2025-4517). Every member of an archive is checked in a
first pass that writes nothing; the second pass checks each again while it copies the member's data
into files it creates itself (``O_EXCL|O_NOFOLLOW``). Accepted: regular files and directories whose
names are already normal and relative (no ``..``, no ``.``, no empty part, no absolute name), all
inside one top folder. Refused: links, devices, FIFOs, sparse members, names that repeat or collide,
and anything beyond the bounds below, counted on the bytes really read (tarfile reads exactly a
member's declared size; a sparse member, whose header could claim gigabytes of holes, is refused by type).

Every refusal raises :class:`BundleError` with a one-line message starting ``invalid bundle:``.
"""
from __future__ import annotations

import errno
import gzip
import hashlib
import os
import stat
import tarfile
import zlib
from pathlib import Path

MAX_MEMBER = 256 << 20       #: bytes of one file of a bundle (archive member or file of a directory)
MAX_TOTAL = 1 << 30          #: bytes of all files of one bundle together
MAX_MEMBERS = 100_000        #: files and directories in one bundle
MANIFEST = "manifest.json"  #: the manifest's name at a bundle's top
MAX_MANIFEST = 32 << 20      #: bytes of manifest.json
MAX_NAME = 4096              #: characters of one member name
#: decompressed bytes of a .tar.gz read at most: the files plus their headers and padding
MAX_STREAM = MAX_TOTAL + MAX_MEMBERS * 3 * tarfile.BLOCKSIZE
CHUNK = 1 << 20
_KINDS = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


class BundleError(Exception):
    """The path is not a bundle, or the bundle is unreadable, invalid or inconsistent (exit code 3)."""


def shown(text, limit: int = 200) -> str:
    """A name from the bundle made safe for one line of a terminal: its Python ``ascii()`` form
    (quotes, every control or non-ASCII character escaped), cut at ``limit`` characters."""
    s = ascii(str(text))
    return s if len(s) <= limit else s[:limit] + "...'"


def plain(name) -> str:
    """``name`` as it is when it is printable ASCII, else its :func:`shown` form: a bundle path safe to print."""
    name = str(name)
    return name if name.isascii() and name.isprintable() else shown(name)


def invalid(where, what: str) -> BundleError:
    """The :class:`BundleError` for an invalid bundle at ``where``: ``invalid bundle: WHERE: WHAT``."""
    return BundleError(f"invalid bundle: {where}: {what}")


# -- opening one file ------------------------------------------------------------------------------
def open_regular(root: str | os.PathLike, rel: str) -> int:
    """Open ``root/rel`` read-only and return the descriptor, walking ``rel`` one component at a time
    from ``root`` with ``O_NOFOLLOW`` (no link is followed anywhere below ``root``) and opening the
    last with ``O_NONBLOCK`` (a FIFO never blocks). Raises ``OSError`` (``ELOOP`` for a link,
    ``ENOTDIR``, ``ENOENT``, ...), and ``OSError(EINVAL)`` when the file is not a regular file."""
    with DirWalk(root) as walk:
        return walk.open(rel)


_ROOT = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_file(name: str, dir_fd: int) -> int:
    f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    st = os.fstat(f)
    if not stat.S_ISREG(st.st_mode):
        os.close(f)
        raise OSError(errno.EINVAL, f"not a regular file ({_KINDS.get(stat.S_IFMT(st.st_mode), 'special')})")
    return f


def sha256_fd(fd: int, chunk: int) -> str:
    """The hex SHA-256 of what is left to read of descriptor ``fd``, read ``chunk`` bytes at a time
    (unbuffered: no copy); ``fd`` is closed. Raises ``OSError`` from a read."""
    h = hashlib.sha256()
    with os.fdopen(fd, "rb", buffering=0) as fh:
        for piece in iter(lambda: fh.read(chunk), b""):
            h.update(piece)
    return h.hexdigest()


class DirWalk:
    """The component walk of :func:`open_regular`, for many files of one bundle: the directories on the
    way to the last file opened stay open, so that the next file of the same directory is one ``openat``
    (``verify`` opens thousands). Each directory is reached from ``root`` one component at a time with
    ``O_NOFOLLOW``; only one chain of directories is held (a few descriptors). Use as a context manager;
    :meth:`open` raises what :func:`open_regular` documents."""

    def __init__(self, root: str | os.PathLike):
        self.root, self.chain, self.root_fd = root, [], None  # chain: [(name, fd)] below root

    def __enter__(self) -> "DirWalk":
        return self

    def __exit__(self, *exc) -> None:
        self._cut(0)
        if self.root_fd is not None:
            os.close(self.root_fd)
            self.root_fd = None

    def _cut(self, keep: int) -> None:
        for _, fd in self.chain[keep:]:
            os.close(fd)
        del self.chain[keep:]

    def open(self, rel: str) -> int:
        """A descriptor of the regular file ``root/rel``, opened read-only (the caller closes it)."""
        parts = [p for p in str(rel).split("/") if p]
        dirs, keep = parts[:-1], 0
        while keep < min(len(dirs), len(self.chain)) and self.chain[keep][0] == dirs[keep]:
            keep += 1
        self._cut(keep)
        if self.root_fd is None:
            self.root_fd = os.open(self.root, _ROOT)
        for part in dirs[keep:]:
            self.chain.append((part, os.open(part, _DIR, dir_fd=self.chain[-1][1] if self.chain else self.root_fd)))
        return _open_file(parts[-1], self.chain[-1][1] if self.chain else self.root_fd)


def read_bounded(root: str | os.PathLike, rel: str, limit: int, where) -> bytes:
    """The bytes of the regular file ``root/rel`` (opened with :func:`open_regular`), at most
    ``limit``. Raises ``FileNotFoundError`` when absent, :class:`BundleError` when it is longer
    than ``limit`` or not a regular file, ``OSError`` otherwise."""
    try:
        fd = open_regular(root, rel)
    except OSError as e:
        if e.errno in (errno.ENOENT,):
            raise FileNotFoundError(e.errno, e.strerror) from None
        if e.errno in (errno.ELOOP, errno.EINVAL, errno.ENOTDIR):
            raise invalid(where, f"{rel} is not a regular file: {e.strerror}") from None
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise invalid(where, f"{rel} is larger than {limit} bytes")
    return data


# -- a directory bundle ----------------------------------------------------------------------------
def scan_tree(root: str | os.PathLike, where) -> tuple[list[str], list[str]]:
    """Walk the directory bundle ``root`` with ``lstat`` only (``os.scandir``, never following a link).
    Returns ``(files, problems)``: the bundle-relative paths of its regular files, and one
    ``not a regular file: REL (a FIFO)`` problem per link, FIFO, socket or device. Raises
    :class:`BundleError` when it holds more than :data:`MAX_MEMBERS` entries, a file over
    :data:`MAX_MEMBER` bytes or more than :data:`MAX_TOTAL` bytes in all (apparent sizes, so a sparse
    file counts whole)."""
    files, problems, total, count = [], [], 0, 0
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(root, rel_dir) if rel_dir else root), key=lambda e: e.name)
        except OSError as e:
            problems.append(f"unreadable: {plain(rel_dir or '.')} ({e.strerror})")
            continue
        for e in entries:
            count += 1
            if count > MAX_MEMBERS:
                raise invalid(where, f"more than {MAX_MEMBERS} files and directories")
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                if st.st_size > MAX_MEMBER:
                    raise invalid(where, f"{shown(rel)} is larger than {MAX_MEMBER} bytes")
                total += st.st_size
                if total > MAX_TOTAL:
                    raise invalid(where, f"its files exceed {MAX_TOTAL} bytes in all")
                files.append(rel)
            else:
                problems.append(f"not a regular file: {plain(rel)} ({_KINDS.get(stat.S_IFMT(st.st_mode), 'special')})")
    return sorted(files), problems


# -- a .tar.gz bundle ------------------------------------------------------------------------------
class _Bounded:
    """The decompressed stream of a ``.tar.gz`` as tarfile reads it: forward only, each read at most
    :data:`CHUNK` bytes (a pax or GNU long-name header larger than that is refused, never read whole)
    and :data:`MAX_STREAM` bytes in all."""

    def __init__(self, raw, where):
        self.gz, self.where, self.pos = gzip.GzipFile(fileobj=raw, mode="rb"), where, 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > CHUNK:
            raise invalid(self.where, f"a tar header or read of {n} bytes (more than {CHUNK})")
        if self.pos + n > MAX_STREAM:
            raise invalid(self.where, f"the archive unpacks to more than {MAX_STREAM} bytes")
        b = self.gz.read(n)
        self.pos += len(b)
        return b

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence != 0 or pos < self.pos:
            raise invalid(self.where, "the archive asks to be read backwards")
        while self.pos < pos and self.read(min(CHUNK, pos - self.pos)):
            pass
        return self.pos


class _Checker:
    """The rules every member must pass (the same object is used by both passes, so the second
    re-checks what it writes)."""

    def __init__(self, where):
        self.where, self.top, self.count, self.total = where, None, 0, 0
        self.files: set[str] = set()
        self.dirs: set[str] = set()

    def check(self, m: tarfile.TarInfo) -> list[str]:
        """The parts of ``m``'s name below the top folder; raises :class:`BundleError`."""
        self.count += 1
        if self.count > MAX_MEMBERS:
            raise invalid(self.where, f"more than {MAX_MEMBERS} members")
        name = m.name
        parts = name.rstrip("/").split("/") if m.isdir() else name.split("/")
        if (not name or len(name) > MAX_NAME or "\0" in name or name.startswith("/")
                or any(p in ("", ".", "..") for p in parts)):
            raise invalid(self.where, f"member {shown(name)} is not a normal relative name inside the bundle")
        is_dir = m.type == tarfile.DIRTYPE
        is_file = m.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and m.sparse is None and not m.issparse()
        if not (is_dir or is_file):
            what = ("a symlink" if m.issym() else "a hard link" if m.islnk() else "a sparse file" if m.issparse()
                    else "a FIFO" if m.isfifo() else "a device" if m.isdev() else f"of tar type {m.type!r}")
            raise invalid(self.where, f"member {shown(name)} is {what}; a bundle holds only files and directories")
        if self.top is None:
            self.top = parts[0]
        if parts[0] != self.top:
            raise invalid(self.where, f"member {shown(name)} is outside the top folder {shown(self.top)}")
        if is_file and len(parts) == 1:
            raise invalid(self.where, f"member {shown(name)} is a file where the top folder should be")
        key = "/".join(parts)
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.files:
                raise invalid(self.where, f"member {shown(name)} is below a file of the same name")
        if key in self.files or (is_file and key in self.dirs):
            raise invalid(self.where, f"member {shown(name)} appears twice or is both a file and a directory")
        for i in range(1, len(parts) + is_dir):
            self.dirs.add("/".join(parts[:i]))
        if is_file:
            if m.size > MAX_MEMBER:
                raise invalid(self.where, f"member {shown(name)} is {m.size} bytes (at most {MAX_MEMBER})")
            self.total += m.size
            if self.total > MAX_TOTAL:
                raise invalid(self.where, f"its members exceed {MAX_TOTAL} bytes in all")
            self.files.add(key)
        return parts[1:]


def _members(path: Path, where):
    """``(tarfile, member)`` for each member of the ``.tar.gz`` at ``path``, read through :class:`_Bounded`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as raw:
        if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
            raise invalid(where, "not a regular file")
        if raw.read(2) != b"\x1f\x8b":
            raise BundleError(f"{where}: not a bundle directory or .tar.gz archive")
        raw.seek(0)
        try:
            with tarfile.open(fileobj=_Bounded(raw, where), mode="r:") as tf:
                while (m := tf.next()) is not None:
                    yield tf, m
        except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError) as e:
            raise invalid(where, f"cannot read the archive: {shown(e)}") from None


def unpack(path: Path, dest: Path, where) -> Path:
    """Check every member of the ``.tar.gz`` at ``path`` (a first pass that writes nothing), then
    copy each into ``dest`` (an empty directory this process made) with files created
    ``O_CREAT|O_EXCL|O_NOFOLLOW`` and at most the declared size read from each. Returns the top
    folder under ``dest``. Raises :class:`BundleError`."""
    first = _Checker(where)
    for _tf, m in _members(path, where):
        first.check(m)
    if first.top is None:
        raise invalid(where, "the archive is empty")
    second = _Checker(where)
    top = dest / first.top
    os.mkdir(top, 0o700)
    made = {""}
    for tf, m in _members(path, where):
        parts = second.check(m)
        if second.top != first.top:
            raise invalid(where, "the archive changed while it was read")
        dirs = parts if m.isdir() else parts[:-1]
        for i in range(1, len(dirs) + 1):
            d = "/".join(dirs[:i])
            if d not in made:
                os.mkdir(top / d, 0o700)
                made.add(d)
        if m.isdir():
            continue
        _copy_member(tf, m, top, "/".join(parts), where)
    return top


def _copy_member(tf: tarfile.TarFile, m: tarfile.TarInfo, top: Path, rel: str, where) -> None:
    src = tf.extractfile(m)
    fd = os.open(top / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    done = 0
    with os.fdopen(fd, "wb") as out:
        while b := src.read(min(CHUNK, m.size - done) or 1):
            done += len(b)
            if done > m.size or done > MAX_MEMBER:
                raise invalid(where, f"member {shown(m.name)} holds more than its declared {m.size} bytes")
            out.write(b)


# -- manifest.json ---------------------------------------------------------------------------------
MAX_DEPTH = 32               #: nesting of lists and objects in manifest.json
_S, _OS, _OI = (str,), (str, type(None)), (int, type(None))
#: the type of each manifest key a reader uses (``forensics.ops.pipeline.collect`` writes them)
_HEAD = {"schema": _S, "tool_version": _S, "complete": (bool,), "self_sha256": _S, "node": _OS, "node_facts": (dict,),
         "timezone": (dict,), "boot_time": _OS, "collection": (dict,), "command_line": _S, "incidents": (list,),
         "redaction": (dict,), "options": (dict,), "artifacts": (list,)}
_ARTIFACT = {"path": _OS, "source": _S, "status": _S, "method": _S, "size": _OI, "sha256": _OS, "errno": _OI,
             "message": _OS, "notes": (list,)}
_NODE_FACTS = {"hostname": _OS, "tz_name": _OS, "boot_id": _OS, "kernel": _OS, "systemd_version": _OS,
               "boot_time": _OS, "package_versions": (dict, type(None))}
_SECTIONS = {"timezone": {"name": _OS, "utc_offset": _OS}, "collection": {"start": _OS, "end": _OS, "root": _OS},
             "redaction": {"what": _OS}}
_TIMES = (("boot_time",), ("node_facts", "boot_time"), ("collection", "start"), ("collection", "end"))


def _types(where, what: str, d: dict, table: dict) -> None:
    for key, types in table.items():
        v = d.get(key)
        if key in d and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
            raise invalid(where, f"manifest.json: {what}{key} is {type(v).__name__}, not "
                                 f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}")


def _depth_ok(obj) -> bool:
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > MAX_DEPTH:
            return False
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return True


def rel_ok(rel: str) -> bool:
    """Whether ``rel`` is a bundle path: relative, already normal (no empty, ``.`` or ``..`` part), no NUL."""
    return bool(rel) and "\0" not in rel and not rel.startswith("/") and \
        all(p not in ("", ".", "..") for p in rel.split("/"))


def check_manifest(m, where, schema: str) -> dict:
    """Check the parsed ``manifest.json`` ``m``: an object of ``schema``, nested at most
    :data:`MAX_DEPTH` deep, each key a reader uses of the type the collector writes, every artifact
    record an object with a relative bundle path (or null), a known status and a 64-hex-digit
    SHA-256, every time an ISO 8601 time with an offset, every incident a ``start``/``end`` pair.
    Returns ``m``; raises :class:`BundleError` naming the first thing that is wrong."""
    from .artifact import Status
    from .timeutil import parse_iso
    if not isinstance(m, dict) or m.get("schema") != schema:
        raise BundleError(f"invalid bundle: {where}: manifest.json is not a {schema} manifest")
    if not _depth_ok(m):
        raise invalid(where, f"manifest.json is nested more than {MAX_DEPTH} levels deep")
    _types(where, "", m, _HEAD)
    _types(where, "node_facts.", m.get("node_facts") or {}, _NODE_FACTS)
    for sec, table in _SECTIONS.items():
        _types(where, f"{sec}.", m.get(sec) or {}, table)
    pv = (m.get("node_facts") or {}).get("package_versions") or {}
    if not all(isinstance(v, (str, type(None))) for v in pv.values()):
        raise invalid(where, "manifest.json: node_facts.package_versions holds a value that is not text")
    for keys in _TIMES:
        v = m
        for k in keys:
            v = (v or {}).get(k)
        if v is not None:
            try:
                parse_iso(v)
            except (ValueError, OverflowError):
                raise invalid(where, f"manifest.json: {'.'.join(keys)} {shown(v)} is not an ISO 8601 time") from None
    for i, inc in enumerate(m.get("incidents") or []):
        if not isinstance(inc, dict) or not all(isinstance(inc.get(k), str) for k in ("start", "end")):
            raise invalid(where, f"manifest.json: incidents[{i}] is not a {{start, end}} window")
        try:
            parse_iso(inc["start"]), parse_iso(inc["end"])
        except (ValueError, OverflowError):
            raise invalid(where, f"manifest.json: incidents[{i}] has a time that is not ISO 8601") from None
        _types(where, f"incidents[{i}].", inc, {"label": _OS, "text": _OS})
    statuses = {s.value for s in Status}
    for i, a in enumerate(m.get("artifacts") or []):
        if not isinstance(a, dict):
            raise invalid(where, f"manifest.json: artifacts[{i}] is {type(a).__name__}, not an object")
        if not isinstance(a.get("source"), str) or not isinstance(a.get("status"), str) or a["status"] not in statuses:
            raise invalid(where, f"manifest.json: artifacts[{i}] lacks a source or has an unknown status")
        _types(where, f"artifacts[{i}].", a, _ARTIFACT)
        if a.get("path") is not None and not rel_ok(a["path"]):
            raise invalid(where, f"manifest.json: artifacts[{i}].path {shown(a['path'])} leaves the bundle")
        sha = a.get("sha256")
        if sha is not None and (len(sha) != 64 or sha.strip("0123456789abcdef")):
            raise invalid(where, f"manifest.json: artifacts[{i}].sha256 is not a SHA-256")
        if (a.get("size") or 0) < 0 or not all(isinstance(n, str) for n in a.get("notes") or []):
            raise invalid(where, f"manifest.json: artifacts[{i}] has a negative size or a note that is not text")
    return m


def bundles_in(folder: Path) -> list[Path]:
    """The bundles directly inside ``folder`` (a directory holding ``manifest.json``, or a ``.tar.gz``
    file; links are not followed), newest first by modification time; ``[]`` when it cannot be read."""
    found = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                if (e.is_file(follow_symlinks=False) and e.name.endswith(".tar.gz")) or (
                        e.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(e.path, MANIFEST))
                        and not os.path.islink(os.path.join(e.path, MANIFEST))):
                    found.append((e.stat(follow_symlinks=False).st_mtime, Path(e.path)))
    except OSError:
        return []
    return [p for _, p in sorted(found, reverse=True)]
