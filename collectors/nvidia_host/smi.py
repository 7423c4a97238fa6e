"""Opt-in ``nvidia-smi -q`` (``--nvidia-smi``), run so that a hung GPU can never hang the collection.

On a GPU that stopped answering, nvidia-smi (NVML's ioctls) can block in the kernel in uninterruptible sleep
(state D), where no signal reaches it (NVIDIA/gpu-monitoring-tools#46; gpud PR #117 after an Xid 45), and
nvidia-bug-report.sh's ``--safe-mode`` skips it for that reason (docs/sources.md "NVIDIA kernel and driver wordings"). So it never runs by
default, runs only on the live node (``--root /``), in a child in its own session with no input, for at most
the given seconds (and never past the run's ``--time-budget``); its output is read through a pipe with a
deadline and a byte bound (:func:`forensics.childio.read_until`). At the deadline the child's process group
gets SIGKILL and is waited for at most
:data:`REAP_S` seconds: a process in D state cannot be reaped, so it is left behind, and the record says
``timed out after N s; left running as PID P`` with its state from ``/proc/P/stat``.

The output is stored redacted; only a few fields are read back from the stored text (:func:`parse`): Driver
Version, CUDA Version, and per GPU its Bus Id, Serial Number, GPU UUID, Retired Pages, Remapped Rows, the
uncorrectable ECC counters (Volatile, Aggregate) and Fabric State/Status -- the layout of ``nvidia-smi -q``
(550.127.05 as recorded in leptonai/gpud@8ddf848e ``e2e/mock/nvidia-smi/test_data.go``): ``Key : Value``
lines indented by four spaces per section level, one ``GPU 00000000:06:00.0`` section per GPU.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

from forensics import hostfs
from forensics.childio import read_until
from forensics.artifact import Artifact, Status
from forensics.redact import TEXT_NOTE, redact_bytes

REL = "nvidia_host/nvidia-smi-q.txt"
SOURCE = "nvidia-smi -q"
OUTPUT_LIMIT = 4 << 20     #: bytes of output kept (8 GPUs write about 60 KB)
REAP_S = 2.0               #: seconds waited for the killed child to go
MIN_S = 1.0                #: below this much budget, nvidia-smi is not started


def acquire(ctx, enabled: bool, timeout_s: float) -> dict:
    """Run ``nvidia-smi -q`` when ``enabled`` on a live node; store its output and record the outcome.
    Returns ``{"ran": bool, "status": "collected"|"truncated"|"error"|"absent"|"not-run", "error", "reason",
    "exit", "pid", "state", "timeout_s", "elapsed_s"}``. Raises nothing."""
    out = {"ran": False, "status": "not-run", "error": None, "exit": None, "pid": None, "state": None,
           "timeout_s": None, "elapsed_s": None,
           "reason": "not asked: nvidia-smi runs only with --nvidia-smi (it can hang unkillable on a hung GPU)"}
    if not enabled:
        return out
    if not ctx.live:
        out["reason"] = "not run: --nvidia-smi runs nvidia-smi only on the live node (--root /)"
        ctx.writer.record(Artifact(None, SOURCE, Status.ABSENT, "command", message=out["reason"]))
        return out
    exe = shutil.which("nvidia-smi")
    if exe is None:
        out.update(status="absent", reason="nvidia-smi is not on PATH")
        ctx.writer.record(Artifact(None, SOURCE, Status.ABSENT, "command", message=out["reason"]))
        return out
    limit = timeout_s if ctx.deadline is None else min(timeout_s, ctx.deadline - time.monotonic())
    if limit < MIN_S:
        out.update(status="truncated", reason="not run: the time budget was spent")
        ctx.writer.record(Artifact(None, SOURCE, Status.TRUNCATED, "command", message=out["reason"]))
        return out
    out.update(ran=True, reason=None, timeout_s=round(limit, 1))
    _run(ctx, exe, limit, out)
    return out


def _run(ctx, exe: str, limit: float, out: dict) -> None:
    started = time.monotonic()
    try:
        child = subprocess.Popen([exe, "-q"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                 env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
    except OSError as e:
        out.update(status="error", error=f"cannot start {exe}: {e}")
        ctx.writer.record(Artifact(None, SOURCE, Status.ERROR, "command", message=out["error"]))
        return
    out["pid"] = child.pid
    try:
        try:
            data, timed_out, cut = read_until(child.stdout, started + limit, OUTPUT_LIMIT)
        except OSError as e:
            data, timed_out, cut = f"reading its output failed: {e}\n".encode(), True, False
        if not timed_out:
            try:
                out["exit"] = child.wait(timeout=max(0.0, started + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    except BaseException:  # interrupted (SIGINT, SIGTERM, SIGHUP): the child, in a session of its own, goes too
        _stop(ctx, child, out)
        child.stdout.close()
        raise
    if timed_out:
        out["error"] = f"timed out after {limit:g} s; " + _stop(ctx, child, out)
    child.stdout.close()  # our end only: a child left in D state keeps its own
    out["elapsed_s"] = round(time.monotonic() - started, 3)
    _store(ctx, data, out, cut)


def _stop(ctx, child, out: dict) -> str:
    """SIGKILL the child's process group; wait at most :data:`REAP_S`; say what became of it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        out["state"] = _state(ctx, child.pid)
        return f"left running as PID {child.pid}" + (f" (state {out['state']})" if out["state"] else "")
    return "killed (SIGKILL)"


