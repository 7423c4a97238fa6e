"""The event model: what every source is read into, and what the correlator and reports consume.

Event kinds form a fixed vocabulary (docs/design.md "Event kinds"): :data:`KINDS` is the one
home of each kind, its ``attrs``, what its time means and whether it is context. Add kinds, never
rename them. Times are timezone-aware UTC ``datetime`` objects; the source's own text for the time
is kept in ``original``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import NamedTuple


@dataclass(frozen=True)
class Kind:
    """What one event kind means.

    ``attrs``: the keys of :attr:`Event.attrs` an event of this kind carries (readers set exactly
    these; tests check it). ``timestamp_desc``: what the event's time is, in the words of
    Timesketch's ``timestamp_desc`` column (plaso's "Creation Time", "Last Known Good", ...; the
    ``timeline --format timesketch`` output). ``context``: a context kind, one of many routine
    lines (one per dpkg.log line, say) kept in analysis.json's ``timeline[]`` only near an
    incident window; the correlator and ``gpu-forensics timeline`` see all of them.
    """

    attrs: tuple[str, ...]
    timestamp_desc: str
    context: bool = False


_CALLER = ("wording", "requester_pid", "requester_comm", "requester_unit")
_LOG = ("message", "identifier", "unit", "pod")

#: the timeline's vocabulary: kind -> :class:`Kind`. :class:`Event` rejects a kind not here.
KINDS: dict[str, Kind] = {
    "journal.reload": Kind(_CALLER, "Reload Requested Time"),
    "journal.reload-finished": Kind(("duration_ms",), "Reload Finished Time", context=True),
    "journal.reexec": Kind(_CALLER, "Reexec Time"),
    "journal.sighup": Kind(("sender_pid", "sender_comm"), "Signal Received Time"),
    "journal.boot": Kind(("boot_id", "first", "last"), "First Entry Of Boot"),
    "journal.nvml-error": Kind(_LOG, "Log Time"),
    "journal.healthy": Kind(_LOG, "Log Time"),
    "journal.unit": Kind(("unit", "action", "message"), "Log Time"),
    "journal.requester": Kind(("pid", "comm", "unit", "identifier", "message"), "Log Time", context=True),
    "journal.banner": Kind(("systemd_version",), "Manager Start Time"),
    # a neighbouring GPU failure (forensics/neighbours.py), never the EPERM class: journal.nvml-error is not it
    "journal.symptom": Kind(("signature", "message", "identifier", "unit", "pod", "container", "path"), "Log Time"),
    "journal.forged": Kind(("claim", "claimed_identifier", "claimed_pid", "pid", "comm", "uid", "transport", "unit",
                            "message"), "Log Time"),
    "package.transaction": Kind(("command", "requested_by", "packages", "end", "error", "ships_units"),
                                "Start Time"),
    "package.unattended-run": Kind(("end", "packages", "result"), "Start Time"),
    "package.dpkg-action": Kind(("action", "package", "old_version", "new_version", "state", "ships_units"),
                                "Log Time", context=True),
    "container.created": Kind(("id", "pod", "namespace", "container_name", "gpu"), "Creation Time"),
    "container.probe": Kind(("id", "pod", "path", "result"), "Probe Time"),
    "container.device-rules-applied": Kind(("id", "pod", "prog_id", "prog_name"), "Program Load Time"),
    "container.runc-warning": Kind(("id", "pod", "level", "device", "message"), "Log Time"),
    "container.log-error": Kind(("pod", "namespace", "container", "message", "signature", "stream", "restart",
                                 "truncated"), "First Error Time"),
    "container.log-healthy": Kind(("pod", "namespace", "container", "message", "stream", "restart", "truncated"),
                                  "Last Clean Log Time"),
    "container.log-symptom": Kind(("pod", "namespace", "container", "restart", "stream", "message", "signature",
                                   "path"), "Log Time"),
    "metrics.dcgm-last-seen": Kind(("gpu", "uuid", "hostname", "metric", "job", "instance"), "Last Sample Time"),
    "metrics.capacity-change": Kind(("resource", "series", "old", "new", "last_old_at"), "Change Time"),
    "kube.event": Kind(("type", "reason", "message", "count", "object_kind", "namespace", "name"),
                       "Last Seen Time"),
    "kube.node-condition": Kind(("type", "status", "reason", "message"), "Transition Time"),
    "kube.container-terminated": Kind(("namespace", "pod", "container", "reason", "exit_code", "restart_count"),
                                      "Finish Time"),
    # kernel lines (issue 26): the journal's _TRANSPORT=kernel entries (collectors/journal) and the syslog
    # files /var/log/kern.log*, /var/log/messages* (collectors/kernlog); wordings in forensics/kmsg.py
    "kernel.xid": Kind(("xid", "pci", "gpu_instance", "pid", "process", "detail", "message"), "Log Time"),
    "kernel.gpu-lost": Kind(("pci", "stage", "message"), "Log Time"),
    "kernel.api-mismatch": Kind(("client", "client_pid", "client_version", "kernel_version", "message"), "Log Time"),
    "kernel.oom-kill": Kind(("pid", "process", "constraint", "task_memcg", "oom_memcg", "container_id", "message"),
                            "Log Time"),
    "kernel.nvrm": Kind(("what", "pci", "uuid", "version", "message"), "Log Time"),
    "kernel.pcie-error": Kind(("pci", "severity", "message"), "Log Time"),
    # a container runtime's CRI UpdateContainerResources call (containerd's instrumented service logs each)
    "runtime.update-resources": Kind(("id", "result", "message", "unit"), "Log Time"),
    # DCGM's Xid field (DCGM_FI_DEV_XID_ERRORS) from Prometheus: the value is the last Xid of that GPU
    "metrics.xid": Kind(("gpu", "uuid", "xid", "hostname", "job", "instance"), "Sample Time"),
    # an alert episode Prometheus recorded itself (ALERTS / ALERTS_FOR_STATE: collectors/metrics/alerts.py)
    "metrics.alert": Kind(("alertname", "alertstate", "severity", "gpu", "uuid", "until", "active_since"),
                          "Alert Start Time"),
    "incident.start": Kind(("incident",), "Last Known Good"),
    "incident.end": Kind(("incident",), "First Known Bad"),
}


def is_context(kind: str) -> bool:
    """Whether ``kind`` is a context kind (:attr:`Kind.context`); ``False`` for a kind not in :data:`KINDS`."""
    k = KINDS.get(kind)
    return bool(k and k.context)


#: the fields of a deferred :class:`Event` made on first access (:meth:`Event.deferred`)
DEFERRED = ("summary", "attrs", "evidence", "original")


@dataclass(slots=True)
class Event:
    """One dated fact on the timeline.

    ``at`` is UTC; ``kind`` is a key of :data:`KINDS` (any other raises ``ValueError``, as does a
    naive ``at``); ``source`` names the evidence source (``journal``, ``dpkg``, ``apt``,
    ``unattended-upgrades``, ``incident``); ``evidence`` points back into the bundle:
    ``{"artifact": REL, "line": N}`` or ``{"artifact": REL, "cursor": CURSOR}``. ``flags`` holds
    reading problems that lower trust in the event or its time:

    - set by the source's reader: ``dst-fold`` (a zone-less wall time that occurred twice; the first
      is taken), ``dst-gap`` (one that never occurred; shifted forward), ``out-of-order`` (earlier than a
      line above it in the same log), ``unparsed`` (a dated dpkg.log line of no known grammar),
      ``interrupted`` (an apt stanza with no End-Date), ``tz-unknown`` (a zone-less time, dpkg.log, apt
      history.log or unattended-upgrades, read as UTC because the node's zone is unknown: the true
      instant lies anywhere within :data:`forensics.timeutil.ZONE_UNCERTAINTY`, ±14 h, of ``at``), ``forged`` (a ``journal.forged`` line: its writer
      claimed to be PID 1 or kubelet, journald's trusted fields say otherwise), ``unverified`` (a line that says
      it is sudo's, sent by syslog(3), of whose writer journald recorded none of what it reads from /proc
      (``_COMM``, ``_EXE``, ``_CMDLINE``, ``_CAP_EFFECTIVE``, ``_SYSTEMD_UNIT``...: it had exited):
      neither sudo's nor a forged one, and never a requester);
    - set by :func:`forensics.findings.analysis.flag_clock_problems` once every source is read:
      ``after-collection`` (dated more than 5 minutes after the collection ended: a clock set into the
      future), ``before-boot`` (a journal entry of the running boot, by its cursor's boot ID, dated more
      than 60 s before that boot's ``/proc/stat`` btime: the clock jumped after it was written),
      ``duplicate-time`` (two ``journal.reload`` events with the very same time), ``same-line`` (a kernel
      line another source already holds: forensics/findings/kernel_lines.py).

    A reader of many routine lines (one per dpkg.log line) makes them with :meth:`deferred`: the
    same event, its :data:`DEFERRED` fields made from the line on first access, so that the lines no
    finding and no timeline entry looks at cost a small object each (``__slots__``, no attrs or
    evidence dicts).
    """

    at: datetime
    source: str
    kind: str
    summary: str
    attrs: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    original: str | None = None
    flags: tuple[str, ...] = ()
    #: ``(make, *args)`` of a deferred event until its fields are made, else ``None``
    _make: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        _check(self)

    @classmethod
    def deferred(cls, at: datetime, source: str, kind: str, flags: tuple[str, ...], make, *args) -> "Event":
        """An event whose :data:`DEFERRED` fields (``summary``, ``attrs``, ``evidence``, ``original``) are
        ``make(*args)``, a 4-tuple in that order, called once, on the first access of any of them (a
        field assigned before that keeps its value). ``make`` must give the same for the same ``args``;
        the other fields, ``at`` and ``flags`` included, are given now. Raises ``ValueError`` as the
        constructor does (an unknown kind, a naive ``at``)."""
        e = cls.__new__(cls)
        e.at, e.source, e.kind, e.flags, e._make = at, source, kind, flags, (make, *args)
        _check(e)
        return e

    def __getattr__(self, name: str):
        # only reached for a slot not set: a deferred field before its first access
        make = self._make if name in DEFERRED else None  # (never recurses: ``_make`` is no deferred field)
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._make = None
        for key, value in zip(DEFERRED, make[0](*make[1:])):
            try:
                object.__getattribute__(self, key)  # assigned by a caller meanwhile: kept
            except AttributeError:
                object.__setattr__(self, key, value)
        return object.__getattribute__(self, name)


def _check(e: Event) -> None:
    if e.kind not in KINDS:
        raise ValueError(f"unknown event kind {e.kind!r}: add it to forensics.events.KINDS")
    if e.at.tzinfo is None:
        raise ValueError(f"event time must be timezone-aware: {e.at!r}")
    e.at = e.at.astimezone(timezone.utc)


class Hole(NamedTuple):
    """A period inside a source's span that no stored file holds (UTC, ``start < end``): a rotation
    missing in the middle, a jump in time longer than the rotation period, a file cut short."""

    start: datetime
    end: datetime
    reason: str


@dataclass
class Coverage:
    """The span a source covers (UTC, ``None`` when unknown) and why it ends there.

    Becomes a ``gaps[]`` record in analysis.json: outside ``[start, end]`` that source can neither
    confirm nor exclude anything, and neither inside one of its ``holes`` (:class:`Hole`).
    ``uncertain`` is a sentence when the source's times themselves are uncertain (zone-less times of
    a node whose zone is unknown): then nothing may be excluded on them; ``None`` when they are not.
    """

    source: str
    start: datetime | None
    end: datetime | None
    reason: str
    holes: tuple[Hole, ...] = ()
    uncertain: str | None = None


#: every :attr:`Coverage.source` the collectors give, the one table of those names (a ``gaps[].source``
#: in analysis.json), with what each covers; reports draw and word a gap by its exact name
GAP_SOURCES = {
    "journal": "the systemd journal's entries (PID 1's lines, units, the kernel's lines through journald)",
    "dpkg": "dpkg.log and its rotations",
    "apt": "apt's history.log and its rotations",
    "unattended-upgrades": "unattended-upgrades' logs",
    "kernel": "the kernel's lines, from any source (the journal's kernel transport, kern.log, the ring buffer)",
    "kern.log": "syslog's kern.log and its rotations",
    "kmsg": "the kernel's ring buffer (/dev/kmsg), since its oldest line",
    "prometheus": "Prometheus's samples, from its retention's start",
    "boot": "the running boot, since btime",
}


@dataclass
class NodeFacts:
    """What the analysis needs to know about the node, read back from the bundle.

    ``tz`` is a tzinfo built from the node's own TZif bytes kept in the bundle (``/etc/localtime``, or
    the root's ``/usr/share/zoneinfo/NAME``), else from the zone name the node gave, by name, with
    the analysing machine's tzdata; ``tz_source`` says which (None: unknown). ``tz_unknown`` is True
    when the node showed no zone at all: ``tz`` is then UTC only as a reading convention, and every
    zone-less time is uncertain by ±14 h. ``boot_time`` is UTC (``/proc/stat`` btime) or ``None``.
    """

    hostname: str | None = None
    tz_name: str | None = None
    tz: tzinfo = timezone.utc
    tz_source: str | None = None
    tz_unknown: bool = False
    boot_time: datetime | None = None
    boot_id: str | None = None
    kernel: str | None = None
    os_release: dict = field(default_factory=dict)
    systemd_version: str | None = None
