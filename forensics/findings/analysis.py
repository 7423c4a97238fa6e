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
from .remedy_plan import plan
from .scope import broke
from .kernel_lines import mark_duplicates
from .correlator import correlate, window_text
from ..events import KINDS, Event
from ..source import Readings
from ..timeutil import human, iso_z, local_iso, parse_iso, within
from .causes import RULES, TITLES
from .verdicts import MECHANISMS
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
    return {"kind": c.kind, "title": TITLES.get(c.kind, c.kind), "verdict": c.verdict, "at": iso_z(c.at),
            "local": local_iso(c.at, tz), "requested_by": c.requested_by, "evidence": c.evidence, "gaps": c.gaps,
            "reason": c.reason, "contradictions": c.contradictions, "mechanism": c.mechanism, "remedy": c.remedy,
            "detail": c.detail}


def verdict_sentence(inc, cause, tz) -> str:
    """One sentence per verdict for the top of the report: what, when (node time and UTC), by whom,
    how sure and why (a rule's own ``sentence`` words a confirmed cause when it has one)."""
    when = human(cause.at, tz)
    rule = RULES.get(cause.kind)
    name = TITLES.get(cause.kind, cause.kind)
    head = f"Incident {inc.id} ({inc.label or window_text(inc)}): "
    if cause.verdict == "confirmed":
        if rule is not None and rule.sentence is not None:
            return f"{head}{name} is CONFIRMED {rule.sentence(cause, when)}"
        return f"{head}{name} is CONFIRMED at {when}. {cause.reason}"
    if cause.verdict == "inferred":
        return f"{head}{name} is INFERRED, not confirmed: {cause.reason}"
    if cause.verdict == "excluded":
        return f"{head}{name} is EXCLUDED: {cause.reason}"
    return f"{head}{name} is UNDETERMINED: {cause.reason}"


#: how far a verdict goes, surest first: the headline takes the surest cause that fits
FITS = ("confirmed", "inferred")
#: an incident's place in the report: by its surest cause's verdict (every cause excluded last)
CERTAINTY = ("confirmed", "inferred", "undetermined", "excluded")


def by_certainty(incidents: list) -> list:
    """``incidents`` in the order the report tells them: the one with a confirmed cause first, then
    inferred, then undetermined, then those whose every cause is excluded; within each, by window start
    (UTC), then id. Their ids stay as the correlator numbered them (by time)."""
    def key(inc):
        best = min((CERTAINTY.index(c.verdict) for c in inc.causes if c.verdict in CERTAINTY), default=len(CERTAINTY))
        return best, inc.start, inc.id
    return sorted(incidents, key=key)


def happened_but_ruled_out(cause) -> bool:
    """True for a cause the evidence shows happened in the window (it has a time) that could not have
    done it here: the report names it at the top, never only in the table."""
    return cause.verdict == "excluded" and cause.at is not None and cause.mechanism == "ruled-out"


def verdict_sentences(incidents: list, tz) -> list[str]:
    """analysis.json's ``verdicts``: per incident (in the report's order), a sentence for each cause that
    fits, then one for each cause that happened in the window and is ruled out (a person's reload beside
    an application's fault); an incident with neither gets its first cause's sentence."""
    out = []
    for inc in incidents:
        said = [verdict_sentence(inc, c, tz) for c in inc.causes if c.verdict in FITS]
        said += [verdict_sentence(inc, c, tz) for c in inc.causes if happened_but_ruled_out(c)]
        out += said or ([verdict_sentence(inc, inc.causes[0], tz)] if inc.causes else [])
    return out
#: ``broken_basis`` values of a container broken by inference (from PID 1's reload), not by a probe or its rules
INFERRED = ("inferred", "bpf")
_ORDER = {k: i for i, k in enumerate(RULES)}


def _lost(exposed: dict) -> str:
    """The headline's tail: how many containers lost GPU access (how many of them by inference) and how
    many could not be assessed (their config.json unread)."""
    broken = [r for r in exposed.get("containers") or [] if r.get("broken")]
    guessed = sum(r.get("broken_basis") in INFERRED for r in broken)
    unread = exposed.get("unknown_containers") or []
    return ((f"; {len(broken)} container{'s' if len(broken) != 1 else ''} lost GPU access" if broken else "")
            + (f" ({guessed} inferred from {TITLES.get(_broken_cause(broken), 'the evidence')}, no probe ran)"
               if guessed else "")
            + (f"; {len(unread)} container{'s' if len(unread) != 1 else ''} could not be assessed (config.json "
               + "; ".join(dict.fromkeys(str(r.get("spec_detail") or "not read") for r in unread)) + ")"
               if unread else "")
            + ("" if exposed.get("assessed", True) else f"; exposure unknown: {exposed.get('reason')}"))


def _broken_cause(rows: list[dict]) -> str | None:
    return next((r.get("broken_cause") for r in rows if r.get("broken_cause")), None)


def rank(pairs: list) -> list:
    """``(incident, cause)`` pairs that fit, best supported first: confirmed before inferred, then by
    :data:`~forensics.findings.verdicts.MECHANISMS` (a mechanism the node shows before one that only fits),
    then the rules' order
    (:data:`forensics.findings.causes.RULES`), then the incident's order."""
    fit = [(n, inc, c) for n, (inc, c) in enumerate(pairs) if c.verdict in FITS]
    fit.sort(key=lambda x: (FITS.index(x[2].verdict), MECHANISMS.get(x[2].mechanism, 1), _ORDER.get(x[2].kind, 99), x[0]))
    return [(inc, c) for _, inc, c in fit]


