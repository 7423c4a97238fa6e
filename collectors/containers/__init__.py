"""Containers: the runtime's on-disk state (not the CRI API), their cgroup device rules, the device
nodes they can see, and (with ``--probe``) whether they can still open them.

Sources, all read under ``--root`` (docs/sources.md "Container engine layouts", "cgroup device state", "GPU stacks" 6 Docker, 7 CRI-O; issue 3 items 1,
3, 4; issue 14 item 1), found by :mod:`collectors.containers.engines` whatever engine runs them:
- containerd bundles ``<state>/io.containerd.runtime.v2.task/<namespace>/<id>/`` (``config.json`` as
  runc read it, i.e. after nvidia-container-runtime rewrote it; ``options.json``; ``init.pid``;
  ``log.json``), for the state dirs /run/containerd, /run/k3s/containerd, dockerd's own
  /run/docker/containerd/daemon, :data:`STATE_DIRS`, and those learnt from live ``containerd-shim*``
  (working directory, ``-address``), ``containerd --state`` and ``dockerd --exec-root`` command lines;
  the ``moby`` namespace is Docker's (engine ``docker``), every other one containerd's (``containerd``);
- CRI-O ``<runroot>/<driver>-containers/<id>/userdata/`` (``config.json``, conmon's ``pidfile``), run
  root /run/containers/storage or crio.conf(.d) / storage.conf ``runroot`` (engine ``crio``);
- runc state ``<runc root>/<id>/state.json`` or ``<runc root>/<namespace>/<id>/state.json``, for the
  roots /run/runc, /run/containerd/runc, /run/docker/runtime-runc, each containerd task's
  ``options.json`` Root, CRI-O's ``runtime_root`` and the ``--root`` of live runc / conmon /
  containerd-shim command lines; a container met only here is engine ``runc`` unless the bundle its
  state names is a containerd or CRI-O one (the same id met twice is one record, ``found_via`` both);
- Docker's ``<data-root>/containers/<id>/config.v2.json`` for a ``moby`` container's name and image
  (only those and its Kubernetes labels are kept, as ``docker-config.json``);
- cgroup v1 ``devices.list``; systemd's transient unit and drop-ins
  ``/run/systemd/transient/<scope>.scope[.d/*.conf]``; ``bpftool`` for cgroup v2 device programs;
- ``/proc/<pid>/root/dev`` of the container's init, read with lstat only, through directory file
  descriptors opened with ``O_NOFOLLOW`` so that nothing the container's author placed in /dev is
  ever followed or opened.

This module lists the containers (:func:`acquire`) and reads their records back (:func:`records`,
:func:`read`); one container is acquired by :mod:`collectors.containers.container`, its cgroup read
by :mod:`collectors.containers.cgroup`; the formats are parsed in :mod:`collectors.containers.parse`.

Bundle layout written by :func:`acquire`: ``containers/roots.json`` (:func:`engines.roots_record`: every
containerd state dir, CRI-O run root and runc root looked in, each with how it was learnt), and per
container ``containers/<namespace>/<id>/`` (namespace: containerd's, ``crio`` for CRI-O, ``runc`` for a
flat runc root)::

    config.json      the on-disk OCI spec, redacted (env values, credential annotations, URL creds)
    state.json       runc's state, redacted the same way
    options.json     containerd's runtime options (BinaryName, Root, SystemdCgroup), redacted like config.json
    devices.list     cgroup v1 device rules, as read
    memory.events    cgroup v2 memory counters; v1: memory.oom_control and memory.failcnt (as read)
    systemd/...      the transient unit file and its drop-ins (redacted: the config rule for units)
    bpftool-*.json   bpftool output (cgroup v2)
    log.json         runc's log (JSON lines), redacted like every log
    docker-config.json  Name, Config.Image and Kubernetes labels of Docker's config.v2.json (moby only)
    systemctl-show.txt  ``systemctl show`` of the scope (live, GPU containers under systemd; unit.py)
    probe.json       the --probe child's raw report
    record.json      the summary record, below

``record.json`` (consumed by the exposure assessment)::

    {"id", "namespace" (containerd namespace; "crio"; "podman"; "runc" for a flat runc root), "pod", "pod_namespace",
     "container_name", "image", "created" (ISO UTC), "pid" (host pid of init), "bundle" (host path),
     "engine": "containerd"|"docker"|"crio"|"podman"|"runc" (see Sources; forensics/engines),
     "found_via": [str: each path the container was met through: task dir, userdata dir, runc state + root],
     "config": {"status": "collected"|"absent"|"unreadable"|"error"|"truncated", "detail": str|None}: the
               on-disk config.json (detail: errno name and message, "over the 8 MiB bound; not read", "gone
               mid-run: ...", "not valid JSON (...)"); when not collected, hooks, linux_devices,
               resources_devices, env and annotations are None (unknown), never empty,
     "hooks": {prestart|createRuntime|createContainer|startContainer|poststart|poststop: [{path, args}]},
     "linux_devices": [{path, type, major, minor}],
     "resources_devices": [{allow, type ("c"|"b"|"a"|None = unset), major, minor (None = wildcard), access}],
     "env": {allowlisted name: value; the last of a repeated name wins},
     "annotations": {cdi.k8s.io/* and io.kubernetes.* pod/container annotations},
     "device_plugin_socket_mount": whether config.json's mounts[] bind-mount the host's
                    /var/lib/kubelet/device-plugins (the kubelet's registration socket) at that path, as a
                    real device plugin's do (parse.device_plugin_socket_mount); None when
                    config.json could not be read; absent in bundles written by older versions,
     "cgroup": {"version": 1|2|None, "path", "driver": "systemd"|"cgroupfs"|None (only from this container's
                own evidence: parse.cgroup_driver; None when it does not show it, never an engine default),
                "driver_source": str naming that evidence ("runc state.json config.cgroups.Systemd=true",
                "cgroup path ... (a systemd scope)", "config.json linux.cgroupsPath ...", "options.json
                SystemdCgroup=true") | None,
                "rules": devices.list as [{allow, type, major, minor, access}] (v1) | None,
                "systemd_drop_in": {"policy", "allow": [DeviceAllow values]} | None,
                "bpf": [{id, name, loaded_at}] (v2, bpftool present) | None},
     "memory": {"oom_kill": int|None, "oom": int|None (v2 only), "oom_group_kill": int|None (v2 5.16+),
                "source": "memory.events" (v2) | "memory.oom_control" (v1) | None,
                "status": that file's outcome ("collected", "absent", "unreadable (Permission denied)", ...) or
                          why no memory cgroup was known, "path": the memory cgroup directory | None,
                "events": {name: int} every counter of the file | None, "failcnt": int | None (v1
                memory.failcnt)} (collectors.containers.memory; a count the file does not hold is None,
                never 0),
     "dev_entries": [{path, kind (c|b|fifo|symlink|regular|dir|socket|other), major, minor, mode, target,
                      ctime (ISO UTC), made_inside (ctime later than "created": made or changed inside the
                      container after the runtime created it; None when either time is unknown)}]
                    or None when the container's /dev could not be read (no live init process),
     "probe": {path: ok|EPERM|ENXIO|ENOENT|EACCES|E...|timeout|not-run},
     "runc_log": [{time, level (warning|error|fatal|panic), msg, device}] from log.json
                 (parse.runc_log) | None (not read; plain runc has none),
     "skipped_devices": ["/dev/char/195:255", ...] runc logged "skipping device ... for systemd" for,
     "systemd_unit": {NeedDaemonReload: bool|None, DevicePolicy, DeviceAllow: [str], ControlGroup,
                      LoadState} (parse.parse_systemctl_show) | None (not read: not live, no systemd,
                      no GPU or not the systemd driver),
     "budget_cut": why the live evidence was not read (the time budget ran out while this container was read:
                   cgroup, memory, dev_entries and systemd_unit None, probe {}); absent when it was read}
    Containers found but not reached before the time budget ran out have no record: ``containers/not-read.json``
    ``{"found": int, "not_read": [{"namespace", "id", "kind", "found_via"}]}`` lists them (truncated in the manifest)
    (``runc_log``, ``skipped_devices``, ``systemd_unit`` and ``memory`` are absent in bundles of older versions,
    and so are ``engine``, ``found_via``, ``config`` and ``cgroup.driver_source``: readers take absent as unknown)
"""
from __future__ import annotations

