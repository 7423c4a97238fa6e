"""Alert audit: would the cluster's alert rules have fired when a node's GPUs went missing?

Fed by the rules the metrics collector returns (:func:`audit_of` its Reading's facts).

Two failure states matter (docs/sources.md "Prometheus", "DCGM exporter and kube-state-metrics"):
- **GPU capacity 0**: ``kube_node_status_capacity{resource="nvidia_com_gpu"}`` (or ``allocatable``)
  still exists, with the value 0;
- **DCGM metrics absent**: dcgm-exporter lost the GPU, so its ``DCGM_FI_*`` series stop while its
  target stays up. A rule that needs the series to exist (``DCGM_FI_DEV_GPU_TEMP > 85``) returns
  nothing and goes silent along with it; ``absent()``, an ``unless`` whose right side is the DCGM
  series, or an ``or vector(1)`` fallback can fire.

Each rule's expression is parsed with ``promql-parser`` (Prometheus v2.45's grammar) and evaluated in
each state over its syntax tree (:mod:`forensics.findings.promql_eval`): the metrics a rule depends on
are its selectors' names (a name inside a label value or a ``label_replace`` string is not one), through
recording rules several levels deep. A rule fires (True), stays silent (False), or is undetermined
(None: its answer depends on values or label matching the expression does not fix, or it does not
parse: named in ``unparsed``). Every verdict carries its reason. promql-parser belongs to the laptop's
``report`` extra; where it is not installed the audit says so (``audited`` False) and analysis goes on.

The rules that would have caught the seed case come from :mod:`forensics.findings.alert_rules`.
"""
from __future__ import annotations

import re

from forensics.findings.alert_rules import RESOURCE, rules_yaml, suggested_rules, write_rules
from forensics.timeutil import human, parse_iso
from forensics.words import count_of

__all__ = ["audit", "audit_of", "recorded_of", "rules_yaml", "suggested_rules", "write_rules"]
METHOD = ("each expression parsed with promql-parser and evaluated in each state: DCGM series gone (exporter up, "
          "GPUs still advertised) and GPU capacity 0; other series taken to exist; recording rules resolved")
#: text fallback for an expression that does not parse: does it look like a GPU rule?
GPU_TEXT = re.compile(r"\bDCGM_FI_\w+|\bkube_node_status_(?:capacity|allocatable)\b|\bup\b\s*\{[^}]*dcgm", re.I)


def _judge(pe, expr, state: str, recorded: dict, resource: str) -> tuple[bool | None, str]:
    v = pe.Evaluator(state, recorded, resource).eval(expr)
    if v.kind == "some":
        return True, f"fires: {v.why}"
    if v.kind == "empty":
        return False, f"cannot fire: {v.why}"
    return None, f"undetermined: {v.why}" if v.kind == "unknown" else f"undetermined: the expression is a {v.kind}"


