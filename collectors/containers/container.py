"""Acquisition of one container: its runtime files, whether its pid is still its init, its /dev,
the open() probe, and the ``record.json`` that sums it up.

For each container :mod:`collectors.containers.engines` found (:func:`_found_one`: a containerd or
Docker task directory, a CRI-O userdata directory, or a runc state under any root) it stores
``state.json`` and ``config.json`` (redacted by :func:`forensics.redact.redact_spec` and re-serialised,
:func:`_read_json`; containerd's ``options.json`` is stored by the discovery), records how the spec read
went (the record's ``config``: :func:`_read_spec`), checks that the recorded pid is still the
container's init (:func:`_pid_is_init`), reads the cgroup (:mod:`collectors.containers.cgroup`), lists
``/proc/<pid>/root/dev`` and runs the probe (:mod:`collectors.containers.probe`), and writes
``containers/<namespace>/<id>/record.json`` in the shape the package docstring gives. ``env`` is the
run's :class:`collectors.containers._Env`.
"""
from __future__ import annotations

import errno
import json
from datetime import datetime

from forensics import engines as eng_table, hostfs
from forensics.artifact import Artifact, Status, errno_name, from_oserror
from forensics import redact as rd
from forensics.source import NOT_READ, GpuContainer

import collectors.containers.docker as dk
import collectors.containers.engines as eng
import collectors.containers.parse as cp
import collectors.containers.probe as probe_mod
import collectors.containers.unit as unit_mod
from .cgroup import SMALL_LIMIT, _cgroup
from .parse import _time

DEFAULT_RUNC_ROOT = "/run/containerd/runc"
JSON_LIMIT = 8 << 20                  #: bytes of config.json / state.json read
RUNC_LOG_LIMIT = 1 << 20              #: bytes of runc's log.json copied (its first lines: create's warnings)
PROBE_BUDGET_S = 120.0                #: all probes of one collection together; later ones are not run
RECORD = "record.json"
#: the layout kinds of a containers/storage container (forensics/engines Discovery.storage_bundle), and of one
#: whose bundle is its run root's userdata (CRI-O's)
_STORAGE = tuple(e.name for e in eng.storage_engines())
_RUN_ROOT = tuple(e.name for e in eng.storage_engines("run"))


def _found_one(ctx, env, f, docker_roots=(), names=None):
    """Acquire one container met by :func:`collectors.containers.engines.discover` (``f``, a ``Found``):
    its runc state (the first of ``f.states`` that exists), its spec (``config.json`` of ``f.bundle`` or of
    the bundle its state names), its pid, cgroup, /dev and probe, and write its record.
    ``docker_roots``: Docker data roots to read ``config.v2.json`` from for a ``moby`` container; ``names``:
    ``{id: (name, source)}`` learnt from the node's conmon processes (a Podman container's name)."""
    rel = f"containers/{f.namespace}/{f.id}"
    state = None
    for path in dict.fromkeys(f.states):
        state = _read_json(ctx, path, f"{rel}/state.json", absent_ok=True)
        if state is not _ABSENT:
            break
        state = None
    else:
        why = ("gone mid-run: listed, then no longer there" if f.kind == "runc" else
               "no runc state for this container under any runc root looked in (containers/roots.json)")
        guess = f"/run/runc/{f.id}/state.json" if f.kind in _STORAGE else \
            f"{DEFAULT_RUNC_ROOT}/{f.namespace}/{f.id}/state.json"
        ctx.writer.record(Artifact(None, (f.states or [guess])[0], Status.ABSENT, "copy-redacted", notes=(why,)))
    ran = cp.state_bundle(state) if isinstance(state, dict) else None
    # a containers/storage run root's userdata without a spec: the bundle runc ran is the one its state names
    # (Podman's, under a graph root not learnt)
    bundle = ran if f.kind in _RUN_ROOT and ran and ran != f.bundle and not _has_spec(ctx, f.bundle) else \
        f.bundle or ran
    engine = _engine(f, bundle)
    outcome: dict = {}
    if bundle and ctx.budget_spent(f"{bundle}/config.json", "copy-redacted"):  # one spec can take a second
        spec, outcome = None, {"status": "truncated", "detail": NOT_READ}
    else:
        spec = _read_spec(ctx, bundle, f"{rel}/config.json", outcome, state, listed=f.bundle == bundle)
    # the engine a spec (or runc's copy of its annotations) names beats the layout: Podman and CRI-O share one
    engine = eng_table.engine_of_spec(cp.dig(spec, "annotations")) or \
        eng_table.engine_of_labels(cp.dig(state, "config", "labels")) or engine
    pid = state.get("init_process_pid") if isinstance(state, dict) else None
    pid_file = eng_table.ENGINES[f.kind].discovery.pid_file if f.kind in eng_table.ENGINES else None
    if not isinstance(pid, int) and bundle and pid_file:
        pid = _int_file(ctx, f"{bundle}/{pid_file}")
    ident = dk.docker_identity(ctx, docker_roots, f.id, rel) if engine == "docker" and not ctx.expired() else None
    if ident is None and (names or {}).get(f.id):
        ident = {"container_name": names[f.id][0], "container_name_source": names[f.id][1]}
    _finish(ctx, env, rel, f.namespace, f.id, bundle, spec, state, pid if isinstance(pid, int) else None, f.options,
            _runc_log(ctx, bundle, rel) if f.kind == "containerd" and not ctx.expired() else None,
            extra={"engine": engine, "config": outcome, "found_via": f.via}, ident=ident)


