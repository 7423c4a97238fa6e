"""The engines and GPU stacks beside containerd: each engine's own settings files as its module in
forensics/engines declares them (:class:`forensics.engines.engine.Settings`: Docker's ``daemon.json``, CRI-O's
``crio.conf(.d)``, Podman's ``containers.conf(.d)``), k3s/RKE2's ``config.toml.tmpl``, Bottlerocket's NVIDIA
files, the GPU Operator's host files and HAMi's ``libvgpu.so``; each engine's cgroup driver as its settings
set it (the ``engine_cgroup_driver`` fact). A new engine's settings are read here by its ``settings`` entry
alone.

Bundle layout written by :func:`acquire` (host path under ``runtime/``; the engines' files as today's
registry names them)::

    runtime/etc/docker/daemon.json
    runtime/etc/crio/crio.conf  runtime/etc/crio/crio.conf.d/*.conf|*.toml
    runtime/usr/share/containers/containers.conf  runtime/etc/containers/containers.conf(.d/*.conf)
    runtime/etc/os-release      runtime/etc/nvidia-k8s-device-plugin/settings.yaml
    runtime/etc/shimpei/nvidia-oci-hooks.json   runtime/run/nvidia/validations/driver-ready

and the ``stack`` entry of ``runtime/facts.json`` (presence of the rest). Where each file is and what
it says: docs/sources.md "GPU stacks" items 2 (GPU Operator), 4 (HAMi), 5 (Bottlerocket), 6
(Docker), 7 (CRI-O) and 8 (k3s / RKE2). Nothing here runs a command; files are read bounded
(``FILE_LIMIT``) through :mod:`forensics.hostfs`, and stored through the redaction policy's ``config`` rule
(:func:`forensics.redact_config.store_config`, in the format of :data:`FORMATS` or the engine's ``fmt``).
"""
from __future__ import annotations

import yaml

from forensics import configdoc as cd, hostfs
from forensics.engines import ENGINES
from forensics.redact_config import store_config

import collectors.runtime_config.parse as rp

FILE_LIMIT = 4 << 20
#: k3s / RKE2 generated containerd configs and the templates they are rendered from (stacks.md 8)
RANCHER = {"k3s": "/var/lib/rancher/k3s/agent/etc/containerd", "rke2": "/var/lib/rancher/rke2/agent/etc/containerd"}
TEMPLATES = ("config.toml.tmpl", "config-v3.toml.tmpl")
#: copied when present (stacks.md 2 and 5)
COPIED = ("/etc/os-release", "/etc/nvidia-k8s-device-plugin/settings.yaml", "/etc/shimpei/nvidia-oci-hooks.json",
          "/run/nvidia/validations/driver-ready")
#: the format each stored file is redacted in (:mod:`forensics.redact_config`)
FORMATS = {"/etc/os-release": "env", "/etc/nvidia-k8s-device-plugin/settings.yaml": "yaml",
           "/etc/shimpei/nvidia-oci-hooks.json": "json", "/run/nvidia/validations/driver-ready": "env"}
PLUGIN_SETTINGS = COPIED[1]  #: the device plugin's config file (Bottlerocket renders it)
#: presence only (stacks.md 2, 4, 5)
PRESENT = ("/run/nvidia/validations/toolkit-ready", "/usr/local/nvidia/toolkit",
           "/etc/systemd/system/nvidia-k8s-device-plugin.service.d/exec-start.conf", "/usr/local/vgpu/libvgpu.so")
#: where the GPU Operator writes its hook
OPERATOR_HOOKS = "/run/containers/oci/hooks.d"


def configured() -> tuple:
    """The engines of the registry (forensics/engines) that declare settings files of their own: Docker's
    daemon.json, CRI-O's crio.conf(.d), Podman's containers.conf(.d) (containerd's config.toml is this
    collector's own); read at each call, so that the registry is the one list."""
    return tuple(e for e in ENGINES.values() if e.settings)


def acquire(ctx) -> dict:
    """Copy the files above that exist into ``runtime/`` and return the ``stack`` entry of facts.json:
    ``{<engine>: artifact path|None (an engine whose settings are one file: Docker's daemon.json) or
    [artifact path] (a file and its drop-ins: CRI-O, Podman), "rancher": [{"distro", "config": bool,
    "templates": [{"path", "directives": bool|None}]}], "copied": {host path: artifact path},
    "present": {host path: bool}, "engine_hooks_dirs": [str] (the ``hooks_dir`` the engines' settings name)}``.
    A file that is not there is not recorded (its absence is the fact); one that exists but cannot be read
    is a manifest record, and so is a symlink whose target is not under the root (absent, saying so) and
    each file the time budget left unread."""
    out: dict = {"copied": {}, "present": {}, "engine_hooks_dirs": []}

    def copy(path: str, limit: int = FILE_LIMIT, fmt: str | None = None) -> str | None:  # None: not stored
        return store_config(ctx, path, "runtime" + path, fmt or FORMATS.get(path, "toml"), limit).path
    for e in configured():
        s = e.settings
        files = _with_drop_ins(ctx, s.files, s.drop_ins, s.suffixes) if s.drop_ins else \
            [f for f in s.files if hostfs.present(ctx.root, f)]
        kept = [p for p in (copy(f, fmt=s.fmt) for f in files) if p]
        out[e.name] = (kept[0] if kept else None) if s.one_file else kept
        docs = [d for d in (_doc(ctx.writer.dir / p, s.fmt)[0] for p in kept) if d is not None]
        out["engine_hooks_dirs"] += (s.parse(docs).get("hooks_dir") or []) if docs else []
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


