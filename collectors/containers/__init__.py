"""Containers: the runtime's on-disk state (not the CRI API), their cgroup device rules, the device
nodes they can see, and (with ``--probe``) whether they can still open them.

Sources, all read under ``--root`` (formats.md §5.2, §6; issue 3 items 1, 3, 4):
- containerd bundles ``<state>/io.containerd.runtime.v2.task/<namespace>/<id>/`` (``config.json`` as
  runc read it, i.e. after nvidia-container-runtime rewrote it; ``options.json``; ``init.pid``), for
  the state dirs /run/containerd, /run/k3s/containerd and :data:`STATE_DIRS`;
- runc state ``<runc root>/<namespace>/<id>/state.json`` (root from ``options.json``, default
  /run/containerd/runc) and plain runc / CRI-O state ``/run/runc/<id>/state.json``;
- cgroup v1 ``devices.list``; systemd's transient unit and drop-ins
  ``/run/systemd/transient/<scope>.scope[.d/*.conf]``; ``bpftool`` for cgroup v2 device programs;
- ``/proc/<pid>/root/dev`` of the container's init, read with lstat only, through directory file
  descriptors opened with ``O_NOFOLLOW`` so that nothing the container's author placed in /dev is
  ever followed or opened.

Bundle layout written by :func:`acquire`, per container ``containers/<namespace>/<id>/``::

    config.json      the on-disk OCI spec, redacted (env values, credential annotations, URL creds)
    state.json       runc's state, redacted the same way
    options.json     containerd's runtime options (BinaryName, Root, SystemdCgroup)
    devices.list     cgroup v1 device rules, as read
    systemd/...      the transient unit file and its drop-ins, as read
    bpftool-*.json   bpftool output (cgroup v2)
    probe.json       the --probe child's raw report
    record.json      the summary record, below

``record.json`` (consumed by the exposure assessment)::

    {"id", "namespace" (containerd namespace; "runc" for /run/runc), "pod", "pod_namespace",
     "container_name", "image", "created" (ISO UTC), "pid" (host pid of init), "bundle" (host path),
     "hooks": {prestart|createRuntime|createContainer|startContainer|poststart|poststop: [{path, args}]},
     "linux_devices": [{path, type, major, minor}],
     "resources_devices": [{allow, type ("c"|"b"|"a"|None = unset), major, minor (None = wildcard), access}],
     "env": {allowlisted name: value; the last of a repeated name wins},
     "annotations": {cdi.k8s.io/* and io.kubernetes.* pod/container annotations},
     "device_plugin_socket_mount": whether config.json's mounts[] bind-mount the host's
                    /var/lib/kubelet/device-plugins (the kubelet's registration socket) at that path, as a
                    real device plugin's do (parse.device_plugin_socket_mount); None when
                    config.json could not be read; absent in bundles written by older versions,
     "cgroup": {"version": 1|2|None, "path", "driver": "systemd"|"cgroupfs"|None,
                "rules": devices.list as [{allow, type, major, minor, access}] (v1) | None,
                "systemd_drop_in": {"policy", "allow": [DeviceAllow values]} | None,
                "bpf": [{id, name, loaded_at}] (v2, bpftool present) | None},
     "dev_entries": [{path, kind (c|b|fifo|symlink|regular|dir|socket|other), major, minor, mode, target,
                      ctime (ISO UTC), made_inside (ctime later than "created": made or changed inside the
                      container after the runtime created it; None when either time is unknown)}]
                    or None when the container's /dev could not be read (no live init process),
     "probe": {path: ok|EPERM|ENXIO|ENOENT|EACCES|E...|timeout|not-run}}
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import datetime

from forensics import hostfs
from forensics.artifact import Artifact, Status, from_oserror
from forensics.bundle import Bundle
from forensics.source import CollectContext, GpuContainer, Option, Reading
from forensics.events import Event, NodeFacts
from forensics.timeutil import parse_iso

from forensics import redact as rd

from . import parse as cp
from . import probe as probe_mod



def _root_only(on: bool, _values) -> bool:
    if on and os.geteuid() != 0:
        raise ValueError("--probe needs root: it joins each container's cgroup and mount namespace")
    return on


NAME = "containers"
PROBE = Option("--probe", "probe", "open() each GPU device inside each container (opt-in)", action="store_true",
               default=False, check=_root_only, record=True)
#: extra containerd state directories, host paths read under --root (a lab's or drill's --state);
#: not on the command line
STATE_DIRS = Option(None, "containerd_state_dirs", "extra containerd state directories", default=())
OPTIONS = [PROBE, STATE_DIRS]

DEFAULT_STATE_DIRS = ("/run/containerd", "/run/k3s/containerd")
TASK_DIRS = ("io.containerd.runtime.v2.task", "io.containerd.runtime.v1.linux")
DEFAULT_RUNC_ROOT = "/run/containerd/runc"
PLAIN_RUNC_ROOTS = ("/run/runc",)
PLAIN_NS = "runc"                     #: namespace recorded for containers found only in /run/runc
SCOPE_PREFIXES = ("cri-containerd-", "docker-", "crio-", "runc-")
TRANSIENT = "/run/systemd/transient"
JSON_LIMIT = 8 << 20                  #: bytes of config.json / state.json read
SMALL_LIMIT = 1 << 20
MAX_CONTAINERS = 5000
BPFTOOL_TIMEOUT_S = 10
PROBE_BUDGET_S = 120.0                #: all probes of one collection together; later ones are not run
RECORD = "record.json"


# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Inventory every container from the runtime's on-disk state into ``containers/``.

    Reads :data:`STATE_DIRS` (extra containerd state dirs, host paths read under ``ctx.root``) and
    :data:`PROBE` (run the open() probe of :mod:`collectors.containers.probe`; otherwise every probe
    result is ``not-run``); adds each GPU container to ``ctx.gpu_containers``. Every file that could
    not be read is recorded in the manifest with its errno; nothing on the host is written, except
    the probe child's own pid into the container's ``cgroup.procs`` (it leaves when the child exits).
    """
    state_dirs = list(DEFAULT_STATE_DIRS) + [str(d) for d in ctx.value(STATE_DIRS)]
    env = _Env(ctx)
    seen: set[tuple[str, str]] = set()
    for state_dir in dict.fromkeys(os.path.normpath(d) for d in state_dirs):
        for task_dir in TASK_DIRS:
            base = f"{state_dir}/{task_dir}"
            try:
                namespaces = hostfs.listdir(ctx.root, base)
            except OSError as e:
                if task_dir == TASK_DIRS[0] and state_dir in DEFAULT_STATE_DIRS[:1]:
                    ctx.writer.record(from_oserror(base, "listdir", e))
                continue
            for ns in namespaces:
                try:
                    ids = hostfs.listdir(ctx.root, f"{base}/{ns}")
                except OSError as e:
                    ctx.writer.record(from_oserror(f"{base}/{ns}", "listdir", e))
                    continue
                for cid in ids:
                    if (ns, cid) in seen:
                        continue
                    if len(seen) >= MAX_CONTAINERS:
                        ctx.writer.record(Artifact(None, base, Status.TRUNCATED, "listdir",
                                                   notes=(f"truncated: only {MAX_CONTAINERS} containers",)))
                        return
                    seen.add((ns, cid))
                    _safe(ctx, ns, cid, lambda: _containerd_one(ctx, env, state_dir, ns, cid, f"{base}/{ns}/{cid}"))
    for runc_root in PLAIN_RUNC_ROOTS:
        try:
            ids = hostfs.listdir(ctx.root, runc_root)
        except OSError:
            continue
        known = {c for _, c in seen}
        for cid in ids:
            if cid not in known and len(seen) < MAX_CONTAINERS:
                seen.add((PLAIN_NS, cid))
                _safe(ctx, PLAIN_NS, cid, lambda: _plain_runc_one(ctx, env, runc_root, cid))


