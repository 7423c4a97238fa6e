"""Analysis: from the collectors' readings of a bundle, correlate and build the
``gpu-forensics/analysis/v1`` JSON.

:func:`build` takes what :func:`forensics.ops.pipeline.read_all` returns (the
:class:`~forensics.source.Readings` of every collector) and the bundle (its manifest and artifact records), never the live host, so the same
bundle gives the same report on a laptop a week later (``forensics.ops.pipeline.analyze(bundle)`` does
both). The dict returned is the contract of ../shared/DESIGN.md "Analysis JSON"; reports render it and
compute nothing of their own.
"""
from __future__ import annotations

import hashlib
import re
from bisect import insort
from datetime import datetime, timedelta
from operator import attrgetter

from ..artifact import Status
from ..bundle import Bundle
from . import alerts
from .correlator import correlate, window_text
from ..events import KINDS, Event
from ..source import Readings
from ..timeutil import human, iso_z, local_iso, parse_iso, within
from .verdicts import TITLES, describe_requester
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


def _timeline_entry(e: Event, tz) -> dict:
    return {"at": iso_z(e.at), "local": local_iso(e.at, tz), "source": e.source, "kind": e.kind,
            "summary": e.summary, "attrs": e.attrs, "evidence": e.evidence, "original": e.original,
            "flags": list(e.flags)}


def _cause_json(c, tz) -> dict:
    return {"kind": c.kind, "verdict": c.verdict, "at": iso_z(c.at), "local": local_iso(c.at, tz),
            "requested_by": c.requested_by, "evidence": c.evidence, "gaps": c.gaps, "reason": c.reason,
            "contradictions": c.contradictions}


def verdict_sentence(inc, cause, tz) -> str:
    """One sentence per verdict for the top of the report: what, when (node time and UTC), by whom,
    how sure and why."""
    when = human(cause.at, tz)
    name = TITLES.get(cause.kind, cause.kind)
    head = f"Incident {inc.id} ({inc.label or window_text(inc)}): "
    if cause.verdict == "confirmed":
        if cause.kind == "daemon-reload":
            by = describe_requester(cause.requested_by)
            basis = {"caller-line": "systemd logged the caller", "inferred": "the requester is inferred"}.get(
                (cause.requested_by or {}).get("basis"), "the requester is unknown")
            return (f"{head}{name} is CONFIRMED at {when}, {by}; PID 1 logged the reload inside the window "
                    f"and {basis}.")
        return f"{head}{name} is CONFIRMED at {when}. {cause.reason}"
    if cause.verdict == "inferred":
        return f"{head}{name} is INFERRED, not confirmed: {cause.reason}"
    if cause.verdict == "excluded":
        return f"{head}{name} is EXCLUDED: {cause.reason}"
    return f"{head}{name} is UNDETERMINED: {cause.reason}"


#: how far a verdict goes, surest first: the headline takes the surest cause that fits
FITS = ("confirmed", "inferred")
#: ``broken_basis`` values of a container broken by inference from PID 1's reload, not by a probe or its rules
INFERRED = ("inferred", "bpf")


def _lost(exposed: dict) -> str:
    """The headline's tail: how many containers lost GPU access (how many of them by inference) and how
    many could not be assessed (their config.json unread)."""
    broken = [r for r in exposed.get("containers") or [] if r.get("broken")]
    guessed = sum(r.get("broken_basis") in INFERRED for r in broken)
    unread = exposed.get("unknown_containers") or []
    return ((f"; {len(broken)} container{'s' if len(broken) != 1 else ''} lost GPU access" if broken else "")
            + (f" ({guessed} inferred from a daemon-reload, no probe ran)" if guessed else "")
            + (f"; {len(unread)} container{'s' if len(unread) != 1 else ''} could not be assessed (config.json "
               + "; ".join(dict.fromkeys(str(r.get("spec_detail") or "not read") for r in unread)) + ")"
               if unread else ""))


