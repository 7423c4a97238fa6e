"""Analysis: from the collectors' readings of a bundle, correlate and build the
``gpu-forensics/analysis/v1`` JSON.

:func:`build` takes what :func:`forensics.ops.pipeline.read_all` returns (the
:class:`~forensics.source.Readings` of every collector) and the bundle (its manifest and artifact records), never the live host, so the same
bundle gives the same report on a laptop a week later (``forensics.ops.pipeline.analyze(bundle)`` does
both). The dict returned is the contract of docs/design.md "Command line and JSON: stable"; reports render it and
compute nothing of their own.
"""
from __future__ import annotations

import hashlib
import re
from bisect import insort
from datetime import datetime, timedelta
from operator import attrgetter

from ..engines import RUN_DIRS
from ..artifact import Status
from ..bundle import Bundle
from . import alerts, host_gpu
from .consistency import contradictions
from .headline import _cause_json, by_certainty, causes_checked, headline, verdict_sentences
from .remedy_plan import plan
from .kernel_lines import mark_duplicates
from .correlator import correlate, windows_of
from .entries import Timeline
from ..events import KINDS, Event
from ..source import Readings
from ..timeutil import iso_z, local_iso, parse_iso, within
from .symptoms import READS as SYMPTOM_READS, classify

SCHEMA = "gpu-forensics/analysis/v1"
#: an event this much later than the collection's end is dated by a clock set into the future
AFTER_COLLECTION = timedelta(minutes=5)
#: a journal entry of the running boot this much earlier than its btime was dated before a clock jump
BEFORE_BOOT = timedelta(seconds=60)
_AT = attrgetter("at")
_CURSOR_BOOT = re.compile(r"(?:^|;)b=([0-9a-fA-F-]{32,36})(?:;|$)")


def _flag(e: Event, flag: str) -> None:
    if flag not in e.flags:
        e.flags = e.flags + (flag,)


def flag_clock_problems(events: list[Event], nf, collection: dict | None) -> None:
    """Flag, in place, events whose time a clock jump makes untrustworthy (Event docstring):

    - ``after-collection``: later than the collection's end (else its start; ISO UTC from the
      manifest's ``collection``) plus :data:`AFTER_COLLECTION`;
    - ``before-boot``: a journal event whose cursor's ``b=`` boot ID is the node's running boot
      (``nf.boot_id``, dashes and case ignored) but dated more than :data:`BEFORE_BOOT` before
      ``nf.boot_time``;
    - ``duplicate-time``: every ``journal.reload`` that shares its exact time with another one.

    Events are kept, never dropped or re-dated: the flag tells the reader not to lean on the time.
    A malformed collection time or a missing boot time only skips that check. Raises nothing.
    """
    collection = collection if isinstance(collection, dict) else {}
    try:
        collected = parse_iso(collection.get("end") or collection.get("start"))
    except (ValueError, TypeError, AttributeError):
        collected = None
    boot = (nf.boot_id or "").replace("-", "").lower() if isinstance(nf.boot_id, str) else ""
    reload_times: dict[datetime, list[Event]] = {}
    try:
        early = nf.boot_time - BEFORE_BOOT if nf.boot_time else None
    except OverflowError:  # a boot time within a minute of year 1: nothing can be dated before it
        early = None
    for e in events:
        if collected and e.at > collected + AFTER_COLLECTION:
            _flag(e, "after-collection")
        # the cursor is read only for a journal event that early (no other source cites one: a dpkg
        # line's evidence, made on first access, is not made for this)
        if boot and early and e.at < early and e.source == "journal":
            cursor = (e.evidence or {}).get("cursor")
            m = _CURSOR_BOOT.search(cursor) if isinstance(cursor, str) else None
            if m and m.group(1).replace("-", "").lower() == boot:
                _flag(e, "before-boot")
        if e.kind == "journal.reload":
            reload_times.setdefault(e.at, []).append(e)
    for same in reload_times.values():
        if len(same) > 1:
            for e in same:
                _flag(e, "duplicate-time")


#: context kinds (``KINDS[kind].context``) are kept in ``timeline[]`` only this near an incident window
#: (the correlator sees all of them; ``gpu-forensics timeline`` prints all of them): one dpkg.log line each
#: would swamp the JSON
CONTEXT_MARGIN = timedelta(hours=1)