def _safe(ctx, ns, cid, fn):
    """One bad container must not cost the others: record the exception and go on."""
    if ns in ("", ".", "..") or cid in ("", ".", ".."):
        return
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - recorded as data
        ctx.writer.record(Artifact(None, f"container:{ns}/{cid}", Status.ERROR, "containers",
                                   message=f"{type(e).__name__}: {e}"))


class _Env:
    """Per-run facts shared by every container: NVIDIA majors, bpftool, the probe switch."""

    def __init__(self, ctx: CollectContext):
        self.probe = bool(ctx.value(PROBE))
        self.probe_left_s = PROBE_BUDGET_S
        self.majors = probe_mod.nvidia_majors(ctx.root)
        self.bpftool = shutil.which("bpftool")
        self.bpftool_noted = False
        # the names in systemd's transient unit directory, listed once per run rather than looked up
        # (exists + listdir, each resolved component by component) for every scope name of every
        # container; None when it cannot be listed, and then each name is looked up as before
        try:
            self.transient: set[str] | None = set(hostfs.listdir(ctx.root, TRANSIENT))
        except OSError:
            self.transient = None


def _containerd_one(ctx, env, state_dir, ns, cid, bundle):
    rel = f"containers/{ns}/{cid}"
    options = _read_json(ctx, f"{bundle}/options.json", f"{rel}/options.json", redact=False)
    runc_root = None
    if isinstance(options, dict):
        runc_root = options.get("root") or options.get("Root")
    state = None
    for root_dir in dict.fromkeys(r for r in (runc_root, f"{state_dir}/runc", DEFAULT_RUNC_ROOT) if r):
        state = _read_json(ctx, f"{root_dir}/{ns}/{cid}/state.json", f"{rel}/state.json", absent_ok=True)
        if state is not _ABSENT:
            break
        state = None
    else:
        ctx.writer.record(Artifact(None, f"{runc_root or DEFAULT_RUNC_ROOT}/{ns}/{cid}/state.json",
                                   Status.ABSENT, "copy-redacted", notes=("no runc state for this bundle",)))
    spec = _read_json(ctx, f"{bundle}/config.json", f"{rel}/config.json")
    pid = state.get("init_process_pid") if isinstance(state, dict) else None
    if not isinstance(pid, int):
        pid = _int_file(ctx, f"{bundle}/init.pid")
    systemd_opt = isinstance(options, dict) and bool(options.get("systemd_cgroup") or options.get("SystemdCgroup"))
    _finish(ctx, env, rel, ns, cid, bundle, spec, state, pid, systemd_opt)


