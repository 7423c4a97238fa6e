"""Runtime configuration formats: containerd's CRI settings, the NVIDIA container toolkit's
``config.toml``, CDI spec files, CRI-O / podman OCI hook files and ``/proc/devices``.

Each parser takes what :mod:`collectors.runtime_config` stored (a parsed TOML document, or a file's
bytes or text) and returns plain dicts; none raises for bad content, and a value of the wrong type
counts as absent. Formats: containerd docs/cri/config.md (config versions 1, 2, 3);
NVIDIA/nvidia-container-toolkit api/config/v1 (``config.toml``); CDI SPEC.md 0.3-1.1; oci-hooks(5);
proc(5) ``/proc/devices``. Nothing here touches the host or the bundle.
"""
from __future__ import annotations

import json
import posixpath

import yaml

from forensics import configdoc as cd
from forensics.versions import at_least, version_tuple

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")  #: CDI SPEC.md spec directories: containerd's and the toolkit's default
#: where each config version keeps the CRI runtime settings (containerd docs/cri/config.md)
CRI_TABLES = {3: ("plugins", "io.containerd.cri.v1.runtime"), 2: ("plugins", "io.containerd.grpc.v1.cri"),
              1: ("plugins", "cri")}
#: the names ``disabled_plugins`` may give the CRI plugin by (containerd docs/PLUGINS.md: id or type.id)
CRI_IDS = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images")
JIT_CDI_SINCE = (1, 18, 0)  #: toolkit commit 6149592b "Default to jit-cdi mode in the nvidia runtime"


def containerd_settings(docs: list[dict], containerd_version: str | None = None) -> dict:
    """Effective CRI settings from containerd config documents in load order (main file first, then its
    imports; later files override).

    Returns ``{"config_version": 1|2|3, "merge": str, "linux_runtime": str|None, "runtimes": {name:
    {"runtime_type", "SystemdCgroup": bool, "SystemdCgroup_basis": "config"|"default", "BinaryName"}},
    "default_runtime", "gpu_runtime",
    "nvidia_binary", "systemd_cgroup": bool|None, "systemd_cgroup_basis": str, "cri_disabled": bool,
    "cri_table": bool, "enable_cdi", "enable_cdi_basis", "cdi_spec_dirs"}``. ``systemd_cgroup`` and
    ``enable_cdi`` are ``None`` (unknown, the basis says why) when ``disabled_plugins`` lists the CRI
    plugin or no file has a CRI plugin table (``cri_table`` False). Imports
    replace whole ``plugins.<id>`` sections before containerd 2.0 and are deep-merged from 2.0 on
    (containerd PR #9982). ``docs`` may hold any values (a valid TOML file can still give a table
    where a string belongs): a value of the wrong type counts as absent. Raises nothing for any
    non-empty list of dicts; absent keys take containerd's documented defaults.
    """
    major = version_tuple(containerd_version)[:1] or None
    cfgv = max((v if isinstance(v := d.get("version"), int) and not isinstance(v, bool) else 1) for d in docs)
    deep = (major[0] >= 2) if major else cfgv >= 3
    merged: dict = {}
    for d in docs:
        merged = cd.merge(merged, d, deep_plugins=deep)
    cri = cd.tab(cd.get(merged, *CRI_TABLES.get(cfgv, CRI_TABLES[2])))
    has_cri = any(isinstance(cd.get(merged, *p), dict) for p in CRI_TABLES.values())
    if not cri:
        cri = next((t for t in (cd.tab(cd.get(merged, *p)) for p in CRI_TABLES.values()) if t), {})
    disabled = [n for n in cd.str_list(merged.get("disabled_plugins")) if n in CRI_IDS]
    # the pre-shim-v2 runtime (io.containerd.runtime.v1.linux) takes its binary and cgroup driver elsewhere
    linux_runtime = cd.text(cd.tab(cd.get(merged, "plugins", "io.containerd.runtime.v1.linux")
                               or cd.get(merged, "plugins", "linux")).get("runtime"))
    runtimes, default = _cri_runtimes(cri, linux_runtime)

    def is_nvidia(n):
        return "nvidia" in n or "nvidia-container-runtime" in (runtimes[n]["BinaryName"] or "")
    gpu = default if is_nvidia(default) else ("nvidia" if "nvidia" in runtimes else
                                              next((n for n in runtimes if is_nvidia(n)), default))
    cdi, cdi_basis = _enable_cdi(cri, major, containerd_version, cfgv)
    sc, sc_basis = runtimes[gpu]["SystemdCgroup"], f"{runtimes[gpu]['SystemdCgroup_basis']} (runtime {gpu})"
    if disabled:  # no CRI here: no Kubernetes container's cgroup driver is set by this file
        sc = cdi = None
        cdi_basis = f"unknown: disabled_plugins lists {', '.join(disabled)}"
        sc_basis = (f"unknown: disabled_plugins lists {', '.join(disabled)}, so this containerd runs no CRI "
                    "containers (e.g. dockerd's own containerd); their cgroup driver is set elsewhere")
    elif not has_cri:  # issue 14: nothing here says this containerd runs CRI containers, or how
        sc = cdi = None
        sc_basis = ("unknown: the config has no CRI plugin table, so it does not say whether this containerd runs "
                    "CRI containers nor with which cgroup driver (containerd's default would apply if it does)")
        cdi_basis = "unknown: the config has no CRI plugin table"
    return {"config_version": cfgv, "merge": "deep" if deep else "plugin sections replaced",
            "linux_runtime": linux_runtime,
            "runtimes": runtimes, "default_runtime": default, "gpu_runtime": gpu,
            "nvidia_binary": runtimes[gpu]["BinaryName"] if is_nvidia(gpu) else None,
            "systemd_cgroup": sc, "systemd_cgroup_basis": sc_basis, "cri_disabled": bool(disabled), "cri_table": has_cri,
            "enable_cdi": cdi, "enable_cdi_basis": cdi_basis,
            "cdi_spec_dirs": cd.str_list(cri.get("cdi_spec_dirs")) or list(CDI_DIRS)}


