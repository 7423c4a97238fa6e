"""Package-log rotation: what the stored files really hold, and logrotate running during collection.

Two halves, both about the same files (``dpkg.log``, ``dpkg.log.1``, ``dpkg.log.2.gz``, ...):

- acquire: logrotate may run while the collector copies (Debian's ``/etc/logrotate.d/dpkg`` and
  ``apt``: ``monthly``, ``rotate 12``, ``compress``, ``delaycompress``, ``create``): ``dpkg.log``
  becomes ``dpkg.log.1``, ``dpkg.log.1`` becomes ``dpkg.log.2.gz``, a new empty ``dpkg.log`` appears.
  A name copied before the rotation and another copied after it can then hold the same lines (counted
  twice) while the lines that moved to an unlisted name are missed. :func:`reconcile` lists the
  directory again at the end, matches the files by identity (:class:`Ident`: inode and first bytes,
  the decompressed first bytes for a ``.gz``), copies what was missed, and records in
  ``packages/rotation.json`` the renamed, duplicated, appeared and vanished names.
- read: the coverage of a log is the union of the periods its files hold; :func:`holes` names the
  periods inside it that no stored file holds (a rotation missing in the middle, a jump in time longer
  than the rotation period, a file cut short at collection, a file whose head was over the size bound).
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from datetime import datetime, timedelta
from typing import Callable

from forensics import hostfs, tailcopy
from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.events import Hole
from forensics.source import CollectContext
from forensics.timeutil import iso_z

import collectors.packages.parse as pp

REPORT = "packages/rotation.json"
#: the note of a redacted copy whose older pieces were dropped when the time budget ran out (written by
#: collectors.packages.redact_copy, read by :meth:`FileSpan.of`)
DROPPED = ("truncated: the time budget (--time-budget) ran out while redacting: the first {n} bytes of the "
           "copied part were dropped")
_DROPPED = re.compile(re.escape(DROPPED).replace(r"\{n\}", r"(\d+)"))
HEAD = 4096            #: bytes of content compared to match two files
HEAD_RAW = 64 << 10    #: bytes of a .gz read to decompress its first HEAD bytes
#: the longest a file of a ``monthly`` rotation holds (31 days) plus a day for the daily logrotate run
ROTATION_PERIOD = timedelta(days=32)


@dataclass(frozen=True)
class Ident:
    """What identifies one host file across a rename: ``(st_dev, st_ino)``, its size, and the first
    :data:`HEAD` bytes of its content (decompressed for a ``.gz``: compressing makes a new inode)."""

    dev: int
    ino: int
    size: int
    head: bytes
    gz: bool

    def same(self, other: "Ident") -> bool:
        """The same lines: same inode and first bytes (a rename), or the same non-empty first bytes
        with one side compressed (``delaycompress``: ``dpkg.log.1`` -> ``dpkg.log.2.gz``)."""
        n = min(len(self.head), len(other.head))
        prefix = self.head[:n] == other.head[:n]
        if (self.dev, self.ino) == (other.dev, other.ino):
            return prefix
        return n > 0 and prefix and self.gz != other.gz


def identify(root, path: str) -> Ident | None:
    """:class:`Ident` of the host file ``path`` under ``root``, or None when it cannot be opened."""
    try:
        with hostfs.open_regular(root, path) as f:
            st = os.fstat(f.fileno())
            raw = f.read(HEAD_RAW if path.endswith(".gz") else HEAD)
    except OSError:
        return None
    head = raw[:HEAD]
    if path.endswith(".gz"):
        try:
            head = zlib.decompressobj(wbits=31).decompress(raw, HEAD)
        except zlib.error:
            pass
    return Ident(st.st_dev, st.st_ino, st.st_size, head, path.endswith(".gz"))


def reconcile(ctx: CollectContext, label: str, directory: str, first: list[str], copied: dict[str, Ident | None],
              wanted: Callable[[str], bool], copy: Callable[[str], None], key: Callable[[str], tuple]) -> dict:
    """List ``directory`` again after its files were copied and settle what a rotation meanwhile did.

    ``first``: the names (``wanted`` ones) of the first listing; ``copied``: each name copied, with its
    :class:`Ident` just before the copy; ``copy(name)`` copies one more file; ``key`` sorts names oldest
    rotation first. Returns the ``label`` entry of ``packages/rotation.json``: ``first``/``last`` (the
    two listings), ``duplicates`` (``{name: name kept}``: two copies of the same lines, the longer one
    kept, readers skip the other), ``renamed`` (``[{from, to}]``), ``copied_at_end`` (names holding
    lines no earlier copy held), ``appeared``/``vanished`` (names in one listing only) and ``late``
    (``[{name, size}]``: a name already copied that now holds a new file, the log recreated by the
    rotation; its lines were written during collection and are not stored). Raises nothing."""
    last = [n for n in (ctx.listdir(directory, record_absent=False) or ()) if wanted(n)]
    out = {"first": sorted(first, key=key), "last": sorted(last, key=key), "duplicates": {}, "renamed": [],
           "copied_at_end": [], "appeared": sorted(set(last) - set(first), key=key),
           "vanished": sorted(set(first) - set(last), key=key), "late": []}
    held = [(n, i) for n, i in copied.items() if i is not None]
    now = {n: i for n in out["last"] if (i := identify(ctx.root, f"{directory}/{n}")) is not None}
    stable = {n for n, i in now.items() if copied.get(n) is not None and _inode(copied[n]) == _inode(i)}
    if stable == set(first) == set(now):  # no name changed file: no rotation, nothing to settle
        return out
    for a, ia in held:  # the same lines copied under two names: keep the longer copy (else the older name)
        for b, ib in held:
            if a != b and a not in out["duplicates"] and b not in out["duplicates"] and ia.same(ib) \
                    and (ib.size, key(a)) > (ia.size, key(b)):
                out["duplicates"][a] = b
                if _inode(ia) == _inode(ib):  # one file seen under its old name and again under its new one
                    out["renamed"].append({"from": a, "to": b})
    for name, ident in now.items():
        if name in stable:
            continue
        match = [n for n, i in held if i.same(ident)]
        if match:
            out["renamed"].append({"from": match[0], "to": name})
        elif name not in copied:
            copy(name)
            out["copied_at_end"].append(name)
        else:
            out["late"].append({"name": name, "size": ident.size})
    return out


def _inode(i: Ident) -> tuple[int, int]:
    return i.dev, i.ino


def load(bundle: Bundle, label: str, problems: list) -> dict:
    """The ``label`` entry of ``packages/rotation.json`` (``{}`` when the bundle has none: older bundles)."""
    if not bundle.find(REPORT):
        return {}
    entry = (bundle.json(REPORT, problems) or {}).get(label)
    return entry if isinstance(entry, dict) else {}


def note(entry: dict) -> str:
    """A clause for the coverage reason naming what a rotation during collection did, or ``""``."""
    parts = [f"{r['from']} -> {r['to']}" for r in entry.get("renamed") or []]
    if not (parts or entry.get("duplicates") or entry.get("copied_at_end") or entry.get("appeared")
            or entry.get("vanished")):
        return ""
    bits = []
    if parts:
        bits.append("renamed " + ", ".join(parts) + " (matched by inode and first bytes)")
    if entry.get("duplicates"):
        bits.append("not counted twice: " + ", ".join(f"{a} (= {b})" for a, b in entry["duplicates"].items()))
    if entry.get("copied_at_end"):
        bits.append("copied at the end: " + ", ".join(entry["copied_at_end"]))
    for k in ("appeared", "vanished"):
        if entry.get(k):
            bits.append(f"{k}: " + ", ".join(entry[k]))
    return "; rotated during collection: " + "; ".join(bits)


@dataclass
class FileSpan:
    """One stored file of a log: its name, first and last dated entry (UTC, None when it has none),
    whether its copy was cut short (its end not stored), and ``head``: why its head is not stored when
    only its end was (:meth:`of`: the lines before the first kept one are gone), else None."""

    name: str
    first: datetime | None = None
    last: datetime | None = None
    cut: bool = False
    head: str | None = None

    @classmethod
    def of(cls, art: Artifact) -> "FileSpan":
        """The span of the stored file ``art`` (dates still unset), its cuts read from the record:
        ``head`` says why its first lines are not stored (the size bound, :mod:`forensics.tailcopy`;
        the time budget, :data:`DROPPED`)."""
        bound = tailcopy.head_cut(art.notes)
        budget = next((int(m[1]) for n in art.notes if (m := _DROPPED.fullmatch(n))), 0)
        why = [f"the first {bound[0]} bytes, over the {tailcopy.size_text(bound[1])} bound, were not copied"] \
            if bound else []
        why += [f"{'the next' if bound else 'the first'} {budget} bytes were dropped when the time budget ran out "
                "while redacting"] if budget else []
        end_cut = art.status is Status.TRUNCATED and (not why or any(n.startswith("only the first") for n in art.notes))
        return cls(PurePosixPath(art.path).name, cut=end_cut, head="; ".join(why) or None)

    def head_text(self) -> str:
        """``dpkg.log before 2026-07-01T10:00:00Z not kept (...)``: what the cut head lost; ``""`` with no cut."""
        if not self.head:
            return ""
        why = self.head
        if self.first is None:
            return f"{self.name}: {why}, and the end kept holds no dated line"
        return f"{self.name} before {iso_z(self.first)} not kept ({why})"


def heads(files: list[FileSpan]) -> str:
    """A clause for the coverage reason naming each file whose head was not kept, or ``""``."""
    cut = [t for f in files if (t := f.head_text())]
    return "; " + "; ".join(cut) if cut else ""


def holes(files: list[FileSpan], base: str, end: datetime | None) -> list[Hole]:
    """The periods inside a log's span that no stored file holds, oldest first.

    ``files`` are the stored files oldest rotation first (:func:`collectors.packages.parse.rotation_key`);
    ``end`` the log's coverage end (the collection, when the current file was still written). Between
    two neighbouring files: a rotation number missing (``.3.gz`` then ``.1``: ``.2`` is gone), the
    older copy cut short, or the newer one stored without its head (:attr:`FileSpan.head`), leaves a hole from the last entry before it to the first entry after it (or
    ``end``); a jump between two dated neighbours longer than :data:`ROTATION_PERIOD` with no file
    holding it is a hole too (the lines may be missing, or the log was silent: nothing can say which)."""
    out: list[Hole] = []
    nums = [_number(f.name, base) for f in files]
    dated = [f for f in files if f.first is not None]
    for i in range(len(files) - 1):
        older, newer = files[i], files[i + 1]
        why = []
        if nums[i] is not None and nums[i + 1] is not None and nums[i] - nums[i + 1] > 1:
            gone = [f"{base}.{n}" for n in range(nums[i + 1] + 1, nums[i])]
            why.append(f"{', '.join(gone)} missing between {older.name} and {newer.name}")
        if older.cut:
            why.append(f"{older.name} was cut short at collection")
        if newer.head:
            why.append(newer.head_text())
        lo = max((f.last for f in files[:i + 1] if f.last), default=None)
        hi = min((f.first for f in files[i + 1:] if f.first), default=end)
        if why and lo and hi and lo < hi:
            out.append(Hole(lo, hi, f"no stored file holds {base} lines from {iso_z(lo)} to {iso_z(hi)}: "
                                    + "; ".join(why)))
    for older, newer in zip(dated, dated[1:]):
        if newer.first - older.last > ROTATION_PERIOD and not any(h.start <= older.last and h.end >= newer.first
                                                                   for h in out):
            days = (newer.first - older.last).days
            out.append(Hole(older.last, newer.first,
                            f"no stored file holds {base} lines from {iso_z(older.last)} to {iso_z(newer.first)}: "
                            f"{days} days between {older.name} and {newer.name}, longer than a monthly rotation "
                            "(lines may be missing, or the log was silent: nothing says which)"))
    return sorted(out)


def _number(name: str, base: str) -> int | None:
    """0 for ``base``, N for ``base.N[.gz]``, None for a ``dateext`` name (no number to miss)."""
    k = pp.rotation_key(name, base)
    if k is None or k[0] == 0:
        return None
    return 0 if k[0] == 2 else -k[1]