def audit(rules_data: dict | None, resource: str = RESOURCE) -> dict:
    """Audit the ``data`` of a ``/api/v1/rules`` answer (``{"groups": [{"name", "file", "rules": […]}]}``,
    docs/querying/api.md "Rules").

    Returns ``{"audited", "method", "alerting_rules", "recording_rules", "fires_when_capacity_zero":
    [names], "fires_when_dcgm_absent": [names], "silent_when_dcgm_absent": [names], "undetermined": [names],
    "unparsed": [{"name", "error"}], "gpu_rules": [{"name", "group", "file", "query", "for_s", "state",
    "depends_on": [selector kinds], "dcgm_absent", "capacity_zero", "reasons"}], "gap": {"capacity_zero":
    bool, "dcgm_absent": bool}, "summary", "suggested_rules_yaml"}``. ``gap`` is True when no rule is known
    to fire in that state (the summary names the undetermined ones). Never raises for a malformed
    answer (``audited`` is then False), nor where promql-parser is not installed.
    """
    groups = (rules_data or {}).get("groups") if isinstance(rules_data, dict) else None
    if not isinstance(groups, list):
        return {"audited": False, "reason": "no rule groups in the answer", "suggested_rules_yaml": rules_yaml()}
    try:
        from forensics.findings import promql_eval as pe
    except ImportError:
        return {"audited": False, "reason": "promql-parser is not installed (pip install 'gpu-forensics[report]')",
                "suggested_rules_yaml": rules_yaml()}
    rules = [(g.get("name"), g.get("file"), r) for g in groups for r in g.get("rules") or []]
    recorded = {}
    for _, _, r in rules:
        if r.get("type") == "recording" and r.get("name"):
            expr, err = pe.parse(r.get("query", ""))
            recorded[r["name"]] = expr if expr is not None else f"does not parse: {err}"
    out = {"audited": True, "method": METHOD, "alerting_rules": 0, "recording_rules": len(recorded),
           "fires_when_capacity_zero": [], "fires_when_dcgm_absent": [], "silent_when_dcgm_absent": [],
           "undetermined": [], "unparsed": [], "gpu_rules": []}
    for group, file, r in rules:
        if r.get("type") == "alerting":
            out["alerting_rules"] += 1
            _audit_rule(pe, out, group, file, r, recorded, resource)
    out["gap"] = {"capacity_zero": not out["fires_when_capacity_zero"],
                  "dcgm_absent": not out["fires_when_dcgm_absent"]}
    out["summary"] = _summary(out)
    out["suggested_rules_yaml"] = rules_yaml()
    return out


def audit_of(metrics: dict) -> dict | None:
    """The alert audit of the rules the metrics Reading collected (``facts["metrics"]["alert_rules"]``,
    collectors/metrics/): :func:`audit` of the stored answer's data; ``{"audited": False, "reason"}``
    when Prometheus answered other calls but not the rules one; ``None`` when no rules were asked for
    (no Prometheus answer at all, or only a dcgm-exporter scrape)."""
    rules = (metrics or {}).get("alert_rules")
    if rules is None:
        return None
    if not rules.get("answered"):
        return {"audited": False, "reason": "the rules answer is missing"}
    return audit(rules.get("data"))


def _audit_rule(pe, out: dict, group, file, r: dict, recorded: dict, resource: str) -> None:
    """Judge one alerting rule in each state its expression depends on, into the lists of ``out``; a rule
    that depends on no GPU series is left out, one that does not parse is named in ``unparsed``."""
    q = r.get("query", "")
    rec = {"name": r.get("name"), "group": group, "file": file, "query": q, "for_s": r.get("duration"),
           "state": r.get("state"), "depends_on": [], "dcgm_absent": None, "capacity_zero": None, "reasons": []}
    expr, err = pe.parse(q)
    if expr is None:
        out["unparsed"].append({"name": rec["name"], "error": err})
        if GPU_TEXT.search(q):
            rec["reasons"].append(f"undetermined: the expression does not parse ({err})")
            out["undetermined"].append(rec["name"])
            out["gpu_rules"].append(rec)
        return
    refs = pe.references(expr, recorded, resource)
    if not refs - {"unparsed-recording"}:
        return
    rec["depends_on"] = sorted(refs)
    judged = []
    if refs & {"dcgm", "dcgm-up"}:
        rec["dcgm_absent"], why = _judge(pe, expr, pe.DCGM_ABSENT, recorded, resource)
        rec["reasons"].append(f"DCGM metrics absent: {why}")
        judged.append(rec["dcgm_absent"])
        if rec["dcgm_absent"] is not None:
            (out["fires_when_dcgm_absent"] if rec["dcgm_absent"] else out["silent_when_dcgm_absent"]).append(rec["name"])
    if refs & {"gpu-capacity", "capacity-mixed"}:
        rec["capacity_zero"], why = _judge(pe, expr, pe.CAPACITY_ZERO, recorded, resource)
        rec["reasons"].append(f"GPU capacity 0: {why}")
        judged.append(rec["capacity_zero"])
        if rec["capacity_zero"]:
            out["fires_when_capacity_zero"].append(rec["name"])
    if None in judged or "unparsed-recording" in refs:
        out["undetermined"].append(rec["name"])
    out["gpu_rules"].append(rec)