def _cri_runtimes(cri: dict, linux_runtime: str | None) -> tuple[dict, str]:
    """``(runtimes, default runtime name)`` of the CRI plugin's table: each handler's type, its
    ``SystemdCgroup`` (a v1 shim takes the plugin's ``systemd_cgroup``) with its basis, and ``BinaryName``;
    the default handler is always there (``runc``, containerd's default, unless the config names one)."""
    ctr = cd.tab(cri.get("containerd"))
    handlers = {str(k): cd.tab(v) for k, v in cd.tab(ctr.get("runtimes")).items()}
    default = cd.text(ctr.get("default_runtime_name"))
    if not default and cd.tab(ctr.get("default_runtime")).get("runtime_type"):  # 1.x: a typed default_runtime
        default = "default"
        handlers.setdefault("default", ctr["default_runtime"])
    default = default or "runc"
    runtimes = {}
    for name, rt in handlers.items():
        opts = cd.tab(rt.get("options"))
        v1_shim = rt.get("runtime_type") == "io.containerd.runtime.v1.linux"
        sc = cri.get("systemd_cgroup") if v1_shim else opts.get("SystemdCgroup")
        runtimes[name] = {"runtime_type": cd.text(rt.get("runtime_type")), "SystemdCgroup": sc is True,
                          "SystemdCgroup_basis": "config" if isinstance(sc, bool) else "default",
                          "BinaryName": linux_runtime if v1_shim else cd.text(opts.get("BinaryName"))}
    runtimes.setdefault(default, {"runtime_type": "io.containerd.runc.v2", "SystemdCgroup": False,
                                  "SystemdCgroup_basis": "default", "BinaryName": None})
    return runtimes, default


