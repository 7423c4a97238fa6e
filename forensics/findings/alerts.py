"""Alert audit: would the cluster's alert rules have fired when a node's GPUs went missing?

Fed by the rules the metrics collector returns (:func:`audit_of` its Reading's facts).

Two failure states matter (../shared/research/formats.md §3-4):
- **GPU capacity 0**: ``kube_node_status_capacity{resource="nvidia_com_gpu"}`` (or ``allocatable``)
  still exists, with the value 0;
- **DCGM metrics absent**: dcgm-exporter lost the GPU, so its ``DCGM_FI_*`` series stop while its
  target stays up. A rule that needs the series to exist (``DCGM_FI_DEV_GPU_TEMP > 85``) returns
  nothing and goes silent along with it; only ``absent()``/``absent_over_time()``, an ``unless`` whose
  right side is the DCGM series, or an ``or vector(…)`` fallback can fire.

This is a documented **heuristic over the PromQL text**, not a PromQL parser: it looks for metric
names, ``absent(``, ``unless``, ``vector(`` and comparisons with a number (``== 0``, ``< 1``), and
resolves recording rules one level deep. Unusual expressions can be misjudged; every verdict carries
its reason so a reader can check it against the query.

It also writes the rules that would have caught the seed case, as a Prometheus rule file whose
``groups:`` list is ready to go under ``spec:`` of a Prometheus Operator ``PrometheusRule``
(rule file format: prometheus/prometheus docs/configuration/alerting_rules.md; ``promtool check
rules`` accepts it).
"""
from __future__ import annotations

import operator
import re
from pathlib import Path

import yaml

HEURISTIC = ("heuristic over the PromQL text (no PromQL parser): metric names, absent()/absent_over_time(), "
             "unless, or vector(), and comparisons with a number; recording rules resolved one level")
