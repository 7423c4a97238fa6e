"""One sweep of the watch agent: every GPU container found, probed, and judged.

A sweep is the collector's own work on a small scale, so that the agent and a collection never
disagree: the ``containers`` collector with ``--probe`` (its discovery, the lstat of
``/proc/<pid>/root/dev`` and the ``open()`` from the container's device cgroup,
:mod:`collectors.containers.probe`, each with its per-container timeout), then the ``node`` and
``runtime_config`` collectors, each acquire into a scratch bundle under the agent's ``--out``
(``.sweep``, removed afterwards; while ``--out`` has less than :data:`ROOM` bytes free or cannot take it, in a
new folder under ``$TMPDIR`` instead, removed the same way: a full ``--out`` never stops the probe); the records are read back with the collectors' ``read`` (the probe's
answers handed on at once, before the rest is read) and the exposure rules
(:func:`forensics.findings.exposure.assess`) say which containers the next daemon-reload would cut off.
Nothing is written outside that scratch folder; the workload's processes are never touched (the probe
is a child of its own that joins the container's cgroup and mount namespace, read-only).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from forensics.artifact import Status
from forensics.bundle import Bundle, BundleWriter
from forensics.output import describe

from forensics.ops.watch.state import MAX_TEXT
from forensics.source import CollectContext

#: probe results that show the device cgroup lets the container open the node (ENXIO: allowed, and no
#: driver answers, as in the lab; docs/sources.md "The systemd lab": ENXIO ... EPERM)
ALLOWED = ("ok", "ENXIO")
DENIED = ("EPERM",)
SCRATCH = ".sweep"
SWEEP_BUDGET_S = 120.0
ROOM = 16 << 20  #: bytes free under --out for the scratch bundle there (one takes 50 kB to a few MB)


@dataclass
class Seen:
    """One GPU container as a sweep saw it: its labels, ``access`` (1, 0, or None when the probe gave no
    answer: not exported then), ``at_risk`` (the exposure rules' verdict: bool, or None when the
    container could not be assessed) and the probe's per-node results."""

    id: str
    namespace: str
    pod: str
    container: str
    access: int | None
    at_risk: bool | None
    probe: dict = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        """The metric labels ``{namespace, pod, container, id}`` (empty string for an unknown one)."""
        return {"namespace": self.namespace, "pod": self.pod, "container": self.container, "id": self.id}


@dataclass
class Sweep:
    """What one sweep found: ``seen`` by container id, ``errors`` (probe errors: a GPU container found
    and not answered for, one that vanished mid-probe, a collector failure), ``why`` (one line per
    error), ``started``/``elapsed`` (unix seconds / seconds), ``runtime`` (the ``runtime_config`` facts judged with)."""

    seen: dict[str, Seen]
    errors: int
    why: list[str]
    started: float
    elapsed: float
    runtime: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def access_of(probe: dict) -> int | None:
    """1 when every answered NVIDIA node opens or fails only with ENXIO, 0 when one gives EPERM (the
    device cgroup denies it), None when none answered (not-run, timeout, ENOENT...: no evidence)."""
    answers = [v for v in (probe or {}).values() if v not in ("not-run", "timeout")]
    if any(v in DENIED for v in answers):
        return 0
    if answers and all(v in ALLOWED for v in answers):
        return 1
    return None


