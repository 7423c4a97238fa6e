"""What the watch agent keeps under ``--out``: its state file and the bundles written at a loss.

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

Loss bundles are ``<out>/loss-<UTC stamp>`` directories (:func:`forensics.ops.pipeline.collect`, the
reload's window as the incident), pruned oldest first to ``keep_bundles`` and ``keep_bytes``
(:func:`prune`); the one just written is never pruned.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

SCHEMA = "gpu-forensics/watch-state/v1"
STATE = "watch-state.json"
PREFIX = "loss-"
COUNTERS = ("reloads_total", "bundles_written_total", "probe_errors_total", "sweeps_total")


def empty() -> dict:
    """A fresh state (no container seen, counters at zero)."""
    return {"schema": SCHEMA, "access": {}, "labels": {}, **{c: 0 for c in COUNTERS}, "last_reload": None,
            "last_sweep": None, "pending": None, "losses": []}


def load(out: Path, log=lambda msg: None) -> dict:
    """The state kept under ``out``, or :func:`empty` when there is none; a file that cannot be read or
    is not this schema is said in the log and set aside as ``watch-state.json.bad`` (never lost)."""
    path = out / STATE
    try:
        data = json.loads(path.read_text("utf-8"))
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not {SCHEMA}")
    except FileNotFoundError:
        return empty()
    except (OSError, ValueError) as e:
        log(f"state: {path} unreadable ({e}); kept as {path.name}.bad, starting afresh")
        try:
            os.replace(path, path.with_name(STATE + ".bad"))
        except OSError:
            pass
        return empty()
    st = empty()
    st.update({k: v for k, v in data.items() if k in st})
    return st


def save(out: Path, st: dict) -> None:
    """Write ``st`` atomically (temporary file, fsync, rename, fsync of the folder). Raises OSError."""
    path = out / STATE
    tmp = path.with_name(STATE + ".tmp")
    st["losses"] = st["losses"][-100:]
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(st, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bundles(out: Path) -> list[Path]:
    """The loss bundles under ``out`` (finished or ``.incomplete``), oldest first (the name is a UTC stamp)."""
    try:
        names = sorted(n for n in os.listdir(out) if n.startswith(PREFIX))
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


def prune(out: Path, keep_bundles: int, keep_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the oldest loss bundles until at most ``keep_bundles`` remain and they hold at most
    ``keep_bytes`` bytes together; ``keep`` (the one just written) is never removed. Returns what was removed."""
    have = bundles(out)
    sizes = {p: size(p) for p in have}
    removed = []
    for p in list(have):
        if len(have) <= keep_bundles and sum(sizes[q] for q in have) <= keep_bytes:
            break
        if keep is not None and p == keep:
            continue
        shutil.rmtree(p, ignore_errors=True)
        have.remove(p)
        removed.append(p)
    return removed


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5GiB``, ``1000000`` to bytes (powers of 1024 for K/M/G/T). Raises ValueError."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    n = float(t[:-1] if mult > 1 else t)
    if n < 0:
        raise ValueError(f"{text!r}: a size is not negative")
    return int(n * mult)