DCGM = re.compile(r"\bDCGM_FI_\w+")
CAPACITY = re.compile(r"\bkube_node_status_(?:capacity|allocatable)\b")
COMPARISON = re.compile(r"(==|!=|<=|>=|<|>)\s*(?:bool\s+)?(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\b")
OPS = {"==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
DCGM_METRIC = "DCGM_FI_DEV_GPU_UTIL"


def _calls(text: str, fn: str) -> list[str]:
    """The argument text of every ``fn(...)`` call in ``text`` (balanced parentheses)."""
    out = []
    for m in re.finditer(rf"\b{fn}\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


def _dcgm_absent(q: str) -> tuple[bool, str]:
    """Does ``q`` fire when the DCGM series are absent (exporter up, metrics gone)? -> (verdict, reason)."""
    if any(DCGM.search(a) for f in ("absent", "absent_over_time") for a in _calls(q, f)):
        return True, "absent()/absent_over_time() over a DCGM metric fires when the series are gone"
    parts = re.split(r"\bunless\b", q)
    if len(parts) > 1 and any(DCGM.search(p) for p in parts[1:]) and not DCGM.search(parts[0]):
        return True, "'unless <DCGM series>' fires when the DCGM series are gone and the left side exists"
    if re.search(r"\bor\b[^()]*\bvector\s*\(", q):
        return True, "an 'or vector(…)' fallback gives a value even when the DCGM series are gone"
    if re.search(r"\bup\b\s*\{[^}]*dcgm", q, re.I) and not DCGM.search(q):
        return False, "watches the exporter target's up, which stays 1 while the DCGM metrics are gone"
    return False, "needs the DCGM series to exist: it returns nothing, and cannot fire, when they are gone"


def _capacity_zero(q: str) -> tuple[bool, str]:
    """Does ``q`` fire when GPU capacity/allocatable is 0 (the series exists with value 0)?"""
    if "nvidia" not in q:
        return False, "does not select the nvidia_com_gpu resource"
    comps = COMPARISON.findall(q)
    if not comps:
        return True, "no comparison: returns the capacity series whatever its value, 0 included"
    hits = [f"{op} {num}" for op, num in comps if OPS[op](0.0, float(num))]
    if hits:
        return True, f"'{hits[0]}' holds for a capacity of 0"
    return False, f"'{comps[0][0]} {comps[0][1]}' does not hold for a capacity of 0"


def audit(rules_data: dict | None) -> dict:
    """Audit the ``data`` of a ``/api/v1/rules`` answer (``{"groups": [{"name", "file", "rules": […]}]}``,
    docs/querying/api.md "Rules").

    Returns ``{"audited", "heuristic", "alerting_rules", "recording_rules", "fires_when_capacity_zero":
    [names], "fires_when_dcgm_absent": [names], "silent_when_dcgm_absent": [names], "gpu_rules": [{"name",
    "group", "file", "query", "for_s", "dcgm_absent", "capacity_zero", "reasons"}], "gap":
    {"capacity_zero": bool, "dcgm_absent": bool}, "summary", "suggested_rules_yaml"}``. ``gap`` is True
    when no rule fires in that state. Never raises for a malformed answer (``audited`` is then False).
    """
    groups = (rules_data or {}).get("groups") if isinstance(rules_data, dict) else None
    if not isinstance(groups, list):
        return {"audited": False, "reason": "no rule groups in the answer", "suggested_rules_yaml": rules_yaml()}
    rules = [(g.get("name"), g.get("file"), r) for g in groups for r in g.get("rules") or []]
    recorded = {r.get("name"): r.get("query", "") for _, _, r in rules if r.get("type") == "recording"}
    out = {"audited": True, "heuristic": HEURISTIC, "alerting_rules": 0, "recording_rules": len(recorded),
           "fires_when_capacity_zero": [], "fires_when_dcgm_absent": [], "silent_when_dcgm_absent": [],
           "gpu_rules": []}
    for group, file, r in rules:
        if r.get("type") != "alerting":
            continue
        out["alerting_rules"] += 1
        q = r.get("query", "")
        expanded = q + "".join(f" {body}" for name, body in recorded.items()
                               if name and re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", q))
        refs_dcgm, refs_cap = bool(DCGM.search(expanded)), bool(CAPACITY.search(expanded))
        refs_up = bool(re.search(r"\bup\b\s*\{[^}]*dcgm", expanded, re.I))
        if not (refs_dcgm or refs_cap or refs_up):
            continue
        rec = {"name": r.get("name"), "group": group, "file": file, "query": q, "for_s": r.get("duration"),
               "state": r.get("state"), "dcgm_absent": None, "capacity_zero": None, "reasons": []}
        if refs_dcgm or refs_up:
            rec["dcgm_absent"], why = _dcgm_absent(expanded)
            rec["reasons"].append(f"DCGM metrics absent: {why}")
            (out["fires_when_dcgm_absent"] if rec["dcgm_absent"] else out["silent_when_dcgm_absent"]).append(rec["name"])
        if refs_cap:
            rec["capacity_zero"], why = _capacity_zero(expanded)
            rec["reasons"].append(f"GPU capacity 0: {why}")
            if rec["capacity_zero"]:
                out["fires_when_capacity_zero"].append(rec["name"])
        out["gpu_rules"].append(rec)
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
    return f"Of {a['alerting_rules']} alerting rules: " + "; ".join(parts) + "."


def suggested_rules(dcgm_metric: str = DCGM_METRIC, resource: str = "nvidia_com_gpu") -> dict:
    """The rule groups that would have caught the seed case (a dict ready for YAML):
    ``GPUCapacityZero`` (capacity 0 for 5 m), ``DCGMMetricsAbsent`` (``absent()`` cluster-wide, 10 m)
    and ``DCGMMetricsMissingOnGPUNode`` (a node with GPU capacity but no DCGM series, 10 m; it maps
    dcgm-exporter's ``Hostname``/``hostname`` label to ``node``, so the exporter must set it to the
    node name, as the Helm chart's ``NODE_NAME`` does)."""
    cap = f'kube_node_status_capacity{{resource="{resource}"}}'
    per_node = " or ".join(f'count by (node) (label_replace({dcgm_metric}, "node", "$1", "{lab}", "(.+)"))'
                           for lab in ("Hostname", "hostname"))
    return {"groups": [{"name": "gpu-forensics.rules", "rules": [
        {"alert": "GPUCapacityZero", "expr": f"{cap} == 0", "for": "5m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "Node {{ $labels.node }} reports nvidia.com/gpu capacity 0",
                         "description": "kube-state-metrics reports nvidia.com/gpu capacity 0 on {{ $labels.node }}: "
                                        "the device plugin lost the GPUs. Pods already running there may have "
                                        "lost device access too."}},
        {"alert": "DCGMMetricsAbsent", "expr": f"absent({dcgm_metric})", "for": "10m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": f"No {dcgm_metric} series anywhere: GPU alerts that need DCGM metrics are silent",
                         "description": "dcgm-exporter exports no DCGM metrics. Every alert written as "
                                        "'DCGM_FI_... > threshold' cannot fire now."}},
        {"alert": "DCGMMetricsMissingOnGPUNode", "expr": f"{cap} > 0 unless on (node) ({per_node})", "for": "10m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "Node {{ $labels.node }} has GPUs but no DCGM metrics",
                         "description": "The node reports nvidia.com/gpu capacity but dcgm-exporter exports no "
                                        f"{dcgm_metric} for it: the exporter (and possibly the pods) lost the GPUs."}},
    ]}]}


def rules_yaml(**kw) -> str:
    """:func:`suggested_rules` as YAML text with a header comment (pyyaml ``safe_dump``)."""
    head = ("# Alert rules suggested by gpu-forensics: they fire when GPU capacity is 0 and when the DCGM\n"
            "# metrics are absent (alerts that need DCGM metrics to exist go silent with them).\n"
            "# Prometheus rule file; for the Prometheus Operator, put the groups: list under spec: of a\n"
            "# monitoring.coreos.com/v1 PrometheusRule. Check with: promtool check rules FILE\n")
    return head + yaml.safe_dump(suggested_rules(**kw), sort_keys=False, width=120)


def write_rules(path: str | Path, **kw) -> Path:
    """Write :func:`rules_yaml` to ``path`` and return it. Raises ``OSError`` when it cannot be written."""
    p = Path(path)
    p.write_text(rules_yaml(**kw), encoding="utf-8")
    return p
