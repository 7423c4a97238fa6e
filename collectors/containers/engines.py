"""Where each engine keeps its containers' on-disk spec and runc state, learnt from the node itself.

:func:`discover` lists, under ``--root`` and without reading a spec, every container it can find, as
:class:`Found` entries (one per container: the same id met through two paths is one entry, with both
paths in ``via``), and the runc roots, containerd state dirs and CRI-O run roots it looked in, each with
how it was learnt (:func:`roots_record`, stored as ``containers/roots.json``).

The roots come from the registry (forensics/engines): each engine's ``Discovery`` names its default roots,
the processes that may teach more and what their command lines and its settings files name; this module
walks the layouts those roots hold. Layouts (docs/sources.md "GPU stacks" 6 Docker, 7 CRI-O; "Container
engine layouts"):

- containerd: ``<state>/io.containerd.runtime.v2.task/<namespace>/<id>/`` (and the v1 shim's
  ``io.containerd.runtime.v1.linux``), for the state dirs /run/containerd, /run/k3s/containerd,
  dockerd's own ``/run/docker/containerd/daemon`` (moby daemon/command/daemon.go, ``<exec-root>/
  containerd/daemon``), the collector's ``containerd_state_dirs``, ``containerd --state X`` and the
  working directory of each ``containerd-shim*`` process (the shim runs in its task's bundle directory);
  engine ``docker`` for the namespace ``moby`` (moby daemon/config ``DefaultContainersNamespace``),
  ``containerd`` for every other namespace (CRI ``k8s.io``, k3s/RKE2, ``default``...);
- CRI-O: ``<runroot>/<driver>-containers/<id>/userdata/config.json`` (containers/storage store.go
  ``filepath.Join(s.RunRoot(), middleDir, id, "userdata")``), run root ``/run/containers/storage`` by
  default, ``[crio] runroot`` of crio.conf(.d), ``[storage] runroot`` of /etc/containers/storage.conf or
  ``crio --runroot``; its runc state is under the runtime's ``runtime_root`` (crio.conf
  ``[crio.runtime.runtimes.<name>] runtime_root``, /run/runc by default);
- runc: ``<root>/<id>/state.json`` or ``<root>/<namespace>/<id>/state.json`` (the containerd shims run
  runc with ``--root <Root>/<namespace>``), for the roots /run/runc, /run/containerd/runc,
  /run/docker/runtime-runc, the ``--root`` of every live ``runc`` (or runtime wrapping runc) command
  line, the v1 ``containerd-shim -runtime-root``, conmon's ``--runtime-arg --root=X`` (``-r`` is conmon's
  runtime binary, not a root), ``dockerd --exec-root X`` (``X/runtime-runc``), CRI-O's
  ``runtime_root`` and the ``Root`` of each containerd task's ``options.json``. A container found only
  here gets its engine from the bundle path its state.json names (:func:`engine_of_bundle`).

A process teaches a root only when it is root's (uid 0 in all four ``Uid:`` fields of ``/proc/PID/status``; the
owner of ``/proc/PID`` is not enough: a non-dumpable process's files show root) and its executable (the
``/proc/PID/exe`` link's text, read as a link, never followed) is the engine's own binary
(its engine's ``Discovery.commands``): any local user can start a process named ``runc --root DIR`` over a directory of forged
state.json files (issue 27). Every process passed over is in ``ignored`` with the reason.

Every read goes through :mod:`forensics.hostfs` (no link followed out of ``--root``) and is bounded;
nothing is written on the host.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from forensics import configdoc, hostfs
from forensics.engines import ENGINES, containerd, namespace_owner, storage


CONTAINERD_STATE_DIRS, TASK_DIRS = containerd.STATE_DIRS, containerd.TASK_DIRS
CMDLINE_LIMIT = 64 << 10
CONF_LIMIT = 1 << 20
MAX_PROCS = 65536
#: seconds discovery may go on listing (reading no file) once the time budget is spent, so that the containers
#: it then cannot read are still counted and named (``containers/not-read.json``)
LIST_GRACE_S = 0.5


@dataclass
class Found:
    """One container met on disk. ``kind`` says where it was first met: ``"containerd"`` (a task
    directory; ``bundle`` is it), ``"crio"`` (a CRI-O userdata directory; ``bundle`` is it), ``"podman"`` (a
    containers/storage container whose spec is in a graph root's userdata; ``bundle`` is that) or
    ``"runc"`` (only a runc state; the bundle comes from its state.json). ``states``: the runc
    state.json paths to try, in order; ``via``: how it was found, one line per path."""

    kind: str
    namespace: str
    id: str
    bundle: str | None = None
    state_dir: str | None = None
    states: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)
    options: object = None  #: containerd's options.json, parsed once (None: not read or not there)


@dataclass
class Roots:
    """Where to look, each path with how it was learnt: ``{path: [source, ...]}``. Paths are kept as the
    host path they resolve to under ``root`` (``/var/run/x`` is ``/run/x`` on a node where /var/run links
    to /run), so that one directory named two ways is looked in once."""

    root: str = "/"
    containerd: dict[str, list[str]] = field(default_factory=dict)
    crio: dict[str, list[str]] = field(default_factory=dict)
    runc: dict[str, list[str]] = field(default_factory=dict)
    docker: dict[str, list[str]] = field(default_factory=dict)  #: Docker data roots (config.v2.json)
    graph: dict[str, list[str]] = field(default_factory=dict)  #: containers/storage graph roots (Podman's bundles)
    ignored: list[str] = field(default_factory=list)  #: processes not learnt from, each with why
    #: container id -> (its name, where it was read): conmon's ``-n`` (Podman and CRI-O name no container in
    #: the spec; the engine's database is not read)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)

    def canon(self, path: str) -> str:
        """``path`` (absolute) as the host path it resolves to under ``root`` (:func:`forensics.hostfs.resolve`),
        normalised; the path itself when it cannot be resolved."""
        try:
            real = os.fspath(hostfs.resolve(self.root, path))
        except OSError:
            return os.path.normpath(path)
        base = os.path.abspath(self.root).rstrip("/")
        return "/" + real[len(base):].lstrip("/") if real.startswith(base) else os.path.normpath(path)

    def add(self, kind: str, path, source: str) -> str | None:
        """Add ``path`` (absolute) to the ``kind`` table with ``source`` and return the path kept (see
        :meth:`canon`; the source names the original spelling when it differs); other values are ignored."""
        if not (isinstance(path, str) and path.startswith("/") and "\0" not in path):
            return None
        kept = self.canon(path)
        if kept != os.path.normpath(path):
            source = f"{source} ({path})"
        sources = getattr(self, kind).setdefault(kept, [])
        if source not in sources:
            sources.append(source)
        return kept

    def learn(self, found) -> None:
        """Add each ``(kind, path, source)`` of an engine's :class:`forensics.engines.engine.Discovery` hook;
        the kind ``"name"`` carries ``(container id, name)`` into :attr:`names` (the first one kept)."""
        for kind, value, source in found:
            if kind == "name":
                self.names.setdefault(value[0], (value[1], source))
            else:
                self.add(kind, value, source)


def engine_of_namespace(ns: str) -> str:
    """The engine whose containers a containerd namespace holds: the one that owns it (``Engine.namespace``:
    Docker's ``moby``), else containerd (CRI's ``k8s.io``, k3s/RKE2, ``default``, nerdctl's...)."""
    return namespace_owner(ns) or containerd.ENGINE.name


def engine_of_bundle(bundle: str | None) -> tuple[str, str | None]:
    """``(engine, containerd namespace | None)`` from the shape of a bundle path runc recorded: a
    containerd task directory (the engine that owns its namespace, ``docker`` for ``moby``; containerd for
    any other), a containers/storage userdata directory (the run-root engine's, CRI-O: a Podman spec names
    its engine itself), else ``("runc", None)``."""
    m = containerd.TASK_PATH.match(os.path.normpath(bundle)) if isinstance(bundle, str) and bundle.startswith("/") else None
    if m:
        return engine_of_namespace(m["ns"]), m["ns"]
    if isinstance(bundle, str) and storage.USERDATA_PATH.match(os.path.normpath(bundle)):
        return storage_engines("run")[0].name, None
    return "runc", None


def _claims(name: str) -> list:
    """The engines whose :attr:`Discovery.commands <forensics.engines.engine.Discovery.commands>` name process
    ``name``, each with the executable names it may run: ``[(engine, (exe, ...))]``."""
    return [(e, exes) for e in ENGINES.values() for cmd, exes in e.discovery.commands.items() if _named(name, cmd)]


def _named(name: str, pattern: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def roots_from_cmdline(argv: list[str], cwd: str | None, where: str, roots: Roots) -> None:
    """Learn roots from one process's command line (``argv``) and working directory (``cwd``, the target
    of /proc/<pid>/cwd or None) through every engine that claims its command name (its
    ``Discovery.from_cmdline``); ``where`` names the process in each source line."""
    if not argv:
        return
    name = argv[0].rsplit("/", 1)[-1]
    for e, _ in _claims(name):
        if e.discovery.from_cmdline:
            roots.learn(e.discovery.from_cmdline(name, argv, cwd, where))


def untrusted(root, pid: str, name: str) -> str | None:
    """Why process ``pid`` (its command name ``name``) under ``<root>/proc`` may not teach a root, or
    ``None`` when it may: uid 0 in all four ``Uid:`` fields of /proc/PID/status (proc(5), as for the
    kubelet: collectors/kubelet/host.py) and an executable
    (the text of the /proc/PID/exe link, `` (deleted)`` dropped) that an engine claiming ``name`` names
    (``Discovery.commands``: ``containerd-shim*`` must run a ``containerd-shim*`` binary)."""
    try:
        status = hostfs.read_text(root, f"/proc/{pid}/status", limit=CMDLINE_LIMIT)
        exe = hostfs.readlink(root, f"/proc/{pid}/exe")
    except OSError as e:
        return f"its owner or executable cannot be read ({os.strerror(e.errno) if e.errno else e})"
    uids = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), None)
    if not uids or any(u != "0" for u in uids):
        return f"it runs as uids {' '.join(uids) if uids else 'unknown'} (real, effective, saved, fs), not root"
    base = (exe or "").removesuffix(" (deleted)").rsplit("/", 1)[-1]
    if not any(_named(base, x) for _, exes in _claims(name) for x in exes):
        return f"its executable is {ascii(exe)}, not {name}'s binary"
    return None


def _proc_roots(root, roots: Roots, expired) -> None:
    """:func:`roots_from_cmdline` for every process under ``<root>/proc``, at most :data:`MAX_PROCS`, whose
    command an engine claims (``Discovery.commands``) and that :func:`untrusted` passes; its working directory
    only where a claiming engine reads it (``Discovery.cwd_of``)."""
    try:
        pids = [p for p in hostfs.listdir(root, "/proc") if p.isdigit()][:MAX_PROCS]
    except OSError:
        return
    for pid in pids:
        if expired():
            return
        try:
            with hostfs.open_regular(root, f"/proc/{pid}/cmdline") as f:
                raw = hostfs.read_upto(f, CMDLINE_LIMIT)
        except OSError:
            continue  # gone, or a kernel thread's empty file
        argv = [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")]
        while argv and argv[-1] == "":
            argv.pop()
        name = argv[0].rsplit("/", 1)[-1] if argv else ""
        claims = _claims(name)
        if not claims:
            continue
        why = untrusted(root, pid, name)
        if why:
            roots.ignored.append(f"/proc/{pid} ({ascii(name)[1:-1]}): {why}; no root learnt from it")
            continue
        cwd = None
        if any(_named(name, c) for e, _ in claims for c in e.discovery.cwd_of):  # a shim's: its task's bundle
            try:
                cwd = hostfs.readlink(root, f"/proc/{pid}/cwd")
            except OSError:
                pass
        roots_from_cmdline(argv, cwd, f"/proc/{pid}/cmdline", roots)


def _settings_roots(root, roots: Roots) -> None:
    """The roots each engine's files name (``Discovery.from_settings`` over its :class:`Settings` files, their
    drop-ins in name order, and ``Discovery.also``), each file read once, bounded; one that cannot be read
    or parsed names nothing (the runtime_config collector stores and reports these files; here they only name
    directories to look in)."""
    docs: dict = {}
    for e in ENGINES.values():
        hook, spec = e.discovery.from_settings, e.settings
        if not hook:
            continue
        files = list(spec.files) if spec else []
        if spec and spec.drop_ins:
            files += [f"{spec.drop_ins}/{n}" for n in sorted(_list(root, spec.drop_ins)) if n.endswith(spec.suffixes)]
        for path in files + list(e.discovery.also):
            if path not in docs:
                docs[path] = _doc(root, path)
            if docs[path] is not None:
                roots.learn(hook(path, docs[path]))


def _doc(root, path: str) -> dict | None:
    """A settings file under root, parsed (:func:`forensics.configdoc.parse`: JSON when its name ends in
    ``.json``, else TOML); None when it cannot be read, is over :data:`CONF_LIMIT`, does not parse or is
    not a table."""
    try:
        text = hostfs.read_text(root, path, limit=CONF_LIMIT)
    except OSError:
        return None
    return configdoc.parse(text, "json" if path.endswith(".json") else "toml")[0]


def _list(root, path: str) -> list[str]:
    try:
        return [n for n in hostfs.listdir(root, path) if n not in ("", ".", "..")]
    except OSError:
        return []


class Inventory:
    """The containers found so far, one :class:`Found` per container (same id through two paths: one)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.found: list[Found] = []
        self.by_id: dict[str, list[Found]] = {}
        self.full = False
        #: why discovery stopped early (the time budget), or None: containers past that point are not counted
        self.cut: str | None = None

    def stop(self, ctx, where: str) -> bool:
        """True (and :attr:`cut` set, once) when the time budget and :data:`LIST_GRACE_S` after it are spent;
        ``where`` names what is left unlisted."""
        if ctx.deadline is None or time.monotonic() < ctx.deadline + LIST_GRACE_S:
            return False
        self.cut = self.cut or (f"truncated: the time budget (--time-budget) was spent while looking for containers; "
                                f"{where} not listed, so containers found only there are not counted")
        return True

    def add(self, f: Found) -> Found | None:
        """Add ``f`` unless the limit is reached (then ``full`` is set); returns it, or ``None``."""
        if len(self.found) >= self.limit:
            self.full = True
            return None
        self.found.append(f)
        self.by_id.setdefault(f.id, []).append(f)
        return f

    def match(self, cid: str, namespace: str | None) -> Found | None:
        """The entry already held for ``cid``: the one in ``namespace`` when given, else the only one."""
        have = self.by_id.get(cid) or []
        same = [f for f in have if namespace is None or f.namespace == namespace]
        return same[0] if len(same) == 1 or (same and namespace) else None


def discover(ctx, extra_state_dirs, read_options, limit: int) -> tuple[Inventory, Roots]:
    """Every container on disk (module docstring), in the order containerd task dirs, CRI-O userdata
    dirs, runc roots. ``extra_state_dirs``: containerd state dirs from the collector's option;
    ``read_options(found)``: reads and stores a containerd task's options.json, returning the parsed
    object (its ``Root`` becomes a runc root). Raises nothing for what cannot be listed."""
    roots = Roots(os.fspath(ctx.root))
    for e in ENGINES.values():
        for kind, dirs in e.discovery.roots.items():
            for d in dirs:
                roots.add(kind, d, "default")
    for d in extra_state_dirs:
        roots.add("containerd", str(d), "collector option containerd_state_dirs")
    _settings_roots(ctx.root, roots)
    _proc_roots(ctx.root, roots, ctx.expired)
    inv = Inventory(limit)
    for state_dir in list(roots.containerd):
        for task_dir in TASK_DIRS:
            base = f"{state_dir}/{task_dir}"
            for ns in _list(ctx.root, base):
                for cid in ctx.listdir(f"{base}/{ns}") or []:
                    if cid in ("", ".", "..") or inv.match(cid, ns) is not None:
                        continue
                    f = inv.add(Found("containerd", ns, cid, f"{base}/{ns}/{cid}", state_dir,
                                      via=[f"containerd task directory {base}/{ns}/{cid}"]))
                    if f is None:
                        return inv, roots
                    if ctx.expired():
                        continue  # listed, so that it is counted as not read; its options.json is not read
                    f.options = read_options(f)
                    r = f.options.get("root") or f.options.get("Root") if isinstance(f.options, dict) else None
                    r = roots.add("runc", r, f"options.json Root of {ns}/{cid}")
                    f.states += [f"{x}/{ns}/{cid}/state.json" for x in
                                 dict.fromkeys(x for x in (r, roots.canon(f"{state_dir}/runc")) if x)]
    for runroot in roots.crio:
        if inv.stop(ctx, "CRI-O run roots and runc roots"):
            return inv, roots
        for middle in [n for n in _list(ctx.root, runroot) if n.endswith("-containers")]:
            for cid in _list(ctx.root, f"{runroot}/{middle}"):
                userdata = f"{runroot}/{middle}/{cid}/userdata"
                if inv.match(cid, None) is not None or not hostfs.exists(ctx.root, userdata):
                    continue
                if inv.add(_storage_container(ctx.root, roots, middle, cid, userdata)) is None:
                    return inv, roots
    _scan_runc_roots(ctx, roots, inv)
    return inv, roots


def storage_engines(where: str | None = None) -> list:
    """The engines over containers/storage (``Discovery.storage_bundle``), or those whose bundle lies
    ``where`` (``"run"``, ``"graph"``), in the registry's order."""
    return [e for e in ENGINES.values() if e.discovery.storage_bundle and where in (None, e.discovery.storage_bundle)]


def _storage_container(root, roots: Roots, middle: str, cid: str, userdata: str) -> Found:
    """A container met in a containers/storage run root: the run-root engine's (CRI-O) when that
    ``userdata`` holds the spec (its bundle); a graph-root engine's (Podman, which runs its containers from
    the graph root's static directory: forensics/engines/podman.py) when the spec is in the same place under
    a graph root instead; else the run-root engine's, whose spec is then recorded as absent."""
    if not hostfs.exists(root, f"{userdata}/config.json"):
        for e in storage_engines("graph"):
            for graph in roots.graph:
                static = f"{graph}/{middle}/{cid}/userdata"
                if hostfs.exists(root, f"{static}/config.json"):
                    return Found(e.name, e.name, cid, static, via=[
                        f"containers/storage run root {userdata}", f"{e.title} bundle {static} (graph root {graph})"])
    run = storage_engines("run")[0]
    return Found(run.name, run.name, cid, userdata, via=[f"{run.title} userdata {userdata}"])


def _scan_runc_roots(ctx, roots: Roots, inv: Inventory) -> None:
    """Add each ``<root>/<id>/state.json`` and ``<root>/<ns>/<id>/state.json`` to the entry of that id (in
    front of its own guesses: it is where runc is), or as a new runc entry."""
    for runc_root, how in roots.runc.items():
        for name in _list(ctx.root, runc_root):
            if inv.stop(ctx, f"runc root {runc_root} (from {name} on) and the roots after it"):
                return
            if hostfs.exists(ctx.root, f"{runc_root}/{name}/state.json"):
                hits = [(None, name, f"{runc_root}/{name}/state.json")]
            else:  # a namespace directory: <root>/<ns>/<id>/state.json
                hits = [(name, cid, f"{runc_root}/{name}/{cid}/state.json")
                        for cid in _list(ctx.root, f"{runc_root}/{name}")
                        if hostfs.exists(ctx.root, f"{runc_root}/{name}/{cid}/state.json")]
            for ns, cid, state in hits:
                f = inv.match(cid, ns)
                line = f"runc state {state} (root {runc_root}: {'; '.join(dict.fromkeys(how))})"
                if f is None:
                    f = inv.add(Found("runc", ns or "runc", cid, via=[]))
                    if f is None:
                        return
                if state in f.states:  # a guess of its own (options.json Root): now seen to be there
                    f.states.remove(state)
                f.states.insert(0, state)
                if line not in f.via:
                    f.via.append(line)


def roots_record(roots: Roots) -> dict:
    """``containers/roots.json``: ``{"containerd_state_dirs"|"crio_runroots"|"graph_roots"|"runc_roots": [{"path",
    "sources": [str]}], "ignored_processes": [str]}``: where the collector looked, and why, and the
    engine-named processes it did not learn from (:func:`untrusted`)."""
    def rows(d):
        return [{"path": p, "sources": list(dict.fromkeys(s))} for p, s in d.items()]
    return {"containerd_state_dirs": rows(roots.containerd), "crio_runroots": rows(roots.crio),
            "graph_roots": rows(roots.graph), "runc_roots": rows(roots.runc), "ignored_processes": list(roots.ignored)}
