"""The shape of one container engine's entry in the registry (forensics/engines/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Settings:
    """Where an engine keeps its own settings and how they read.

    ``files``: host paths, read in override order; ``drop_ins``: a directory whose files ending in one of
    ``suffixes`` follow them in name order (the first 32; ``None``: no drop-ins); ``fmt``: ``"json"`` or
    ``"toml"``, how each file parses and is redacted (forensics/redact_config.py); ``what``: how a problem
    names them (``"CRI-O config"``); ``parse(docs)``: the parsed documents in override order -> the settings
    the analysis carries as ``stack.<engine>`` (a value of the wrong type counts as unset,
    forensics/configdoc.py); ``driver(settings)`` -> ``(value, said)``: ``"systemd"`` or ``"cgroupfs"`` where
    they set the cgroup driver, ``None`` where they do not (its default applies), and the sentence saying
    which, written after the files' names; ``one_file``: the single file is recorded as one path and named
    by ``source`` (Docker's daemon.json), not as a list named by ``files``; ``shows_engine``: how stack
    recognition cites the files as evidence that the engine runs here (``{files}`` their names), ``None``
    where they show nothing (containers.conf ships with containers-common on CRI-O nodes too)."""

    files: tuple[str, ...]
    fmt: str
    what: str
    parse: Callable[[list], dict]
    driver: Callable[[dict], tuple]
    drop_ins: str | None = None
    suffixes: tuple[str, ...] = ()
    one_file: bool = False
    shows_engine: str | None = None


@dataclass(frozen=True)
class Discovery:
    """How an engine's containers are found on a node; collectors/containers/engines.py walks the roots
    it names (containerd task directories, containers/storage run and graph roots, runc roots).

    ``roots``: ``{kind: default directories}``, a kind being ``"containerd"`` (state dirs holding task
    directories), ``"crio"`` (containers/storage run roots), ``"graph"`` (containers/storage graph roots),
    ``"runc"`` (runc state roots) or ``"docker"`` (Docker data roots); ``commands``: ``{process name: the
    executable names it may run}`` (a trailing ``*`` makes either a prefix: ``containerd-shim*``), the
    processes that may teach a root; ``from_cmdline(name, argv, cwd, where)``: the roots one such
    process's command line (and working directory, or None) names, as ``[(kind, path, source)]``, the kind
    ``"name"`` carrying ``(container id, its name)`` instead of a path; ``from_settings(path, doc)``: the
    same for one parsed file among its :class:`Settings` files and drop-ins and ``also`` (more files, TOML
    or, ending in ``.json``, JSON); ``storage_bundle``: for an engine over containers/storage
    (forensics/engines/storage.py), where the bundle runc runs lies: ``"run"`` (the run root's ``userdata``:
    CRI-O) or ``"graph"`` (the graph root's: Podman); ``pid_file``: the file in its bundle that holds the
    container's pid (containerd's ``init.pid``, CRI-O's ``pidfile``), read when runc's state gives none;
    ``cwd_of``: the process names (as in ``commands``) whose working directory ``from_cmdline`` reads: only
    theirs is read (/proc/PID/cwd), every other process's ``cwd`` is None."""

    roots: dict = field(default_factory=dict)
    commands: dict = field(default_factory=dict)
    from_cmdline: Callable | None = None
    from_settings: Callable | None = None
    also: tuple[str, ...] = ()
    storage_bundle: str | None = None
    pid_file: str | None = None
    cwd_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cdi:
    """How GPU containers move to CDI devices on an engine that starts them by its own command (Docker,
    Podman) rather than through Kubernetes; forensics/findings/stack_remedies.py writes the remedies.

    ``spec_why(settings)``: why a CDI spec is needed first and where this engine looks for it (``settings``:
    the engine's, ``stack.<engine>``, ``{}`` when none was seen); ``steps(settings, hook_users, version)``: what
    follows a spec, in order, each the next step of the one before, as ``{"what", "change": [command lines,
    "# ..." comments], "needs", "breaks", "why"}`` (``hook_users``: what still starts GPU containers
    through the standalone hook, in words; ``version``: the engine's ``{"version", "basis"}`` of the runtime
    facts' ``versions``, None when not read: its gates are said against it, :func:`forensics.versions.gate`); ``run_what``: the name of the step that starts containers with
    CDI devices (the one that relies on the spec: never given while the driver root is unknown)."""

    spec_why: Callable[[dict], str]
    steps: Callable[[dict, list, dict | None], list]
    run_what: str


def flag(argv: list[str], *names: str) -> str | None:
    """The value of the first ``-name X`` / ``--name X`` / ``--name=X`` of ``argv`` (Go flag and urfave/cli
    spellings), ``None`` when absent."""
    for i, a in enumerate(argv):
        for n in names:
            if a in (f"-{n}", f"--{n}") and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith((f"-{n}=", f"--{n}=")):
                return a.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class Version:
    """How an engine's version is read (collectors/runtime_config, the ``versions`` fact): ``argv``, run on a live
    node only (never on a mounted root: the binary would be ours), its answer's ``pattern`` (group 1 is the
    version), and the Debian ``packages`` whose installed version (/var/lib/dpkg/status, collectors/node.py)
    answers where the command cannot be run or does not answer, in order."""

    argv: tuple[str, ...]
    pattern: str
    packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Engine:
    """One container engine, as data.

    ``name``: as container records, stacks and remedies carry it (``"podman"``); ``title``: as a sentence
    writes it (``"Podman"``); ``scope_prefix``: of its containers' systemd scopes (``"libpod"``);
    ``cgroup_default``: ``{cgroup version (1, 2) or None (either): (driver, why)}``, the driver it uses when
    its setting is not given, with the upstream source; ``cgroup_setting``: where that setting lives, in
    words; ``marker``: a spec annotation ``(key, value)`` only this engine writes (``None``: none is
    decisive); ``pod_annotations``: ``(pod, namespace, container)`` annotation keys naming the Kubernetes
    pod of a container it runs (empty: it runs no pods); ``settings``: its own settings
    files (:class:`Settings`; ``None``: read elsewhere, containerd's by collectors/runtime_config/parse.py);
    ``discovery``: how its containers are found (:class:`Discovery`); ``cdi``: how its GPU containers move to
    CDI devices by its own command (:class:`Cdi`; ``None``: through Kubernetes and the device plugin);
    ``cri_runtime``: the scheme of the Node's ``status.nodeInfo.containerRuntimeVersion`` when the kubelet
    runs on it (``"cri-o://"``); ``namespace``: the containerd namespace whose containers are its own
    (Docker's ``moby``, the CRI plugin's ``k8s.io``); ``scope_decides``: a container in its scope is its own
    (False where others use the prefix too: containerd's ``cri-containerd-`` is k3s's and RKE2's, runc's
    ``runc-`` any runc caller's); ``hook_user``: its containers that carry the standalone
    nvidia-container-runtime-hook in their spec use that hook themselves (False for containerd, whose hooked
    containers come from nvidia-container-runtime's legacy mode, judged by the runtime's mode); ``daemon``:
    ``(its systemd unit, its process's command name)`` when it runs as a daemon, whose own journal lines may
    carry the NVML errors of the containers it starts (collectors/journal); ``version``: how its version is read
    (:class:`Version`; its remedies' gates are said against it, :func:`forensics.versions.gate`)."""

    name: str
    title: str
    scope_prefix: str
    cgroup_default: dict = field(default_factory=dict)
    cgroup_setting: str = ""
    marker: tuple[str, str] | None = None
    pod_annotations: tuple[str, ...] = ()
    settings: Settings | None = None
    discovery: Discovery = field(default_factory=Discovery)
    cdi: Cdi | None = None
    cri_runtime: str | None = None
    namespace: str | None = None
    scope_decides: bool = True
    hook_user: bool = True
    daemon: tuple[str, str] | None = None
    version: Version | None = None

    def default_driver(self, version: int | None) -> tuple[str, str] | None:
        """``(driver, why)`` for cgroup ``version`` (1, 2 or None: unknown); None when the default depends
        on a version that is unknown."""
        return self.cgroup_default.get(None) or self.cgroup_default.get(version)
