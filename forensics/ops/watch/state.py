"""What the watch agent keeps under ``--out``: its state file, the bundles written at a loss, and a small
record of the last losses.

``<out>/watch-state.json`` (schema ``gpu-forensics/watch-state/v1``), written whole to a temporary file
beside it, fsync'ed and renamed over the old one, so a killed agent leaves the old state or the new one,
never half of one::

    {"schema", "access": {container id: 0|1 (the last answer the probe gave)},
     "labels": {container id: {namespace, pod, container, id}},
     "reloads_total", "bundles_written_total", "probe_errors_total", "sweeps_total": int,
     "last_reload", "last_sweep": unix seconds | null,
     "pending": {"name", "ids", "incident"} | null  (a loss whose bundle is not yet written: a restarted
                agent writes it, and no second one),
     "losses": [{"name", "ids", "at", "path", "verified": bool, "problems": [str]}]  (the last 100)}

The file is trusted for nothing (issue 27: a ``pending`` name ``../escaped`` had the root agent write outside
``--out``; ``"losses": {}`` crashed it at every restart): :func:`load` reads at most :data:`MAX_STATE` bytes
of a regular file (never through a link, never a FIFO), and :func:`check` holds it to the schema (types,
ranges, sizes, and bundle names of the one shape the agent makes, :data:`NAME`: a single path component).
Anything else is set aside as ``watch-state.json.bad-<UTC stamp>``, said in one line, and the agent starts
afresh.

Loss bundles are ``<out>/loss-<UTC stamp>`` directories (:func:`forensics.ops.pipeline.collect`, the
reload's window as the incident), pruned oldest first to ``keep_bundles`` and ``keep_bytes``
(:func:`prune`), the newest included: ``keep_bytes`` is a hard limit. ``<out>/watch-losses.txt``
(:func:`record_loss`) holds one line for each of the last losses in a file of a fixed
:data:`RECORD_BYTES` bytes, made at start and rewritten in place, so that a loss is on disk even when
``--out`` is full and no bundle could be written.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

from forensics import hostfs, output
from forensics.timeutil import parse_iso

SCHEMA = "gpu-forensics/watch-state/v1"
STATE = "watch-state.json"
LOSSES = "watch-losses.txt"
PREFIX = "loss-"
STAMP = "%Y%m%dT%H%M%S.%fZ"
#: a loss bundle's name as the agent makes it (``PREFIX`` + ``STAMP``): one path component, nothing else
NAME = re.compile(r"loss-\d{8}T\d{6}\.\d{6}Z")
COUNTERS = ("reloads_total", "bundles_written_total", "probe_errors_total", "sweeps_total")
MAX_STATE = 8 << 20      #: bytes of state file read (10,000 containers take about 3 MB)
MAX_CONTAINERS = 10_000  #: containers remembered
MAX_LOSSES = 100         #: losses remembered
MAX_TEXT = 1024          #: characters of a label, a container id or a problem line
MAX_COUNT = 1 << 62
RECORD_BYTES = 4096      #: size of watch-losses.txt
RECORD_LINE = 480        #: characters of one of its lines at most


def empty() -> dict:
    """A fresh state (no container seen, counters at zero)."""
    return {"schema": SCHEMA, "access": {}, "labels": {}, **{c: 0 for c in COUNTERS}, "last_reload": None,
            "last_sweep": None, "pending": None, "losses": []}


def load(out: Path, log=lambda msg: None) -> dict:
    """The state kept under ``out``, or :func:`empty` when there is none. A file that cannot be read, is not a
    regular file (a link, a FIFO, a directory), is over :data:`MAX_STATE` bytes, is not JSON or fails
    :func:`check` is set aside (:func:`set_aside`) and said in one line on ``log``; never raises."""
    path = out / STATE
    try:
        if os.path.islink(path):  # hostfs would follow it (inside out); the agent never made one
            raise OSError(errno.ELOOP, "a symbolic link", str(path))
        with hostfs.open_regular(out, STATE) as f:
            raw = hostfs.read_upto(f, MAX_STATE + 1)
        if len(raw) > MAX_STATE:
            raise ValueError(f"over {MAX_STATE} bytes")
        data = json.loads(raw)
        problem = check(data)
        if problem:
            raise ValueError(problem)
    except FileNotFoundError:
        return empty()
    except (OSError, ValueError, RecursionError) as e:
        why = output.describe(e) if isinstance(e, OSError) else str(e)[:300]
        log(f"state: {path} not used ({why}); {set_aside(path)}, starting afresh")
        return empty()
    st = empty()
    st.update({k: v for k, v in data.items() if k in st})
    return st


def set_aside(path: Path) -> str:
    """Rename ``path`` (whatever it is; a link is renamed, not followed) to ``<name>.bad-<UTC stamp>``
    beside it, never over another file; returns what was done, in words. Never raises."""
    dest = path.with_name(f"{path.name}.bad-{datetime.now(timezone.utc).strftime(STAMP)}")
    try:
        output.rename_noreplace(path, dest)
    except OSError as e:
        return f"it could not be set aside ({output.describe(e)})"
    return f"kept as {dest.name}"


def check(data) -> str | None:
    """The first way ``data`` (parsed JSON) is not a state this agent could have written, or None. Keys
    missing take :func:`empty`'s values (an older agent's file); unknown keys are dropped by :func:`load`."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("schema") != SCHEMA:
        return f"schema is not {SCHEMA}"
    for c in COUNTERS:
        if c in data and not _int(data[c], 0, MAX_COUNT):
            return f"{c} is not a count"
    for t in ("last_reload", "last_sweep"):
        if data.get(t) is not None and not _unix(data[t]):
            return f"{t} is not unix seconds"
    access, labels = data.get("access", {}), data.get("labels", {})
    if not _map(access, lambda k, v: _int(v, 0, 1)):
        return "access is not {container id: 0 or 1}"
    if not _map(labels, _labels):
        return "labels is not {container id: {namespace, pod, container, id}}"
    if data.get("pending") is not None and not _pending(data["pending"]):
        return f"pending is not a loss of this agent ({{name {NAME.pattern}, ids, incident}})"
    losses = data.get("losses", [])
    if not (type(losses) is list and len(losses) <= MAX_LOSSES and all(_loss(x) for x in losses)):
        return f"losses is not a list of at most {MAX_LOSSES} losses"
    return None


