"""The evidence bundle: opening it (directory or ``.tar.gz``), reading its files and verifying it; it is
written by :class:`forensics.bundle_write.BundleWriter` (re-exported here).

Layout (see docs/design.md "Every artifact has an outcome")::

    manifest.json            schema gpu-forensics/manifest/v1, one record per artifact
    node/...                 node facts (hostname, /etc/localtime bytes, /proc/stat, ...)
    journal/...              selected journal entries as JSON Lines, with cursors
    packages/...             dpkg.log*, apt history.log*, unattended-upgrades logs, as copied

A bundle is written into ``<out>.incomplete/`` with an ``INCOMPLETE`` marker and only renamed to
``<out>`` once ``manifest.json`` is complete, so a killed collection never leaves something that
looks whole; its ``manifest.json`` always parses, even after a full disk (:class:`forensics.output.Reserve`),
and carries ``self_sha256`` (the SHA-256 of its own canonical JSON without that key: an edit shows).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .artifact import Artifact, Status
from .bundle_open import (MANIFEST, MAX_MANIFEST, BundleError, DirWalk, bundles_in, check_manifest, invalid, plain,
                          read_bounded, scan_tree, sha256_fd, shown, unpack)
from .bundle_write import CHUNK, SCHEMA, BundleWriter, canonical_sha256, safe_rel as _safe_rel
from .output import INCOMPLETE

__all__ = ["BundleError", "Bundle", "BundleWriter", "verify", "canonical_sha256", "MANIFEST", "INCOMPLETE", "SCHEMA"]


@dataclass
class Bundle:
    """A bundle opened for reading. ``root`` is a directory holding ``manifest.json``.

    Use :meth:`open`. A ``.tar.gz`` is checked member by member and unpacked by this code (never by
    tarfile's extraction, see :mod:`forensics.bundle_open`) into a temporary directory that lives as
    long as this object. ``manifest_sha256`` is the SHA-256 of the manifest.json bytes read: the value
    ``collect`` and ``run`` print for the ticket. ``problems`` lists the links, FIFOs and devices of a
    directory bundle opened with ``strict=False`` (never opened, never followed).
    """

    root: Path
    manifest: dict
    source: Path
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)
    _arts: list[Artifact] | None = field(default=None, repr=False)
    manifest_sha256: str = ""
    files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | os.PathLike, strict: bool = True) -> "Bundle":
        """Open a bundle directory or ``.tar.gz``. Raises :class:`BundleError` (message ``invalid
        bundle: ...`` for a hostile or broken one) when ``path`` is missing, not a bundle, still
        marked incomplete, an archive member is not a plain file or directory inside the bundle or
        over the bounds of :mod:`forensics.bundle_open`, or the manifest is not a valid
        ``gpu-forensics/manifest/v1`` (:func:`forensics.bundle_open.check_manifest`). A directory
        bundle holding a link, FIFO, socket or device is refused too, unless ``strict`` is false
        (``verify``): then each is listed in ``problems``."""
        p = Path(path)
        tmp = None
        if p.name.endswith(".part"):  # BundleWriter._archive's temporary name
            raise BundleError(f"{p}: a partial archive left by a collection killed while archiving; not a bundle")
        try:
            st = os.stat(p)
        except OSError:
            raise BundleError(f"{p}: no such bundle") from None
        if stat.S_ISREG(st.st_mode):
            tmp = tempfile.TemporaryDirectory(prefix="gpu-forensics-")
            try:
                root = unpack(p, Path(tmp.name), p)
            except BaseException:
                tmp.cleanup()
                raise
        elif stat.S_ISDIR(st.st_mode):
            root = p
        else:
            raise invalid(p, "not a directory or regular file")
        try:
            return cls._read(p, root, tmp, strict)
        except BaseException:
            if tmp is not None:
                tmp.cleanup()
            raise

    @classmethod
    def _read(cls, p: Path, root: Path, tmp, strict: bool) -> "Bundle":
        files, problems = scan_tree(root, p)
        if problems and strict:
            raise invalid(p, problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        if INCOMPLETE in files:
            raise BundleError(f"{p}: bundle is marked INCOMPLETE (the collection was interrupted)")
        try:
            raw = read_bounded(root, MANIFEST, MAX_MANIFEST, p)
        except FileNotFoundError:
            inside = bundles_in(p)
            hint = (f"; it holds {'bundles' if len(inside) > 1 else 'a bundle'}: " + ", ".join(map(str, inside[:5]))
                    + (f" (and {len(inside) - 5} more)" if len(inside) > 5 else "") if inside
                    else "; is this a gpu-forensics bundle?")
            raise BundleError(f"{p}: no manifest.json here{hint}") from None
        except OSError as e:
            raise BundleError(f"{p}: manifest.json is unreadable: {e}") from e
        try:
            manifest = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise invalid(p, f"manifest.json is not valid JSON: {shown(e)}") from None
        check_manifest(manifest, p, SCHEMA)
        share_record_text(manifest.get("artifacts") or [])
        return cls(root=root, manifest=manifest, source=p, _tmp=tmp, manifest_sha256=hashlib.sha256(raw).hexdigest(),
                   files=files, problems=problems)

    def close(self) -> None:
        """Remove the temporary directory of an unpacked ``.tar.gz`` (nothing for a directory)."""
        if self._tmp is not None:
            self._tmp.cleanup()

    def artifacts(self) -> list[Artifact]:
        """All manifest records, in acquisition order (parsed once; readers ask for them often)."""
        if self._arts is None:
            self._arts = [Artifact.from_json(a) for a in self.manifest.get("artifacts", [])]
        return list(self._arts)

    def artifact_records(self) -> list[dict]:
        """:meth:`Artifact.to_json` of each of :meth:`artifacts`, in acquisition order, keys sorted as
        manifest.json writes them: the manifest's own record (the same dict, not a copy: a busy node's
        thousands of records are held once) where it holds those values, a new dict where it does not
        (a record of an older version, which lacks a key). Read-only: the dicts may be the manifest's."""
        out = []
        for raw, art in zip(self.manifest.get("artifacts", []), self.artifacts()):
            mine = art.to_json()
            out.append(raw if raw == mine else dict(sorted(mine.items())))
        return out

    def path(self, rel: str) -> Path:
        """Real path of the stored artifact ``rel`` (no check that it exists)."""
        return self.root / _safe_rel(rel)

    def json(self, rel: str, problems: list | None = None, kind: type | None = dict, shared: bool = False):
        """The stored JSON file ``rel``, parsed: the one way a reader takes JSON out of the bundle.

        Returns the value when it is a ``kind`` (``dict`` by default: a JSON object; ``list``; ``None``
        takes any value), else ``None``: when the file is absent (nothing appended: its manifest record
        says why), cannot be read or parsed (``{"artifact": rel, "message": "cannot read: <why>"}``
        appended to ``problems`` when given; a nesting too deep for the parser counts as unparsable), or
        holds another type (``"not a JSON object"`` / ``"not a JSON array"``). ``shared``: its keys and short
        strings are interned (:func:`shared_strings`), for a reader that holds many files of one shape (a
        busy node's thousand container records: half the memory). Raises nothing."""
        try:
            value = json.loads(self.path(rel).read_bytes())
            if shared:
                value = shared_strings(value)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as e:
            why = f"cannot read: {shown(e)}"
        else:
            if kind is None or isinstance(value, kind):
                return value
            why = f"not a JSON {'array' if kind is list else 'object' if kind is dict else kind.__name__}"
        if problems is not None:
            problems.append({"artifact": rel, "message": why})
        return None

    def find(self, prefix: str) -> list[Artifact]:
        """Records whose bundle path starts with ``prefix`` and that hold data (collected or truncated)."""
        return [a for a in self.artifacts()
                if a.path and a.path.startswith(prefix) and a.status in (Status.COLLECTED, Status.TRUNCATED)]

    def records(self, prefix: str) -> list[Artifact]:
        """Every record (any status) whose bundle path or source starts with ``prefix``."""
        return [a for a in self.artifacts() if (a.path or "").startswith(prefix) or a.source.startswith(prefix)]