def _plain_runc_one(ctx, env, runc_root, cid):
    rel = f"containers/{PLAIN_NS}/{cid}"
    state = _read_json(ctx, f"{runc_root}/{cid}/state.json", f"{rel}/state.json")
    bundle = cp.state_bundle(state) if isinstance(state, dict) else None
    spec = _read_json(ctx, f"{bundle}/config.json", f"{rel}/config.json") if bundle else None
    pid = state.get("init_process_pid") if isinstance(state, dict) else None
    _finish(ctx, env, rel, PLAIN_NS, cid, bundle, spec, state, pid if isinstance(pid, int) else None, False)


def _finish(ctx, env, rel, ns, cid, bundle, spec, state, pid, systemd_opt):
    socket_mount = cp.device_plugin_socket_mount(spec) if isinstance(spec, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    state = state if isinstance(state, dict) else {}
    ann = cp.annotations(spec)
    pod, pod_ns, cname, image = cp.pod_identity(ann)
    live_pid = pid if pid and _pid_is_init(ctx, pid, state, cid) else None
    cgroup, procs = _cgroup(ctx, env, rel, cid, spec, state, live_pid, systemd_opt)
    # None: the container's /dev was not read (no live init); [] would claim it was read and empty
    entries, raw_targets = None, []
    if live_pid:
        entries, raw_targets, problems = probe_mod.list_dev(ctx.root, live_pid, ctx.deadline)
        for art in problems:
            ctx.writer.record(art)
    results = _probe(ctx, env, rel, live_pid, procs, entries or [], raw_targets)
    created = cp.state_created(state)
    t_created = _time(created)  # parsed once, not once per /dev entry
    for e in entries or []:
        e["made_inside"] = _later(e.get("ctime"), t_created)
    record = {
        "id": cid, "namespace": ns, "pod": pod, "pod_namespace": pod_ns, "container_name": cname,
        "created": created, "pid": pid, "image": image, "bundle": bundle,
        "hooks": cp.hooks(spec), "linux_devices": cp.linux_devices(spec),
        "resources_devices": cp.resources_devices(spec), "env": cp.env_allowlisted(spec),
        "annotations": ann, "device_plugin_socket_mount": socket_mount,
        "cgroup": cgroup, "dev_entries": entries, "probe": results,
    }
    ctx.writer.write_json(f"{rel}/{RECORD}", record, source=bundle or f"container:{ns}/{cid}",
                          method="containers", notes=("summary of the files beside it; env values other "
                                                      "than NVIDIA_*, CUDA_* and a few more are left out",),
                          compact=True)
    if cp.is_gpu(record):  # podlogs keeps these containers' logs
        ctx.gpu_containers.append(GpuContainer(pod_ns, pod, cname, cid))


def _later(a: str | None, tb: datetime | None) -> bool | None:
    """Whether ISO time ``a`` is later than the time ``tb``; ``None`` when either is unknown."""
    ta = _time(a)
    return None if ta is None or tb is None else ta > tb


_ABSENT = object()  #: what ``_read_json(..., absent_ok=True)`` returns for a path that does not exist


def _read_json(ctx, source: str, rel: str, redact: bool = True, absent_ok: bool = False):
    """Read a JSON file under root and store it (redacted) at ``rel``; the parsed, redacted object or
    ``None``. A file that is not JSON is not stored (it could not be redacted) but recorded. With
    ``absent_ok``, a path that does not exist (``hostfs.exists`` is false) returns ``_ABSENT`` and
    records nothing."""
    try:
        with hostfs.open_regular(ctx.root, source) as f:
            data = f.read(JSON_LIMIT + 1)
    except OSError as e:
        # asked only when the open failed: an open that succeeds implies the path exists
        if absent_ok and not hostfs.exists(ctx.root, source):
            return _ABSENT
        ctx.writer.record(from_oserror(source, "copy-redacted", e))
        return None
    if len(data) > JSON_LIMIT:
        ctx.writer.record(Artifact(None, source, Status.ERROR, "copy-redacted",
                                   message=f"larger than {JSON_LIMIT} bytes; not stored"))
        return None
    redact = redact and ctx.redact  # --no-redact opts out (recorded in the manifest)
    try:
        obj = json.loads(data.decode("utf-8", "surrogateescape"))
        if redact:
            obj = rd.redact_spec(obj)
        # compact, so that the C encoder writes it (indent= takes the pure-Python one, ~7x slower); a
        # value nested too deeply to write back fails here, not half-way into the bundle
        text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    except ValueError as e:
        ctx.writer.record(Artifact(None, source, Status.ERROR, "copy-redacted",
                                   message=f"not valid JSON ({e}); not stored because it cannot be redacted"))
        return None
    except RecursionError:
        # nesting beyond the interpreter's recursion limit (a hostile file): the container's record is
        # still written, from an empty spec
        ctx.writer.record(Artifact(None, source, Status.ERROR, "copy-redacted",
                                   message="JSON nested too deeply to redact; not stored, read as empty"))
        return None
    notes = (f"env values redacted (names kept; values outside {', '.join(rd.ENV_KEPT)} and of credential-named "
             f"variables replaced by a keyed hash prefix); annotation values other than Kubernetes pod identity and "
             f"{rd.CDI_PREFIX}*, credential args, auth headers and URL credentials redacted; re-serialised from the "
             "parsed file",) if redact else ()
    ctx.writer.write_bytes(rel, (text + "\n").encode("ascii"), source, "copy-redacted" if redact else "copy-parsed",
                           notes=notes)
    return obj


def _int_file(ctx, source: str) -> int | None:
    try:
        return int(hostfs.read_text(ctx.root, source, limit=64).strip())
    except (OSError, ValueError):
        return None


def _pid_is_init(ctx, pid: int, state: dict, cid: str | None = None) -> bool:
    """The pid still belongs to the container's init (runc's ``init_process_start``, in clock ticks
    since boot, equals field 22 of /proc/<pid>/stat), so its /proc entries are the container's."""
    try:
        text = hostfs.read_text(ctx.root, f"/proc/{pid}/stat", limit=4096)
    except OSError as e:
        ctx.writer.record(from_oserror(f"/proc/{pid}/stat", "read", e, ("container init is not running",)))
        return False
    want = state.get("init_process_start")
    if want is None:
        return _pid_looks_like_container(ctx, pid, state, cid)
    fields = text.rsplit(")", 1)[-1].split()
    ok = len(fields) > 19 and fields[19] == str(want)
    if not ok:
        ctx.writer.record(Artifact(None, f"/proc/{pid}/stat", Status.ERROR, "read",
                                   message=f"pid {pid} is no longer the container's init (start time differs)"))
    return ok


def _pid_looks_like_container(ctx, pid: int, state: dict, cid: str | None = None) -> bool:
    """Without runc's ``init_process_start`` the pid is taken for the container's init only when it is in
    a mount namespace other than PID 1's and its /proc/<pid>/cgroup names the container id; otherwise a
    recycled or forged pid (state.json saying ``1``) would have the host's /dev read as the container's."""
    cid = cid or (state.get("id") if isinstance(state.get("id"), str) else None)
    why = None
    try:
        mine = hostfs.readlink(ctx.root, f"/proc/{pid}/ns/mnt")
        host = hostfs.readlink(ctx.root, "/proc/1/ns/mnt")
        if mine is None or mine == host:
            why = "it is in the host's mount namespace"
        elif not cid or cid not in hostfs.read_text(ctx.root, f"/proc/{pid}/cgroup", limit=SMALL_LIMIT):
            why = "its /proc/<pid>/cgroup does not name the container"
    except OSError as e:
        why = f"its namespaces or cgroups cannot be read ({e.strerror or e})"
    if why:
        ctx.writer.record(Artifact(None, f"/proc/{pid}", Status.ERROR, "read",
                                   message=f"pid {pid} is not taken for the container's init: {why} "
                                           "(runc's init_process_start is missing)"))
    return why is None


# -- cgroup ----------------------------------------------------------------------------------------
def _cgroup_path_ok(p) -> bool:
    """A cgroup directory as runc or /proc recorded it: a plain path under /sys/fs/cgroup/, no ``..``."""
    return isinstance(p, str) and p.startswith("/sys/fs/cgroup/") and ".." not in p.split("/") and "\0" not in p


def _cgroup(ctx, env, rel, cid, spec, state, pid, systemd_opt) -> tuple[dict, list[str]]:
    """The record's ``cgroup`` and the cgroup directories (host paths) the probe joins."""
    paths = state.get("cgroup_paths") if isinstance(state.get("cgroup_paths"), dict) else {}
    if not paths and pid:
        paths = _proc_cgroup_paths(ctx, pid)
    bad = {k: paths[k] for k in ("devices", "") if paths.get(k) and not _cgroup_path_ok(paths[k])}
    if bad:
        ctx.writer.record(Artifact(None, f"container:{cid}", Status.ERROR, "containers",
                                   message="cgroup paths outside /sys/fs/cgroup or with '..' ignored: "
                                           + ", ".join(f"{k or 'unified'}={str(v)[:200]!r}" for k, v in bad.items())))
        paths = {k: v for k, v in paths.items() if k not in bad}
    version = 1 if paths.get("devices") else 2 if paths.get("") else None
    path = paths.get("devices") or paths.get("") or None
    sysd = cp.dig(state, "config", "cgroups", "Systemd")
    cgpath = cp.dig(spec, "linux", "cgroupsPath")
    if state:
        driver = "systemd" if sysd is True else "cgroupfs"
    elif systemd_opt or (isinstance(cgpath, str) and cgpath.count(":") == 2) or (path or "").endswith(".scope"):
        driver = "systemd"
    else:
        driver = "cgroupfs" if path else None
    rules = None
    if version == 1 and path:
        kept: list[bytes] = []
        art = ctx.writer.copy(ctx.root, f"{path}/devices.list", f"{rel}/devices.list", limit=SMALL_LIMIT, keep=kept)
        if art.status in (Status.COLLECTED, Status.TRUNCATED):
            rules = cp.parse_devices_list(b"".join(kept).decode("utf-8", "replace"))
    return {"version": version, "path": path, "driver": driver, "rules": rules,
            "systemd_drop_in": _drop_ins(ctx, env, rel, cid, path), "bpf": _bpf(ctx, env, rel, version, path)}, \
        [p for p in (paths.get("devices"), paths.get("")) if p]


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
        elif ctrls == "":
            out[""] = ("/sys/fs/cgroup/unified" if hostfs.exists(ctx.root, "/sys/fs/cgroup/unified/cgroup.procs")
                       else "/sys/fs/cgroup") + p
    return out


def _scope_names(cid: str, path: str | None) -> list[str]:
    names = [f"{p}{cid}.scope" for p in SCOPE_PREFIXES]
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
            art = ctx.writer.copy(ctx.root, src, f"{rel}/systemd/{src[len(TRANSIENT) + 1:]}", limit=SMALL_LIMIT,
                                  keep=kept)
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
    shown = _bpftool(ctx, [env.bpftool, "-j", "cgroup", "show", os.path.join(ctx.root, path.lstrip("/"))],
                     f"{rel}/bpftool-cgroup.json")
    if shown is None:
        return None
    progs = []
    for pid_ in cp.bpf_device_prog_ids(shown):
        info = _bpftool(ctx, [env.bpftool, "-j", "prog", "show", "id", str(pid_)], f"{rel}/bpftool-prog-{pid_}.json")
        info = info if isinstance(info, dict) else {}
        progs.append({"id": pid_, "name": info.get("name") or "", "loaded_at": cp.bpf_time(info.get("loaded_at"))})
    return progs


def _bpftool(ctx, argv, rel):
    src = " ".join(argv)
    try:
        out = subprocess.run(argv, capture_output=True, timeout=BPFTOOL_TIMEOUT_S, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        ctx.writer.record(Artifact(None, src, Status.ERROR, "command", message=str(e)))
        return None
    if out.returncode != 0:
        ctx.writer.record(Artifact(None, src, Status.ERROR, "command", message=f"exit {out.returncode}: "
                                   + out.stderr[-500:].decode("utf-8", "replace").strip()))
        return None
    with ctx.writer.create(rel, src, "command", text=False) as fh:
        fh.write(out.stdout[:SMALL_LIMIT])
    try:
        return json.loads(out.stdout.decode("utf-8", "replace") or "null")
    except ValueError:
        return None


def _probe(ctx, env, rel, pid, procs, entries, raw_targets) -> dict:
    """Probe results keyed by display path, for every non-directory /dev/nvidia* and
    /dev/nvidia-caps/* entry: ``not-run`` unless ``--probe`` and the entry is an NVIDIA char device."""
    raw = dict(raw_targets)
    results, targets = {}, []
    for e in entries:
        p = e["path"]
        if e["kind"] == "dir" or not (p.startswith("/dev/nvidia")):
            continue
        results[p] = "not-run"
        if env.probe and pid and e["kind"] == "c" and e["major"] in env.majors:
            targets.append((p, raw[p], e["major"], e["minor"]))
    if targets and env.probe_left_s <= 0:
        ctx.writer.record(Artifact(None, f"/proc/{pid}/root/dev", Status.TRUNCATED, "probe",
                                   notes=(f"truncated: probe time budget of {PROBE_BUDGET_S:.0f} s spent; not run",)))
    elif targets:
        found, report = probe_mod.probe(ctx.root, pid, procs, [(r, ma, mi) for _, r, ma, mi in targets],
                                        timeout=min(probe_mod.TIMEOUT_S, env.probe_left_s))
        env.probe_left_s -= report.get("elapsed_s") or 0
        for (p, *_), res in zip(targets, found):
            results[p] = res
        report["targets"] = [p for p, *_ in targets]
        ctx.writer.write_json(f"{rel}/probe.json", report, source=f"/proc/{pid}/root/dev", method="probe",
                              notes=("open(O_RDWR|O_NOFOLLOW|O_NONBLOCK) from a child inside the container's "
                                     "cgroup and mount namespace",))
    return results


# -- read ------------------------------------------------------------------------------------------
def records(bundle: Bundle, problems: list | None = None) -> list[tuple[str, dict]]:
    """Every ``containers/<ns>/<id>/record.json`` of the bundle as ``(rel path, record)``. A record
    that cannot be parsed is skipped and, when ``problems`` is given, reported there."""
    out = []
    for art in bundle.find("containers/"):
        if art.path.endswith("/" + RECORD):
            try:
                rec = json.loads(bundle.path(art.path).read_text("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as e:
                if problems is not None:
                    problems.append({"artifact": art.path, "message": f"cannot read: {e}"})
                continue
            out.append((art.path, rec))
    return out


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """Read the container records back from the bundle (never the host).

    Returns a :class:`Reading` with ``facts["containers"]`` = the records (shape in the module
    docstring; each gets ``"gpu": bool`` from :func:`parse.is_gpu` added), with them
    ``facts["device_plugin_dir"]`` (the kubelet directory ``device_plugin_socket_mount`` is about), and events, each with ``evidence = {"artifact": record path}``:

    - ``container.created`` at the runc ``created`` time: attrs ``id, pod, namespace,
      container_name, gpu``;
    - ``container.probe`` at collection time, for results other than ``not-run``: attrs
      ``id, pod, path, result``;
    - ``container.device-rules-applied`` at a device BPF program's ``loaded_at`` when that is later
      than the container's creation (the last re-application of its device rules, e.g. by a
      daemon-reload or a container update): attrs ``id, pod, prog_id, prog_name``.
    """
    reading = Reading()
    collected = (bundle.manifest.get("collection") or {})
    at_collect = _time(collected.get("end") or collected.get("start"))
    for rel, rec in records(bundle, reading.problems):
        rec = dict(rec)
        rec["gpu"] = cp.is_gpu(rec)
        reading.facts.setdefault("containers", []).append(rec)
        reading.facts["device_plugin_dir"] = cp.DEVICE_PLUGIN_DIR  # what device_plugin_socket_mount checks
        ev = {"artifact": rel}
        cid, pod = rec.get("id"), rec.get("pod")
        label = f"{rec.get('pod_namespace')}/{pod}" if pod else cid
        created = _time(rec.get("created"))
        if created:
            name = rec.get("container_name") or (cid or "")[:12]
            reading.events.append(Event(created, "containers", "container.created",
                                        f"container {name} of {label} created" + (" (GPU)" if rec["gpu"] else ""),
                                        {"id": cid, "pod": pod, "namespace": rec.get("pod_namespace"),
                                         "container_name": rec.get("container_name"), "gpu": rec["gpu"]}, ev))
        for path, result in (rec.get("probe") or {}).items():
            if result != "not-run" and at_collect:
                reading.events.append(Event(at_collect, "containers", "container.probe",
                                            f"open({path}) in {label}: {result}",
                                            {"id": cid, "pod": pod, "path": path, "result": result}, ev))
        for prog in ((rec.get("cgroup") or {}).get("bpf") or []):
            loaded = _time(prog.get("loaded_at"))
            if loaded and created and loaded > created:
                reading.events.append(Event(loaded, "containers", "container.device-rules-applied",
                                            f"device rules of {label} re-applied (BPF program {prog.get('id')} "
                                            f"{prog.get('name') or 'unnamed'} loaded)",
                                            {"id": cid, "pod": pod, "prog_id": prog.get("id"),
                                             "prog_name": prog.get("name")}, ev))
    return reading


def _time(text) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_iso(text)
    except (ValueError, OverflowError):
        return None