def _engine(f, bundle: str | None) -> str:
    """The engine that runs ``f`` by where it was found: Docker for a containerd task in ``moby``, the
    layout's engine for a containers/storage one, else the shape of the bundle its runc state names."""
    if f.kind == "containerd":
        return eng.engine_of_namespace(f.namespace)
    return f.kind if f.kind in _STORAGE else eng.engine_of_bundle(bundle)[0]


def _has_spec(ctx, bundle: str | None) -> bool:
    return bool(bundle) and hostfs.exists(ctx.root, f"{bundle}/config.json")


def _read_spec(ctx, bundle, rel, outcome, state, listed: bool):
    """``config.json`` of ``bundle`` read and stored by :func:`_read_json`; ``outcome`` gets the record's
    ``config`` (``{"status", "detail"}``). The bundle directory is listed first, so that a spec that was
    there and is gone when read is told from one that never was ("gone mid-run"); ``listed``: the bundle
    directory itself was listed by the discovery (so its absence now means it went away mid-run)."""
    if not bundle:
        outcome.update(status="absent", detail="no bundle path: runc's state.json " +
                       ("names none" if isinstance(state, dict) else "could not be read"))
        return None
    try:
        names = hostfs.listdir(ctx.root, bundle)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            outcome.update(status="absent", detail=f"gone mid-run: the bundle directory {bundle} was listed, then "
                           "no longer there" if listed else f"ENOENT: the bundle directory {bundle} runc's state "
                           "names does not exist")
            ctx.writer.record(from_oserror(f"{bundle}/config.json", "copy-redacted", e, (outcome["detail"],)))
            return None
        in_bundle = None
    else:
        in_bundle = "config.json" in names
    spec = _read_json(ctx, f"{bundle}/config.json", rel, outcome=outcome)
    if spec is not None and not isinstance(spec, dict):  # valid JSON, but no OCI spec (config.md: an object)
        outcome.update(status="error", detail=f"not a JSON object ({type(spec).__name__})")
        ctx.writer.record(Artifact(None, f"{bundle}/config.json", Status.ERROR, "copy-redacted", message=(
            f"not a JSON object (a {type(spec).__name__}): no OCI spec read; the container's hooks, devices and "
            "env are unknown")))
        return None
    if outcome.get("status") == "absent":
        outcome["detail"] = ("gone mid-run: listed in the bundle, then no longer there" if in_bundle
                             else f"ENOENT: the bundle {bundle} holds no config.json")
    return spec


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