def headline(incidents, exposed: dict) -> dict:
    """The report's answer in one line, from the causes and the exposure together:
    ``{"verdict": "confirmed" | "inferred" | "undetermined" | "none", "text": str}``.

    confirmed / inferred: the surest cause that fits, across every incident (its contradictions said);
    undetermined: an incident or a broken container (``exposed["containers"][i]["broken"]``) and no cause
    that fits, every one excluded or undetermined (all excluded reads "undetermined: none of the known
    causes fits"); none: no incident and nothing broken. Never "excluded": a ruled-out cause is no
    answer for a node that lost a GPU. Containers broken by inference (``broken_basis`` in :data:`INFERRED`)
    open no incident; with no incident they make the headline "inferred", citing the reload. The text says
    how many containers could not be assessed (``exposed["unknown_containers"]``). Raises nothing for
    missing keys."""
    broken = [r for r in exposed.get("containers") or [] if r.get("broken")]
    lost = _lost(exposed)
    causes = [(inc, c) for inc in incidents for c in inc.causes]
    for verdict in FITS:
        fit = [(inc, c) for inc, c in causes if c.verdict == verdict]
        if fit:
            inc, c = fit[0]
            said = "; the sources contradict each other (see the cause)" if c.contradictions else ""
            return {"verdict": verdict, "text": f"{verdict}: {TITLES.get(c.kind, c.kind)} ({inc.id}){said}{lost}"}
    if not causes:
        if broken and all(r.get("broken_basis") in INFERRED for r in broken):
            first = min((r["broken_evidence"][0] for r in broken if r.get("broken_evidence")),
                        key=lambda e: e.get("at") or "", default={})
            return {"verdict": "inferred", "text": f"inferred: {TITLES['daemon-reload']} (PID 1 logged it at "
                    f"{first.get('at')}, after the containers were created) most likely revoked the GPU of "
                    f"hook-injected containers under the systemd driver{lost}; --probe would settle it"}
        if broken:
            return {"verdict": "undetermined", "text": f"undetermined: no incident window was found, so no known "
                    f"cause was weighed{lost}"}
        return {"verdict": "none", "text": f"none: no incident was found{lost}"}
    open_ = sorted({TITLES.get(c.kind, c.kind) for _, c in causes if c.verdict == "undetermined"})
    if not open_:
        return {"verdict": "undetermined", "text": "undetermined: none of the known causes fits (each one is "
                f"excluded){lost}"}
    return {"verdict": "undetermined", "text": f"undetermined: no known cause is confirmed or inferred; "
            f"{', '.join(open_)} can be neither shown nor ruled out{lost}"}


#: context kinds (``KINDS[kind].context``) are kept in ``timeline[]`` only this near an incident window
#: (the correlator sees all of them; ``gpu-forensics timeline`` prints all of them): one dpkg.log line each
#: would swamp the JSON
CONTEXT_MARGIN = timedelta(hours=1)


def driver_precondition(rows: list[dict], value: bool | None, basis: str | None) -> tuple[bool | None, str | None]:
    """The ``systemd_cgroup`` precondition of the reload cause, from the GPU containers' own drivers first.

    ``rows``: the exposure's container rows; ``value``/``basis``: containerd's CRI setting and where it was
    read. A GPU container whose driver is shown by its own evidence or its engine's config (basis
    ``evidence`` / ``engine config``, findings/cgroup_driver.py) is direct evidence and wins over the
    containerd setting (a Docker host's containerd config says nothing of Docker's driver): any such
    container under systemd makes it True, all of them under cgroupfs make it False; a driver that is only
    assumed from a default changes nothing. Returns the (value, basis) pair; raises nothing."""
    shown = [r for r in rows if r.get("gpu_injection") not in (None, "none", "unknown")
             and r.get("cgroup_driver_basis") in ("evidence", "engine config") and r.get("cgroup_driver")]
    if not shown:
        return value, basis
    sysd = [r for r in shown if r["cgroup_driver"] == "systemd"]
    pick = sysd[0] if sysd else shown[0]
    new = bool(sysd)
    if new is value:
        return value, basis
    src = pick.get("cgroup_driver_source") or pick["cgroup_driver_basis"]
    said = f"; containerd's setting read {value} ({basis})" if value is not None and basis else ""
    return new, f"container {str(pick.get('id'))[:12]} runs under {pick['cgroup_driver']}: {src}{said}"


