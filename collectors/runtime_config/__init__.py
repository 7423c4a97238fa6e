"""Node runtime configuration: containerd, the NVIDIA container toolkit, CDI specs, NVIDIA device majors
and nodes, and the runc / systemd / toolkit versions that decide whether a daemon-reload revokes GPUs.

Bundle layout written by :func:`acquire` (each host file is stored under ``runtime/`` + its host path)::

    runtime/etc/containerd/config.toml          and every file its ``imports`` name, recursively
    runtime/etc/nvidia-container-runtime/config.toml
    runtime/etc/cdi/*.{json,yaml,yml}           runtime/var/run/cdi/*.{json,yaml,yml}
    runtime/etc/containers/oci/hooks.d/*.json   runtime/usr/share/containers/oci/hooks.d/*.json
    runtime/run/containers/oci/hooks.d/*.json   (and CRI-O's configured hooks_dir)
    runtime/etc/docker/daemon.json, runtime/etc/crio/...  see :mod:`collectors.runtime_config.engines`
    runtime/proc/devices
    runtime/facts.json                          load order of the containerd files, /dev nodes, versions

Formats: containerd docs/cri/config.md (config versions 1, 2, 3) and cmd/containerd/server/config
(``imports``); NVIDIA/nvidia-container-toolkit api/config/v1 (``config.toml``); CDI SPEC.md 0.3-1.1;
proc(5) ``/proc/devices``. docs/sources.md "OCI runtime spec and the NVIDIA modes", "Container engine
layouts", "CDI" and "cgroup device state" summarise them.

Every configuration file is stored through :func:`forensics.redact_config.store_config` (the redaction
policy's ``config`` rule, unless ``--no-redact``: registry ``password``/``auth``/``identitytoken``, header
values, hook args, env entries, URL credentials), its manifest record saying how many values it replaced.

This module holds the entry points, :func:`acquire` and :func:`read`, with what they copy and load;
the formats are parsed in :mod:`collectors.runtime_config.parse` and the /dev nodes are listed by
:mod:`collectors.runtime_config.devices`.
"""
from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
import subprocess
import tomllib

from forensics import configdoc as cd, debstatus, hostfs
from forensics.artifact import Artifact, Status, from_oserror
from forensics.bundle import Bundle
from forensics.engines import ENGINES
from forensics.engines.engine import Version
from forensics.events import NodeFacts
from forensics.redact_config import format_of, store_config
from forensics.source import CollectContext, Reading
from .devices import device_nodes
from . import engines
from .parse import (CDI_DIRS, cdi_spec, containerd_settings, nvidia_majors, oci_hook_file,
                    toolkit_settings)

FACTS = "runtime/facts.json"
FILE_LIMIT = 4 << 20       #: bytes copied of any one config or spec file
MAX_FILES = 64             #: containerd imports followed, and spec files taken per CDI directory
CONTAINERD_CONFIGS = ("/etc/containerd/config.toml",  # k3s and RKE2 keep their own, used when /etc has none
                      "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
                      "/var/lib/rancher/rke2/agent/etc/containerd/config.toml")
TOOLKIT_CONFIGS = ("/etc/nvidia-container-runtime/config.toml",  # GPU Operator's toolkit keeps its own
                   "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml")
HOOKS_DIRS = ("/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d")  #: CRI-O / podman hook files
DRIVER_ROOT = "/run/nvidia/driver"
#: packages whose dpkg version stands for a component's version when it cannot be asked
#: the toolkit's version, read as an engine's is (:class:`forensics.engines.engine.Version`)
TOOLKIT_VERSION = Version(("nvidia-ctk", "--version"), r"version (\d\S*)",
                          ("nvidia-container-toolkit", "nvidia-container-toolkit-base"))