def _enable_cdi(cri: dict, major, containerd_version: str | None, cfgv: int) -> tuple[bool | None, str]:
    """``(enable_cdi, basis)``: the config's value (never true on a containerd older than 1.7, which has no CDI
    and ignores it), else containerd's default for its version (false in 1.7, true from 2.0; 1.6 has no CDI),
    else the default the config version implies."""
    cdi = v if isinstance(v := cri.get("enable_cdi"), bool) else None
    has_cdi = at_least({"version": containerd_version}, "1.7")  # None when the version was not seen
    if cdi is True and has_cdi is False:
        return False, f"config sets it, but containerd {containerd_version} has no CDI support (1.7+)"
    if cdi is not None:
        return cdi, "config"
    if major:
        cdi = major[0] >= 2
        return cdi, f"default for containerd {containerd_version}" + (
            "" if cdi or has_cdi else " (no CDI support before 1.7)")
    return cfgv >= 3, (f"default for config version {cfgv} (containerd {'2.x' if cfgv >= 3 else '1.7; 1.6 has no CDI'};"
                       " containerd version unknown)")


def toolkit_settings(doc: dict, toolkit_version: str | None) -> dict:
    """nvidia-container-runtime ``config.toml`` → ``{"mode", "mode_basis", "mode_resolved",
    "resolved_basis", "no_cgroups", "cli_root" (``[nvidia-container-cli] root``), "spec_dirs", "accept_envvar_when_unprivileged",
    "accept_volume_mounts"}``. ``mode = "auto"`` resolves to ``jit-cdi`` from toolkit 1.18.0 and to
    ``legacy`` before (internal/info/auto.go; CDI-only requests and Tegra still pick cdi/csv per
    container); ``None`` when the version is unknown. Defaults from api/config/v1/config.go; a value
    of the wrong type counts as absent. Raises nothing for any dict."""
    rt = cd.tab(doc.get("nvidia-container-runtime"))
    mode = cd.text(rt.get("mode")) or "auto"
    out = {"mode": mode, "mode_basis": "config" if cd.text(rt.get("mode")) else "default (not set)",
           "mode_resolved": mode, "resolved_basis": "set explicitly"}
    if mode == "auto":
        v = version_tuple(toolkit_version)
        if not v:
            out["mode_resolved"], out["resolved_basis"] = None, "auto, and the toolkit version is unknown"
        else:
            out["mode_resolved"] = "jit-cdi" if v >= JIT_CDI_SINCE else "legacy"
            since = ">=" if v >= JIT_CDI_SINCE else "<"
            out["resolved_basis"] = f"auto with toolkit {toolkit_version} ({since} 1.18.0)"
    out["no_cgroups"] = cd.tab(doc.get("nvidia-container-cli")).get("no-cgroups") is True
    out["cli_root"] = cd.text(cd.tab(doc.get("nvidia-container-cli")).get("root"))  # the driver root the hook uses
    out["spec_dirs"] = cd.str_list(cd.get(rt, "modes", "cdi", "spec-dirs")) or list(CDI_DIRS)
    envvar = doc.get("accept-nvidia-visible-devices-envvar-when-unprivileged")
    out["accept_envvar_when_unprivileged"] = envvar if isinstance(envvar, bool) else True
    out["accept_volume_mounts"] = doc.get("accept-nvidia-visible-devices-as-volume-mounts") is True
    return out