def _timeline(events: list[Event], incidents, tz, full: bool) -> tuple[Timeline, dict]:
    """Timeline entries (a :class:`~.entries.Timeline` view), and ``{kind: count}`` of context events left out
    (none when ``full``)."""
    near = within((i.start - CONTEXT_MARGIN, i.end + CONTEXT_MARGIN) for i in incidents)
    out, omitted = [], {}
    for e in events:
        if not full and KINDS[e.kind].context and not near(e.at):
            omitted[e.kind] = omitted.get(e.kind, 0) + 1
            continue
        out.append(e)
    return Timeline(out, tz), omitted


def build(readings: Readings, bundle: Bundle, full_timeline: bool = False) -> dict:
    """Build the analysis dict (schema ``gpu-forensics/analysis/v1``) from every collector's readings
    of ``bundle`` (flagging the events' clock problems in place first, :func:`flag_clock_problems`).

    ``timeline[]`` holds every event except those of context kinds (:attr:`forensics.events.Kind.context`)
    far from any incident window, which ``timeline_omitted`` counts; ``full_timeline=True`` keeps them all.
    ``red_flags`` is there only when the journal holds forged PID 1 or kubelet lines (:func:`_red_flags`);
    ``symptoms`` lists the neighbouring GPU failures seen, never the EPERM class (:func:`.symptoms.classify`)."""
    nf, events, coverage, facts, problems = (readings.node, readings.events, readings.coverage, readings.facts,
                                             readings.problems)
    flag_clock_problems(events, nf, bundle.manifest.get("collection"))
    mark_duplicates(events)  # one printk in the journal, kern.log and /dev/kmsg counts once
    m = bundle.manifest
    artifacts = bundle.artifacts()
    exposed = _exposure(facts, events, artifacts, problems)
    incidents, cov = _correlate(readings, m, exposed, full_timeline)
    incidents = by_certainty(incidents)
    tz = nf.tz
    _mark_windows(events, incidents)
    timeline, omitted = _timeline(events, incidents, tz, full_timeline)
    for n in (facts.get("package_lines_outside_windows") or {}).values():  # context lines far from every window
        if n:
            omitted["package.dpkg-action"] = omitted.get("package.dpkg-action", 0) + n
    out = {
        "schema": SCHEMA,
        "node": m.get("node") or nf.hostname,
        "collected_at": (m.get("collection") or {}).get("start"),
        "timezone": {"name": nf.tz_name, "utc_offset": (m.get("timezone") or {}).get("utc_offset")},
        "node_facts": _node_facts(nf, m, facts),
        "headline": headline(incidents, exposed),
        "causes_checked": causes_checked(incidents),
        "host_gpu": host_gpu.summary(facts, events, cov),
        "verdicts": verdict_sentences(incidents, tz),
        "incidents": [_incident_json(inc, tz) for inc in incidents],
        "exposure": {**exposed, "remedy_plan": plan(exposed.get("remedies"))} if exposed.get("assessed") else exposed,
        "metrics": _metrics_summary(facts.get("metrics"), tz),
        "kube": _kube_summary(facts.get("kube")),
        "gaps": [_gap_json(c) for c in cov.values()],
        "problems": problems,
        **_red_flags(events, tz),
        "symptoms": classify([e for e in events if e.kind in SYMPTOM_READS], facts, m.get("node") or nf.hostname),
        "bundle": _bundle_section(bundle, artifacts),
        "timeline": timeline,
        "timeline_omitted": omitted,
    }
    # the report never contradicts itself; should it, the breach is shown with the problems, never hidden
    problems.extend({"artifact": "analysis", "message": f"the report contradicts itself: {said}"}
                    for said in contradictions(out))
    return out


def _correlate(readings: Readings, m: dict, exposed: dict, full: bool):
    """:func:`~forensics.findings.correlator.correlate` over ``readings``; when some collectors wait for the
    incident windows (``readings.later``, forensics/ops/pipeline.py ``read_all(defer=True)``), they are read
    first for the windows opened from the rest (for every line when ``full``), and again for every line
    should the correlator then open other windows (their lines open none: a safeguard, not a path)."""
    nf, events, facts = readings.node, readings.events, readings.facts
    if readings.later is not None:
        windows = None if full else windows_of(m, events, readings.coverage, exposed, facts.get("metrics"), nf.tz)
        readings.later(windows)
        flag_clock_problems(events, nf, m.get("collection"))  # the lines just read (idempotent for the rest)
        incidents, cov = correlate(m, events, readings.coverage, facts, exposed, facts.get("metrics"), nf.tz)
        if windows is None or [(i.start, i.end) for i in incidents] == windows:
            return incidents, cov
        readings.later(None)
        flag_clock_problems(events, nf, m.get("collection"))
    return correlate(m, events, readings.coverage, facts, exposed, facts.get("metrics"), nf.tz)


