"""The collector contract: how to add an evidence source. Read this module, then copy a small collector
(``collectors/node.py``, ``collectors/kube``).

A collector is a module (or package) in ``collectors/`` listed once in ``collectors.COLLECTORS`` (in
acquisition order). It defines four names (and may define ``WINDOWED`` and ``begin``, below):

``NAME``
    The source's name (``"journal"``), used in progress notes and in the ``collector:NAME`` record
    written when it fails or is not reached.
``OPTIONS``
    A list of :class:`Option`: its command-line options as data (sos's ``PluginOpt`` idea). The CLI
    builds the ``collect``/``run`` flags from every collector's OPTIONS (``forensics/ops/cli.py``);
    the collector reads this run's value with ``ctx.value(OPTION)``, never from ``sys.argv``. An
    Option with ``flag=None`` is a knob for programs and tests only (a lab's containerd state dir).
``acquire(ctx: CollectContext) -> None``
    Host -> bundle. Read the host only through :mod:`forensics.hostfs` (under ``ctx.root``, never
    following the host's symlinks out of it), never write to it, and record every artifact with its
    status through ``ctx.writer`` (:class:`forensics.bundle.BundleWriter`): ``copy``/``write_json``/
    ``create`` record what was stored; ``record(Artifact(...))`` what was absent, unreadable (with its
    errno) or truncated. Raise nothing for bad input: a failure is evidence too. An exception that
    escapes is recorded by the pipeline as an ``error`` artifact and the other collectors still run.
``read(bundle, node: forensics.events.NodeFacts) -> Reading``
    Bundle -> :class:`Reading` (events, coverage, facts, problems), from the stored copies only, never
    from the host. Give facts; never judge (verdicts belong to ``forensics/findings``). Read a JSON
    file of the bundle with ``bundle.json(rel, reading.problems)`` (:meth:`forensics.bundle.Bundle.json`).

Two more names are optional:

``WINDOWED = True``
    ``read`` also takes ``windows``: the incident windows the analysis opened from every other source
    (UTC ``(start, end)`` pairs), and makes events only of what may fall near them (within
    :data:`forensics.timeutil.WINDOW_REACH`); what lies farther is counted, and its times still bound the
    coverage (issue 30: 100,000 dpkg.log lines of a long-lived node for a few hundred the windows need).
    ``read(bundle, node)`` still reads everything (``gpu-forensics timeline``, ``fleet``). Only
    :mod:`collectors.packages` is windowed; its lines open no incident.
``begin(ctx: CollectContext) -> Callable[[], None] | None``
    :func:`acquire` in two steps, for a source slow enough to read in a child process while the
    collectors after it run here (both cores busy): start the work and return the call that waits for
    it and records the rest, or None when there is nothing to wait for. The pipeline
    (:func:`forensics.ops.pipeline.collect`) calls ``begin`` instead of ``acquire`` for the first
    collector that has it, calls what it returned once the others are done (or when interrupted: a
    second interruption stops the child), and puts the manifest records it made where its turn was.
    The work must run on its own copy of ``ctx`` and write only its own files. ``acquire`` stays the
    whole thing in one call (``begin`` and then the returned call). Only :mod:`collectors.journal` has
    one (:func:`collectors.journal.begin`).

Budgets: the run has one time budget (``--time-budget``). Check ``ctx.expired()`` between files or
requests; once it is true stop, and record what was not read as ``truncated`` with a note that says
so. ``ctx.deadline`` (a ``time.monotonic()`` value or None) is there for loops that pass it down.

Redaction: unless ``--no-redact``, ``ctx.redact`` is true and secret values are replaced before they
are stored, with the functions of :mod:`forensics.redact` (``redact_bytes`` for logs,
``redact_spec`` for OCI specs, ``redact_text``...). Say in the artifact's notes what was redacted.

Facts learnt while acquiring and needed by a later collector travel on the context, typed:
``ctx.node`` (:class:`HostFacts`, filled by the node collector, which runs first; the manifest's
``node_facts``) and ``ctx.gpu_containers`` (:class:`GpuContainer`, filled by the containers
collector, read by podlogs). Add a field here rather than reading another collector's files from the
bundle being written. Collectors import only this core (``forensics.*`` below ``findings``/``ops``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypedDict

from . import hostfs
from .artifact import Artifact, Status, from_oserror
from .bundle import BundleWriter
from .events import Coverage, Event, NodeFacts


@dataclass(frozen=True)
class Option:
    """One option of a collector, as data; the CLI turns it into an ``argparse`` argument.

    ``flag`` is the command-line spelling (``"--since"``; None: not on the command line, set by
    programs only); ``dest`` the key of its value in ``CollectContext.options``; ``help`` and
    ``metavar`` as argparse shows them; ``action`` ``"store_true"`` or ``"append"`` (else one value,
    converted by ``type``); ``default`` the value when not given (``()`` for an ``append`` option);
    ``choices`` the allowed values.

    ``check(value, values) -> value`` validates a value given on the command line and converts it for
    the collector (``values`` holds every option's raw value, for checks that need another option);
    it raises ``ValueError`` with the message the CLI prints as a usage error. It is not called for
    an option left at its default.

    ``record`` says what the manifest's ``options`` section keeps of this option: None (nothing),
    True (the value itself) or a function of the value (e.g. a URL without its credentials).
    """

    flag: str | None
    dest: str
    help: str
    metavar: str | None = None
    action: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple | None = None
    check: Callable[[Any, Mapping[str, Any]], Any] | None = None
    record: bool | Callable[[Any], Any] | None = None


def option_values(options: list[Option], given: Mapping[str, Any], *, checked: bool = False) -> dict[str, Any]:
    """``{dest: value}`` for every option of ``options``: the value in ``given``, else its default.

    With ``checked`` (values from the command line), each given non-default value goes through the
    option's ``check``, in ``options`` order; its ``ValueError`` propagates. Raises ``ValueError``
    for a key of ``given`` that no option declares (a misspelt name)."""
    known = {o.dest for o in options}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"no collector declares the option(s) {', '.join(unknown)}")
    out = {o.dest: given.get(o.dest, o.default) for o in options}
    if checked:
        for o in options:
            if o.check is not None and out[o.dest] != o.default and out[o.dest] is not None:
                out[o.dest] = o.check(out[o.dest], out)
    return out


def recorded_options(options: list[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's ``options`` entries of ``options`` (those with ``record``), from ``values``."""
    out = {}
    for o in options:
        if o.record:
            v = values.get(o.dest, o.default)
            out[o.dest] = v if o.record is True else o.record(v)
    return out


@dataclass
class HostFacts:
    """What the node collector learnt about the host while acquiring (the manifest's ``node_facts``).

    ``hostname`` is the first line of /etc/hostname; ``hostname_override`` the ``--node`` name (set by
    the pipeline before any collector runs); ``tz_name`` the IANA zone and ``tz_source`` where it came
    from (which file said the name, and which TZif gave the rules; bundles before it said ``tz_basis``);
    ``boot_time`` ISO UTC (/proc/stat btime); ``utc_offset`` ``"+0900"`` at collection time;
    ``package_versions`` ``{package: version}`` and ``package_db``, the database that said them (dpkg's status
    file, or rpm's database on a node without dpkg); ``systemd_version`` and its ``_basis`` (which command or
    file said so). None: not known."""

    hostname_override: str | None = None
    hostname: str | None = None
    tz_name: str | None = None
    tz_source: str | None = None
    boot_id: str | None = None
    kernel: str | None = None
    boot_time: str | None = None
    utc_offset: str | None = None
    package_versions: dict[str, str] = field(default_factory=dict)
    package_db: str | None = None
    systemd_version: str | None = None
    systemd_version_basis: str | None = None

    @property
    def name(self) -> str | None:
        """The node's name as recorded: ``--node``, else the host name."""
        return self.hostname_override or self.hostname

    def manifest(self) -> dict:
        """The manifest's ``node_facts`` section (``hostname_override`` only when ``--node`` was given)."""
        d = dict(vars(self))
        if d["hostname_override"] is None:
            del d["hostname_override"]
        return d


@dataclass(frozen=True)
class GpuContainer:
    """A container the containers collector found to hold or ask for a GPU (``parse.is_gpu``): its
    Kubernetes identity from the CRI annotations (None when not a pod's) and its runtime id."""

    pod_namespace: str | None
    pod: str | None
    container_name: str | None
    id: str


#: the message of a source not read because the time budget was spent (:meth:`CollectContext.budget_spent`)
NOT_READ = "not read: the time budget (--time-budget) was spent"


@dataclass
class CollectContext:
    """What a collector's ``acquire(ctx)`` gets.

    ``root`` is the host's root as this process sees it (``/`` on the node, ``/host`` in a pod);
    ``writer`` the bundle being written; ``deadline`` the ``time.monotonic()`` value after which
    collectors stop reading and mark what they hold truncated (None: no budget); ``redact`` whether
    secret values are redacted (``--no-redact`` clears it); ``log`` takes progress notes;
    ``options`` the values of the collectors' :class:`Option` s, keyed by ``dest`` (read them with
    :meth:`value`; a missing key is the option's default). ``node`` and ``gpu_containers`` are the
    typed facts handed from one collector to the next (module docstring).
    """

    root: Path
    writer: BundleWriter
    deadline: float | None = None
    redact: bool = True
    log: Callable[[str], None] = lambda msg: None
    options: dict[str, Any] = field(default_factory=dict)
    node: HostFacts = field(default_factory=HostFacts)
    gpu_containers: list[GpuContainer] = field(default_factory=list)

    def value(self, option: Option) -> Any:
        """This run's value of ``option``: ``options[option.dest]``, else ``option.default``."""
        return self.options.get(option.dest, option.default)

    def listdir(self, path: str, *, record_absent: bool = True) -> list[str] | None:
        """The names in the host directory ``path`` (under ``root``, :func:`forensics.hostfs.listdir`), or
        ``None`` when it cannot be listed; the failure is recorded as an artifact (absent, unreadable
        with its errno, or error: :func:`forensics.artifact.from_oserror`), an absent directory only
        with ``record_absent``. Raises nothing."""
        try:
            return hostfs.listdir(self.root, path)
        except OSError as e:
            a = from_oserror(path, "listdir", e)
            if record_absent or a.status is not Status.ABSENT:
                self.writer.record(a)
            return None

    def expired(self) -> bool:
        """True once the run's time budget (``--time-budget``) is spent."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def left(self, cap: float) -> float:
        """Seconds a wait (a child, a read that can block) may still take: ``cap``, or what is left of the
        run's time budget when that is less (0.0 once it is spent)."""
        return cap if self.deadline is None else max(0.0, min(cap, self.deadline - time.monotonic()))

    def budget_spent(self, source: str, method: str = "copy") -> Artifact | None:
        """Call before reading the host source ``source``: ``None`` while the time budget lasts; once it is
        spent, ``source`` is recorded as ``truncated`` with the message :data:`NOT_READ` (which
        ``forensics.ops.pipeline.budget_cuts`` lists as cut by the budget), so that it is never silently
        missing, and that record is returned (true: skip the read)."""
        if not self.expired():
            return None
        return self.writer.record(Artifact(None, source, Status.TRUNCATED, method, message=NOT_READ))

    def copy(self, source: str, rel: str, method: str = "copy", **kw) -> Artifact:
        """:meth:`forensics.bundle.BundleWriter.copy` of the host file ``source`` (under ``root``) to ``rel``
        (``kw``: its ``limit``, ``transform``, ``tail``...) while the time budget lasts; once it is spent the
        file is not read, and the :meth:`budget_spent` record is returned instead."""
        return self.budget_spent(source, method) or self.writer.copy(self.root, source, rel, method, **kw)


    @property
    def live(self) -> bool:
        """True when collecting from the running host itself (``--root /``)."""
        return os.path.realpath(self.root) == "/"


class Facts(TypedDict, total=False):
    """The facts a collector's ``read()`` may give (``Reading.facts``), each key with its one producer.

    This is the one list of them: a key not declared here is refused by ``read_all``
    (``forensics.ops.pipeline``), so that findings never read a fact nobody documented. Add a key here,
    with its producer and shape, when a collector gives a new one.
    """

    #: collectors.runtime_config: containerd / toolkit / CDI / OCI-hook settings, /dev and /dev/char, versions
    runtime: dict
    #: collectors.runtime_config: ``{"systemd_cgroup": True | False | None}`` (None: unknown)
    preconditions: dict
    #: collectors.runtime_config: ``{engine: {"value": "systemd"|"cgroupfs"|None, "source": str}}`` for each engine
    #: (containerd, docker, crio) whose config the node showed; None: the config does not set it (a default)
    engine_cgroup_driver: dict
    #: collectors.runtime_config: Docker / CRI-O / k3s / Bottlerocket / GPU Operator / HAMi signs
    #: (:func:`collectors.runtime_config.engines.read`)
    stack: dict
    #: collectors.containers: one record per container (the record.json shape of collectors/containers)
    containers: list
    #: collectors.containers: the kubelet directory a real device plugin's socket mount must reach
    device_plugin_dir: str
    #: collectors.journal: the systemd version read from the journal, and where it was read
    systemd_version: str | None
    systemd_version_basis: str | None
    #: collectors.journal: ``[{boot_id, first, last}]`` and the first/last entry held (ISO UTC)
    boots: list
    journal_first: str | None
    journal_last: str | None
    #: collectors.packages: package -> ISO UTC of its last change in dpkg.log; events per log; how many
    #: packages ship systemd units (None: unknown)
    packages_last_change: dict
    package_event_counts: dict
    #: collectors.packages read for windows: ``{log: lines}`` outside every window, counted and not made events
    package_lines_outside_windows: dict
    packages_with_unit_scripts: int | None
    #: collectors.node: ``{package: version}`` from dpkg/rpm status
    package_versions: dict
    #: collectors.podlogs: per GPU container log, the first error, last healthy and last line
    podlogs: list
    #: collectors.metrics: retention, DCGM last-seen, capacity changes, alert rules, series (no judgement)
    metrics: dict
    #: collectors.kube: the node, its GPU pods, the device plugin DaemonSets, events (read-only API answers)
    kube: dict
    #: collectors.nvidia_host: the host's driver state read from files that touch no GPU (the loaded module's
    #: version, the user-space libraries and packages, the NVIDIA PCI functions, /proc/devices, the fabric
    #: manager's unit and log, and nvidia-smi's answer when ``--nvidia-smi`` ran it); shape in that module
    host_gpu: dict
    #: collectors.kubelet: the kubelet's CPU, memory and topology manager policies (with where each was read),
    #: cpu_manager_state, and the device-plugin checkpoint (which pod holds which GPU); shape in that module
    kubelet: dict


FACT_KEYS = frozenset(Facts.__annotations__)


@dataclass
class Reading:
    """What one collector's ``read()`` returns: events, the coverage of each of its sources, and
    facts (:class:`Facts`: only the declared keys, merged into the analysis)."""

    events: list[Event] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    facts: Facts = field(default_factory=dict)
    #: problems met while reading stored artifacts: ``{"artifact": REL, "message": str}``
    problems: list[dict] = field(default_factory=list)


@dataclass
class Readings:
    """What every collector's ``read()`` gave for one bundle, merged (``forensics.ops.pipeline.read_all``):
    the node facts, the events of all sources sorted by time, every source's coverage, the facts of all
    readings merged into one dict (a later collector's key replaces an earlier one's), and the problems
    (a collector whose ``read`` raised is one: ``{"artifact": collector name, "message"}``)."""

    node: NodeFacts
    events: list[Event] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    facts: Facts = field(default_factory=dict)
    problems: list[dict] = field(default_factory=list)
    #: with ``read_all(defer=True)``: ``later(windows)`` reads the ``WINDOWED`` collectors for the incident
    #: windows (UTC ``(start, end)`` pairs; ``None``: everything) and completes these readings in place
    later: Callable[[list | None], None] | None = None
