"""kubelet: its CPU, memory and topology manager policies (and where each was read), its CPU and memory
manager checkpoints, and the device manager's checkpoint of which pod holds which GPU. Read-only,
bounded, redacted; every file with its outcome.

Why: kubelet's static CPU manager rewrites a running container's resources through CRI
``UpdateContainerResources``, and runc then drops the device rules a prestart hook added (docs/sources.md "CPU manager and container updates");
the device checkpoint tells, even on a dead node's disk, which pods had GPUs and whether the device
plugin passed device specs (spec injection) or only ``NVIDIA_VISIBLE_DEVICES`` (the hook's envvar).

Sources (under ``--root``): the running kubelet's ``/proc/<pid>/cmdline`` (comm ``kubelet``, every uid
0), else its systemd unit, drop-ins and environment files, else k3s/RKE2 ``config.yaml`` ``kubelet-arg``
(:mod:`collectors.kubelet.config` says which files and how they merge); the KubeletConfiguration file and
its drop-ins; ``<root-dir>/cpu_manager_state``, ``memory_manager_state``,
``device-plugins/kubelet_internal_checkpoint`` (:mod:`collectors.kubelet.checkpoints` gives their shapes,
from kubernetes' source); ``/var/log/pods`` (``<namespace>_<pod>_<uid>``) and ``<root-dir>/pods/<uid>``.

Bundle: ``kubelet/index.json`` (below), ``kubelet/process.json`` ``{"pid", "argv" (redacted: credential
flags' values hashed), "source"}``, ``kubelet/files/<host path>`` (config, drop-ins, unit files, env files,
k3s configs; text redacted), ``kubelet/cpu_manager_state``, ``kubelet/memory_manager_state`` (as is),
``kubelet/kubelet_internal_checkpoint.json`` (parsed; each ``AllocResp`` replaced by what it held,
redacted: :func:`collectors.kubelet.host.alloc_record`), ``kubelet/pods.json`` ``{"log_dirs": [name],
"pod_dirs": [uid]}``. ``index.json``: ``{"flags_source", "flags_complete": bool, "argv", "config_file",
"config_file_basis", "drop_in_dir", "drop_ins": [path], "root_dir", "root_dir_basis", "files": {host path:
bundle path}, "status": {host path: outcome}}``.

``read()`` gives the ``kubelet`` fact::

    {"config": {"source": config file path | None, "config_file_basis": why that file (or why none),
                "drop_ins": [path], "flags_source": "/proc/812/cmdline" |
                "systemd unit ..." | "<k3s config> kubelet-arg" | None, "precedence": str,
                "cpuManagerPolicy" | "cpuManagerReconcilePeriod" | "topologyManagerPolicy" |
                "memoryManagerPolicy" | "featureGates" | "InPlacePodVerticalScaling" | "root_dir":
                    {"value": "static" | {...} | True | None, "source": where it was read, or
                     "not set (kubelet default: none)", or "unknown: ..." when the sources were missing}},
     "cpu_manager_state": {"source", "version", "policy", "default_cpuset", "entries": {pod_uid: {container:
                           cpuset}}, "container_id_entries", "pod_entries", "checksum"} | None,
     "memory_manager_state": {"source", "policy", "entries": {pod_uid: {container: [{numa_affinity, type,
                              size}]}}, "numa_nodes", "checksum"} | None,
     "device_checkpoint": {"source", "format": "numa"|"list"|None, "boot_id", "checksum",
                           "entries": [{"pod_uid", "namespace", "pod", "container", "resource",
                                        "device_ids": [...], "numa": {numa: [...]} | None,
                                        "device_specs_passed": bool | None, "cdi_devices_passed": bool | None,
                                        "alloc_error": str | None}],
                           "registered": {resource: [ids]}} | None,
     "pods": {pod_uid: {"namespace", "pod", "log_dir": bool, "pod_dir": bool}},
     "status": {host path: "collected" | "absent" | "unreadable (Permission denied)" | "error (...)" | ...}}

``None`` means not collected (the status says why). Facts only: nothing here says a cause.
"""
from __future__ import annotations

import json

import yaml

from forensics import hostfs
from forensics import redact as rd
from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.events import NodeFacts
from forensics.source import CollectContext, Reading

import collectors.kubelet.checkpoints as cps
import collectors.kubelet.config as kc
import collectors.kubelet.host as kh