def versioned() -> dict[str, Version]:
    """What the ``versions`` fact holds, by key: each engine's of the registry (forensics/engines: containerd,
    Docker, CRI-O, Podman, runc; :attr:`forensics.engines.engine.Engine.version`) and the NVIDIA Container
    Toolkit's (``nvidia-container-toolkit``)."""
    return {**{n: e.version for n, e in ENGINES.items() if e.version}, "nvidia-container-toolkit": TOOLKIT_VERSION}


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
        if path == TOOLKIT_CONFIGS[0] or hostfs.present(ctx.root, path):
            a = store_config(ctx, path, "runtime" + path, "toml", FILE_LIMIT)
            toolkit.append({"source": path, "path": a.path})
    facts["toolkit_configs"] = toolkit
    docs = [d for d in (_toml_or_none(w.dir, f["path"]) for f in facts["containerd_files"]) if d is not None]
    extra = list(containerd_settings(docs)["cdi_spec_dirs"]) if docs else []
    for t in toolkit:  # CDI directories named by containerd or the toolkit are read too
        extra += cd.str_list(cd.get(_toml_or_none(w.dir, t["path"]), "nvidia-container-runtime", "modes", "cdi", "spec-dirs"))
    facts["cdi_dirs"] = _acquire_dirs(ctx, [*CDI_DIRS, *(d for d in extra if isinstance(d, str))][:8],
                                      (".json", ".yaml", ".yml"))
    facts["stack"] = engines.acquire(ctx)  # Docker, CRI-O, k3s/RKE2, Bottlerocket, GPU Operator, HAMi signs
    hooks_dirs = [*HOOKS_DIRS, engines.OPERATOR_HOOKS, *facts["stack"]["engine_hooks_dirs"]]
    facts["hooks_dirs"] = _acquire_dirs(ctx, list(dict.fromkeys(hooks_dirs))[:8], (".json",))
    ctx.copy("/proc/devices", "runtime/proc/devices", limit=1 << 20)
    facts["driver_root"] = {"path": DRIVER_ROOT, "exists": hostfs.exists(ctx.root, DRIVER_ROOT)}
    dev_char = ctx.listdir("/dev/char")
    facts["dev_char"] = None if dev_char is None else dev_char[:16384]
    # an unreadable /dev must not read as "no NVIDIA nodes on the host"
    facts["host_devices"] = (None if ctx.listdir("/dev") is None
                             else device_nodes(ctx.root, "/dev", facts["dev_char"]))
    facts["driver_root_devices"] = (device_nodes(ctx.root, DRIVER_ROOT + "/dev", None)
                                    if facts["driver_root"]["exists"] else [])
    facts["versions"] = _versions(ctx)
    w.write_json(FACTS, facts, source="runtime_config", method="generated")


def _acquire_containerd(ctx) -> list[dict]:
    """Copy the main config and its imports, breadth first as containerd loads them (a file already
    loaded is skipped, which breaks import loops)."""
    main = next((p for p in CONTAINERD_CONFIGS if hostfs.present(ctx.root, p)), CONTAINERD_CONFIGS[0])
    pending, loaded, files = [(main, None)], set(), []
    while pending and len(files) < MAX_FILES:
        path, parent = pending.pop(0)
        path = posixpath.normpath(path)
        if path in loaded:
            continue
        loaded.add(path)
        a = store_config(ctx, path, "runtime" + path, "toml", FILE_LIMIT)
        files.append({"source": path, "path": a.path, "imported_by": parent})
        doc = _toml_or_none(ctx.writer.dir, a.path)
        for imp in cd.str_list((doc or {}).get("imports")):
            pending.extend((p, path) for p in _resolve_import(ctx.root, path, imp))
    return files


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
            store_config(ctx, f"{d.rstrip('/')}/{n}", f"runtime{d.rstrip('/')}/{n}", format_of(n), FILE_LIMIT)
        out.append({"dir": d, "exists": True, "files": specs})
    return out


def _versions(ctx: CollectContext) -> dict:
    """``{key: {"version", "basis"}}`` of :func:`versioned`, each asked of its command on a live node, else
    (or where it does not answer) the node's package database's (``ctx.node``: dpkg's, or rpm's on a node
    without dpkg); systemd's from the node facts."""
    pv, db = ctx.node.package_versions or {}, ctx.node.package_db
    out = {k: _command(ctx, list(v.argv), v.pattern) or _pkg_version(pv, v.packages, db)
           for k, v in versioned().items()}
    return {**out, "systemd": {"version": ctx.node.systemd_version, "basis": ctx.node.systemd_version_basis}}


