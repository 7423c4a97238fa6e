"""The engines and GPU stacks beside containerd: Docker's ``daemon.json``, CRI-O's ``crio.conf(.d)``,
k3s/RKE2's ``config.toml.tmpl``, Bottlerocket's NVIDIA files, the GPU Operator's host files and HAMi's
``libvgpu.so``; each engine's cgroup driver as its config sets it (the ``engine_cgroup_driver`` fact).

Bundle layout written by :func:`acquire` (host path under ``runtime/``)::

    runtime/etc/docker/daemon.json
    runtime/etc/crio/crio.conf  runtime/etc/crio/crio.conf.d/*.conf|*.toml
    runtime/usr/share/containers/containers.conf  runtime/etc/containers/containers.conf(.d/*.conf)
    runtime/etc/os-release      runtime/etc/nvidia-k8s-device-plugin/settings.yaml
    runtime/etc/shimpei/nvidia-oci-hooks.json   runtime/run/nvidia/validations/driver-ready

and the ``stack`` entry of ``runtime/facts.json`` (presence of the rest). Where each file is and what
it says: docs/sources.md "GPU stacks" items 2 (GPU Operator), 4 (HAMi), 5 (Bottlerocket), 6
(Docker), 7 (CRI-O) and 8 (k3s / RKE2). Nothing here runs a command; files are read bounded
(``FILE_LIMIT``) through :mod:`forensics.hostfs`, and stored through the redaction policy's ``config`` rule
(:func:`forensics.redact_config.store_config`, in the format of :data:`FORMATS`).
"""
from __future__ import annotations

import json
import tomllib

import yaml

from forensics import hostfs
from forensics.engines import crio as crio_engine, docker as docker_engine, podman as podman_engine
from forensics.redact_config import store_config

import collectors.runtime_config.parse as rp

FILE_LIMIT = 4 << 20
DOCKER = docker_engine.DAEMON_JSON                       #: stacks.md 6
CRIO_CONF, CRIO_DIR = crio_engine.CONFIGS                #: stacks.md 7
PODMAN_CONFS, PODMAN_DIR = podman_engine.CONFIGS[:2], podman_engine.CONFIGS[2]   #: containers.conf(5)
#: k3s / RKE2 generated containerd configs and the templates they are rendered from (stacks.md 8)
RANCHER = {"k3s": "/var/lib/rancher/k3s/agent/etc/containerd", "rke2": "/var/lib/rancher/rke2/agent/etc/containerd"}
TEMPLATES = ("config.toml.tmpl", "config-v3.toml.tmpl")
#: copied when present (stacks.md 2 and 5)
COPIED = ("/etc/os-release", "/etc/nvidia-k8s-device-plugin/settings.yaml", "/etc/shimpei/nvidia-oci-hooks.json",
          "/run/nvidia/validations/driver-ready")
#: the format each stored file is redacted in (:mod:`forensics.redact_config`)
FORMATS = {DOCKER: "json", "/etc/os-release": "env", "/etc/nvidia-k8s-device-plugin/settings.yaml": "yaml",
           "/etc/shimpei/nvidia-oci-hooks.json": "json", "/run/nvidia/validations/driver-ready": "env"}
PLUGIN_SETTINGS = COPIED[1]  #: the device plugin's config file (Bottlerocket renders it)
#: presence only (stacks.md 2, 4, 5)
PRESENT = ("/run/nvidia/validations/toolkit-ready", "/usr/local/nvidia/toolkit",
           "/etc/systemd/system/nvidia-k8s-device-plugin.service.d/exec-start.conf", "/usr/local/vgpu/libvgpu.so")
#: CRI-O's compiled-in hooks_dir (cri-o pkg/config/config.go) and where the GPU Operator writes its hook
CRIO_HOOKS_DEFAULT = ["/usr/share/containers/oci/hooks.d"]
OPERATOR_HOOKS = "/run/containers/oci/hooks.d"