def _node_facts(nf, m: dict, facts: dict) -> dict:
    """The ``node_facts`` section: boot, kernel, OS, systemd (with where its version was read) and packages."""
    return {"boot_time": iso_z(nf.boot_time), "boot_id": nf.boot_id, "kernel": nf.kernel,
            "os": nf.os_release.get("PRETTY_NAME"), "systemd_version": nf.systemd_version, "tz_source": nf.tz_source,
            "systemd_version_basis": (m.get("node_facts") or {}).get("systemd_version_basis")
            or facts.get("systemd_version_basis"),
            "package_versions": facts.get("package_versions", {})}


def _bundle_section(bundle: Bundle, artifacts: list) -> dict:
    """The ``bundle`` section: where it is, the manifest's SHA-256, how it was collected, every artifact and
    those that could not be read."""
    m, records = bundle.manifest, bundle.artifact_records()
    digest = bundle.manifest_sha256 or hashlib.sha256(bundle.path("manifest.json").read_bytes()).hexdigest()
    return {"path": str(bundle.source), "manifest_sha256": digest, "command_line": m.get("command_line"),
            "collection": m.get("collection"), "tool_version": m.get("tool_version"), "redaction": m.get("redaction"),
            "artifacts": records,
            "missing": [r for r, a in zip(records, artifacts) if a.status in (Status.UNREADABLE, Status.ERROR)]}


def _mark_windows(events: list[Event], incidents) -> None:
    """Each incident's ``incident.start`` and ``incident.end`` into the sorted ``events``, after those of the same
    time."""
    for inc in incidents:
        insort(events, Event(inc.start, "incident", "incident.start", f"{inc.id} last known good",
                             {"incident": inc.id}), key=_AT)
        insort(events, Event(inc.end, "incident", "incident.end", f"{inc.id} first known bad", {"incident": inc.id}),
               key=_AT)


def _exposure(facts: dict, events: list[Event], artifacts: list, problems: list) -> dict:
    """The ``exposure`` section: unknown when the bundle holds no running state (:func:`_runtime_state_missing`)
    or no container and runtime evidence, else :func:`forensics.findings.exposure.assess` of the facts (a
    failure of the assessment is a problem, and the section says the node was not assessed)."""
    missing = _runtime_state_missing(artifacts, facts)
    if missing:
        return _unassessed(missing)
    if not (facts.get("runtime") or facts.get("containers")):
        return _unassessed("container and runtime evidence not in this bundle")
    from forensics.redact import ENV_ALLOW
    from . import exposure
    from .broken import trusted_reloads
    from .device_plugin import device_plugin_settings
    containers = facts.get("containers") or []
    try:
        dp = device_plugin_settings(containers, ENV_ALLOW.match, facts.get("device_plugin_dir"))
        return {**exposure.assess(facts.get("runtime") or {}, containers, dp, facts.get("engine_cgroup_driver"),
                                  trusted_reloads(events), facts.get("kube")), "device_plugin": dp}
    except Exception as e:  # hostile records must not cost the report (like read_all's collectors)
        problems.append({"artifact": "exposure", "message": f"assessment failed: {type(e).__name__}: {e}"})
        return _unassessed(f"the assessment failed ({type(e).__name__}: {e})")


def _incident_json(inc, tz) -> dict:
    """One ``incidents[]`` record: window (UTC and node time), evidence, symptom class, pods, causes."""
    return {"id": inc.id, "symptom": inc.symptom, "label": inc.label, "origin": inc.origin,
            "window": {"start": iso_z(inc.start), "end": iso_z(inc.end),
                       "start_local": local_iso(inc.start, tz), "end_local": local_iso(inc.end, tz)},
            "evidence": inc.evidence, "notes": inc.notes, "symptom_class": inc.symptom_class,
            "pods": sorted(inc.pods), "containers": sorted(inc.containers),
            "causes": [_cause_json(c, tz) for c in inc.causes]}