def _pkg_version(pv: dict, packages: tuple[str, ...], db: str | None) -> dict:
    """``{"version", "basis"}`` from the node's package versions (collectors/node.py) as the database ``db``
    said them (dpkg's status file, or rpm's database; None: older bundles, dpkg's): the first of ``packages``
    installed."""
    n = next((n for n in packages if pv.get(n)), None)
    return {"version": pv.get(n), "basis": f"{db or debstatus.PATH} ({n})" if n else None}


def _command(ctx, argv: list[str], pattern: str) -> dict | None:
    """Run a version command on a live node only (never on a mounted root: the binary would be ours)."""
    if not ctx.live:
        return None
    cmd = shlex.join(argv)
    if ctx.budget_spent(cmd, "command"):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, timeout=ctx.left(10), check=False,
                             stdin=subprocess.DEVNULL).stdout.decode("utf-8", "replace")
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
    pods use; ``systemd_cgroup_basis`` says where it was read, or why it is unknown), ``nvidia_runtime`` (:func:`toolkit_settings`), ``nvidia_runtime_mode`` and
    ``nvidia_runtime_mode_resolved``, ``cdi`` (``{"dirs", "specs": [`` :func:`cdi_spec` ``]}``),
    ``oci_hooks`` (:func:`oci_hook_file`),
    ``proc_devices`` (:func:`nvidia_majors`), ``nvidia_majors``, ``host_devices``, ``dev_char``
    (the names in /dev/char, or None when not listed), ``dev_char_absent`` (True when /dev/char did not exist),
    ``driver_root`` ("/run/nvidia/driver" or "/"), ``driver_root_devices``, ``versions``, and ``stack`` and
    ``engine_cgroup_driver`` (:func:`collectors.runtime_config.engines.read`; both also top-level facts).
    Unparseable files become ``Reading.problems``; nothing here raises for bad content."""
    r = Reading()
    facts = bundle.json(FACTS, r.problems) or {}
    versions = _stored_versions(bundle, facts, node)
    stored = {a.path: a for a in bundle.find("runtime/")}
    ctd = _containerd(bundle, stored, facts, versions, r)
    tk = _toolkit(bundle, stored, facts, versions, ctd, r)
    specs = _dir_files(bundle, stored, facts.get("cdi_dirs"), CDI_DIRS, cdi_spec, r)
    hooks = _dir_files(bundle, stored, facts.get("hooks_dirs"), HOOKS_DIRS, oci_hook_file, r)
    majors = None
    if "runtime/proc/devices" in stored:
        majors = nvidia_majors(bundle.path("runtime/proc/devices").read_text("utf-8", "replace"))
    driver_root = DRIVER_ROOT if (facts.get("driver_root") or {}).get("exists") else "/"
    runtime = {
        "containerd": ctd,
        "systemd_cgroup": (ctd or {}).get("systemd_cgroup"),
        "systemd_cgroup_basis": (f"{(ctd or {}).get('systemd_cgroup_basis')}; read from {', '.join(ctd['files'])}"
                                 if ctd else "unknown: no containerd config could be read"),
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
        # no /dev/char at all (ENOENT at collection): no link exists, rather than "not known"
        "dev_char_absent": facts.get("dev_char") is None and any(
            a.source == "/dev/char" and a.status is Status.ABSENT for a in bundle.artifacts()),
        "driver_root": driver_root,
        "driver_root_devices": facts.get("driver_root_devices") or [],
        "versions": versions,
    }
    runtime["stack"], runtime["engine_cgroup_driver"] = engines.read(bundle, stored, facts.get("stack"), ctd, r)
    r.facts = {"runtime": runtime, "preconditions": {"systemd_cgroup": runtime["systemd_cgroup"]},
               "engine_cgroup_driver": runtime["engine_cgroup_driver"], "stack": runtime["stack"]}
    return r


def _stored_versions(bundle: Bundle, facts: dict, node: NodeFacts) -> dict:
    """The runtime components' versions the collector read, else the package versions of the node facts,
    else (systemd) the node's own."""
    versions = facts.get("versions") or {}
    nf = bundle.manifest.get("node_facts") or {}
    pv = nf.get("package_versions") or {}
    for key, v in versioned().items():
        if not (versions.get(key) or {}).get("version"):
            versions[key] = _pkg_version(pv, v.packages, nf.get("package_db"))
    _unfinished(bundle, versions)
    if not (versions.get("systemd") or {}).get("version"):
        versions["systemd"] = {"version": node.systemd_version, "basis": "node facts" if node.systemd_version else None}
    return versions