def _directives(root, path: str) -> bool | None:
    """Whether a k3s template holds Go template actions (``{{``): then ``nvidia-ctk`` cannot edit it as
    TOML. ``None`` when it cannot be read."""
    try:
        with hostfs.open_regular(root, path) as f:
            return b"{{" in f.read(FILE_LIMIT)
    except OSError:
        return None


def _doc(path, fmt: str) -> tuple[dict | None, str | None]:
    """A stored settings file parsed (:func:`forensics.configdoc.parse`, ``fmt`` ``"json"`` or ``"toml"``) →
    ``(document, None)``, or ``(None, why)`` where it cannot be read, does not parse or is not a table."""
    try:
        text = path.read_text("utf-8", "replace")
    except OSError as e:
        return None, f"cannot be read: {e.strerror}"
    return cd.parse(text, fmt)


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
    plugin = cd.tab(cd.get(doc, "flags", "plugin"))
    pds, dls = plugin.get("passDeviceSpecs"), plugin.get("deviceListStrategy")
    return {"pass_device_specs": pds if isinstance(pds, bool) else None,
            "device_list_strategy": cd.str_list(dls) or None}


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

    ``stack``: ``{<engine>: its settings (:attr:`forensics.engines.engine.Settings.parse`) + {"source": host
    path} (one file) or {"files": [host path]} | None (no settings file seen), "rancher": [...] (acquire's),
    "os_release": {ID, VARIANT_ID, ...} | None, "bottlerocket": bool|None, "bottlerocket_settings": str (the
    rendered plugin settings.yaml text) | None, "bottlerocket_plugin": :func:`plugin_config` of it,
    "shimpei_hook": bool (Bottlerocket's /etc/shimpei/nvidia-oci-hooks.json), "operator": {"driver_ready":
    {KEY: value} | None, "toolkit_ready", "toolkit_dir"}, "hami_vgpu": bool|None, "bottlerocket_plugin_unit":
    bool|None, "collected": bool}``; ``collected`` False (and every other value None) for a bundle from a
    version that did not look. ``engine_cgroup_driver``: the contract's ``{engine: {"value", "source"}}``
    for each engine whose config was seen."""
    if entry is None:
        return {"collected": False, **{e.name: None for e in configured()}, "rancher": None, "os_release": None,
                "bottlerocket": None, "bottlerocket_settings": None, "bottlerocket_plugin": None, "shimpei_hook": None,
                "operator": None, "hami_vgpu": None, "bottlerocket_plugin_unit": None}, _ecd(ctd, {})
    seen = {e.name: _settings(bundle, e.settings, entry.get(e.name), stored, r) for e in configured()}
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
    stack = {"collected": True, **seen, "rancher": entry.get("rancher") or [],
             "os_release": osr, "bottlerocket": (osr.get("ID") == "bottlerocket") if osr is not None else None,
             "bottlerocket_settings": settings, "bottlerocket_plugin": plugin,
             "shimpei_hook": "/etc/shimpei/nvidia-oci-hooks.json" in copied,
             "bottlerocket_plugin_unit": present.get(PRESENT[2]),
             "operator": {"driver_ready": _kv(ready) if ready is not None else None,
                          "toolkit_ready": present.get(PRESENT[0]), "toolkit_dir": present.get(PRESENT[1])},
             "hami_vgpu": present.get(PRESENT[3])}
    return stack, _ecd(ctd, seen)


def _settings(bundle, spec, recorded, stored: dict, r) -> dict | None:
    """``spec.parse(docs)`` (:class:`forensics.engines.engine.Settings`) of the stored files ``recorded``
    (one path or a list, as :func:`acquire` wrote them) in their order, with their host paths (``source``
    or ``files``); a file that does not parse is a problem ("daemon.json is not valid JSON: ...") and left
    out; None without any stored file."""
    files = [p for p in ([recorded] if isinstance(recorded, str) else recorded or []) if p in stored]
    if not files:
        return None
    docs = []
    for p in files:
        d, why = _doc(bundle.path(p), spec.fmt)
        if why:
            r.problems.append({"artifact": p, "message": f"{spec.what} {why}"})
        if d is not None:
            docs.append(d)
    hosts = [p.removeprefix("runtime") for p in files]
    return {**spec.parse(docs), **({"source": hosts[0]} if spec.one_file else {"files": hosts})}


def _ecd(ctd: dict | None, seen: dict) -> dict:
    """The ``engine_cgroup_driver`` fact (../h-contracts: runtime_config facts): a value only where the
    engine's config sets it; ``None`` when the config was seen but does not (its default applies, and
    the reader must call it a default). ``seen``: ``{engine: its settings | None}`` (:func:`_settings`)."""
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
    for e in configured():
        if seen.get(e.name) is not None:
            value, said = e.settings.driver(seen[e.name])
            names = seen[e.name].get("source") or ", ".join(seen[e.name].get("files") or [])
            out[e.name] = {"value": value, "source": f"{names}: {said}"}
    return out
