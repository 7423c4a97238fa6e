"""A container's cgroup: its paths, the driver, cgroup v1 ``devices.list``, systemd's transient
unit and drop-ins, the device BPF programs of cgroup v2 (``bpftool``), and its memory counters
(:mod:`collectors.containers.memory`).

:func:`_cgroup` gives the record's ``cgroup`` (shape in :mod:`collectors.containers`) and the cgroup
directories the probe joins; every file it reads is stored under the container's bundle directory
(``devices.list``, ``systemd/...``, ``bpftool-*.json``). The formats are parsed by
:mod:`collectors.containers.parse`.
"""
from __future__ import annotations

import json
import os
import subprocess

from forensics import hostfs
from forensics.artifact import Artifact, Status
from forensics.engines import scope_names
from forensics.redact_config import store_config

import collectors.containers.parse as cp
from collectors.containers.memory import memory

TRANSIENT = "/run/systemd/transient"
SMALL_LIMIT = 1 << 20
BPFTOOL_TIMEOUT_S = 10


def _cgroup_path_ok(p) -> bool:
    """A cgroup directory as runc or /proc recorded it: a plain path under /sys/fs/cgroup/, no ``..``."""
    return isinstance(p, str) and p.startswith("/sys/fs/cgroup/") and ".." not in p.split("/") and "\0" not in p


def _cgroup(ctx, env, rel, cid, spec, state, pid, options) -> tuple[dict, list[str], dict]:
    """The record's ``cgroup``, the cgroup directories (host paths) the probe joins, and the record's
    ``memory`` (:func:`collectors.containers.memory.memory`). ``options``: containerd's parsed
    options.json (or None); the driver and its source are :func:`collectors.containers.parse.cgroup_driver`'s."""
    paths = state.get("cgroup_paths") if isinstance(state.get("cgroup_paths"), dict) else {}
    path_from = "runc state.json cgroup_paths"
    if not paths and pid:
        paths, path_from = _proc_cgroup_paths(ctx, pid), f"/proc/{pid}/cgroup"
    bad = {k: paths[k] for k in ("devices", "", "memory") if paths.get(k) and not _cgroup_path_ok(paths[k])}
    if bad:
        ctx.writer.record(Artifact(None, f"container:{cid}", Status.ERROR, "containers",
                                   message="cgroup paths outside /sys/fs/cgroup or with '..' ignored: "
                                           + ", ".join(f"{k or 'unified'}={str(v)[:200]!r}" for k, v in bad.items())))
        paths = {k: v for k, v in paths.items() if k not in bad}
    version = 1 if paths.get("devices") else 2 if paths.get("") else None
    path = paths.get("devices") or paths.get("") or None
    driver, driver_source = cp.cgroup_driver(state, spec, path, path_from, options, cid)
    rules = None
    if version == 1 and path:
        kept: list[bytes] = []
        art = ctx.writer.copy(ctx.root, f"{path}/devices.list", f"{rel}/devices.list", limit=SMALL_LIMIT, keep=kept)
        if art.status in (Status.COLLECTED, Status.TRUNCATED):
            rules = cp.parse_devices_list(b"".join(kept).decode("utf-8", "replace"))
    return {"version": version, "path": path, "driver": driver, "driver_source": driver_source, "rules": rules,
            "systemd_drop_in": _drop_ins(ctx, env, rel, cid, path), "bpf": _bpf(ctx, env, rel, version, path)}, \
        [p for p in (paths.get("devices"), paths.get("")) if p], memory(ctx, rel, paths)


def _proc_cgroup_paths(ctx, pid) -> dict:
    """cgroup_paths from /proc/<pid>/cgroup when runc's state is missing (standard mount points)."""
    try:
        text = hostfs.read_text(ctx.root, f"/proc/{pid}/cgroup", limit=SMALL_LIMIT)
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        ctrls, _, p = rest.partition(":")
        if "devices" in ctrls.split(","):
            out["devices"] = "/sys/fs/cgroup/devices" + p
        elif "memory" in ctrls.split(","):
            out["memory"] = "/sys/fs/cgroup/memory" + p
        elif ctrls == "":
            out[""] = ("/sys/fs/cgroup/unified" if hostfs.exists(ctx.root, "/sys/fs/cgroup/unified/cgroup.procs")
                       else "/sys/fs/cgroup") + p
    return out


def _scope_names(cid: str, path: str | None) -> list[str]:
    names = scope_names(cid)
    last = (path or "").rstrip("/").rsplit("/", 1)[-1]
    if last.endswith(".scope"):
        names.insert(0, last)
    return list(dict.fromkeys(names))