def verify(path: "str | os.PathLike | Bundle") -> list[str]:
    """Recompute every hash of the bundle at ``path`` (or of an open :class:`Bundle`).

    Returns a list of problems, empty when the bundle is intact: ``changed: REL`` (hash or size
    differs), ``removed: REL``, ``added: REL`` (a file the manifest does not list), ``not a regular
    file: REL (a FIFO)`` (a link, FIFO or device: never opened nor followed) and ``manifest: ...``
    (its ``self_sha256`` no longer matches). Raises :class:`BundleError` when ``path`` is not a
    bundle at all. An empty list proves only that the files match the manifest: a bundle whose files
    and manifest were both rewritten and resealed verifies too; only ``manifest_sha256`` compared
    with the value recorded in the ticket tells.
    """
    b = path if isinstance(path, Bundle) else Bundle.open(path, strict=False)
    problems = list(b.problems)
    if b.manifest.get("self_sha256") != canonical_sha256(b.manifest):
        problems.append("manifest: manifest.json was changed after collection (self_sha256 mismatch)")
    listed = set()
    with DirWalk(b.root) as walk:
        for a in b.artifacts():
            if not a.path:
                continue
            listed.add(_safe_rel(a.path))
            try:
                fd = walk.open(_safe_rel(a.path))
            except OSError as e:
                special = f"not a regular file: {plain(a.path)} ("
                if e.errno in (errno.ENOENT, errno.ENOTDIR):
                    problems.append(f"removed: {plain(a.path)}")
                elif not any(p.startswith(special) for p in b.problems):  # listed once, by the walk
                    problems.append(f"{special}{e.strerror})")
                continue
            if sha256_fd(fd, CHUNK) != a.sha256:
                problems.append(f"changed: {plain(a.path)}")
    for rel in b.files:
        if rel != MANIFEST and rel not in listed:
            problems.append(f"added: {plain(rel)}")
    return sorted(set(problems))