def acquire(ctx) -> dict:
    """Copy the files above that exist into ``runtime/`` and return the ``stack`` entry of facts.json:
    ``{"docker": artifact path|None, "crio": [artifact path], "podman": [artifact path] (containers.conf and its
    drop-ins), "rancher": [{"distro", "config": bool,
    "templates": [{"path", "directives": bool|None}]}], "copied": {host path: artifact path},
    "present": {host path: bool}, "crio_hooks_dirs": [str]}``. A file that is not there is not recorded
    (its absence is the fact); one that exists but cannot be read is a manifest record, and so is a symlink
    whose target is not under the root (absent, saying so) and each file the time budget left unread."""
    out: dict = {"copied": {}, "present": {}}

    def copy(path: str, limit: int = FILE_LIMIT) -> str | None:  # the bundle path; None: not stored
        return store_config(ctx, path, "runtime" + path, FORMATS.get(path, "toml"), limit).path
    out["docker"] = copy(DOCKER) if hostfs.present(ctx.root, DOCKER) else None
    out["crio"] = [p for p in (copy(f) for f in _with_drop_ins(ctx, (CRIO_CONF,), CRIO_DIR, (".conf", ".toml"))) if p]
    docs = [d for d in (_toml(ctx.writer.dir / p) for p in out["crio"]) if d is not None]
    out["crio_hooks_dirs"] = crio_settings(docs)["hooks_dir"] if docs else []
    out["podman"] = [p for p in (copy(f) for f in _with_drop_ins(ctx, PODMAN_CONFS, PODMAN_DIR, (".conf",))) if p]
    out["rancher"] = []
    for distro, d in RANCHER.items():
        tmpls = [{"path": f"{d}/{t}", "directives": None if ctx.budget_spent(f"{d}/{t}", "read")
                  else _directives(ctx.root, f"{d}/{t}")} for t in TEMPLATES if hostfs.exists(ctx.root, f"{d}/{t}")]
        config = hostfs.exists(ctx.root, f"{d}/config.toml")
        if config or tmpls:
            out["rancher"].append({"distro": distro, "config": config, "templates": tmpls})
    for p in COPIED:
        if hostfs.present(ctx.root, p):
            out["copied"][p] = copy(p, 1 << 20)
    out["present"] = {p: hostfs.exists(ctx.root, p) for p in PRESENT}
    return out


def _with_drop_ins(ctx, files: tuple[str, ...], drop_ins: str, suffixes: tuple[str, ...]) -> list[str]:
    """The config ``files`` that are present, then the first 32 of the ``drop_ins`` directory's files with
    one of ``suffixes``, in name order (the order CRI-O and containers.conf(5) read them in)."""
    names = ctx.listdir(drop_ins, record_absent=False)
    return [f for f in files if hostfs.present(ctx.root, f)] + \
        [f"{drop_ins}/{n}" for n in sorted(names or []) if n.endswith(suffixes)][:32]


def podman_settings(docs: list[dict]) -> dict:
    """Podman's containers.conf files in override order (containers.conf(5): /usr/share, then /etc, then
    the drop-ins in name order) → ``{"cgroup_manager": str|None (None: not set; Podman's default is systemd),
    "hooks_dir": [str] | None (None: not set), "cdi_spec_dirs": [str] | None}``, all from ``[engine]``."""
    merged: dict = {}
    for d in docs:
        merged = rp._merge(merged, d, deep_plugins=False)
    eng = rp._tab(merged.get("engine"))
    return {"cgroup_manager": rp._text(eng.get("cgroup_manager")),
            "hooks_dir": rp._str_list(eng.get("hooks_dir")) or None,
            "cdi_spec_dirs": rp._str_list(eng.get("cdi_spec_dirs")) or None}


def _directives(root, path: str) -> bool | None:
    """Whether a k3s template holds Go template actions (``{{``): then ``nvidia-ctk`` cannot edit it as
    TOML. ``None`` when it cannot be read."""
    try:
        with hostfs.open_regular(root, path) as f:
            return b"{{" in f.read(FILE_LIMIT)
    except OSError:
        return None


