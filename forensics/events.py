"""The event model: what every source is read into, and what the correlator and reports consume.

Event kinds form a fixed vocabulary (../shared/DESIGN.md "Event kinds"); each kind has fixed
``attrs``. Add kinds, never rename them. Times are timezone-aware UTC ``datetime`` objects; the
source's own text for the time is kept in ``original``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo

#: kind -> the attrs that kind carries (documentation and a test keep readers honest)
KINDS: dict[str, tuple[str, ...]] = {
    "journal.reload": ("wording", "requester_pid", "requester_comm", "requester_unit"),
    "journal.reload-finished": ("duration_ms",),
    "journal.reexec": ("wording", "requester_pid", "requester_comm", "requester_unit"),
    "journal.sighup": ("sender_pid", "sender_comm"),
    "journal.boot": ("boot_id", "first", "last"),
    "journal.nvml-error": ("message", "identifier", "unit", "pod"),
    "journal.healthy": ("message", "identifier", "unit", "pod"),
    "journal.unit": ("unit", "action", "message"),
    "journal.requester": ("pid", "comm", "unit", "identifier", "message"),
    "journal.banner": ("systemd_version",),
    "package.transaction": ("command", "requested_by", "packages", "end", "error", "ships_units"),
    "package.unattended-run": ("end", "packages", "result"),
    "package.dpkg-action": ("action", "package", "old_version", "new_version", "state", "ships_units"),
    "container.created": ("id", "pod", "namespace", "container_name", "gpu"),
    "container.probe": ("id", "pod", "path", "result"),
    "container.device-rules-applied": ("id", "pod", "prog_id", "prog_name"),
    "container.log-error": ("pod", "namespace", "container", "message", "signature", "stream", "restart", "truncated"),
    "container.log-healthy": ("pod", "namespace", "container", "message", "stream", "restart", "truncated"),
    "metrics.dcgm-last-seen": ("gpu", "uuid", "hostname", "metric", "job", "instance"),
    "metrics.capacity-change": ("resource", "series", "old", "new", "last_old_at"),
    "kube.event": ("type", "reason", "message", "count", "object_kind", "namespace", "name"),
    "kube.node-condition": ("type", "status", "reason", "message"),
    "kube.container-terminated": ("namespace", "pod", "container", "reason", "exit_code", "restart_count"),
    "incident.start": ("incident",),
    "incident.end": ("incident",),
}


@dataclass
class Event:
    """One dated fact on the timeline.

    ``at`` is UTC; ``source`` names the evidence source (``journal``, ``dpkg``, ``apt``,
    ``unattended-upgrades``, ``incident``); ``evidence`` points back into the bundle:
    ``{"artifact": REL, "line": N}`` or ``{"artifact": REL, "cursor": CURSOR}``. ``flags`` holds
    reading problems that lower trust in the event or its time:

    - set by the source's reader: ``dst-fold`` (a zone-less wall time that occurred twice; the first
      is taken), ``dst-gap`` (one that never occurred; shifted forward), ``out-of-order`` (earlier than a
      line above it in the same log), ``unparsed`` (a dated dpkg.log line of no known grammar),
      ``interrupted`` (an apt stanza with no End-Date);
    - set by :func:`forensics.findings.analysis.flag_clock_problems` once every source is read:
      ``after-collection`` (dated more than 5 minutes after the collection ended: a clock set into the
      future), ``before-boot`` (a journal entry of the running boot, by its cursor's boot ID, dated more
      than 60 s before that boot's ``/proc/stat`` btime: the clock jumped after it was written),
      ``duplicate-time`` (two ``journal.reload`` events with the very same time).
    """

    at: datetime
    source: str
    kind: str
    summary: str
    attrs: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    original: str | None = None
    flags: tuple[str, ...] = ()

    def __post_init__(self):
        if self.at.tzinfo is None:
            raise ValueError(f"event time must be timezone-aware: {self.at!r}")
        self.at = self.at.astimezone(timezone.utc)


@dataclass
class Coverage:
    """The span a source covers (UTC, ``None`` when unknown) and why it ends there.

    Becomes a ``gaps[]`` record in analysis.json: outside ``[start, end]`` that source can neither
    confirm nor exclude anything.
    """

    source: str
    start: datetime | None
    end: datetime | None
    reason: str


@dataclass
class NodeFacts:
    """What the analysis needs to know about the node, read back from the bundle.

    ``tz`` is a tzinfo built from the node's own ``/etc/localtime`` bytes (never the analysing
    machine's zone); ``boot_time`` is UTC (``/proc/stat`` btime) or ``None``.
    """

    hostname: str | None = None
    tz_name: str | None = None
    tz: tzinfo = timezone.utc
    boot_time: datetime | None = None
    boot_id: str | None = None
    kernel: str | None = None
    os_release: dict = field(default_factory=dict)
    systemd_version: str | None = None