#: strings up to this many characters are interned by :func:`shared_strings` (names, paths, flags; not messages)
SHARED_MAX = 64


#: the artifact records' keys whose text repeats from record to record (a status, a method, an errno's message)
_REPEATED = ("status", "method", "message")


def share_record_text(records: list) -> None:
    """In place, one copy of each text that repeats across the manifest's artifact ``records`` (checked
    dicts): their :data:`_REPEATED` values and their notes (a redaction rule's note is the same sentence on
    thousands of a busy node's records; the parser makes a new string for each). The values are equal, so
    nothing a reader or ``self_sha256`` sees changes; a local memo, not :func:`sys.intern`, so that a
    unique path is not kept in the interpreter's table. Raises nothing."""
    memo: dict = {}
    for r in records:
        for k in _REPEATED:
            if isinstance(v := r.get(k), str):
                r[k] = memo.setdefault(v, v)
        if isinstance(notes := r.get("notes"), list):
            notes[:] = [memo.setdefault(n, n) if isinstance(n, str) else n for n in notes]


def shared_strings(v):
    """``v`` (parsed JSON) with every key and every string of at most :data:`SHARED_MAX` characters
    :func:`sys.intern`-ed: one copy of each name however many records repeat it. Raises RecursionError for
    a nesting deeper than the interpreter's limit (the parser's own limit is the same)."""
    if isinstance(v, dict):
        return {sys.intern(k): shared_strings(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shared_strings(x) for x in v]
    return sys.intern(v) if isinstance(v, str) and len(v) <= SHARED_MAX else v