NAME = "kubelet"
OPTIONS: list = []
INDEX = "kubelet/index.json"
PRECEDENCE = ("command-line flags override the config file and its drop-ins; feature gates given on the command "
              "line are overridden by the file's (kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/)")


def _rel(path: str) -> str:
    return "kubelet/files/" + path.lstrip("/")


# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Acquire the kubelet's flags, config, checkpoints and pod directories into ``kubelet/`` (layout in
    the module docstring), each file's outcome in the manifest and in ``kubelet/index.json``. Raises
    nothing for bad input (an unparsable file is recorded; what was read before it is kept)."""
    idx: dict = {"status": {}, "files": {}}
    proc = kh.kubelet_process(ctx, idx)
    units = _unit_texts(ctx, idx)
    k3s = _k3s_docs(ctx, idx)
    argv, idx["flags_source"], idx["flags_complete"] = _argv(ctx, proc, units, k3s)
    idx["argv"] = argv
    if proc:
        ctx.writer.write_json("kubelet/process.json", {"pid": proc[0], "argv": argv, "source": idx["flags_source"]},
                              idx["flags_source"], "read", notes=("credential flags' values hashed",) if ctx.redact
                              else ())
    elif not ctx.expired():
        kh.record(ctx, idx, Artifact(None, "/proc/<pid>/cmdline", Status.ABSENT, "read",
                                     notes=("no process named kubelet run by root",)))
    f = kc.flags(argv or [])
    _config(ctx, idx, f)
    root = f.get("root-dir") or kc.DEFAULT_ROOT
    idx["root_dir"], idx["root_dir_basis"] = root, (f"{idx['flags_source']} --root-dir" if "root-dir" in f
                                                    else "kubelet's default (no --root-dir seen)")
    kh.copy_state(ctx, idx, f"{root}/cpu_manager_state", "kubelet/cpu_manager_state")
    kh.copy_state(ctx, idx, f"{root}/memory_manager_state", "kubelet/memory_manager_state")
    kh.device_checkpoint(ctx, idx, f"{root}/device-plugins/kubelet_internal_checkpoint",
                         "kubelet/kubelet_internal_checkpoint.json")
    pods = {"log_dirs": kh.listdir(ctx, idx, "/var/log/pods"), "pod_dirs": kh.listdir(ctx, idx, f"{root}/pods")}
    ctx.writer.write_json("kubelet/pods.json", pods, "/var/log/pods", "listdir",
                          notes=(f"names of /var/log/pods and {root}/pods",), compact=True)
    ctx.writer.write_json(INDEX, idx, "kubelet", "kubelet", notes=("what the kubelet collector read, and how",))


def _unit_texts(ctx, idx) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(unit texts, environment file texts)``: ``kubelet.service`` and its ``kubelet.service.d/*.conf``
    drop-ins in systemd's order (by file name; /etc over /usr/lib over /lib for the same name), then the
    EnvironmentFiles they name, each as ``(host path, stored text)``."""
    units, envs = [], []
    unit = next((f"{d}/kubelet.service" for d in kc.UNIT_DIRS if hostfs.present(ctx.root, f"{d}/kubelet.service")),
                None)
    if unit is None:
        idx["status"]["kubelet.service"] = f"absent (looked in {', '.join(kc.UNIT_DIRS)})"
    drop: dict[str, str] = {}
    for d in reversed(kc.UNIT_DIRS):
        if hostfs.exists(ctx.root, f"{d}/kubelet.service.d"):
            for n in (kh.listdir(ctx, idx, f"{d}/kubelet.service.d") or [])[:kh.MAX_FILES]:
                if n.endswith(".conf"):
                    drop[n] = f"{d}/kubelet.service.d/{n}"
    for path in ([unit] if unit else []) + [drop[n] for n in sorted(drop)]:
        text = kh.copy_text(ctx, idx, path, _rel(path), "unit")
        if text is not None:
            units.append((path, text))
    _, env_files, _ = kc.unit_settings([t for _, t in units])
    for path in list(dict.fromkeys(env_files))[:kh.MAX_FILES]:
        if path.startswith("/"):
            text = kh.copy_text(ctx, idx, path, _rel(path), "env")
            if text is not None:
                envs.append((path, text))
    return units, envs