def sweep(root: str | os.PathLike, out: str | os.PathLike, state_dirs: tuple = (),
          on_access: Callable[[dict[str, Seen]], None] | None = None, runtime: dict | None = None) -> Sweep:
    """Run one sweep of the node under ``root``, its scratch bundles in ``<out>/.sweep`` (removed at the
    end, also on error). The containers come first, so that ``on_access`` (called with the ``seen`` dict,
    ``at_risk`` still None) can publish the probe's answers before the runtime configuration is read and the
    exposure rules run (they fill ``at_risk`` in the same objects). ``runtime``: the ``runtime_config`` facts of
    an earlier sweep (:attr:`Sweep.runtime`) to judge with instead of reading them again. ``state_dirs``: extra containerd state
    directories (the collector's ``containerd_state_dirs``). Raises nothing for a container that goes away,
    nor for a full ``out`` (:func:`_collect`); ``BundleWriteError`` when ``$TMPDIR`` cannot take the scratch either."""
    import collectors.containers as ctn
    from collectors import node, runtime_config
    from forensics.findings import exposure
    from forensics.findings.device_plugin import device_plugin_settings
    from forensics.redact import ENV_ALLOW

    started, t0 = time.time(), time.monotonic()
    errors, why, seen, notes = [0], [], {}, []

    def read_containers(b):
        reading = ctn.read(b, node.facts(b))
        lost = [a for a in b.artifacts() if a.status is Status.ERROR and (a.source or "").startswith("container:")]
        return reading, lost
    reading, lost = _collect(root, Path(out), [ctn], {"probe": True, "containerd_state_dirs": state_dirs},
                             read_containers, errors, why, notes)
    containers = reading.facts.get("containers") or []
    for a in lost:  # a container listed, then gone before it was read: _safe recorded the exception
        errors[0] += 1
        why.append(f"{a.source}: {a.message}")
    for p in reading.problems:  # containers the sweep's budget left unread (or partly read): no answer for them
        if p.get("artifact") in (ctn.NOT_READ, "containers"):
            errors[0] += 1
            why.append(p["message"])
    for rec in containers:
        if not rec.get("gpu") or not isinstance(rec.get("id"), str) or not 0 < len(rec["id"]) <= MAX_TEXT:
            continue  # an id no runtime gives (the state could not keep it)
        probe = dict(rec.get("probe") or {})
        acc = access_of(probe)
        if acc is None:  # a GPU container the probe could not answer for: it vanished, or timed out
            errors[0] += 1
            why.append(f"{rec['id'][:12]}: no probe answer ({_no_answer(rec)})")
        names = (str(rec.get(k) or "")[:MAX_TEXT] for k in ("pod_namespace", "pod", "container_name"))
        seen[rec["id"]] = Seen(rec["id"], *names, acc, None, probe)
    if on_access:
        on_access(seen)
    if runtime is None:
        runtime = _collect(root, Path(out), [node, runtime_config], {},
                           lambda b: runtime_config.read(b, node.facts(b)).facts, errors, why, notes)
    dp = device_plugin_settings(containers, ENV_ALLOW.match, reading.facts.get("device_plugin_dir"))
    for row in exposure.assess(runtime.get("runtime") or {}, containers, dp, runtime.get("engine_cgroup_driver"))["containers"]:
        if row.get("id") in seen and row.get("gpu_injection") not in (None, "unknown"):
            seen[row["id"]].at_risk = bool(row.get("at_risk"))
    return Sweep(seen, errors[0], why, started, time.monotonic() - t0, runtime, list(dict.fromkeys(notes)))


def _collect(root, out: Path, mods: list, options: dict, read: Callable, errors: list, why: list, notes: list):
    """``read(bundle)`` of a scratch bundle the collectors ``mods`` acquired into: ``<out>/.sweep`` when ``out``
    has :data:`ROOM` bytes free, else (or when writing it fails all the same) a new folder under ``$TMPDIR``,
    said in ``notes``; removed afterwards. A collector that raises adds to ``errors[0]`` and ``why``.
    Raises ``BundleWriteError`` when the last place cannot take it either."""
    if _room(out) >= ROOM:
        try:
            return _collect_in(root, out / SCRATCH, mods, options, read, errors, why)
        except OSError as e:  # BundleWriteError above all: the disk filled meanwhile
            notes.append(f"scratch under {tempfile.gettempdir()}: {out} could not take it ({describe(e)})")
    else:
        notes.append(f"scratch under {tempfile.gettempdir()}: {out} has under {ROOM >> 20} MiB free")
    tmp = Path(tempfile.mkdtemp(prefix="gpu-forensics-sweep-"))
    try:
        return _collect_in(root, tmp / SCRATCH, mods, options, read, errors, why)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _collect_in(root, scratch: Path, mods: list, options: dict, read: Callable, errors: list, why: list):
    """:func:`_collect` at one place; errors and ``why`` are added to only once the bundle is written."""
    _clear(scratch)
    mine, said = [0], []
    try:
        writer = BundleWriter(scratch)
        ctx = CollectContext(root=Path(root), writer=writer, options=options, deadline=time.monotonic() + SWEEP_BUDGET_S)
        for mod in mods:
            try:
                mod.acquire(ctx)
            except Exception as e:  # noqa: BLE001 - one source failing is an error counted, not a crash
                mine[0] += 1
                said.append(f"{mod.NAME}: {type(e).__name__}: {e}")
        if writer.write_error is not None:
            raise writer.write_error
        writer.meta.update({"node": ctx.node.name, "node_facts": ctx.node.manifest(), "incidents": []})
        path, _ = writer.finish()
        errors[0] += mine[0]
        why.extend(said)
        b = Bundle.open(path)
        try:
            return read(b)
        finally:
            b.close()
    finally:
        _clear(scratch)


def _room(out: Path) -> int:
    """Bytes free for this process under ``out`` (0 when it cannot be told, or no inode is left)."""
    try:
        v = os.statvfs(out)
    except OSError:
        return 0
    return v.f_bavail * v.f_frsize if (v.f_files == 0 or v.f_favail > 16) else 0


def _no_answer(rec: dict) -> str:
    if not rec.get("pid"):
        return "no init pid"
    if rec.get("dev_entries") is None:
        return "its init is gone or its /dev could not be read"
    return ", ".join(f"{p} {v}" for p, v in (rec.get("probe") or {}).items()) or "no GPU node in its /dev"


def _clear(scratch: Path) -> None:
    """Remove a sweep's scratch bundle (and the ``.incomplete`` one a killed agent left)."""
    for p in (scratch, scratch.with_name(scratch.name + ".incomplete")):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