def _unfinished(bundle: Bundle, versions: dict) -> None:
    """In place: a component whose version was not seen, whose package dpkg lists as not finished
    (:data:`forensics.debstatus.UNFINISHED`: an install or upgrade stopped between unpacking and configuring),
    gets ``unfinished``: ``{"package", "version", "state"}`` (forensics.versions.gate says it): the files on disk
    may be either version, so the version stays unknown."""
    wanted = {k: v.packages for k, v in versioned().items() if not (versions.get(k) or {}).get("version")}
    if not wanted:
        return
    try:
        with open(bundle.path(debstatus.COPY), "rb") as f:
            found = debstatus.unfinished(f, {n for names in wanted.values() for n in names}, debstatus.LIMIT)
    except OSError:  # not stored (no dpkg on the node, an older bundle): nothing said
        return
    for key, names in wanted.items():
        n = next((n for n in names if n in found), None)
        if n:
            versions[key] = {**(versions.get(key) or {"version": None, "basis": None}),
                             "unfinished": {"package": n, **found[n]}}


def _containerd(bundle: Bundle, stored: dict, facts: dict, versions: dict, r: Reading) -> dict | None:
    """:func:`containerd_settings` of the stored config and its imports, with ``files``; ``None`` when one
    of them did not parse or none was stored."""
    files = facts.get("containerd_files") or [{"source": CONTAINERD_CONFIGS[0],
                                               "path": "runtime" + CONTAINERD_CONFIGS[0]}]
    docs, bad = _tomls(bundle, stored, files, "containerd config", r)
    if not docs or bad:
        return None
    # k3s's and RKE2's config is read by their own embedded containerd: a containerd package's version (or the
    # containerd on PATH) is another binary's, so their defaults go by the config version alone
    embedded = str(files[0].get("source") or "").startswith("/var/lib/rancher/")
    ctd = _settings(containerd_settings, [d for _, d in docs], None if embedded else versions["containerd"]["version"],
                    files, r)
    if ctd is not None:
        ctd["files"] = [s for s, _ in docs]
    return ctd


def _toolkit(bundle: Bundle, stored: dict, facts: dict, versions: dict, ctd: dict | None, r: Reading) -> dict | None:
    """:func:`toolkit_settings` of the toolkit config the runtime reads (the GPU Operator's under
    /usr/local/nvidia when containerd's runtime binary is there), with its ``source``."""
    tk_files = facts.get("toolkit_configs") or [{"source": TOOLKIT_CONFIGS[0], "path": "runtime" + TOOLKIT_CONFIGS[0]}]
    tk_docs, _ = _tomls(bundle, stored, tk_files, "toolkit config", r)
    operator = ((ctd or {}).get("nvidia_binary") or "").startswith("/usr/local/nvidia/")
    tk_docs.sort(key=lambda sd: sd[0].startswith("/usr/local/nvidia/") != operator)  # the one the runtime reads
    if not tk_docs:
        return None
    tk = _settings(toolkit_settings, tk_docs[0][1], versions["nvidia-container-toolkit"]["version"], tk_files, r)
    if tk is not None:
        tk["source"] = tk_docs[0][0]
    return tk


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