def _timeline(events: list[Event], incidents, tz, full: bool) -> tuple[list[dict], dict]:
    """Timeline entries, and ``{kind: count}`` of context events left out (none when ``full``)."""
    near = within((i.start - CONTEXT_MARGIN, i.end + CONTEXT_MARGIN) for i in incidents)
    out, omitted = [], {}
    for e in events:
        if not full and KINDS[e.kind].context and not near(e.at):
            omitted[e.kind] = omitted.get(e.kind, 0) + 1
            continue
        out.append(_timeline_entry(e, tz))
    return out, omitted


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
    m = bundle.manifest
    preconditions = {"systemd_cgroup": (facts.get("preconditions") or {}).get("systemd_cgroup"),
                     "gpu_outside_spec": None}
    exposed = _unassessed("container and runtime evidence not in this bundle")
    if facts.get("runtime") or facts.get("containers"):
        from forensics.redact import ENV_ALLOW
        from . import exposure
        from .broken import trusted_reloads
        from .device_plugin import device_plugin_settings
        containers = facts.get("containers") or []
        try:
            dp = device_plugin_settings(containers, ENV_ALLOW.match, facts.get("device_plugin_dir"))
            exposed = {**exposure.assess(facts.get("runtime") or {}, containers, dp, facts.get("engine_cgroup_driver"),
                                         trusted_reloads(events), facts.get("kube")), "device_plugin": dp}
        except Exception as e:  # hostile records must not cost the report (like read_all's collectors)
            problems.append({"artifact": "exposure", "message": f"assessment failed: {type(e).__name__}: {e}"})
            exposed = _unassessed(f"the assessment failed ({type(e).__name__}: {e})")
        outside = exposed.get("gpu_outside_spec")
        if outside is False and any(r.get("dev_char_missing") for r in exposed.get("containers", [])):
            outside = True  # the /dev/char trap: a spec GPU whose rule runc left out of DeviceAllow= is revoked too
        preconditions["gpu_outside_spec"] = outside
    # a container broken only by inference from a reload opens no incident: the reload would then confirm itself
    broken = [r for r in exposed.get("containers", []) if r.get("broken") and r.get("broken_basis") not in INFERRED]
    basis = {"systemd_cgroup": (facts.get("runtime") or {}).get("systemd_cgroup_basis")}
    preconditions["systemd_cgroup"], basis["systemd_cgroup"] = driver_precondition(
        exposed.get("containers", []), preconditions["systemd_cgroup"], basis["systemd_cgroup"])
    incidents, cov = correlate(m, events, coverage, preconditions, broken, facts.get("metrics"), nf.tz, basis)
    tz = nf.tz
    for inc in incidents:  # into the sorted events, after those of the same time
        insort(events, Event(inc.start, "incident", "incident.start", f"{inc.id} last known good",
                             {"incident": inc.id}), key=_AT)
        insort(events, Event(inc.end, "incident", "incident.end", f"{inc.id} first known bad", {"incident": inc.id}),
               key=_AT)
    timeline, omitted = _timeline(events, incidents, tz, full_timeline)
    manifest_bytes = bundle.path("manifest.json").read_bytes()
    artifacts = bundle.artifacts()
    return {
        "schema": SCHEMA,
        "node": m.get("node") or nf.hostname,
        "collected_at": (m.get("collection") or {}).get("start"),
        "timezone": {"name": nf.tz_name, "utc_offset": (m.get("timezone") or {}).get("utc_offset")},
        "node_facts": {"boot_time": iso_z(nf.boot_time), "boot_id": nf.boot_id, "kernel": nf.kernel,
                       "os": nf.os_release.get("PRETTY_NAME"), "systemd_version": nf.systemd_version,
                       "tz_source": nf.tz_source,
                       "systemd_version_basis": (m.get("node_facts") or {}).get("systemd_version_basis")
                       or facts.get("systemd_version_basis"),
                       "package_versions": facts.get("package_versions", {})},
        "headline": headline(incidents, exposed),
        "verdicts": [verdict_sentence(inc, c, tz) for inc in incidents for c in inc.causes
                     if c.verdict in ("confirmed", "inferred")]
        or [verdict_sentence(inc, inc.causes[0], tz) for inc in incidents],
        "incidents": [{"id": inc.id, "symptom": inc.symptom, "label": inc.label, "origin": inc.origin,
                       "window": {"start": iso_z(inc.start), "end": iso_z(inc.end),
                                  "start_local": local_iso(inc.start, tz), "end_local": local_iso(inc.end, tz)},
                       "evidence": inc.evidence, "notes": inc.notes,
                       "causes": [_cause_json(c, tz) for c in inc.causes]} for inc in incidents],
        "exposure": exposed,
        "metrics": _metrics_summary(facts.get("metrics")),
        "kube": _kube_summary(facts.get("kube")),
        "gaps": [{"source": c.source, "covers": {"start": iso_z(c.start), "end": iso_z(c.end)}, "reason": c.reason,
                  **({"holes": [{"start": iso_z(h.start), "end": iso_z(h.end), "reason": h.reason} for h in c.holes]}
                     if c.holes else {}), **({"uncertain": c.uncertain} if c.uncertain else {})}
                 for c in cov.values()],
        "problems": problems,
        **_red_flags(events, tz),
        "symptoms": classify([e for e in events if e.kind in SYMPTOM_READS], facts, m.get("node") or nf.hostname),
        "bundle": {"path": str(bundle.source), "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
                   "command_line": m.get("command_line"), "collection": m.get("collection"),
                   "tool_version": m.get("tool_version"), "redaction": m.get("redaction"),
                   "artifacts": [a.to_json() for a in artifacts],
                   "missing": [a.to_json() for a in artifacts if a.status in (Status.UNREADABLE, Status.ERROR)]},
        "timeline": timeline,
        "timeline_omitted": omitted,
    }


