"""Entries through the node's own ``journalctl -o json`` (journalctl(1)), for files this process's
libsystemd cannot read, or when it cannot load libsystemd at all (:func:`fallback`): the source
:func:`collectors.journal.selection.select` reads, as :class:`collectors.journal.reader._ReaderSource`.
Past a damage where libsystemd stops a walk by matches, every entry is read and the matches tested
here (:mod:`collectors.journal.damage`).
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tempfile

from forensics import hostfs
from forensics.artifact import Artifact, Status
import collectors.journal.damage as damage
from .files import METHOD, _File
from .reader import cursor_fields


def _head(path: str) -> bytes:
    """The first 208 bytes of the file at ``path`` (its header), ``b""`` when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(208)
    except OSError:
        return b""


def _text(v) -> bytes | None:
    """A field of ``journalctl -o json`` as libsystemd's match compares it: the first value's bytes."""
    v = v[0] if isinstance(v, list) and v and not all(isinstance(x, int) for x in v) else v
    if isinstance(v, dict) and "base64" in v:
        return base64.b64decode(v["base64"])
    return None if v is None else str(v).encode()


class _JournalctlSource:
    """Entries through the node's own ``journalctl -o json`` (for files this libsystemd cannot read)."""

    method = "journalctl"

    def __init__(self, argv: list[str], paths: list[str], tmpdir=None, here: list[str] | None = None):
        self.base = argv + [f"--file={p}" for p in paths] + ["--no-pager", "--all"]
        #: the files as this process reaches them (``paths`` may be inside a chroot), for their headers
        self.here = here or []
        self.tmpdir = tmpdir  #: where journalctl's stderr is kept (the bundle being written; never the node's /tmp)
        self.dropped: list[str] = []  #: the files libsystemd dropped in the last run (:meth:`_lines`)
        self.damage: list[dict] = []  #: :mod:`collectors.journal.damage` records, one per file and scan
        self.skipped = 0  #: output lines of journalctl that were no entry (:meth:`_entries`)

    def _lines(self, args, first_only=False):
        """The lines of ``journalctl <args>``; the files libsystemd dropped midway go to :attr:`dropped`
        (it runs at ``SYSTEMD_LOG_LEVEL=debug``, where libsystemd says so: :data:`collectors.journal.damage.DROPPED`).
        Raises OSError when journalctl fails."""
        self.dropped = []
        env = {**os.environ, "SYSTEMD_LOG_LEVEL": "debug"}
        with tempfile.TemporaryFile(dir=self.tmpdir) as err:
            p = subprocess.Popen(self.base + args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                 env=env)
            try:
                for line in p.stdout:
                    yield line
                    if first_only:
                        p.kill()
                        break
            finally:
                p.stdout.close()
                rc = p.wait()
            err.seek(0)
            said = [line for line in err if not line.startswith(b"Journal filter:")]
            self.dropped = [line.split(damage.DROPPED, 1)[1].rsplit(b", ignoring", 1)[0].decode(errors="replace")
                            for line in said if damage.DROPPED in line]
            if rc not in (0, -9):
                text = b"".join(said[-5:]).decode(errors="replace").strip()[-500:]
                raise OSError(f"journalctl exited {rc}: {text}")

    def _entry(self, line: bytes) -> dict:
        """One line of ``journalctl -o json`` as a stored entry (times as int µs). Raises ``ValueError``
        for a line that is no JSON object with integer times and a text cursor."""
        doc = json.loads(line)
        if not isinstance(doc, dict) or not isinstance(doc.get("__CURSOR", ""), str):
            raise ValueError("not a journal entry (a JSON object with a text __CURSOR)")
        e = {}
        for k, v in doc.items():
            if k in ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP"):
                if not isinstance(v, (str, int)) or isinstance(v, bool):
                    raise ValueError(f"{k}: not an integer")
                e[k] = int(v)
            elif k == "__CURSOR" or not k.startswith("__"):
                e[k] = self._conv(v)
        return e

    def _conv(self, v):
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            return {"base64": base64.b64encode(bytes(v)).decode()}
        return [self._conv(x) for x in v] if isinstance(v, list) else v

    @staticmethod
    def _matches(groups):
        out = []
        for i, group in enumerate(groups):
            out += (["+"] if i else []) + [f"{f}={v}" for f, v in group]
        return out

    def scan(self, groups, start=None, end=None):
        args = ["-o", "json"]
        args += ["--since", f"@{start // 10**6}.{start % 10**6:06d}"] if start is not None else []
        args += ["--until", f"@{end // 10**6}.{end % 10**6:06d}"] if end is not None else []
        last = None
        for e in self._entries(self._lines(args + self._matches(groups))):
            self._last = e
            t = e.get("__REALTIME_TIMESTAMP")
            last = (t, last[1] + 1 if last and last[0] == t else 1)
            yield e
        if self.dropped and groups:  # past the damage by every entry, the matches tested here
            yield from self._salvage(args, groups, last, start is None and end is None)

    def _salvage(self, args, groups, after, whole: bool):
        """The entries of ``groups`` by ``journalctl <args>`` over every entry but those the walk by matches
        gave (up to the ``k``-th of time ``t`` when ``after`` is ``(t, k)``), and a damage record per dropped
        file: what was read and lost counted when one file is read ``whole``
        (:class:`collectors.journal.damage.Walked` over the cursors' sequence numbers, its header read here)."""
        dropped = self.dropped
        why = "libsystemd (the node's journalctl) stopped a walk by journal matches at an object it could not read"
        one = whole and len(self.here) == 1 and len(dropped) == 1
        head = _head(self.here[0]) if one else b""
        one = one and bool(head)
        walked, same = damage.Walked(head), 0
        try:
            for e in self._entries(self._lines(args)):
                seq = cursor_fields(e.get("__CURSOR", "")).get("i", "")
                if one and isinstance(e.get("__REALTIME_TIMESTAMP"), int) and re.fullmatch("[0-9a-f]{1,16}", seq):
                    walked.saw(int(seq, 16), e["__REALTIME_TIMESTAMP"])
                if damage.matches(lambda f: _text(e.get(f)), groups):
                    t = e.get("__REALTIME_TIMESTAMP")
                    if after is not None and isinstance(t, int) and isinstance(after[0], int) and t <= after[0]:
                        same += t == after[0]
                        if t < after[0] or same <= after[1]:
                            continue
                    self._last = e
                    yield e
        finally:
            self.damage += [walked.record(dropped[0], head, why)] if one else [
                {"source": d, "why": why, "entries": None, "read": None, "lost": None, "holes": []} for d in dropped]

    def _entries(self, lines):
        """The entries of ``journalctl -o json`` lines; a line that is none (:meth:`_entry`) is skipped and
        counted in :attr:`skipped`."""
        for line in lines:
            try:
                yield self._entry(line)
            except ValueError:
                self.skipped += 1

    def full(self) -> dict:
        return self._last

    def cursor(self) -> str:
        return self._last["__CURSOR"]

    def close(self) -> None:
        pass

    def unique(self, field_: str) -> list[str]:
        values = (line.rstrip(b"\n") for line in self._lines(["-F", field_]))
        return sorted(v.decode("utf-8", "replace") for v in values if v)

    def unique_holding(self, field_: str, texts: tuple[str, ...]) -> list[str]:
        """The values of ``field_`` that hold one of ``texts``, sorted (``journalctl -F``)."""
        return [v for v in self.unique(field_) if any(t in v for t in texts)]

    def edge(self, group=(), last=False) -> dict | None:
        args = ["-o", "json"] + (["-n", "1"] if last else []) + self._matches([group] if group else [])
        found = list(self._entries(self._lines(args, first_only=not last)))
        return found[-1] if found else None