def _k3s_docs(ctx, idx) -> list[tuple[str, object]]:
    """k3s / RKE2 ``config.yaml`` and ``config.yaml.d/*.yaml`` (name order), parsed; absent ones noted."""
    out = []
    for base in kc.K3S_CONFIGS:
        d = base + ".d"
        names = sorted(n for n in (kh.listdir(ctx, idx, d) or []) if n.endswith((".yaml", ".yml"))) \
            if hostfs.exists(ctx.root, d) else []
        for path in ([base] if hostfs.present(ctx.root, base) else []) + [f"{d}/{n}" for n in names[:kh.MAX_FILES]]:
            doc = kh.copy_config(ctx, idx, path, _rel(path))
            if doc is not None:
                out.append((path, doc))
        if not hostfs.present(ctx.root, base):
            idx["status"].setdefault(base, "absent")
    return out


def _argv(ctx, proc, units, k3s) -> tuple[list[str] | None, str | None, bool]:
    """``(argv, where it came from, whether it is the whole command line)``: the process's (redacted),
    else the unit's ExecStart expanded, else ``kubelet`` + k3s's ``kubelet-arg`` (partial: k3s adds its own)."""
    if proc:
        pid, argv = proc
        return (rd.redact_args(argv) if ctx.redact else argv), f"/proc/{pid}/cmdline", True
    units, envs = units
    env, _, exec_start = kc.unit_settings([t for _, t in units])
    if exec_start:
        for _, text in envs:  # EnvironmentFile= settings override Environment= ones (systemd.exec(5))
            env.update(kc.env_file(text))
        unit_files = ", ".join(p for p, _ in units + envs)
        return kc.expand(exec_start, env), f"systemd unit ({unit_files}): ExecStart= expanded", True
    args = kc.k3s_args([doc for _, doc in k3s])
    if args:
        return ["kubelet", *args], f"{', '.join(p for p, _ in k3s)} kubelet-arg", False
    return None, None, False


def _config(ctx, idx, f: dict) -> None:
    """The KubeletConfiguration file (``--config``, else a stack's known path when the whole command line
    is not known) and its drop-ins (``--config-dir``, else :data:`collectors.kubelet.config.DROP_IN_DIRS`)."""
    path, basis = None, None
    if "config" in f:
        path, basis = f["config"], f"{idx['flags_source']} --config"
    elif idx["flags_complete"]:
        basis = f"{idx['flags_source']} has no --config: kubelet reads no config file"
    else:
        found = next(((p, s) for p, s in kc.CONFIG_FILES if hostfs.present(ctx.root, p)), None)
        if found:
            path, basis = found[0], f"known path of {found[1]} (the kubelet's command line was not read)"
        else:
            kh.record(ctx, idx, Artifact(None, "kubelet config file", Status.ABSENT, "copy", notes=(
                "no kubelet command line, and none of " + ", ".join(p for p, _ in kc.CONFIG_FILES),)))
    idx["config_file"], idx["config_file_basis"] = path, basis
    if path:
        kh.copy_config(ctx, idx, path, _rel(path))
    dirs = [f["config-dir"]] if "config-dir" in f else [] if idx["flags_complete"] else \
        [d for d in kc.DROP_IN_DIRS if hostfs.exists(ctx.root, d)][:1]
    idx["drop_in_dir"], idx["drop_ins"] = (dirs[0] if dirs else None), []
    for d in dirs:
        for n in sorted(n for n in (kh.listdir(ctx, idx, d) or []) if n.endswith(".conf"))[:kh.MAX_FILES]:
            kh.copy_config(ctx, idx, f"{d}/{n}", _rel(f"{d}/{n}"))
            idx["drop_ins"].append(f"{d}/{n}")


# -- read ------------------------------------------------------------------------------------------
def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """The ``kubelet`` fact (shape in the module docstring) from the stored copies; an empty Reading for
    a bundle without ``kubelet/index.json``. A stored file that does not parse is a problem, and the
    fact's value it would have given is unknown."""
    r = Reading()
    idx = bundle.json(INDEX, r.problems)
    if not isinstance(idx, dict):
        return r
    pods = _pods(bundle.json("kubelet/pods.json", r.problems))
    r.facts["kubelet"] = {
        "config": _config_fact(bundle, idx, r.problems),
        "cpu_manager_state": _state(bundle, idx, "cpu_manager_state", cps.cpu_manager_state, r.problems),
        "memory_manager_state": _state(bundle, idx, "memory_manager_state", cps.memory_manager_state, r.problems),
        "device_checkpoint": _devices(bundle, idx, pods, r.problems), "pods": pods,
        "status": dict(idx.get("status") or {})}
    return r