import json
import os
import shutil
from datetime import datetime

from forensics import hostfs
from forensics.artifact import Artifact, Status, from_oserror
from forensics.bundle import Bundle
from forensics.source import CollectContext, Option, Reading
from forensics.events import Event, NodeFacts

from . import engines as eng
from . import parse as cp
from . import probe as probe_mod
from .cgroup import TRANSIENT
from .unit import Systemctl
from .container import PROBE_BUDGET_S, RECORD, _found_one, _read_json
from .parse import _time


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

MAX_CONTAINERS = 5000
NOT_READ = "containers/not-read.json"  #: the containers the time budget left unread (:func:`_not_read`)


# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Inventory every container from the runtime's on-disk state into ``containers/``.

    Finds them with :func:`collectors.containers.engines.discover` (containerd, Docker, CRI-O and plain
    runc, the roots learnt from the node; written to ``containers/roots.json``), reads :data:`STATE_DIRS`
    (extra containerd state dirs, host paths read under ``ctx.root``) and :data:`PROBE` (run the open()
    probe of :mod:`collectors.containers.probe`; otherwise every probe result is ``not-run``); adds each
    GPU container to ``ctx.gpu_containers``. Every file that could not be read is recorded in the manifest
    with its errno; nothing on the host is written, except the probe child's own pid into the container's
    ``cgroup.procs`` (it leaves when the child exits).
    """
    env = _Env(ctx)
    default_tasks = f"{eng.CONTAINERD_STATE_DIRS[0]}/{eng.TASK_DIRS[0]}"
    try:
        hostfs.listdir(ctx.root, default_tasks)
    except OSError as e:  # the usual node's runtime: say that it is not there
        ctx.writer.record(from_oserror(default_tasks, "listdir", e))

    def read_options(f):
        return _read_json(ctx, f"{f.bundle}/options.json", f"containers/{f.namespace}/{f.id}/options.json")
    inv, roots = eng.discover(ctx, ctx.value(STATE_DIRS), read_options, MAX_CONTAINERS)
    ctx.writer.write_json("containers/roots.json", eng.roots_record(roots), source="containers:discovery",
                          method="containers", notes=("where the collector looked for containers, and why",
                                                        *([f"{len(roots.ignored)} process(es) named as an engine not "
                                                           "learnt from (not root's, or not the engine's binary): "
                                                           "ignored_processes"] if roots.ignored else [])))
    if inv.full:
        ctx.writer.record(Artifact(None, "containers", Status.TRUNCATED, "listdir",
                                   notes=(f"truncated: only {MAX_CONTAINERS} containers",)))
    if inv.cut:
        ctx.writer.record(Artifact(None, "containers:discovery", Status.TRUNCATED, "listdir", notes=(inv.cut,)))
    docker_roots = list(roots.docker)
    for i, f in enumerate(inv.found):
        if ctx.expired():  # the rest are listed as not read, never dropped
            _not_read(ctx, inv.found[i:], len(inv.found))
            break
        _safe(ctx, f.namespace, f.id, lambda: _found_one(ctx, env, f, docker_roots, roots.names))


def _not_read(ctx, left: list, total: int) -> None:
    """Write ``containers/not-read.json`` (:data:`NOT_READ`): the containers found but not read because the
    time budget was spent, ``[{"namespace", "id", "kind", "found_via"}]``, recorded as truncated with a note
    that counts them (``forensics.ops.pipeline.budget_cuts`` reads it as a cut by the budget)."""
    note = (f"truncated: {len(left)} of the {total} containers found were not read: the time budget "
            "(--time-budget) was spent; their ids are listed here, their records are not in the bundle")
    with ctx.writer.create(NOT_READ, "containers", "containers", notes=[note]) as fh:
        json.dump({"not_read": [{"namespace": f.namespace, "id": f.id, "kind": f.kind, "found_via": f.via}
                                for f in left], "found": total}, fh, separators=(",", ":"))


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
    """Per-run facts shared by every container: NVIDIA majors, bpftool, systemctl, the probe switch."""

    def __init__(self, ctx: CollectContext):
        self.probe = bool(ctx.value(PROBE))
        self.probe_left_s = PROBE_BUDGET_S
        self.majors = probe_mod.nvidia_majors(ctx.root)
        self.bpftool = shutil.which("bpftool")
        self.bpftool_noted = False
        self.systemctl = Systemctl(ctx.root)  # read-only `systemctl show` of GPU scopes, live only
        # the names in systemd's transient unit directory, listed once per run rather than looked up
        # (exists + listdir, each resolved component by component) for every scope name of every
        # container; None when it cannot be listed, and then each name is looked up as before
        try:
            self.transient: set[str] | None = set(hostfs.listdir(ctx.root, TRANSIENT))
        except OSError:
            self.transient = None


# -- read ------------------------------------------------------------------------------------------
def records(bundle: Bundle, problems: list | None = None) -> list[tuple[str, dict]]:
    """Every ``containers/<ns>/<id>/record.json`` of the bundle as ``(rel path, record)``. A record
    that cannot be parsed is skipped and, when ``problems`` is given, reported there."""
    out = []
    for art in bundle.find("containers/"):
        if art.path.endswith("/" + RECORD):
            rec = bundle.json(art.path, problems, shared=True)
            if rec is None:
                continue
            out.append((art.path, rec))
    return out


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """Read the container records back from the bundle (never the host).

    Returns a :class:`Reading` with ``facts["containers"]`` = the records (shape in the module
    docstring; each gets ``"gpu"`` added: :func:`parse.is_gpu`, or ``None`` (unknown) when that finds no GPU
    and the record's ``config.status`` is not ``collected``), with them
    ``facts["device_plugin_dir"]`` (the kubelet directory ``device_plugin_socket_mount`` is about), and events, each with ``evidence = {"artifact": record path}``:

    - ``container.created`` at the runc ``created`` time: attrs ``id, pod, namespace,
      container_name, gpu``;
    - ``container.probe`` at collection time, for results other than ``not-run``: attrs
      ``id, pod, path, result``;
    - ``container.device-rules-applied`` at a device BPF program's ``loaded_at`` when that is later
      than the container's creation (the last re-application of its device rules, e.g. by a
      daemon-reload or a container update): attrs ``id, pod, prog_id, prog_name``;
    - ``container.runc-warning`` at the time of each warning (or worse) line of runc's log.json: attrs
      ``id, pod, level, device`` (``/dev/char/M:m`` of a "skipping device ... for systemd" line, else
      ``None``), ``message``; ``evidence`` names the stored log.json.
    """
    reading = Reading()
    collected = (bundle.manifest.get("collection") or {})
    at_collect = _time(collected.get("end") or collected.get("start"))
    _budget_problems(bundle, reading.problems)
    late = 0
    for rel, rec in records(bundle, reading.problems):
        rec = dict(rec)
        late += bool(rec.get("budget_cut"))
        # no sign of a GPU in a spec that could not be read is no answer: unknown (None), not False
        rec["gpu"] = cp.is_gpu(rec) or (None if (rec.get("config") or {}).get("status", "collected") != "collected"
                                        else False)
        reading.facts.setdefault("containers", []).append(rec)
        reading.facts["device_plugin_dir"] = cp.DEVICE_PLUGIN_DIR  # what device_plugin_socket_mount checks
        reading.events.extend(_record_events(rel, rec, at_collect))
    if late:
        reading.problems.append({"artifact": "containers", "message": f"{late} container(s) only partly read: "
                                 "the time budget (--time-budget) was spent while they were read; their cgroup, "
                                 "/dev and probe are unknown"})
    return reading


def _record_events(rel: str, rec: dict, at_collect: datetime | None) -> list[Event]:
    """The events of one container record (:func:`read` lists them): created, each probe result, each
    later re-application of its device rules, each warning of runc's log."""
    out: list[Event] = []
    ev = {"artifact": rel}
    cid, pod = rec.get("id"), rec.get("pod")
    label = f"{rec.get('pod_namespace')}/{pod}" if pod else cid
    created = _time(rec.get("created"))
    if created:
        name = rec.get("container_name") or (cid or "")[:12]
        out.append(Event(created, "containers", "container.created",
                         f"container {name} of {label} created" + (" (GPU)" if rec["gpu"] else ""),
                         {"id": cid, "pod": pod, "namespace": rec.get("pod_namespace"),
                          "container_name": rec.get("container_name"), "gpu": rec["gpu"]}, ev))
    for path, result in (rec.get("probe") or {}).items():
        if result != "not-run" and at_collect:
            out.append(Event(at_collect, "containers", "container.probe",
                             f"open({path}) in {label}: {result}",
                             {"id": cid, "pod": pod, "path": path, "result": result}, ev))
    for prog in ((rec.get("cgroup") or {}).get("bpf") or []):
        loaded = _time(prog.get("loaded_at"))
        if loaded and created and loaded > created:
            out.append(Event(loaded, "containers", "container.device-rules-applied",
                             f"device rules of {label} re-applied (BPF program {prog.get('id')} "
                             f"{prog.get('name') or 'unnamed'} loaded)",
                             {"id": cid, "pod": pod, "prog_id": prog.get("id"),
                              "prog_name": prog.get("name")}, ev))
    for entry in rec.get("runc_log") or []:
        at = _time(entry.get("time")) if isinstance(entry, dict) else None
        if at:
            dev = entry.get("device")
            out.append(Event(at, "containers", "container.runc-warning",
                             f"runc {entry.get('level')} for {label}: {entry.get('msg')}"[:300],
                             {"id": cid, "pod": pod, "level": entry.get("level"), "device": dev,
                              "message": entry.get("msg")},
                             {"artifact": rel.rsplit("/", 1)[0] + "/log.json"}))
    return out


def _budget_problems(bundle: Bundle, problems: list) -> None:
    """The collection's budget cuts as reading problems (the report's list): containers found but not read
    (``containers/not-read.json``, :func:`_not_read`), and a discovery the budget stopped."""
    for art in bundle.records("containers"):
        if art.source == "containers:discovery" and art.status is Status.TRUNCATED:
            problems.append({"artifact": "containers", "message": " ".join(art.notes) or "discovery cut short"})
    if not any(a.path == NOT_READ for a in bundle.find("containers/")):
        return
    doc = bundle.json(NOT_READ, problems)
    try:
        left, found = len(doc["not_read"]), doc["found"]
    except (KeyError, TypeError):
        if doc is not None:
            problems.append({"artifact": NOT_READ, "message": "cannot read: not the not_read/found record the "
                             "containers collector writes"})
        return
    problems.append({"artifact": NOT_READ, "message": f"{left} of the {found} containers found were not read: the "
                     "time budget (--time-budget) was spent; whether they hold or lost a GPU is unknown"})