def fallback(ctx, files: list[_File], rel: str, unloadable: str | None = None):
    """A journalctl source when no file opened here (``unloadable``: why this process cannot load
    libsystemd at all, :func:`collectors.journal.files.unusable`); when there is none, ``None``, and why
    is recorded as an error artifact of ``rel`` (the entries' file)."""
    jc = next((p for p in ("/usr/bin/journalctl", "/bin/journalctl") if hostfs.exists(ctx.root, p)), None)
    why = None
    if jc is None:
        why = "no journalctl on the node (/usr/bin/journalctl, /bin/journalctl) to fall back on"
    elif ctx.live:
        paths = [str(hostfs.resolve(f.root, f.path)) for f in files]
        return _JournalctlSource([str(hostfs.resolve(ctx.root, jc))], paths, getattr(ctx.writer, "dir", None), paths)
    elif os.geteuid() != 0:
        why = "running the node's journalctl under chroot needs root"
    else:
        host = [f.path for f in files if f.root == str(ctx.root)]
        if host:
            return _JournalctlSource(["chroot", str(ctx.root), jc], host, getattr(ctx.writer, "dir", None),
                                     [str(hostfs.resolve(ctx.root, p)) for p in host])
        why = "the unreadable files are outside --root, so the node's journalctl cannot reach them"
    opened = (f"this collector cannot load libsystemd ({unloadable})" if unloadable else
              f"none of the {len(files)} journal files could be opened")
    ctx.writer.record(Artifact(None, rel, Status.ERROR, METHOD, message=f"{opened}, and {why}"))
    return None
