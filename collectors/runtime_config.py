"""Node runtime configuration: containerd, the NVIDIA container toolkit, CDI specs, NVIDIA device majors
and nodes, and the runc / systemd / toolkit versions that decide whether a daemon-reload revokes GPUs.

Bundle layout written by :func:`acquire` (each host file is stored under ``runtime/`` + its host path)::

    runtime/etc/containerd/config.toml          and every file its ``imports`` name, recursively; unless
                                                --no-redact, credential values (registry ``password``,
                                                ``auth``, ``identitytoken``, ``Authorization`` headers...)
                                                and URL credentials are replaced (:func:`redact_toml`)
    runtime/etc/nvidia-container-runtime/config.toml
    runtime/etc/cdi/*.{json,yaml,yml}           runtime/var/run/cdi/*.{json,yaml,yml}
    runtime/etc/containers/oci/hooks.d/*.json   runtime/usr/share/containers/oci/hooks.d/*.json
    runtime/proc/devices
    runtime/facts.json                          load order of the containerd files, /dev nodes, versions

Formats: containerd docs/cri/config.md (config versions 1, 2, 3) and cmd/containerd/server/config
(``imports``); NVIDIA/nvidia-container-toolkit api/config/v1 (``config.toml``); CDI SPEC.md 0.3-1.1;
proc(5) ``/proc/devices``. ../shared/research/formats.md sections 5 and 6 summarise them.
"""
from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import shlex
import stat
import subprocess
import tomllib

import yaml

from forensics import hostfs
from forensics.artifact import Artifact, Status, from_oserror
from forensics.bundle import Bundle
from forensics.events import NodeFacts
from forensics.redact import redact_toml
from forensics.source import CollectContext, Reading

FACTS = "runtime/facts.json"
FILE_LIMIT = 4 << 20       #: bytes copied of any one config or spec file
MAX_FILES = 64             #: containerd imports followed, and spec files taken per CDI directory
CONTAINERD_CONFIGS = ("/etc/containerd/config.toml",  # k3s and RKE2 keep their own, used when /etc has none
                      "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
                      "/var/lib/rancher/rke2/agent/etc/containerd/config.toml")