def _finish(ctx, env, rel, ns, cid, bundle, spec, state, pid, options, runc_log=None, extra=None, ident=None):
    known = isinstance(spec, dict)  # the spec was read: its lists are facts; otherwise they are unknown (None)
    socket_mount = cp.device_plugin_socket_mount(spec) if known else None
    spec = spec if known else {}
    state = state if isinstance(state, dict) else {}
    ann = cp.annotations(spec)
    pod, pod_ns, cname, image = cp.pod_identity(ann)
    if ident:  # Docker's own config.v2.json (its name, image, cri-dockerd's pod labels), or conmon's -n
        pod, pod_ns = pod or ident.get("pod"), pod_ns or ident.get("pod_namespace")
        cname, image = cname or ident.get("container_name"), image or ident.get("image")
    created = cp.state_created(state)
    late = ctx.expired()  # spent while this container was read: what its files said is kept, no live evidence read
    if late:
        ctx.writer.record(Artifact(None, f"container:{ns}/{cid}", Status.TRUNCATED, "containers", message=LATE))
    live = _not_read_live() if late else _live(ctx, env, rel, cid, spec, state, pid, options, created)
    record = {
        "id": cid, "namespace": ns, "pod": pod, "pod_namespace": pod_ns, "container_name": cname,
        "created": created, "pid": pid, "image": image, "bundle": bundle,
        "hooks": cp.hooks(spec) if known else None, "linux_devices": cp.linux_devices(spec) if known else None,
        "resources_devices": cp.resources_devices(spec) if known else None,
        "env": cp.env_allowlisted(spec) if known else None,
        "annotations": ann if known else None, "device_plugin_socket_mount": socket_mount, **live,
        "runc_log": runc_log, "skipped_devices": list(dict.fromkeys(e["device"] for e in runc_log or [] if e["device"])),
        "systemd_unit": None, **({"budget_cut": LATE} if late else {}), **(extra or {}),
        # where a name the spec does not carry was read (conmon's -n); absent when the spec or Docker named it
        **({"container_name_source": ident["container_name_source"]}
           if ident and ident.get("container_name_source") and cname == ident.get("container_name") else {}),
    }
    cgroup = live["cgroup"]
    if not late and cgroup["driver"] == "systemd" and cp.is_gpu(record):  # systemd's own view of the scope
        record["systemd_unit"] = unit_mod.show(ctx, env.systemctl, rel, unit_mod.unit_name(cid, cgroup, spec))
    ctx.writer.write_json(f"{rel}/{RECORD}", record, source=bundle or f"container:{ns}/{cid}",
                          method="containers", notes=("summary of the files beside it; env values other "
                                                      "than NVIDIA_*, CUDA_* and a few more are left out",)
                          + ((LATE,) if late else ()), compact=True)
    if cp.is_gpu(record):  # podlogs keeps these containers' logs
        ctx.gpu_containers.append(GpuContainer(pod_ns, pod, cname, cid))


def _live(ctx, env, rel, cid, spec, state, pid, options, created) -> dict:
    """The record's live evidence: ``cgroup``, ``memory``, ``dev_entries`` and ``probe`` (pid checked to be
    the container's init first)."""
    live_pid = pid if pid and _pid_is_init(ctx, pid, state, cid) else None
    cgroup, procs, mem = _cgroup(ctx, env, rel, cid, spec, state, live_pid, options)
    # None: the container's /dev was not read (no live init); [] would claim it was read and empty
    entries, raw_targets = None, []
    if live_pid:
        entries, raw_targets, problems = probe_mod.list_dev(ctx.root, live_pid, ctx.deadline)
        for art in problems:
            ctx.writer.record(art)
    results = _probe(ctx, env, rel, live_pid, procs, entries or [], raw_targets)
    t_created = _time(created)  # parsed once, not once per /dev entry
    for e in entries or []:
        e["made_inside"] = _later(e.get("ctime"), t_created)
    return {"cgroup": cgroup, "memory": mem, "dev_entries": entries, "probe": results}


