"""Acquisition of one container: its runtime files, whether its pid is still its init, its /dev,
the open() probe, and the ``record.json`` that sums it up.

For a containerd bundle (:func:`_containerd_one`) or a plain runc / CRI-O state directory
(:func:`_plain_runc_one`) it stores ``options.json``, ``state.json`` and ``config.json`` (redacted by
:func:`forensics.redact.redact_spec` and re-serialised, :func:`_read_json`), checks that the recorded
pid is still the container's init (:func:`_pid_is_init`), reads the cgroup
(:mod:`collectors.containers.cgroup`), lists ``/proc/<pid>/root/dev`` and runs the probe
(:mod:`collectors.containers.probe`), and writes ``containers/<namespace>/<id>/record.json`` in the
shape the package docstring gives. ``env`` is the run's :class:`collectors.containers._Env`.
"""
from __future__ import annotations

import json
from datetime import datetime

from forensics import hostfs
from forensics.artifact import Artifact, Status, from_oserror
from forensics import redact as rd
from forensics.source import GpuContainer

import collectors.containers.parse as cp
import collectors.containers.probe as probe_mod
import collectors.containers.unit as unit_mod
from .cgroup import SMALL_LIMIT, _cgroup
from .parse import _time

DEFAULT_RUNC_ROOT = "/run/containerd/runc"
PLAIN_NS = "runc"                     #: namespace recorded for containers found only in /run/runc
JSON_LIMIT = 8 << 20                  #: bytes of config.json / state.json read
RUNC_LOG_LIMIT = 1 << 20              #: bytes of runc's log.json copied (its first lines: create's warnings)
PROBE_BUDGET_S = 120.0                #: all probes of one collection together; later ones are not run
RECORD = "record.json"


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
    _finish(ctx, env, rel, ns, cid, bundle, spec, state, pid, systemd_opt, _runc_log(ctx, bundle, rel))


def _runc_log(ctx, bundle: str, rel: str) -> list[dict] | None:
    """runc's ``log.json`` of the task (the runc.v2 shim runs runc with ``--log <bundle>/log.json
    --log-format json``) copied to ``{rel}/log.json``, redacted like every log
    (:func:`forensics.redact.redact_bytes`), at most :data:`RUNC_LOG_LIMIT` bytes; its warning and worse
    entries (:func:`collectors.containers.parse.runc_log`), or ``None`` when it could not be read."""
    stored: list[bytes] = []

    def transform(data: bytes) -> tuple[bytes, tuple[str, ...]]:
        out = rd.redact_bytes(data) if ctx.redact else data
        stored.append(out)
        return out, ((f"credentials redacted ({rd.TEXT_NOTE})",) if out != data else ())
    art = ctx.writer.copy(ctx.root, f"{bundle}/log.json", f"{rel}/log.json", "copy-redacted" if ctx.redact else "copy",
                          limit=RUNC_LOG_LIMIT, transform=transform)
    if art.status not in (Status.COLLECTED, Status.TRUNCATED) or not stored:
        return None
    return cp.runc_log(stored[0].decode("utf-8", "replace"))


def _plain_runc_one(ctx, env, runc_root, cid):
    rel = f"containers/{PLAIN_NS}/{cid}"
    state = _read_json(ctx, f"{runc_root}/{cid}/state.json", f"{rel}/state.json")
    bundle = cp.state_bundle(state) if isinstance(state, dict) else None
    spec = _read_json(ctx, f"{bundle}/config.json", f"{rel}/config.json") if bundle else None
    pid = state.get("init_process_pid") if isinstance(state, dict) else None
    _finish(ctx, env, rel, PLAIN_NS, cid, bundle, spec, state, pid if isinstance(pid, int) else None, False)


def _finish(ctx, env, rel, ns, cid, bundle, spec, state, pid, systemd_opt, runc_log=None):
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
        "cgroup": cgroup, "dev_entries": entries, "probe": results, "runc_log": runc_log,
        "skipped_devices": list(dict.fromkeys(e["device"] for e in runc_log or [] if e["device"])),
        "systemd_unit": None,
    }
    if cgroup["driver"] == "systemd" and cp.is_gpu(record):  # systemd's own view of the scope
        record["systemd_unit"] = unit_mod.show(ctx, env.systemctl, rel, unit_mod.unit_name(cid, cgroup, spec))
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