def _drop_ins(ctx, env, rel, cid, path) -> dict | None:
    """systemd's transient unit and its drop-ins: what systemd re-applies on the next reload.

    ``env.transient`` (the unit directory's names, listed once per run) rules out the scope names that
    are not there without touching the host; a name that is there is still looked up as before."""
    texts = []
    for scope in _scope_names(cid, path):
        unit = f"{TRANSIENT}/{scope}"
        listed = env.transient
        files = [unit] if (listed is None or scope in listed) and hostfs.exists(ctx.root, unit) else []
        if listed is None or f"{scope}.d" in listed:
            try:
                files += [f"{unit}.d/{n}" for n in hostfs.listdir(ctx.root, f"{unit}.d") if n.endswith(".conf")]
            except OSError:
                pass
        for src in files:
            kept: list[bytes] = []  # the bytes stored, parsed without reading the bundle back
            art = store_config(ctx, src, f"{rel}/systemd/{src[len(TRANSIENT) + 1:]}", "unit", SMALL_LIMIT, kept=kept)
            if art.status in (Status.COLLECTED, Status.TRUNCATED):
                texts.append(b"".join(kept).decode("utf-8", "replace"))
        if files:
            break
    return cp.parse_unit_device_settings(texts) if texts else None


def _bpf(ctx, env, rel, version, path) -> list | None:
    """Device-filter BPF programs attached to a cgroup v2 path, with ``loaded_at`` (bpftool)."""
    if version != 2 or not path or not os.path.isdir(os.path.join(ctx.root, path.lstrip("/"))):
        return None
    if not env.bpftool:
        if not env.bpftool_noted:
            env.bpftool_noted = True
            ctx.writer.record(Artifact(None, "bpftool", Status.ABSENT, "command",
                                       message="bpftool is not installed; cgroup v2 device programs not listed"))
        return None
    where = os.path.join(ctx.root, path.lstrip("/"))
    offline = None if on_cgroup2(where) else (
        f"{path} under --root is not on a mounted cgroup2 file system (a copied or offline root): "
        "device programs can only be listed on the live node")
    shown = _bpftool(ctx, [env.bpftool, "-j", "cgroup", "show", where], f"{rel}/bpftool-cgroup.json", offline)
    if shown is None:
        return None
    progs = []
    for pid_ in cp.bpf_device_prog_ids(shown):
        info = _bpftool(ctx, [env.bpftool, "-j", "prog", "show", "id", str(pid_)], f"{rel}/bpftool-prog-{pid_}.json")
        info = info if isinstance(info, dict) else {}
        progs.append({"id": pid_, "name": info.get("name") or "", "loaded_at": cp.bpf_time(info.get("loaded_at"))})
    return progs


def on_cgroup2(path: str, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether ``path`` (not followed if a link) lies on a mounted cgroup2 file system: its ``st_dev`` is
    the device of a ``cgroup2`` line of ``mountinfo`` (proc(5), /proc/pid/mountinfo: field 3 is
    major:minor, the field after `` - `` the type). False when either cannot be read."""
    try:
        st = os.stat(path, follow_symlinks=False)
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read(4 << 20).splitlines()
    except OSError:
        return False
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    for line in lines:
        head, sep, tail = line.partition(" - ")
        f = head.split()
        if sep and len(f) > 2 and f[2] == dev and tail.split()[:1] == ["cgroup2"]:
            return True
    return False


def _bpftool(ctx, argv, rel, offline: str | None = None):
    """Run bpftool and store its JSON at ``rel``; a failure is an error, or absent with ``offline`` as the
    reason when the cgroup is not on a live cgroup2 mount (nothing there for bpftool to list)."""
    src = " ".join(argv)
    if ctx.budget_spent(src, "command"):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, timeout=ctx.left(BPFTOOL_TIMEOUT_S), check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        ctx.writer.record(Artifact(None, src, Status.ERROR, "command", message=str(e)))
        return None
    if out.returncode != 0:
        said = f"exit {out.returncode}: " + out.stderr[-500:].decode("utf-8", "replace").strip()
        ctx.writer.record(Artifact(None, src, Status.ABSENT if offline else Status.ERROR, "command",
                                   message=f"{offline} ({said})" if offline else said))
        return None
    with ctx.writer.create(rel, src, "command", text=False) as fh:
        fh.write(out.stdout[:SMALL_LIMIT])
    try:
        return json.loads(out.stdout.decode("utf-8", "replace") or "null")
    except ValueError:
        return None