def _int(v, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _unix(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and 0 <= v < 1e11


def _text(v, limit: int = MAX_TEXT, empty_ok: bool = True) -> bool:
    # any characters: labels are what the runtime said (the agent escapes them where it prints them)
    return type(v) is str and (empty_ok or v != "") and len(v) <= limit


def _map(v, ok) -> bool:
    return type(v) is dict and len(v) <= MAX_CONTAINERS and all(_text(k, empty_ok=False) and ok(k, x)
                                                                  for k, x in v.items())


def _labels(cid: str, v) -> bool:
    return (type(v) is dict and set(v) == {"namespace", "pod", "container", "id"} and v["id"] == cid
            and all(_text(x) for x in v.values()))


def _ids(v) -> bool:
    return type(v) is list and 0 < len(v) <= MAX_CONTAINERS and all(_text(x, empty_ok=False) for x in v)


def _iso(v) -> bool:
    try:
        return _text(v, 64, False) and parse_iso(v) is not None
    except (ValueError, OverflowError):
        return False


def _pending(v) -> bool:
    inc = v.get("incident") if type(v) is dict else None
    return (set(v) == {"name", "ids", "incident"} and _name(v["name"]) and _ids(v["ids"])
            and type(inc) is dict and set(inc) == {"start", "end", "label"} and _iso(inc["start"])
            and _iso(inc["end"]) and parse_iso(inc["start"]) <= parse_iso(inc["end"])
            and _text(inc["label"], 300)) if inc is not None else False


def _loss(v) -> bool:
    return (type(v) is dict and set(v) == {"name", "ids", "at", "path", "verified", "problems"}
            and _name(v["name"]) and _ids(v["ids"]) and _iso(v["at"]) and (v["path"] is None or _text(v["path"], 4096))
            and type(v["verified"]) is bool and type(v["problems"]) is list and len(v["problems"]) <= 20
            and all(_text(p) for p in v["problems"]))


def _name(v) -> bool:
    return type(v) is str and NAME.fullmatch(v) is not None


def save(out: Path, st: dict) -> None:
    """Write ``st`` atomically (a new temporary file, never through a link; fsync, rename, fsync of the
    folder). Raises OSError (a full or read-only ``out``: the caller counts it and goes on)."""
    path = out / STATE
    tmp = path.with_name(STATE + ".tmp")
    st["losses"] = st["losses"][-MAX_LOSSES:]
    data = (json.dumps(st, indent=1, sort_keys=True) + "\n").encode()
    try:
        os.unlink(tmp)  # a killed agent's, or anything else put there: a new file, made here
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        set_aside(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        output.write_all(fd, data)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(tmp)  # a full disk: no half file left taking room
        raise
    os.close(fd)
    os.replace(tmp, path)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def record_loss(out: Path, line: str) -> None:
    """Add ``line`` (one loss, cut to :data:`RECORD_LINE` characters) to ``<out>/watch-losses.txt``, keeping
    the last lines that fit in its fixed :data:`RECORD_BYTES` bytes (padded with newlines). The file is
    made whole once (:func:`make_record`) and then only rewritten in place, which needs no new block on
    ext4, xfs or tmpfs: a full ``--out`` still takes it (a copy-on-write file system may refuse).
    Raises OSError (the caller logs the line instead)."""
    fd = os.open(out / LOSSES, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_size != RECORD_BYTES:
            raise OSError(errno.EINVAL, f"not the {RECORD_BYTES}-byte record this agent makes", str(out / LOSSES))
        old = os.pread(fd, RECORD_BYTES, 0).decode("utf-8", "replace").split("\n")
        lines = [x for x in old if x.strip()] + [" ".join(line.split())[:RECORD_LINE]]
        while len("\n".join(lines).encode()) + 1 > RECORD_BYTES:
            lines.pop(0)
        body = ("\n".join(lines) + "\n").encode()
        body += b"\n" * (RECORD_BYTES - len(body))
        if os.pwrite(fd, body, 0) != RECORD_BYTES:
            raise OSError(errno.ENOSPC, "short write", str(out / LOSSES))
        os.fsync(fd)
    finally:
        os.close(fd)


def make_record(out: Path) -> None:
    """Make ``<out>/watch-losses.txt`` (:func:`record_loss`) when it is missing or not the agent's fixed size
    (a link or anything else there is set aside first). Raises OSError (a full disk: tried again later)."""
    path = out / LOSSES
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and _is_record(st):
        return
    if st is not None:
        set_aside(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        output.write_all(fd, b"\n" * RECORD_BYTES)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def _is_record(st: os.stat_result) -> bool:
    """Whether ``st`` (an lstat) is a loss record :func:`make_record` made: a regular file of its size."""
    return stat.S_ISREG(st.st_mode) and st.st_size == RECORD_BYTES


def bundles(out: Path) -> list[Path]:
    """The loss bundles under ``out`` (finished or ``.incomplete``), oldest first (the name is a UTC stamp): only
    directories named as the agent names them (:data:`NAME`), so that :func:`prune` never removes anything else."""
    try:
        names = sorted(n for n in os.listdir(out) if _name(n.removesuffix(".incomplete")))
    except OSError:
        return []
    return [out / n for n in names if (out / n).is_dir() and not (out / n).is_symlink()]


def size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for d, _, files in os.walk(path):
        for n in files:
            try:
                st = os.lstat(os.path.join(d, n))
            except OSError:
                continue
            total += st.st_size
    return total


def prune(out: Path, keep_bundles: int, keep_bytes: int) -> list[Path]:
    """Remove the oldest loss bundles until at most ``keep_bundles`` remain and they hold at most
    ``keep_bytes`` bytes together. A hard limit: a bundle alone over ``keep_bytes`` is removed first, the
    newest too (the caller says so), and then the oldest. Only ``loss-*`` directories are counted or removed
    (never a link). Returns what was removed."""
    have = bundles(out)
    sizes = {p: size(p) for p in have}
    removed = [p for p in have if sizes[p] > keep_bytes]  # never fit: they go first, not the older ones that do
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
        have.remove(p)
    for p in list(have):
        if len(have) <= keep_bundles and sum(sizes[q] for q in have) <= keep_bytes:
            break
        shutil.rmtree(p, ignore_errors=True)
        have.remove(p)
        removed.append(p)
    return removed


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5GiB``, ``1000000`` to bytes (powers of 1024 for K/M/G/T). Raises ValueError."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    n = float(t[:-1] if mult > 1 else t)
    if not 0 <= n < 1 << 60:  # nan, inf and 1e400 too
        raise ValueError(f"{text!r}: a size is between 0 and 1E (no negative, no infinite one)")
    return int(n * mult)