TOOLKIT_CONFIGS = ("/etc/nvidia-container-runtime/config.toml",  # GPU Operator's toolkit keeps its own
                   "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
HOOKS_DIRS = ("/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d")  #: CRI-O / podman hook files
DRIVER_ROOT = "/run/nvidia/driver"
#: where each config version keeps the CRI runtime settings (containerd docs/cri/config.md)
CRI_TABLES = {3: ("plugins", "io.containerd.cri.v1.runtime"), 2: ("plugins", "io.containerd.grpc.v1.cri"),
              1: ("plugins", "cri")}
#: packages whose dpkg version stands for a component's version when it cannot be asked
PACKAGES = {"runc": ("runc",), "containerd": ("containerd", "containerd.io"),
            "nvidia-container-toolkit": ("nvidia-container-toolkit", "nvidia-container-toolkit-base")}
JIT_CDI_SINCE = (1, 18, 0)  #: toolkit commit 6149592b "Default to jit-cdi mode in the nvidia runtime"
NAME = "runtime_config"
OPTIONS: list = []  #: none


# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Copy containerd's config (following ``imports``), the toolkit config, CDI specs and
    ``/proc/devices`` into ``runtime/``, and write ``runtime/facts.json`` (containerd load order, CDI
    directories, NVIDIA nodes under /dev and /run/nvidia/driver/dev with their /dev/char links, versions).
    Versions it cannot ask come from ``ctx.node`` (the node collector's dpkg versions); a missing or unreadable host file is a
    manifest record, never an exception."""
    w = ctx.writer
    facts: dict = {"containerd_files": _acquire_containerd(ctx)}
    toolkit = []
    for path in TOOLKIT_CONFIGS:
        if path == TOOLKIT_CONFIGS[0] or hostfs.exists(ctx.root, path):
            a = w.copy(ctx.root, path, "runtime" + path, limit=FILE_LIMIT)
            toolkit.append({"source": path, "path": a.path})
    facts["toolkit_configs"] = toolkit
    docs = [d for d in (_toml_or_none(w.dir, f["path"]) for f in facts["containerd_files"]) if d is not None]
    extra = list(containerd_settings(docs)["cdi_spec_dirs"]) if docs else []
    for t in toolkit:  # CDI directories named by containerd or the toolkit are read too
        extra += _str_list(_get(_toml_or_none(w.dir, t["path"]), "nvidia-container-runtime", "modes", "cdi", "spec-dirs"))
    facts["cdi_dirs"] = _acquire_dirs(ctx, [*CDI_DIRS, *(d for d in extra if isinstance(d, str))][:8],
                                      (".json", ".yaml", ".yml"))
    facts["hooks_dirs"] = _acquire_dirs(ctx, list(HOOKS_DIRS), (".json",))
    w.copy(ctx.root, "/proc/devices", "runtime/proc/devices", limit=1 << 20)
    facts["driver_root"] = {"path": DRIVER_ROOT, "exists": hostfs.exists(ctx.root, DRIVER_ROOT)}
    try:
        facts["dev_char"] = hostfs.listdir(ctx.root, "/dev/char")[:16384]
    except OSError as e:
        facts["dev_char"] = None
        w.record(from_oserror("/dev/char", "listdir", e))
    try:
        hostfs.listdir(ctx.root, "/dev")
    except OSError as e:  # an unreadable /dev must not read as "no NVIDIA nodes on the host"
        w.record(from_oserror("/dev", "listdir", e))
        facts["host_devices"] = None
    else:
        facts["host_devices"] = device_nodes(ctx.root, "/dev", facts["dev_char"])
    facts["driver_root_devices"] = (device_nodes(ctx.root, DRIVER_ROOT + "/dev", None)
                                    if facts["driver_root"]["exists"] else [])
    facts["versions"] = _versions(ctx)
    w.write_json(FACTS, facts, source="runtime_config", method="generated")


def _acquire_containerd(ctx) -> list[dict]:
    """Copy the main config and its imports, breadth first as containerd loads them (a file already
    loaded is skipped, which breaks import loops)."""
    main = next((p for p in CONTAINERD_CONFIGS if hostfs.exists(ctx.root, p)), CONTAINERD_CONFIGS[0])
    pending, loaded, files = [(main, None)], set(), []
    while pending and len(files) < MAX_FILES:
        path, parent = pending.pop(0)
        path = posixpath.normpath(path)
        if path in loaded:
            continue
        loaded.add(path)
        a = _copy_redacted(ctx, path, "runtime" + path) if ctx.redact else \
            ctx.writer.copy(ctx.root, path, "runtime" + path, limit=FILE_LIMIT)
        files.append({"source": path, "path": a.path, "imported_by": parent})
        doc = _toml_or_none(ctx.writer.dir, a.path)
        for imp in _str_list((doc or {}).get("imports")):
            pending.extend((p, path) for p in _resolve_import(ctx.root, path, imp))
    return files


def _copy_redacted(ctx, path: str, rel: str) -> Artifact:
    """Store a containerd TOML file through :func:`redact_toml` (registry credentials live in it); the
    manifest record says so. An unreadable file is recorded as :meth:`BundleWriter.copy` would."""
    try:
        with hostfs.open_regular(ctx.root, path) as f:
            data = f.read(FILE_LIMIT + 1)
    except OSError as e:
        return ctx.writer.record(from_oserror(path, "copy-redacted", e))
    notes = ["credential values (keys holding password, auth, token, secret, key, credential) and URL "
             "credentials redacted; every other line as on the node"]
    if len(data) > FILE_LIMIT:
        data = data[:FILE_LIMIT]
        notes.append(f"truncated: only the first {FILE_LIMIT} bytes were read")
    with ctx.writer.create(rel, path, "copy-redacted", notes=notes, text=False) as fh:
        fh.write(redact_toml(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
    return ctx.writer.artifacts[-1]


def _resolve_import(root, parent: str, imp: str) -> list[str]:
    """An ``imports`` entry as containerd resolves it: relative to the importing file's directory,
    globs expanded (sorted, like Go's filepath.Glob)."""
    if not imp.startswith("/"):
        imp = posixpath.join(posixpath.dirname(parent), imp)
    if not any(c in imp for c in "*?["):
        return [imp]
    paths = ["/"]
    for part in [p for p in imp.split("/") if p]:
        nxt = []
        for base in paths:
            if any(c in part for c in "*?["):
                try:
                    nxt += [posixpath.join(base, n) for n in hostfs.listdir(root, base) if fnmatch.fnmatchcase(n, part)]
                except OSError:
                    pass
            else:
                nxt.append(posixpath.join(base, part))
        paths = nxt[:MAX_FILES]
    return sorted(p for p in paths if hostfs.exists(root, p))


def _acquire_dirs(ctx, dirs: list[str], suffixes: tuple[str, ...]) -> list[dict]:
    """Copy the files named ``*suffix`` in each directory (a directory reached twice, e.g. /var/run/cdi and
    /run/cdi, is read once); an unlistable directory is a manifest record."""
    out, seen = [], set()
    for d in dirs:
        try:
            real = hostfs.resolve(ctx.root, d)
            if real in seen:
                continue
            seen.add(real)
            names = hostfs.listdir(ctx.root, d)
        except OSError as e:
            ctx.writer.record(from_oserror(d, "listdir", e))
            out.append({"dir": d, "exists": False, "files": []})
            continue
        specs = [n for n in names if n.endswith(suffixes)][:MAX_FILES]
        for n in specs:
            ctx.writer.copy(ctx.root, f"{d.rstrip('/')}/{n}", f"runtime{d.rstrip('/')}/{n}", limit=FILE_LIMIT)
        out.append({"dir": d, "exists": True, "files": specs})
    return out


def device_nodes(root, dev: str, dev_char: list[str] | None) -> list[dict]:
    """``/dev/nvidia*`` under ``root`` (and one level inside directories such as /dev/nvidia-caps), by
    lstat only: ``[{"path", "kind": c|b|dir|symlink|fifo|socket|regular, "major", "minor", "mode",
    "target", "dev_char": "/dev/char/M:m", "dev_char_exists": bool|None}]``. ``dev_char`` is the
    listing of /dev/char (``None`` when it could not be listed). Paths are as seen on the host."""
    out = []
    try:
        base = hostfs.resolve(root, dev)
        names = [n for n in os.listdir(base) if n.startswith("nvidia")]
    except OSError:
        return out
    for name in sorted(names)[:256]:
        entries = [(f"{dev}/{name}", base / name)]
        try:
            if stat.S_ISDIR(os.lstat(base / name).st_mode):
                entries += [(f"{dev}/{name}/{n}", base / name / n) for n in sorted(os.listdir(base / name))[:256]]
        except OSError:
            pass
        for shown, real in entries:
            try:
                st = os.lstat(real)
            except OSError:
                continue
            rec = {"path": shown, "kind": _kind(st.st_mode), "major": None, "minor": None,
                   "mode": f"{stat.S_IMODE(st.st_mode):04o}", "target": None}
            if rec["kind"] in ("c", "b"):
                rec["major"], rec["minor"] = os.major(st.st_rdev), os.minor(st.st_rdev)
            if rec["kind"] == "symlink":
                rec["target"] = os.readlink(real)
            if rec["kind"] == "c":
                rec["dev_char"] = f"/dev/char/{rec['major']}:{rec['minor']}"
                rec["dev_char_exists"] = None if dev_char is None else f"{rec['major']}:{rec['minor']}" in dev_char
            out.append(rec)
    return out


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "c"), (stat.S_ISBLK, "b"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISREG, "regular")):
        if test(mode):
            return name
    return "other"


def _versions(ctx: CollectContext) -> dict:
    pv = ctx.node.package_versions or {}
    return {
        "runc": _command(ctx, ["runc", "--version"], r"runc version (\S+)") or _pkg_version(pv, "runc"),
        "containerd": _command(ctx, ["containerd", "--version"], r"containerd \S+ v?(\d\S*)")
        or _pkg_version(pv, "containerd"),
        "nvidia-container-toolkit": _command(ctx, ["nvidia-ctk", "--version"], r"version (\d\S*)")
        or _pkg_version(pv, "nvidia-container-toolkit"),
        "systemd": {"version": ctx.node.systemd_version, "basis": ctx.node.systemd_version_basis},
    }


def _pkg_version(pv: dict, key: str) -> dict:
    """``{"version", "basis"}`` from the node's dpkg package versions (collectors/node.py)."""
    n = next((n for n in PACKAGES[key] if pv.get(n)), None)
    return {"version": pv.get(n), "basis": f"/var/lib/dpkg/status ({n})" if n else None}


def _command(ctx, argv: list[str], pattern: str) -> dict | None:
    """Run a version command on a live node only (never on a mounted root: the binary would be ours)."""
    if not ctx.live:
        return None
    cmd = shlex.join(argv)
    try:
        out = subprocess.run(argv, capture_output=True, timeout=10, check=False).stdout.decode("utf-8", "replace")
    except OSError as e:
        ctx.writer.record(from_oserror(cmd, "command", e))
        return None
    except subprocess.TimeoutExpired as e:
        ctx.writer.record(Artifact(None, cmd, Status.ERROR, "command", message=str(e)))
        return None
    with ctx.writer.create(f"runtime/{argv[0]}-version.txt", cmd, "command") as fh:
        fh.write(out)
    m = re.search(pattern, out)
    return {"version": m.group(1), "basis": cmd} if m else None


# -- read ------------------------------------------------------------------------------------------
def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """Parse the stored copies into ``Reading.facts == {"runtime": {...}, "preconditions":
    {"systemd_cgroup": True|False|None}}``. ``runtime`` holds ``containerd`` (see
    :func:`containerd_settings`), ``systemd_cgroup`` and ``enable_cdi`` (for the runtime handler GPU
    pods use), ``nvidia_runtime`` (:func:`toolkit_settings`), ``nvidia_runtime_mode`` and
    ``nvidia_runtime_mode_resolved``, ``cdi`` (``{"dirs", "specs": [`` :func:`cdi_spec` ``]}``),
    ``oci_hooks`` (:func:`oci_hook_file`),
    ``proc_devices`` (:func:`nvidia_majors`), ``nvidia_majors``, ``host_devices``, ``dev_char``,
    ``driver_root`` ("/run/nvidia/driver" or "/"), ``driver_root_devices`` and ``versions``.
    Unparseable files become ``Reading.problems``; nothing here raises for bad content."""
    r = Reading()
    facts = _load_json(bundle, FACTS) or {}
    versions = facts.get("versions") or {}
    pv = (bundle.manifest.get("node_facts") or {}).get("package_versions") or {}
    for key in PACKAGES:
        if not (versions.get(key) or {}).get("version"):
            versions[key] = _pkg_version(pv, key)
    if not (versions.get("systemd") or {}).get("version"):
        versions["systemd"] = {"version": node.systemd_version, "basis": "node facts" if node.systemd_version else None}
    stored = {a.path: a for a in bundle.find("runtime/")}
    files = facts.get("containerd_files") or [{"source": CONTAINERD_CONFIGS[0],
                                               "path": "runtime" + CONTAINERD_CONFIGS[0]}]
    docs, bad = _tomls(bundle, stored, files, "containerd config", r)
    ctd = _settings(containerd_settings, [d for _, d in docs], versions["containerd"]["version"], files, r) \
        if docs and not bad else None
    if ctd is not None:
        ctd["files"] = [s for s, _ in docs]
    tk_files = facts.get("toolkit_configs") or [{"source": TOOLKIT_CONFIGS[0], "path": "runtime" + TOOLKIT_CONFIGS[0]}]
    tk_docs, _ = _tomls(bundle, stored, tk_files, "toolkit config", r)
    operator = ((ctd or {}).get("nvidia_binary") or "").startswith("/usr/local/nvidia/")
    tk_docs.sort(key=lambda sd: sd[0].startswith("/usr/local/nvidia/") != operator)  # the one the runtime reads
    tk = _settings(toolkit_settings, tk_docs[0][1], versions["nvidia-container-toolkit"]["version"], tk_files, r) \
        if tk_docs else None
    if tk is not None:
        tk["source"] = tk_docs[0][0]
    specs = _dir_files(bundle, stored, facts.get("cdi_dirs"), CDI_DIRS, cdi_spec, r)
    hooks = _dir_files(bundle, stored, facts.get("hooks_dirs"), HOOKS_DIRS, oci_hook_file, r)
    majors = None
    if "runtime/proc/devices" in stored:
        majors = nvidia_majors(bundle.path("runtime/proc/devices").read_text("utf-8", "replace"))
    driver_root = DRIVER_ROOT if (facts.get("driver_root") or {}).get("exists") else "/"
    runtime = {
        "containerd": ctd,
        "systemd_cgroup": (ctd or {}).get("systemd_cgroup"),
        "enable_cdi": (ctd or {}).get("enable_cdi"),
        "nvidia_runtime": tk,
        "nvidia_runtime_mode": (tk or {}).get("mode"),
        "nvidia_runtime_mode_resolved": (tk or {}).get("mode_resolved"),
        "cdi": {"dirs": facts.get("cdi_dirs"), "specs": specs},
        "oci_hooks": hooks,
        "proc_devices": majors,
        "nvidia_majors": sorted({195, *(majors or {}).values()}),
        "host_devices": facts.get("host_devices") or [],
        "dev_char": facts.get("dev_char"),
        "driver_root": driver_root,
        "driver_root_devices": facts.get("driver_root_devices") or [],
        "versions": versions,
    }
    r.facts = {"runtime": runtime, "preconditions": {"systemd_cgroup": runtime["systemd_cgroup"]}}
    return r


def containerd_settings(docs: list[dict], containerd_version: str | None = None) -> dict:
    """Effective CRI settings from containerd config documents in load order (main file first, then its
    imports; later files override).

    Returns ``{"config_version": 1|2|3, "merge": str, "linux_runtime": str|None, "runtimes": {name:
    {"runtime_type", "SystemdCgroup": bool, "SystemdCgroup_basis": "config"|"default", "BinaryName"}},
    "default_runtime", "gpu_runtime",
    "nvidia_binary", "systemd_cgroup", "enable_cdi", "enable_cdi_basis", "cdi_spec_dirs"}``. Imports
    replace whole ``plugins.<id>`` sections before containerd 2.0 and are deep-merged from 2.0 on
    (containerd PR #9982). ``docs`` may hold any values (a valid TOML file can still give a table
    where a string belongs): a value of the wrong type counts as absent. Raises nothing for any
    non-empty list of dicts; absent keys take containerd's documented defaults.
    """
    major = _vtuple(containerd_version)[:1] or None
    cfgv = max((v if isinstance(v := d.get("version"), int) and not isinstance(v, bool) else 1) for d in docs)
    deep = (major[0] >= 2) if major else cfgv >= 3
    merged: dict = {}
    for d in docs:
        merged = _merge(merged, d, deep_plugins=deep)
    cri = _tab(_get(merged, *CRI_TABLES.get(cfgv, CRI_TABLES[2])))
    if not cri:
        cri = next((t for t in (_tab(_get(merged, *p)) for p in CRI_TABLES.values()) if t), {})
    ctr = _tab(cri.get("containerd"))
    # the pre-shim-v2 runtime (io.containerd.runtime.v1.linux) takes its binary and cgroup driver elsewhere
    linux_runtime = _text(_tab(_get(merged, "plugins", "io.containerd.runtime.v1.linux")
                               or _get(merged, "plugins", "linux")).get("runtime"))
    handlers = {str(k): _tab(v) for k, v in _tab(ctr.get("runtimes")).items()}
    default = _text(ctr.get("default_runtime_name"))
    if not default and _tab(ctr.get("default_runtime")).get("runtime_type"):  # 1.x: a typed default_runtime
        default = "default"
        handlers.setdefault("default", ctr["default_runtime"])
    default = default or "runc"
    runtimes = {}
    for name, rt in handlers.items():
        opts = _tab(rt.get("options"))
        v1_shim = rt.get("runtime_type") == "io.containerd.runtime.v1.linux"
        sc = cri.get("systemd_cgroup") if v1_shim else opts.get("SystemdCgroup")
        runtimes[name] = {"runtime_type": _text(rt.get("runtime_type")), "SystemdCgroup": sc is True,
                          "SystemdCgroup_basis": "config" if isinstance(sc, bool) else "default",
                          "BinaryName": linux_runtime if v1_shim else _text(opts.get("BinaryName"))}
    runtimes.setdefault(default, {"runtime_type": "io.containerd.runc.v2", "SystemdCgroup": False,
                                  "SystemdCgroup_basis": "default", "BinaryName": None})

    def is_nvidia(n):
        return "nvidia" in n or "nvidia-container-runtime" in (runtimes[n]["BinaryName"] or "")
    gpu = default if is_nvidia(default) else ("nvidia" if "nvidia" in runtimes else
                                              next((n for n in runtimes if is_nvidia(n)), default))
    cdi, cdi_basis = (v if isinstance(v := cri.get("enable_cdi"), bool) else None), "config"
    if cdi is None and major:  # the default moved from false (1.7) to true (2.0); 1.6 has no CDI at all
        cdi = major[0] >= 2
        cdi_basis = f"default for containerd {containerd_version}" + (
            "" if cdi or _vtuple(containerd_version) >= (1, 7) else " (no CDI support before 1.7)")
    elif cdi is None:
        cdi = cfgv >= 3
        cdi_basis = (f"default for config version {cfgv} (containerd {'2.x' if cfgv >= 3 else '1.7; 1.6 has no CDI'};"
                     " containerd version unknown)")
    return {"config_version": cfgv, "merge": "deep" if deep else "plugin sections replaced",
            "linux_runtime": linux_runtime,
            "runtimes": runtimes, "default_runtime": default, "gpu_runtime": gpu,
            "nvidia_binary": runtimes[gpu]["BinaryName"] if is_nvidia(gpu) else None,
            "systemd_cgroup": runtimes[gpu]["SystemdCgroup"], "enable_cdi": cdi, "enable_cdi_basis": cdi_basis,
            "cdi_spec_dirs": _str_list(cri.get("cdi_spec_dirs")) or list(CDI_DIRS)}


def toolkit_settings(doc: dict, toolkit_version: str | None) -> dict:
    """nvidia-container-runtime ``config.toml`` → ``{"mode", "mode_basis", "mode_resolved",
    "resolved_basis", "no_cgroups", "spec_dirs", "accept_envvar_when_unprivileged",
    "accept_volume_mounts"}``. ``mode = "auto"`` resolves to ``jit-cdi`` from toolkit 1.18.0 and to
    ``legacy`` before (internal/info/auto.go; CDI-only requests and Tegra still pick cdi/csv per
    container); ``None`` when the version is unknown. Defaults from api/config/v1/config.go; a value
    of the wrong type counts as absent. Raises nothing for any dict."""
    rt = _tab(doc.get("nvidia-container-runtime"))
    mode = _text(rt.get("mode")) or "auto"
    out = {"mode": mode, "mode_basis": "config" if _text(rt.get("mode")) else "default (not set)",
           "mode_resolved": mode, "resolved_basis": "set explicitly"}
    if mode == "auto":
        v = _vtuple(toolkit_version)
        if not v:
            out["mode_resolved"], out["resolved_basis"] = None, "auto, and the toolkit version is unknown"
        else:
            out["mode_resolved"] = "jit-cdi" if v >= JIT_CDI_SINCE else "legacy"
            since = ">=" if v >= JIT_CDI_SINCE else "<"
            out["resolved_basis"] = f"auto with toolkit {toolkit_version} ({since} 1.18.0)"
    out["no_cgroups"] = _tab(doc.get("nvidia-container-cli")).get("no-cgroups") is True
    out["spec_dirs"] = _str_list(_get(rt, "modes", "cdi", "spec-dirs")) or list(CDI_DIRS)
    envvar = doc.get("accept-nvidia-visible-devices-envvar-when-unprivileged")
    out["accept_envvar_when_unprivileged"] = envvar if isinstance(envvar, bool) else True
    out["accept_volume_mounts"] = doc.get("accept-nvidia-visible-devices-as-volume-mounts") is True
    return out


def cdi_spec(data: bytes, source: str) -> dict:
    """One CDI spec file (JSON or YAML) → ``{"source", "cdiVersion", "kind", "devices": [name],
    "device_nodes": [{"device": name|None, "path", "hostPath", "type", "major", "minor"}],
    "hooks": [{"device", "hookName", "path", "args"}], "problems": [str]}`` (CDI SPEC.md); strings are
    ``str`` or ``None`` and major/minor ``int`` or ``None``, whatever the file holds. An empty file, bad
    syntax, nesting too deep to parse, or a spec without cdiVersion / kind / devices gives problems,
    never an exception."""
    out = {"source": source, "cdiVersion": None, "kind": None, "devices": [], "device_nodes": [], "hooks": [],
           "problems": []}
    try:
        doc = json.loads(data) if source.endswith(".json") and data.strip() else yaml.safe_load(data)
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        out["problems"].append(f"CDI spec {source} cannot be parsed: {type(e).__name__}: {e}"[:500])
        return out
    if not isinstance(doc, dict):
        out["problems"].append(f"CDI spec {source} is " + ("empty" if doc is None else "not a mapping"))
        return out
    out["cdiVersion"], out["kind"] = _scalar(doc.get("cdiVersion")), _scalar(doc.get("kind"))
    edits = [(None, _tab(doc.get("containerEdits")))]
    for dev in doc.get("devices") if isinstance(doc.get("devices"), list) else []:
        if isinstance(dev, dict):
            out["devices"].append(_scalar(dev.get("name")) or "")
            edits.append((out["devices"][-1], _tab(dev.get("containerEdits"))))
    for name, e in edits:
        for n in [n for n in _list(e.get("deviceNodes")) if isinstance(n, dict)]:
            out["device_nodes"].append({"device": name, "path": _text(n.get("path")),
                                        "hostPath": _text(n.get("hostPath")), "type": _text(n.get("type")),
                                        "major": _num(n.get("major")), "minor": _num(n.get("minor"))})
        for h in [h for h in _list(e.get("hooks")) if isinstance(h, dict)]:
            out["hooks"].append({"device": name, "hookName": _text(h.get("hookName")), "path": _text(h.get("path")),
                                 "args": [a for a in _list(h.get("args")) if isinstance(a, str)]})
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
        out.update(path=_text(hook.get("path")), args=[a for a in _list(hook.get("args")) if isinstance(a, str)],
                   stages=[s for s in _list(doc.get("stages")) if isinstance(s, str)],
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


# -- helpers ---------------------------------------------------------------------------------------
def _merge(a: dict, b: dict, deep_plugins: bool, depth: int = 0) -> dict:
    out = dict(a)
    for k, v in b.items():
        replace_section = depth == 1 and not deep_plugins  # containerd 1.x: plugins.<id> replaced whole
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not replace_section:
            out[k] = _merge(out[k], v, deep_plugins, depth + 1 if (depth or k == "plugins") else 0)
        else:
            out[k] = v
    return out


def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _tab(v) -> dict:
    """A TOML/JSON/YAML table, or ``{}`` for a value of any other type."""
    return v if isinstance(v, dict) else {}


def _text(v) -> str | None:
    """A non-empty string, or ``None`` for anything else."""
    return v if isinstance(v, str) and v else None


def _scalar(v) -> str | None:
    """A YAML/JSON scalar as text (``cdiVersion: 0.6`` is a float to YAML), ``None`` for the rest."""
    return str(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else None


def _num(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _str_list(v) -> list[str]:
    return [x for x in (v if isinstance(v, list) else [v] if isinstance(v, str) else []) if isinstance(x, str)]


def _vtuple(v: str | None) -> tuple[int, ...]:
    """``"1:1.17.8-1"`` / ``"v1.1.5+ds1"`` → ``(1, 17, 8)``; ``()`` when unknown."""
    m = re.match(r"(?:\d+:)?v?(\d+(?:\.\d+)*)", (v or "").strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def _toml_or_none(bundle_dir, rel: str | None) -> dict | None:
    if not rel:
        return None
    try:
        return tomllib.loads((bundle_dir / rel).read_text("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None


def _settings(fn, doc, version, files, r: Reading) -> dict | None:
    """``fn(doc, version)``, or a problem when valid TOML holds values of the wrong type."""
    try:
        return fn(doc, version)
    except (AttributeError, TypeError, ValueError) as e:
        r.problems.append({"artifact": files[0].get("path"),
                           "message": f"unexpected value types: {type(e).__name__}: {e}"})
        return None


def _tomls(bundle: Bundle, stored: dict, files: list[dict], what: str, r: Reading) -> tuple[list, bool]:
    """``[(host path, document)]`` of the stored TOML files, in order, and whether any was invalid (a problem)."""
    docs, bad = [], False
    for f in files:
        if f.get("path") in stored:
            try:
                docs.append((f["source"], tomllib.loads(bundle.path(f["path"]).read_text("utf-8", "replace"))))
            except (ValueError, RecursionError) as e:
                bad = True
                r.problems.append({"artifact": f["path"], "message": f"{what} is not valid TOML: {e}"})
    return docs, bad


def _dir_files(bundle: Bundle, stored: dict, listed, default, parse, r: Reading) -> list[dict]:
    """Parse every stored file that came from one of the directories in ``listed`` (facts.json) with
    ``parse(bytes, host path)``; each result's ``problems`` become reading problems."""
    dirs = {d["dir"].rstrip("/") for d in listed or []} or set(default)
    out = []
    for a in sorted(stored.values(), key=lambda a: a.path):
        if posixpath.dirname(a.source) in dirs:
            out.append(parse(bundle.path(a.path).read_bytes(), a.source))
            r.problems.extend({"artifact": a.path, "message": p} for p in out[-1]["problems"])
    return out


def _load_json(bundle: Bundle, rel: str):
    try:
        return json.loads(bundle.path(rel).read_text())
    except (OSError, ValueError, RecursionError):
        return None