def _summary(a: dict) -> str:
    parts = []
    if a["gap"]["dcgm_absent"]:
        silent = ", ".join(a["silent_when_dcgm_absent"]) or "none"
        parts.append(f"no alert rule fires when the DCGM metrics are absent (GPU rules that go silent with them: "
                     f"{silent})")
    else:
        parts.append(f"fires when the DCGM metrics are absent: {', '.join(a['fires_when_dcgm_absent'])}")
    if a["gap"]["capacity_zero"]:
        parts.append("no alert rule fires when GPU capacity is 0")
    else:
        parts.append(f"fires when GPU capacity is 0: {', '.join(a['fires_when_capacity_zero'])}")
    if a["undetermined"]:
        parts.append(f"undetermined: {', '.join(map(str, a['undetermined']))}")
    return f"Of {a['alerting_rules']} alerting rules: " + "; ".join(parts) + "."


def recorded_of(metrics: dict, audit_result: dict | None, tz=None) -> dict | None:
    """What Prometheus itself recorded of the node's alerts (``facts["metrics"]["alerts_recorded"]``,
    collectors/metrics/alerts.py), the answer a reader wants before the simulation: did an alert fire,
    when, for which GPU. Keeps the alerts a node label ties to this node, and the cluster-wide ones whose
    rule the audit counts as a GPU rule (``audit_result["gpu_rules"]``); the other cluster-wide ones are
    counted in ``left_out``. Returns ``{"summary", "basis", "alerts": [the kept records, firing first],
    "fired": [alertname], "left_out": int, "names_anywhere": int}``, or None for a bundle from before
    this query (or without Prometheus). Times in the summary are whole seconds in ``tz`` (the node's zone)."""
    rec = (metrics or {}).get("alerts_recorded")
    if not isinstance(rec, dict):
        return None
    gpu_names = {r.get("name") for r in (audit_result or {}).get("gpu_rules") or []}
    kept = [a for a in rec.get("alerts") or [] if a.get("node_bound") or a.get("alertname") in gpu_names]
    kept.sort(key=lambda a: (a.get("alertstate") != "firing", (a.get("episodes") or [{}])[0].get("start") or ""))
    fired = list(dict.fromkeys(a["alertname"] for a in kept if a.get("alertstate") == "firing"))
    out = {"basis": rec.get("basis"), "alerts": kept, "fired": fired,
           "left_out": len(rec.get("alerts") or []) - len(kept), "names_anywhere": len(rec.get("names_anywhere") or [])}
    out["summary"] = _recorded_summary(rec, kept, out, tz)
    return out


def _recorded_summary(rec: dict, kept: list[dict], out: dict, tz) -> str:
    if not rec.get("names_answered"):
        return "Prometheus did not answer which alerts it recorded, so whether one fired is unknown."
    if not out["names_anywhere"]:
        return ("Prometheus recorded no alert at all in its window (no ALERTS series): its rules are evaluated "
                "elsewhere (Thanos Ruler, Mimir's ruler, another Prometheus), or none was ever pending or firing.")
    if not kept:
        return (f"No alert was pending or firing for this node or its GPUs in Prometheus's window "
                f"({count_of(out['names_anywhere'], 'alert name')} recorded for other targets).")
    said = []
    for a in kept:
        who = f" for GPU {a['gpu']}" if a.get("gpu") else (" (cluster-wide)" if not a.get("node_bound") else "")
        eps = a.get("episodes") or []
        first = eps[0] if eps else {}
        when = human(parse_iso(first["start"]), tz) if first.get("start") else "an unknown time"
        end = "still active at collection" if eps and eps[-1].get("open") else (
            f"last until {human(parse_iso(eps[-1]['end']), tz)}" if eps and eps[-1].get("end") else "")
        said.append(f"{a['alertname']} {a.get('alertstate')}{who} from {when}"
                    + (f" ({count_of(len(eps), 'episode')})" if len(eps) > 1 else "") + (f", {end}" if end else ""))
    head = (f"Prometheus recorded {count_of(len(out['fired']), 'alert')} firing for this node"
            if out["fired"] else "Prometheus recorded no alert firing for this node, only pending ones")
    return f"{head}: " + "; ".join(said) + "."