def _state(ctx, pid: int) -> str | None:
    """The state of ``pid`` (``"D: uninterruptible sleep"``...) from the third field of /proc/PID/stat, the one
    after the name in parentheses (proc(5)); None when it cannot be read."""
    try:
        text = hostfs.read_text(ctx.root, f"/proc/{pid}/stat", limit=4096)
    except OSError:
        return None
    state = text.rpartition(")")[2].split()[:1]
    return {"D": "D: uninterruptible sleep", "Z": "Z: zombie", "S": "S: sleeping", "R": "R: running",
            "T": "T: stopped"}.get(state[0], state[0]) if state else None


def _store(ctx, data: bytes, out: dict, cut: bool) -> None:
    notes = [f"exit status {out['exit']}"] if out["exit"] is not None else []
    stored = redact_bytes(data) if ctx.redact else data
    if stored != data:
        notes.append(f"credentials redacted ({TEXT_NOTE})")
    if cut:
        notes.append(f"truncated: only the first {OUTPUT_LIMIT} bytes of output were kept")
    if out["error"]:
        notes.append(f"{len(data)} bytes of output before it was stopped")
        status = Status.ERROR
    else:
        status = Status.TRUNCATED if cut else Status.COLLECTED
    a = ctx.writer.write_bytes(REL, stored, SOURCE, "command", tuple(notes), status=status, message=out["error"])
    out["status"] = a.status.value


# -- reading the stored output ---------------------------------------------------------------------------
KEY_VALUE = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?)\s*:\s?(?P<value>.*)$")
GPU_HEAD = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
SECTIONS = {"Retired Pages": "retired_pages", "Remapped Rows": "remapped_rows", "Fabric": "fabric"}
GPU_FIELDS = {"Bus Id": "bus_id", "Serial Number": "serial", "GPU UUID": "uuid"}


def parse(text: str) -> dict:
    """``{"driver_version", "cuda_version", "gpus": [{"bus_id", "serial", "uuid", "retired_pages": {key: value},
    "remapped_rows": {...}, "ecc_uncorrectable": {"volatile": {key: value}, "aggregate": {...}}, "fabric":
    {"State", "Status", ...}}], "first_line"}``; values as printed (``N/A`` kept), None when not shown. A
    failure message (``Failed to initialize NVML: ...``) shows as ``first_line`` with no GPU."""
    out = {"driver_version": None, "cuda_version": None, "gpus": [], "first_line": None}
    gpu, path = None, []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        out["first_line"] = out["first_line"] or line.strip()
        head = GPU_HEAD.match(line)
        if head:
            gpu = {"bus_id": head.group("bus"), "serial": None, "uuid": None, "retired_pages": {},
                   "remapped_rows": {}, "ecc_uncorrectable": {"volatile": {}, "aggregate": {}}, "fabric": {}}
            out["gpus"].append(gpu)
            path = []
            continue
        m = KEY_VALUE.match(line)
        key = (m.group("key") if m else line).strip()
        level = (len(m.group("indent")) if m else len(line) - len(line.lstrip())) // 4
        value = m.group("value").strip() if m else None
        if gpu is None:
            if key in ("Driver Version", "CUDA Version") and value:
                out["driver_version" if key.startswith("Driver") else "cuda_version"] = value
            continue
        path = path[:max(level - 1, 0)] + [key]
        _gpu_field(gpu, path, key, value)
    return out


def _gpu_field(gpu: dict, path: list[str], key: str, value: str | None) -> None:
    if value is None or value == "":
        return
    if len(path) == 1 and key in GPU_FIELDS:
        gpu[GPU_FIELDS[key]] = value
    elif len(path) == 2 and path[0] in SECTIONS:
        gpu[SECTIONS[path[0]]][key] = value
    elif len(path) == 3 and path[0] == "ECC Errors" and path[1] in ("Volatile", "Aggregate") \
            and ("Uncorrectable" in key or key in ("Double Bit ECC", "Total")):
        gpu["ecc_uncorrectable"][path[1].lower()][key] = value
    elif len(path) == 2 and path[0] == "PCI" and key == "Bus Id":
        gpu["bus_id"] = value