def _red_flags(events: list[Event], tz) -> dict:
    """``{"red_flags": [...]}`` when the journal holds forged lines (``journal.forged``: someone wrote
    as PID 1 or kubelet), else ``{}``. Each record: ``at``, ``local``, ``summary``, ``claim``,
    ``claimed_identifier``, ``claimed_pid``, ``pid``, ``comm``, ``uid``, ``transport``, ``unit``,
    ``message`` (the event's attrs) and ``evidence``. They are never evidence for a verdict."""
    flags = [{"at": iso_z(e.at), "local": local_iso(e.at, tz), "summary": e.summary, **e.attrs,
              "evidence": e.evidence} for e in events if e.kind == "journal.forged"]
    return {"red_flags": flags} if flags else {}


def _unassessed(reason: str) -> dict:
    """The ``exposure`` section when the node's exposure could not be assessed: every setting unknown."""
    return {"assessed": False, "reason": reason, "systemd_cgroup": None, "enable_cdi": None,
            "nvidia_runtime_mode": None, "device_list_strategy": None, "pass_device_specs": None, "containers": [],
            "unknown_containers": []}


def _metrics_summary(m: dict | None) -> dict:
    """What the report shows of the Prometheus evidence: retention, DCGM last-seen per GPU, capacity
    changes and the alert audit (with the suggested rules). ``{"collected": False}`` without metrics."""
    if not m:
        return {"collected": False}
    m = {**m, "alert_audit": alerts.audit_of(m)}
    keep = ("source", "retention", "dcgm_last_seen", "capacity_changes", "alert_audit", "dcgm_exporter_now", "errors")
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