YAML_LIMIT = 1 << 20  #: bytes of a YAML CDI spec parsed (a spec for 8 GPUs with MIG is tens of KB)
#: PyYAML's safe loader, libyaml's when it is there (about twice as fast; the single-file collector has none)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def cdi_spec(data: bytes, source: str) -> dict:
    """One CDI spec file (JSON or YAML) → ``{"source", "cdiVersion", "kind", "devices": [name],
    "device_nodes": [{"device": name|None, "path", "hostPath", "type", "major", "minor"}],
    "hooks": [{"device", "hookName", "path", "args"}], "problems": [str]}`` (CDI SPEC.md); strings are
    ``str`` or ``None`` and major/minor ``int`` or ``None``, whatever the file holds. An empty file, bad
    syntax, nesting too deep to parse, or a spec without cdiVersion / kind / devices gives problems,
    never an exception."""
    out = {"source": source, "cdiVersion": None, "kind": None, "devices": [], "device_nodes": [], "hooks": [],
           "problems": []}
    yml = not (source.endswith(".json") and data.strip())
    if yml and len(data) > YAML_LIMIT:  # YAML is parsed in Python: megabytes take minutes; a real spec is KBs
        out["problems"].append(f"CDI spec {source} is not read: {len(data)} bytes of YAML, over the {YAML_LIMIT}-byte "
                               "bound for parsing it")
        return out
    try:
        doc = yaml.load(data, Loader=SAFE_LOADER) if yml else json.loads(data)
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        out["problems"].append(f"CDI spec {source} cannot be parsed: {type(e).__name__}: {e}"[:500])
        return out
    if not isinstance(doc, dict):
        out["problems"].append(f"CDI spec {source} is " + ("empty" if doc is None else "not a mapping"))
        return out
    out["cdiVersion"], out["kind"] = cd.scalar(doc.get("cdiVersion")), cd.scalar(doc.get("kind"))
    edits = [(None, cd.tab(doc.get("containerEdits")))]
    for dev in doc.get("devices") if isinstance(doc.get("devices"), list) else []:
        if isinstance(dev, dict):
            out["devices"].append(cd.scalar(dev.get("name")) or "")
            edits.append((out["devices"][-1], cd.tab(dev.get("containerEdits"))))
    for name, e in edits:
        for n in [n for n in cd.items(e.get("deviceNodes")) if isinstance(n, dict)]:
            out["device_nodes"].append({"device": name, "path": cd.text(n.get("path")),
                                        "hostPath": cd.text(n.get("hostPath")), "type": cd.text(n.get("type")),
                                        "major": cd.num(n.get("major")), "minor": cd.num(n.get("minor"))})
        for h in [h for h in cd.items(e.get("hooks")) if isinstance(h, dict)]:
            out["hooks"].append({"device": name, "hookName": cd.text(h.get("hookName")), "path": cd.text(h.get("path")),
                                 "args": [a for a in cd.items(h.get("args")) if isinstance(a, str)]})
    missing = [k for k in ("cdiVersion", "kind") if not doc.get(k)] + ([] if out["devices"] else ["devices"])
    if missing:
        out["problems"].append(f"CDI spec {source} is invalid: missing {', '.join(missing)}")
    return out


def oci_hook_file(data: bytes, source: str) -> dict:
    """A CRI-O / podman hooks.d JSON file (oci-hooks(5), version 1.0.0) → ``{"source", "path": str|None,
    "args": [str], "stages": [str], "always", "nvidia": bool (the legacy nvidia-container-runtime-hook),
    "problems": [str]}``. Any bytes are accepted: a file that is not such JSON gives a problem, never
    an exception."""
    out = {"source": source, "path": None, "args": [], "stages": [], "always": None, "nvidia": False, "problems": []}
    try:
        doc = json.loads(data)
        hook = doc["hook"]
        out.update(path=cd.text(hook.get("path")), args=[a for a in cd.items(hook.get("args")) if isinstance(a, str)],
                   stages=[s for s in cd.items(doc.get("stages")) if isinstance(s, str)],
                   always=(doc.get("when") or {}).get("always"))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        out["problems"].append(f"OCI hook file {source} cannot be read: {type(e).__name__}: {e}")
    out["nvidia"] = posixpath.basename(out["path"] or "") == "nvidia-container-runtime-hook"
    return out


def nvidia_majors(text: str) -> dict[str, int]:
    """``/proc/devices`` text → ``{name: major}`` for character devices whose name starts with
    ``nvidia`` (``nvidia`` or, before driver 550.40, ``nvidia-frontend`` = 195; ``nvidia-uvm``,
    ``nvidia-caps``... are dynamic). proc(5)."""
    out, section = {}, None
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            section = line.split()[0].lower()
            continue
        parts = line.split()
        if section == "character" and len(parts) == 2 and parts[0].isascii() and parts[0].isdigit() \
                and parts[1].startswith("nvidia"):
            out[parts[1]] = int(parts[0])
    return out