#: why a container's live evidence is missing when the time budget ran out while it was read
LATE = ("partly read: the time budget (--time-budget) was spent after its runtime files were read; its cgroup, "
        "memory counters, /dev, probe and systemd unit were not read")


def _not_read_live() -> dict:
    """:func:`_live`'s keys for a container the budget cut (:data:`LATE`): every value unknown."""
    return {"cgroup": {"version": None, "path": None, "driver": None, "driver_source": None, "rules": None,
                       "systemd_drop_in": None, "bpf": None},
            "memory": {"oom_kill": None, "oom": None, "oom_group_kill": None, "source": None, "status": LATE,
                       "path": None, "events": None, "failcnt": None},
            "dev_entries": None, "probe": {}}


def _later(a: str | None, tb: datetime | None) -> bool | None:
    """Whether ISO time ``a`` is later than the time ``tb``; ``None`` when either is unknown."""
    ta = _time(a)
    return None if ta is None or tb is None else ta > tb


_ABSENT = object()  #: what ``_read_json(..., absent_ok=True)`` returns for a path that does not exist


def _read_json(ctx, source: str, rel: str, redact: bool = True, absent_ok: bool = False, outcome: dict | None = None):
    """Read a JSON file under root and store it (redacted) at ``rel``; the parsed, redacted object or
    ``None``. A file that is not JSON is not stored (it could not be redacted) but recorded. With
    ``absent_ok``, a path that does not exist (``hostfs.exists`` is false) returns ``_ABSENT`` and
    records nothing. ``outcome``, when given, gets ``{"status", "detail"}`` (the record's ``config`` shape:
    collected, or absent / unreadable / error with the errno name, or truncated over :data:`JSON_LIMIT`)."""
    outcome = {} if outcome is None else outcome
    outcome.update(status="collected", detail=None)
    try:
        with hostfs.open_regular(ctx.root, source) as f:
            data = hostfs.read_upto(f, JSON_LIMIT + 1)
    except OSError as e:
        # asked only when the open failed: an open that succeeds implies the path exists
        if absent_ok and not hostfs.exists(ctx.root, source):
            return _ABSENT
        art = ctx.writer.record(from_oserror(source, "copy-redacted", e))
        outcome.update(status=art.status.value, detail=f"{errno_name(e.errno) or 'error'}: {e.strerror or e}")
        return None
    if len(data) > JSON_LIMIT:
        ctx.writer.record(Artifact(None, source, Status.ERROR, "copy-redacted",
                                   message=f"larger than {JSON_LIMIT} bytes; not stored"))
        outcome.update(status="truncated", detail=f"over the {JSON_LIMIT >> 20} MiB bound; not read")
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
        outcome.update(status="error", detail=f"not valid JSON ({e})"[:300])
        return None
    except RecursionError:
        # nesting beyond the interpreter's recursion limit (a hostile file): the container's record is
        # still written, from an empty spec
        ctx.writer.record(Artifact(None, source, Status.ERROR, "copy-redacted",
                                   message="JSON nested too deeply to redact; not stored, read as empty"))
        outcome.update(status="error", detail="JSON nested too deeply to read")
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
                                        timeout=ctx.left(min(probe_mod.TIMEOUT_S, env.probe_left_s)))
        env.probe_left_s -= report.get("elapsed_s") or 0
        for (p, *_), res in zip(targets, found):
            results[p] = res
        report["targets"] = [p for p, *_ in targets]
        ctx.writer.write_json(f"{rel}/probe.json", report, source=f"/proc/{pid}/root/dev", method="probe",
                              notes=("open(O_RDWR|O_NOFOLLOW|O_NONBLOCK) from a child inside the container's "
                                     "cgroup and mount namespace",))
    return results