def headline(incidents, exposed: dict) -> dict:
    """The report's answer in one line, from the causes and the exposure together:
    ``{"verdict": "confirmed" | "inferred" | "undetermined" | "none", "text": str, "cause", "incident",
    "severity", "remedy"}`` (the last four only when a cause fits).

    confirmed / inferred: the best-supported cause that fits across every incident and every class
    (:func:`rank`), its contradictions said, the other causes that fit named, and the causes that
    happened in the window but could not have done it named as ruled out (never hidden); its rule's
    remedy and severity (``node``: the node's GPU or driver needs action first). undetermined: an
    incident or a broken container and no cause that fits (all excluded reads "none of the known causes
    fits"); none: no incident and nothing broken. Never "excluded". Containers broken by inference
    (``broken_basis`` in :data:`INFERRED`) open no incident; with no incident they make the headline
    "inferred", naming the cause the exposure inferred it from (``broken_cause``). Raises nothing for
    missing keys."""
    broken = [r for r in exposed.get("containers") or [] if r.get("broken")]
    lost = _lost(exposed)
    causes = [(inc, c) for inc in incidents for c in inc.causes]
    ranked = rank(causes)
    if ranked:
        inc, c = ranked[0]
        said = "; the sources contradict each other (see the cause)" if c.contradictions else ""
        also = [f"{TITLES.get(x.kind, x.kind)} ({i.id}, {x.verdict})" for i, x in ranked[1:4] if (i, x) != (inc, c)]
        out = [f"ruled out though it happened: {TITLES.get(x.kind, x.kind)} ({i.id})" for i, x in causes
               if happened_but_ruled_out(x)]
        text = (f"{c.verdict}: {TITLES.get(c.kind, c.kind)} ({inc.id}){said}"
                + (f"; also fits: {', '.join(also)}" if also else "") + "".join(f"; {o}" for o in dict.fromkeys(out))
                + lost)
        rule = RULES.get(c.kind)
        return {"verdict": c.verdict, "text": text, "cause": c.kind, "incident": inc.id,
                "severity": rule.severity if rule else None, "remedy": c.remedy,
                "broke": broke(incidents, exposed), "ruled_out": list(dict.fromkeys(
                    TITLES.get(x.kind, x.kind) for _, x in causes if happened_but_ruled_out(x)))}
    if not causes:
        if broken and all(r.get("broken_basis") in INFERRED for r in broken):
            first = min((r["broken_evidence"][0] for r in broken if r.get("broken_evidence")),
                        key=lambda e: e.get("at") or "", default={})
            names = sorted({f"{r.get('namespace') or ''}/{r.get('pod') or r.get('id')}" for r in broken})
            return {"verdict": "inferred", "text": f"inferred: {TITLES.get(_broken_cause(broken), 'an unknown cause')} "
                    f"(its {first.get('source') or 'evidence'} line at {first.get('at')}, after the containers were "
                    f"created) most likely took the GPU of {', '.join(names[:3])}{' and more' if len(names) > 3 else ''}"
                    f"{lost}; --probe would settle it"}
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


def causes_checked(incidents) -> list[dict]:
    """analysis.json's ``causes_checked``: one row per rule of :data:`forensics.findings.causes.RULES`, in
    its order: ``{"kind", "title", "explains", "needs", "incidents": [{"incident", "verdict", "mechanism",
    "reason", "evidence" (count), "gaps"}]}``, so the reader sees every cause ruled in or out, and why."""
    return [{"kind": k, "title": r.title, "explains": sorted(r.explains), "needs": list(r.needs),
             "incidents": [{"incident": inc.id, "verdict": c.verdict, "mechanism": c.mechanism, "reason": c.reason,
                            "evidence": len(c.evidence), "gaps": c.gaps}
                           for inc in incidents for c in inc.causes if c.kind == k]}
            for k, r in RULES.items()]


#: context kinds (``KINDS[kind].context``) are kept in ``timeline[]`` only this near an incident window
#: (the correlator sees all of them; ``gpu-forensics timeline`` prints all of them): one dpkg.log line each
#: would swamp the JSON
CONTEXT_MARGIN = timedelta(hours=1)


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
    mark_duplicates(events)  # one printk in the journal, kern.log and /dev/kmsg counts once
    m = bundle.manifest
    artifacts = bundle.artifacts()
    exposed = _exposure(facts, events, artifacts, problems)
    incidents, cov = correlate(m, events, coverage, facts, exposed, facts.get("metrics"), nf.tz)
    incidents = by_certainty(incidents)
    tz = nf.tz
    _mark_windows(events, incidents)
    timeline, omitted = _timeline(events, incidents, tz, full_timeline)
    manifest_bytes = bundle.path("manifest.json").read_bytes()
    out = {
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
        "bundle": {"path": str(bundle.source), "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
                   "command_line": m.get("command_line"), "collection": m.get("collection"),
                   "tool_version": m.get("tool_version"), "redaction": m.get("redaction"),
                   "artifacts": [a.to_json() for a in artifacts],
                   "missing": [a.to_json() for a in artifacts if a.status in (Status.UNREADABLE, Status.ERROR)]},
        "timeline": timeline,
        "timeline_omitted": omitted,
    }
    # the report never contradicts itself; should it, the breach is shown with the problems, never hidden
    problems.extend({"artifact": "analysis", "message": f"the report contradicts itself: {said}"}
                    for said in contradictions(out))
    return out


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