def _toml(path) -> dict | None:
    try:
        return tomllib.loads(path.read_text("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):
        return None


def docker_settings(doc: dict) -> dict:
    """``/etc/docker/daemon.json`` (dockerd(8) "Daemon configuration file") → ``{"runtimes": {name: path},
    "default_runtime": str|None, "cgroup_driver": "systemd"|"cgroupfs"|None (``exec-opts``
    ``native.cgroupdriver``; None: not set, dockerd's default applies), "cdi": bool|None
    (``features.cdi``; None: not set: off before Docker 28.2, on from 28.2, stacks.md 6), "cdi_spec_dirs":
    [str], "live_restore": bool (containers survive a dockerd restart)}``. A value of the wrong type
    counts as absent."""
    rts = {str(k): rp._text(rp._tab(v).get("path")) for k, v in rp._tab(doc.get("runtimes")).items()}
    driver = None
    for opt in rp._str_list(doc.get("exec-opts")):
        key, _, val = opt.partition("=")
        if key.strip() == "native.cgroupdriver" and val.strip() in ("systemd", "cgroupfs"):
            driver = val.strip()
    cdi = rp._tab(doc.get("features")).get("cdi")
    return {"runtimes": rts, "default_runtime": rp._text(doc.get("default-runtime")), "cgroup_driver": driver,
            "cdi": cdi if isinstance(cdi, bool) else None, "cdi_spec_dirs": rp._str_list(doc.get("cdi-spec-dirs")),
            "live_restore": doc.get("live-restore") is True}


def crio_settings(docs: list[dict]) -> dict:
    """CRI-O's ``crio.conf`` then its drop-ins in name order (crio.conf(5): later files override) →
    ``{"cgroup_manager": str|None (None: not set; CRI-O's default is systemd, stacks.md 7),
    "hooks_dir": [str] (CRI-O's compiled default when not set), "hooks_dir_basis", "default_runtime":
    str|None, "runtimes": {name: runtime_path|None}}``."""
    merged: dict = {}
    for d in docs:
        merged = rp._merge(merged, d, deep_plugins=True)
    rt = rp._tab(rp._get(merged, "crio", "runtime"))
    hooks = rp._str_list(rt.get("hooks_dir"))
    return {"cgroup_manager": rp._text(rt.get("cgroup_manager")),
            "hooks_dir": hooks or list(CRIO_HOOKS_DEFAULT),
            "hooks_dir_basis": "config" if hooks else "CRI-O's default (pkg/config/config.go)",
            "default_runtime": rp._text(rt.get("default_runtime")),
            "runtimes": {str(k): rp._text(rp._tab(v).get("runtime_path")) for k, v in rp._tab(rt.get("runtimes")).items()}}


def plugin_config(text: str | None, problems: list | None = None) -> dict | None:
    """The NVIDIA device plugin's config file (``flags.plugin.passDeviceSpecs``, ``deviceListStrategy``:
    k8s-device-plugin api/config/v1; Bottlerocket renders its settings into one, stacks.md 5) →
    ``{"pass_device_specs": bool|None, "device_list_strategy": [str]|None}``; ``None`` without a file.
    Bad YAML, or YAML that is not a mapping, reads as unknown values (said in ``problems`` when given), never
    an exception."""
    if text is None:
        return None
    try:
        doc = yaml.load(text, Loader=rp.SAFE_LOADER)
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        doc = None
        if problems is not None:
            problems.append(f"not valid YAML ({' '.join(str(e).split())[:200]}): its settings are unknown")
    else:
        if not isinstance(doc, dict) and problems is not None:
            problems.append(f"not a YAML mapping (a {type(doc).__name__}): its settings are unknown")
    plugin = rp._tab(rp._get(doc, "flags", "plugin"))
    pds, dls = plugin.get("passDeviceSpecs"), plugin.get("deviceListStrategy")
    return {"pass_device_specs": pds if isinstance(pds, bool) else None,
            "device_list_strategy": rp._str_list(dls) or None}


def _kv(text: str) -> dict[str, str]:
    """``KEY=value`` lines (os-release(5), the GPU Operator's driver-ready file) → dict, quotes dropped."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep and k and not k.startswith("#"):
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


def read(bundle, stored: dict, entry: dict | None, ctd: dict | None, r) -> tuple[dict, dict]:
    """``(stack, engine_cgroup_driver)`` from the stored files and the facts.json ``stack`` entry.

    ``stack``: ``{"docker": docker_settings + {"source"} | None (no daemon.json), "crio": crio_settings +
    {"files"} | None (no CRI-O config), "podman": podman_settings + {"files"} | None (no containers.conf), "rancher": [...] (acquire's), "os_release": {ID, VARIANT_ID, ...}
    | None, "bottlerocket": bool|None, "bottlerocket_settings": str (the rendered plugin settings.yaml
    text) | None, "bottlerocket_plugin": :func:`plugin_config` of it, "shimpei_hook": bool (Bottlerocket's /etc/shimpei/nvidia-oci-hooks.json), "operator":
    {"driver_ready": {KEY: value} | None, "toolkit_ready", "toolkit_dir"} , "hami_vgpu": bool|None,
    "bottlerocket_plugin_unit": bool|None, "collected": bool}``; ``collected`` False (and every other
    value None) for a bundle from a version that did not look. ``engine_cgroup_driver``: the contract's
    ``{engine: {"value", "source"}}`` for each engine whose config was seen."""
    if entry is None:
        return {"collected": False, "docker": None, "crio": None, "podman": None, "rancher": None, "os_release": None,
                "bottlerocket": None, "bottlerocket_settings": None, "bottlerocket_plugin": None, "shimpei_hook": None,
                "operator": None, "hami_vgpu": None, "bottlerocket_plugin_unit": None}, _ecd(ctd, None, None)
    docker = None
    if entry.get("docker") in stored:
        try:
            doc = json.loads(bundle.path(entry["docker"]).read_text("utf-8", "replace") or "{}")
            if not isinstance(doc, dict):
                r.problems.append({"artifact": entry["docker"], "message": f"daemon.json is not a JSON object "
                                   f"(a {type(doc).__name__}): its settings are unknown, read as unset"})
            docker = {**docker_settings(doc if isinstance(doc, dict) else {}), "source": DOCKER}
        except (ValueError, RecursionError) as e:
            r.problems.append({"artifact": entry["docker"], "message": f"daemon.json is not valid JSON: {e}"})
            docker = {"runtimes": {}, "default_runtime": None, "cgroup_driver": None, "cdi": None,
                      "cdi_spec_dirs": [], "live_restore": False, "source": DOCKER}
    crio = _settings(bundle, [p for p in entry.get("crio") or [] if p in stored], r, "CRI-O config", crio_settings)
    podman = _settings(bundle, [p for p in entry.get("podman") or [] if p in stored], r, "containers.conf",
                       podman_settings)
    copied = {k: v for k, v in (entry.get("copied") or {}).items() if v in stored}

    def text(host):
        return bundle.path(copied[host]).read_text("utf-8", "replace") if host in copied else None
    osr = _kv(text("/etc/os-release")) if "/etc/os-release" in copied else None
    settings = text(PLUGIN_SETTINGS)
    said: list[str] = []
    plugin = plugin_config(settings, said)
    r.problems.extend({"artifact": copied[PLUGIN_SETTINGS], "message": m} for m in said)
    present = entry.get("present") or {}
    ready = text("/run/nvidia/validations/driver-ready")
    stack = {"collected": True, "docker": docker, "crio": crio, "podman": podman, "rancher": entry.get("rancher") or [],
             "os_release": osr, "bottlerocket": (osr.get("ID") == "bottlerocket") if osr is not None else None,
             "bottlerocket_settings": settings, "bottlerocket_plugin": plugin,
             "shimpei_hook": "/etc/shimpei/nvidia-oci-hooks.json" in copied,
             "bottlerocket_plugin_unit": present.get(PRESENT[2]),
             "operator": {"driver_ready": _kv(ready) if ready is not None else None,
                          "toolkit_ready": present.get(PRESENT[0]), "toolkit_dir": present.get(PRESENT[1])},
             "hami_vgpu": present.get(PRESENT[3])}
    return stack, _ecd(ctd, docker, crio, podman)


def _settings(bundle, files: list[str], r, what: str, settings) -> dict | None:
    """``settings(docs)`` (:func:`crio_settings`, :func:`podman_settings`) of the stored TOML ``files`` in their
    order, with their host paths in ``files``; one that does not parse is a problem ("``what`` is not valid
    TOML") and left out; None without any file."""
    if not files:
        return None
    docs = []
    for p in files:
        d = _toml(bundle.path(p))
        if d is None:
            r.problems.append({"artifact": p, "message": f"{what} is not valid TOML"})
        else:
            docs.append(d)
    return {**settings(docs), "files": [p.removeprefix("runtime") for p in files]}


def _ecd(ctd: dict | None, docker: dict | None, crio: dict | None, podman: dict | None = None) -> dict:
    """The ``engine_cgroup_driver`` fact (../h-contracts: runtime_config facts): a value only where the
    engine's config sets it; ``None`` when the config was seen but does not (its default applies, and
    the reader must call it a default)."""
    out = {}
    if ctd is not None:
        rt = (ctd.get("runtimes") or {}).get(ctd.get("gpu_runtime")) or {}
        src = f"{', '.join(ctd.get('files') or [])}: "
        if ctd.get("cri_disabled") or not ctd.get("cri_table"):
            out["containerd"] = {"value": None, "source": src + (ctd.get("systemd_cgroup_basis") or "")}
        elif rt.get("SystemdCgroup_basis") == "config":
            out["containerd"] = {"value": "systemd" if rt.get("SystemdCgroup") else "cgroupfs",
                                 "source": src + f"SystemdCgroup={str(rt.get('SystemdCgroup')).lower()} "
                                                 f"(runtime {ctd.get('gpu_runtime')})"}
        else:
            out["containerd"] = {"value": None, "source": src + f"SystemdCgroup not set for runtime "
                                                                f"{ctd.get('gpu_runtime')}: containerd's default applies"}
    if docker is not None:
        v = docker["cgroup_driver"]
        out["docker"] = {"value": v, "source": f"{DOCKER}: " + (f"exec-opts native.cgroupdriver={v}" if v else
                         "exec-opts sets no native.cgroupdriver: dockerd's default applies (systemd on cgroup v2 "
                         "with systemd, else cgroupfs)")}
    if crio is not None:
        v = crio["cgroup_manager"]
        out["crio"] = {"value": v if v in ("systemd", "cgroupfs") else None,
                       "source": f"{', '.join(crio['files'])}: " + (f"cgroup_manager = {v}" if v else
                                 "cgroup_manager not set: CRI-O's default (systemd) applies")}
    if podman is not None:
        v = podman["cgroup_manager"]
        out["podman"] = {"value": v if v in ("systemd", "cgroupfs") else None,
                         "source": f"{', '.join(podman['files'])}: " + (f"[engine] cgroup_manager = {v}" if v else
                                   "[engine] cgroup_manager not set: Podman's default (systemd) applies")}
    return out