def _gap_json(c) -> dict:
    """One ``gaps[]`` record of a source's Coverage: its span (UTC), reason, holes and uncertainty."""
    return {"source": c.source, "covers": {"start": iso_z(c.start), "end": iso_z(c.end)}, "reason": c.reason,
            **({"holes": [{"start": iso_z(h.start), "end": iso_z(h.end), "reason": h.reason} for h in c.holes]}
               if c.holes else {}), **({"uncertain": c.uncertain} if c.uncertain else {})}


def _red_flags(events: list[Event], tz) -> dict:
    """``{"red_flags": [...]}`` when the journal holds forged lines (``journal.forged``: someone wrote
    as PID 1 or kubelet), else ``{}``. Each record: ``at``, ``local``, ``summary``, ``claim``,
    ``claimed_identifier``, ``claimed_pid``, ``pid``, ``comm``, ``uid``, ``transport``, ``unit``,
    ``message`` (the event's attrs) and ``evidence``. They are never evidence for a verdict."""
    flags = [{"at": iso_z(e.at), "local": local_iso(e.at, tz), "summary": e.summary, **e.attrs,
              "evidence": e.evidence} for e in events if e.kind == "journal.forged"]
    return {"red_flags": flags} if flags else {}


#: where each engine keeps its running containers' state (forensics/engines: RUN_DIRS), and /proc
_RUNTIME_STATE = (*RUN_DIRS, "/proc")


def _runtime_state_missing(artifacts: list, facts: dict) -> str | None:
    """Why no container could be assessed when the collected root holds no runtime state at all (a disk image
    of a dead node, an offline root: ``/proc`` and the runtimes' ``/run`` state absent, as the manifest
    records), else ``None``: then exposure is unknown, never "no GPU containers"."""
    if facts.get("containers"):
        return None
    absent = sorted({a.source for a in artifacts if a.status is Status.ABSENT and a.source
                     and any(a.source == d or a.source.startswith(d + "/") for d in _RUNTIME_STATE)})
    if "/proc/stat" not in absent:  # /proc is mounted on a running node: its runtime may simply run nothing
        return None
    run = [a for a in absent if a.startswith("/run/")]
    return ("the collected root holds no running state (/proc/stat absent"
            + (f", and {run[0]}" if run else "") + "): a disk image or a node that is not running, so which "
            "containers had GPUs, and how they got them, is unknown")


def _unassessed(reason: str) -> dict:
    """The ``exposure`` section when the node's exposure could not be assessed: every setting unknown."""
    return {"assessed": False, "reason": reason, "systemd_cgroup": None, "enable_cdi": None,
            "nvidia_runtime_mode": None, "device_list_strategy": None, "pass_device_specs": None, "containers": [],
            "unknown_containers": []}


def _metrics_summary(m: dict | None, tz=None) -> dict:
    """What the report shows of the Prometheus evidence: retention, DCGM last-seen per GPU, capacity
    changes, the alerts Prometheus recorded (``alerts_recorded``: None for a bundle from before that query)
    and the alert audit (with the suggested rules). ``{"collected": False}`` without metrics."""
    if not m:
        return {"collected": False}
    audit = alerts.audit_of(m)
    m = {**m, "alert_audit": audit, "alerts_recorded": alerts.recorded_of(m, audit, tz)}
    keep = ("source", "retention", "dcgm_last_seen", "capacity_changes", "alerts_recorded", "alert_audit",
            "dcgm_exporter_now", "errors")
    return {"collected": True, **{k: m.get(k) for k in keep}}


def _kube_summary(k: dict | None) -> dict:
    """What the analysis keeps of the stored Kubernetes answers (``facts["kube"]`` of collectors/kube):
    ``{"collected": True, "node": name | None, "labels": {label: value} | None (no Node answer),
    "device_plugin_images": [image] | None (no plugin DaemonSet answer)}``; ``{"collected": False}``
    without ``kube/`` answers. The labels name the node's pool in ``gpu-forensics fleet``."""
    if not k:
        return {"collected": False}
    node, ds = k.get("node") or {}, k.get("device_plugin") or {}
    return {"collected": True, "node": node.get("name"), "labels": node.get("labels"),
            "device_plugin_images": ds.get("images")}


def analysed_at() -> str:
    """Now, ISO UTC (for report footers)."""
    from datetime import timezone
    return iso_z(datetime.now(timezone.utc).replace(microsecond=0))