def _load_config(bundle: Bundle, rel: str, problems: list, parse):
    """``parse(text)`` of a stored file, a mapping; None when absent (its status says why), unparsable or of
    another type (a problem)."""
    try:
        text = bundle.path(rel).read_text("utf-8", "replace")
    except (OSError, ValueError):
        return None
    try:
        doc = parse(text)
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        problems.append({"artifact": rel, "message": f"cannot parse: {str(e)[:200]}"})
        return None
    if not isinstance(doc, dict):  # every file read here is a mapping (an object) at its top
        problems.append({"artifact": rel, "message": f"not an object (a {type(doc).__name__}): not read"})
        return None
    return doc


def _config_fact(bundle: Bundle, idx: dict, problems: list) -> dict:
    files, gaps = [], []
    for path in ([idx["config_file"]] if idx.get("config_file") else []) + list(idx.get("drop_ins") or []):
        rel = (idx.get("files") or {}).get(path)
        doc = _load_config(bundle, rel, problems, _parse_config) if rel else None
        if isinstance(doc, dict):
            files.append((path, doc))
        else:
            gaps.append(f"{path} ({(idx.get('status') or {}).get(path, 'not stored')})")
    argv_flags = kc.flags(idx.get("argv") or [])
    out = kc.merged(files, argv_flags, idx.get("flags_source"))
    why = None
    if gaps or (not idx.get("flags_source") and not files):
        why = (f"unknown: {'; '.join(gaps)} not read" if gaps else
               "unknown: no kubelet command line, unit, k3s config or config file was found")
    elif not idx.get("flags_source"):
        why = (f"not set in {', '.join(p for p, _ in files)} (kubelet default: none); the kubelet's command line "
               "was not found, and a flag would override the file")
    for v in out.values():
        if why and v["source"].startswith("not set"):
            v["source"] = why
    root = idx.get("root_dir")
    out["root_dir"] = {"value": root, "source": idx.get("root_dir_basis")}
    return {"source": idx.get("config_file"), "config_file_basis": idx.get("config_file_basis"),
            "drop_ins": list(idx.get("drop_ins") or []), "flags_source": idx.get("flags_source"),
            "precedence": PRECEDENCE, **out}


def _parse_config(text: str):
    """A KubeletConfiguration document (YAML, of which JSON is a subset; a JSON file parsed as JSON)."""
    return json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)


def _state(bundle: Bundle, idx: dict, name: str, parse, problems: list) -> dict | None:
    doc = bundle.json(f"kubelet/{name}", problems)
    if doc is None:
        return None
    return {"source": f"{idx.get('root_dir')}/{name}", **parse(doc)}


def _pods(doc) -> dict:
    """``{uid: {"namespace", "pod", "log_dir", "pod_dir"}}`` from the two listings (a /var/log/pods name is
    ``<namespace>_<pod>_<uid>``: kubelet's BuildPodLogsDirectory; namespaces and pod names hold no ``_``)."""
    doc = doc if isinstance(doc, dict) else {}
    out: dict = {}
    for name in doc.get("log_dirs") or []:
        ns, _, rest = str(name).partition("_")
        pod, _, uid = rest.rpartition("_")
        if ns and pod and uid:
            out[uid] = {"namespace": ns, "pod": pod, "log_dir": True, "pod_dir": False}
    for uid in doc.get("pod_dirs") or []:
        out.setdefault(str(uid), {"namespace": None, "pod": None, "log_dir": False, "pod_dir": False})["pod_dir"] = True
    return out


def _devices(bundle: Bundle, idx: dict, pods: dict, problems: list) -> dict | None:
    doc = bundle.json("kubelet/kubelet_internal_checkpoint.json", problems)
    if doc is None:
        return None
    d = cps.device_checkpoint(doc)
    for e in d["entries"]:
        who = pods.get(e["pod_uid"] or "") or {}
        alloc = e.pop("alloc") or {}
        e.update(namespace=who.get("namespace"), pod=who.get("pod"),
                 device_specs_passed=alloc.get("device_specs_passed"), cdi_devices_passed=alloc.get("cdi_devices_passed"),
                 alloc_error=alloc.get("error"))
    return {"source": f"{idx.get('root_dir')}/device-plugins/kubelet_internal_checkpoint", **d}
