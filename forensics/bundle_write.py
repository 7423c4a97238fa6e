"""Writing the evidence bundle (:class:`BundleWriter`); :mod:`forensics.bundle` opens and verifies it.

A bundle is written into ``<out>.incomplete/`` with an ``INCOMPLETE`` marker and only renamed to
``<out>`` once ``manifest.json`` is complete, so a killed collection never leaves something that
looks whole; its ``manifest.json`` always parses, even after a full disk (:class:`forensics.output.Reserve`),
and carries ``self_sha256`` (the SHA-256 of its own canonical JSON without that key: an edit shows).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator

from . import __version__, hostfs, output, tailcopy
from .artifact import Artifact, Status, from_oserror
from .bundle_open import MANIFEST
from .output import INCOMPLETE, BundleWriteError, canonical_pieces as _canonical_pieces


SCHEMA = "gpu-forensics/manifest/v1"
CHUNK = 1 << 20


def safe_rel(rel: str) -> str:
    """``rel`` as a normal relative path inside the bundle; raises ValueError for an absolute path, ``..`` or an empty one."""
    parts = rel.split("/")
    if parts[0] and "" not in parts and "." not in parts and ".." not in parts:
        return rel  # already normal and relative: what the PurePosixPath below would return
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"bundle path must be relative and inside the bundle: {rel!r}")
    return str(p)


def canonical_sha256(manifest: dict) -> str:
    """SHA-256 (hex) of ``manifest`` without its ``self_sha256`` key, as sorted compact JSON."""
    body = {k: v for k, v in manifest.items() if k != "self_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class _HashingWriter(io.RawIOBase):
    def __init__(self, f, failed):
        self.f, self.h, self.size, self.failed = f, hashlib.sha256(), 0, failed

    def writable(self):
        return True

    def write(self, b):
        b = bytes(b)
        try:
            self.f.write(b)
        except OSError as e:
            raise self.failed(e) from None
        self.h.update(b)
        self.size += len(b)
        return len(b)


class BundleWriter:
    """Write artifacts into a new bundle and record each one in the manifest.

    ``out`` is the final path: a directory, or a file ending in ``.tar.gz``. Raises
    ``FileExistsError`` (its text says what is there and what to do) when ``out`` or
    ``<out>.incomplete`` already exists: a bundle is never overwritten, and of two collections racing
    on one ``out`` only one claims it (:func:`forensics.output.claim`). Raises
    :class:`~forensics.output.BundleWriteError` when the output cannot be written (under /proc or /sys,
    read-only, full); a write that fails later raises it too and sets :attr:`write_error`.
    Nothing is written outside ``out``, ``<out>.incomplete`` and (archiving) ``<out>.part``.
    """

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.tar = self.out.name.endswith(".tar.gz")
        output.refuse_pseudo(self.out)
        if os.path.lexists(self.out):
            raise FileExistsError(f"{self.out} already exists (a bundle is never overwritten); "
                                  "choose another --out")
        stem = self.out.name[: -len(".tar.gz")] if self.tar else self.out.name
        self.dir = self.out.with_name(stem + ".incomplete")
        output.claim(self.dir)
        self.artifacts: list[Artifact] = []
        self.meta: dict = {}
        self.write_error: BundleWriteError | None = None  #: the first failed write, if any
        self._dirs: set[str] = set()  #: bundle-relative directories already created (mkdir once each)
        self._reserve = output.Reserve.open(self.dir / MANIFEST, self._head(output.UNDER_WAY))

    def _head(self, reason: str | None) -> dict:
        """The manifest's head (``meta``, the schema): complete without ``reason``, else incomplete for it."""
        return {**{k: v for k, v in self.meta.items() if k != "artifacts"}, "schema": SCHEMA, "tool_version": __version__, "complete": reason is None,
                **({"incomplete_reason": reason} if reason else {})}

    def _failed(self, e: OSError) -> BundleWriteError:
        """The :class:`BundleWriteError` for a failed write (kept in :attr:`write_error`)."""
        if isinstance(e, BundleWriteError):
            return e
        err = BundleWriteError(f"cannot write the bundle at {self.dir}: {output.describe(e)}", e.errno, self.dir)
        self.write_error = self.write_error or err
        return err

    def abandon(self, reason: str) -> Path:
        """Stop: write a manifest with ``complete: false`` and ``incomplete_reason`` (when the disk
        allows) and put ``reason`` in the INCOMPLETE marker; the directory keeps its ``.incomplete``
        name. Returns that directory. Never raises ``OSError``."""
        output.write_partial_manifest(self.dir / MANIFEST, self._head(reason), self.artifacts, self._reserve.release())
        output.mark(self.dir, reason)
        return self.dir

    # -- writing ---------------------------------------------------------------------------------
    def _target(self, rel: str) -> str:
        rel = safe_rel(rel)
        parent = os.path.dirname(rel)
        if parent not in self._dirs:
            try:
                os.makedirs(os.path.join(self.dir, parent), exist_ok=True)
            except OSError as e:
                raise self._failed(e) from None
            self._dirs.add(parent)
        return os.path.join(self.dir, rel)

    def _open(self, rel: str):
        """``rel``'s file in the bundle, opened for writing; :class:`BundleWriteError` when it cannot be."""
        target = self._target(rel)
        try:
            return open(target, "wb")
        except OSError as e:
            raise self._failed(e) from None

    def copy(self, root: str | os.PathLike, source: str, rel: str, method: str = "copy",
             limit: int | None = None, notes: tuple[str, ...] = (), keep: list[bytes] | None = None,
             transform=None, tail: bool = False) -> Artifact:
        """Copy the host file ``source`` (read under ``root`` via :mod:`forensics.hostfs`) to ``rel``.

        At most ``limit`` bytes are copied; a longer file is recorded as ``truncated``. Returns the
        recorded :class:`Artifact` (absent / unreadable / error on ``OSError``, never raises for a
        bad source). With ``keep`` (a list), every chunk written is also appended to it, so that a
        caller can parse what was stored without reading the bundle back. With ``transform`` (a
        function ``bytes -> (bytes, notes)``, e.g. a redaction), the file is read whole (up to
        ``limit``) and only what ``transform`` returns is written, with its notes added (one starting
        ``truncated:`` records it truncated): nothing of the original reaches the bundle first. With ``tail`` (and ``limit``), a longer file keeps its
        last ``limit`` bytes from a line boundary instead, noted (:mod:`forensics.tailcopy`) as truncated.
        """
        try:
            with hostfs.open_regular(root, source) as src:
                skipped = tailcopy.seek_tail(src, limit) if tail and limit is not None else 0
                notes = tuple(notes) + ((tailcopy.note(skipped, limit),) if skipped else ())
                if transform is not None:
                    return self._copy_transformed(src, source, rel, method, limit, notes, transform, skipped)
                return self._copy_plain(src, source, rel, method, limit, notes, keep, skipped)
        except BundleWriteError:
            raise
        except OSError as e:
            return self.record(from_oserror(source, method, e, notes))

    def _copy_plain(self, src, source, rel, method, limit, notes, keep, skipped) -> Artifact:
        with self._open(rel) as out:
            w = _HashingWriter(out, self._failed)
            remaining, truncated = limit, False
            try:
                while True:
                    n = CHUNK if remaining is None else min(CHUNK, remaining)
                    if n == 0:
                        truncated = bool(src.read(1))
                        break
                    b = hostfs.read_upto(src, n)  # src.read(n), without allocating n for a short file
                    if not b:
                        break
                    w.write(b)
                    if keep is not None:
                        keep.append(b)
                    if remaining is not None:
                        remaining -= len(b)
            except BundleWriteError:
                raise
            except OSError as e:
                a = from_oserror(source, method, e, notes)
                return self.record(Artifact(rel, source, Status.TRUNCATED if w.size else a.status, method,
                                            w.size, w.h.hexdigest(), a.errno, a.message, notes))
        notes += (f"only the first {limit} bytes were copied",) if truncated else ()
        status = Status.TRUNCATED if truncated or skipped else Status.COLLECTED
        return self.record(Artifact(rel, source, status, method, w.size, w.h.hexdigest(), notes=notes))

    def _copy_transformed(self, src, source, rel, method, limit, notes, transform, skipped) -> Artifact:
        try:
            data = src.read() if limit is None else hostfs.read_upto(src, limit + 1)
        except OSError as e:
            return self.record(from_oserror(source, method, e, notes))
        truncated = limit is not None and len(data) > limit
        data, more = transform(data[:limit] if truncated else data)
        notes = tuple(notes) + tuple(more) + ((f"only the first {limit} bytes were copied",) if truncated else ())
        cut = truncated or skipped or any(n.startswith("truncated:") for n in more)  # as create() reads its notes
        return self.write_bytes(rel, data, source, method, notes, status=Status.TRUNCATED if cut else Status.COLLECTED)

    @contextmanager
    def create(self, rel: str, source: str, method: str, notes: list[str] | None = None,
               text: bool = True) -> Iterator[io.IOBase]:
        """Context manager for a generated artifact (JSON Lines, a command's output).

        Yields a text (UTF-8) or binary stream. On normal exit the artifact is recorded as collected,
        or as truncated when the caller appended a note starting with ``truncated:`` to ``notes``;
        an exception inside the block records an ``error`` artifact and is re-raised.
        """
        notes = notes if notes is not None else []
        with self._open(rel) as raw:
            w = _HashingWriter(raw, self._failed)
            stream = io.TextIOWrapper(io.BufferedWriter(w), encoding="utf-8", newline="\n") if text \
                else io.BufferedWriter(w)
            try:
                yield stream
                stream.flush()
            except BaseException as e:
                try:
                    stream.flush()
                except OSError:
                    pass
                self.record(Artifact(rel, source, Status.ERROR, method, w.size, w.h.hexdigest(),
                                     message=f"{type(e).__name__}: {e}", notes=tuple(notes)))
                raise
        status = Status.TRUNCATED if any(n.startswith("truncated:") for n in notes) else Status.COLLECTED
        self.record(Artifact(rel, source, status, method, w.size, w.h.hexdigest(), notes=tuple(notes)))

    def write_json(self, rel: str, obj, source: str, method: str, notes: tuple[str, ...] = (),
                   compact: bool = False) -> Artifact:
        """Write ``obj`` as JSON (keys sorted; indented, or with ``compact`` on one line, which the C
        encoder writes several times faster) to ``rel`` and record it as collected; returns the
        :class:`Artifact`. Raises ``OSError`` when the bundle cannot be written."""
        data = (json.dumps(obj, sort_keys=True, default=str, separators=(",", ":")) if compact
                else json.dumps(obj, indent=2, sort_keys=True, default=str)).encode() + b"\n"
        return self.write_bytes(rel, data, source, method, notes)

    def write_bytes(self, rel: str, data: bytes, source: str, method: str, notes: tuple[str, ...] = (),
                    status: Status = Status.COLLECTED, message: str | None = None) -> Artifact:
        """Write ``data`` (generated in memory) to ``rel`` and record it as ``status`` (with ``message``: what
        went wrong, for an ``error`` whose partial output is kept); returns the :class:`Artifact`. Raises
        ``ValueError`` for a ``rel`` outside the bundle, and ``OSError`` when the bundle cannot be written
        (recorded first, like :meth:`create`, as an ``error`` artifact)."""
        try:
            fd = os.open(self._target(rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:  # the file open(path, "wb") creates, written whole without a file object
                output.write_all(fd, data)
            finally:
                os.close(fd)
        except OSError as e:
            err = self._failed(e)
            self.record(Artifact(rel, source, Status.ERROR, method, message=f"{type(e).__name__}: {err}",
                                 notes=tuple(notes)))
            raise err from None
        return self.record(Artifact(rel, source, status, method, len(data),
                                    hashlib.sha256(data).hexdigest(), message=message, notes=tuple(notes)))

    def record(self, artifact: Artifact) -> Artifact:
        """Add one manifest record (any status) and return it; a reserve that cannot grow is a write error."""
        self.artifacts.append(artifact)
        if self.write_error is None and (full := self._reserve.grow(output.record_size(artifact))):
            self._failed(full)
        return artifact

    def finish(self) -> tuple[Path, str]:
        """Write ``manifest.json``, drop the INCOMPLETE marker and move the bundle to ``out``.

        Returns ``(final path, sha256 of manifest.json)``; for a ``.tar.gz`` the directory is archived
        into ``<out>.part`` (the INCOMPLETE marker left out), which takes the name ``out`` only once
        complete, and the directory is removed. The manifest's own hash is what the ticket should
        record. Raises :class:`~forensics.output.BundleWriteError` when the manifest or the archive
        cannot be written (the directory is kept, marked with the reason, and no ``.part`` is left)
        and ``FileExistsError`` when ``out`` appeared meanwhile (the bundle stays ``.incomplete``).
        """
        head, canonical = self._head(None), hashlib.sha256()
        for piece in _canonical_pieces(head, self.artifacts):
            canonical.update(piece.encode())
        head["self_sha256"] = canonical.hexdigest()
        self._reserve.release()
        try:
            digest = output.write_manifest(self.dir / MANIFEST, head, self.artifacts)
        except OSError as e:
            err = self._failed(e)
            self.abandon(f"manifest.json could not be written: {output.describe(e)}")
            raise err from None
        try:
            output.archive(self.dir, self.out) if self.tar else output.rename_noreplace(self.dir, self.out)
        except FileExistsError:
            self.abandon(f"{self.out} appeared while this collection ran (another collection?); "
                         "this one was kept under the .incomplete name")
            raise FileExistsError(f"{self.out} was written by another collection meanwhile; this "
                                  f"collection's bundle is kept in {self.dir}") from None
        except OSError as e:
            err = self._failed(e)
            self.abandon(f"the bundle could not be written as {self.out.name}: {output.describe(e)}")
            raise err from None
        shutil.rmtree(self.dir) if self.tar else (self.out / INCOMPLETE).unlink()
        return self.out, digest
