"""deploy/alerts/: the shipped alert rules, and the alert audit's PromQL parsing.

The rules file and the PrometheusRule in the tree are exactly what their one home
(forensics/findings/alert_rules.py) renders, their groups are the same, the report's suggested rules are
the shipped GPU group, ``promtool check rules`` accepts them and ``promtool test rules`` runs the unit
tests of every alert on real series (deploy/alerts/gpu-forensics.rules.test.yml), which fail when a rule
is wrong. The audit (forensics/findings/alerts.py) parses expressions with promql-parser: the cases the
text heuristic it replaced got wrong are judged right, an unparsable rule is named and undetermined.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from forensics.findings import alert_rules, alerts

PROJECT = Path(__file__).resolve().parent.parent
ALERTS = PROJECT / "deploy" / "alerts"
PROMTOOL = "/usr/bin/promtool"
CONTRACT = {"gpu_forensics_container_gpu_access", "gpu_forensics_container_at_risk", "gpu_forensics_build_info",
            "gpu_forensics_last_sweep_timestamp_seconds"}


def _promtool(*args: str, cwd: Path = ALERTS) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_shipped_files_are_generated_from_one_home_and_share_their_groups():
    for name, text in alert_rules.shipped_files().items():
        assert (ALERTS / name).read_text() == text, f"run python3 deploy/alerts/generate.py ({name} differs)"
    plain = yaml.safe_load((ALERTS / alert_rules.RULES_FILE).read_text())
    pr = yaml.safe_load((ALERTS / alert_rules.PROMRULE_FILE).read_text())
    assert pr["apiVersion"] == "monitoring.coreos.com/v1" and pr["kind"] == "PrometheusRule"
    assert pr["spec"]["groups"] == plain["groups"]
    # the report suggests the shipped GPU group itself, and not the watch group (absent() of the agent's
    # metrics would fire for ever on a cluster without it)
    suggested = yaml.safe_load(alerts.rules_yaml())
    assert suggested["groups"] == [plain["groups"][0]] and plain["groups"][0]["name"] == "gpu-forensics.gpu"
    names = {g["name"]: [r["alert"] for r in g["rules"]] for g in plain["groups"]}
    assert names == {"gpu-forensics.gpu": ["GPUCapacityZero", "DCGMMetricsAbsent", "DCGMMetricsMissingOnGPUNode"],
                     "gpu-forensics.watch": ["GPUContainerAccessLost", "GPUContainerAtRisk", "GPUForensicsWatchAbsent",
                                             "GPUForensicsWatchDown", "GPUForensicsWatchMissingOnGPUNode",
                                             "GPUForensicsSweepStale"]}


def test_every_rule_has_for_severity_and_annotations_and_names_the_contracts_metrics():
    doc = alert_rules.shipped_rules()
    rules = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    severities = {n: r["labels"]["severity"] for n, r in rules.items()}
    assert severities["GPUContainerAccessLost"] == "critical" and severities["GPUContainerAtRisk"] == "warning"
    assert rules["GPUCapacityZero"]["expr"] == 'kube_node_status_capacity{resource="nvidia_com_gpu"} == 0'
    assert rules["DCGMMetricsAbsent"]["expr"] == "absent(DCGM_FI_DEV_GPU_TEMP)"
    assert rules["GPUContainerAccessLost"]["expr"] == "gpu_forensics_container_gpu_access == 0"
    assert rules["GPUContainerAtRisk"]["expr"] == "gpu_forensics_container_at_risk == 1"
    assert rules["GPUForensicsWatchAbsent"]["expr"] == "absent(gpu_forensics_build_info)"
    used = {m for r in rules.values() for m in CONTRACT if m in r["expr"]}
    assert used == CONTRACT
    readme = (PROJECT / "docs/usage.md").read_text()  # the runbook: docs/usage.md, "Alerts and the watch agent"
    anchor = alert_rules.RUNBOOK.split("#", 1)[1]
    assert "\n## Alerts and the watch agent\n" in readme and anchor == "alerts-and-the-watch-agent"
    for name, r in rules.items():
        assert r["for"] and set(r["annotations"]) == {"summary", "description", "runbook_url"}, name
        assert r["annotations"]["runbook_url"] == alert_rules.RUNBOOK
        assert f"`{name}`" in readme, f"docs/usage.md's runbook names {name}"


def test_promtool_check_rules_accepts_both_rule_files(tmp_path):
    p = _promtool("check", "rules", alert_rules.RULES_FILE)
    assert p.returncode == 0 and "SUCCESS: 9 rules found" in p.stdout, p.stdout + p.stderr
    spec = tmp_path / "spec.yml"  # the PrometheusRule's spec is a rule file too
    spec.write_text(yaml.safe_dump(yaml.safe_load((ALERTS / alert_rules.PROMRULE_FILE).read_text())["spec"]))
    p = _promtool("check", "rules", str(spec))
    assert p.returncode == 0 and "SUCCESS: 9 rules found" in p.stdout, p.stdout + p.stderr


def test_promtool_unit_tests_cover_every_alert_firing_and_not_firing():
    tests = yaml.safe_load((ALERTS / "gpu-forensics.rules.test.yml").read_text())
    cases = [c for t in tests["tests"] for c in t["alert_rule_test"]]
    names = {r["alert"] for g in alert_rules.shipped_rules()["groups"] for r in g["rules"]}
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == names  # each alert fires in some test
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == names  # and is silent in another
    p = _promtool("test", "rules", "gpu-forensics.rules.test.yml")
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def test_the_unit_tests_fail_on_a_wrong_rule(tmp_path):
    """The unit tests are not vacuous: ``== 1`` for access lost, or a shorter ``for:``, fails them."""
    for old, new in (("gpu_forensics_container_gpu_access == 0", "gpu_forensics_container_gpu_access == 1"),
                     ("    for: 5m\n", "    for: 4m\n")):
        shutil.copy(ALERTS / "gpu-forensics.rules.test.yml", tmp_path)
        text = (ALERTS / alert_rules.RULES_FILE).read_text()
        assert old in text
        (tmp_path / alert_rules.RULES_FILE).write_text(text.replace(old, new, 1))
        p = _promtool("test", "rules", "gpu-forensics.rules.test.yml", cwd=tmp_path)
        assert p.returncode != 0 and "FAILED" in p.stdout + p.stderr, (old, p.stdout)


def test_generate_script_rewrites_the_files(tmp_path):
    shutil.copytree(PROJECT / "forensics", tmp_path / "forensics", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "deploy" / "alerts").mkdir(parents=True)
    shutil.copy(ALERTS / "generate.py", tmp_path / "deploy" / "alerts")
    p = subprocess.run([sys.executable, str(tmp_path / "deploy/alerts/generate.py")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    for name in (alert_rules.RULES_FILE, alert_rules.PROMRULE_FILE):
        assert (tmp_path / "deploy/alerts" / name).read_text() == (ALERTS / name).read_text()


# -- the audit: parsed, not read as text ----------------------------------------------------------------
def _audit(*rules: tuple[str, str], recording: tuple[tuple[str, str], ...] = ()) -> dict:
    data = {"groups": [{"name": "g", "file": "g.yml", "rules": [
        *({"type": "recording", "name": n, "query": q} for n, q in recording),
        *({"type": "alerting", "name": n, "query": q} for n, q in rules)]}]}
    return alerts.audit(data)


def _verdicts(a: dict) -> dict:
    return {r["name"]: (r["dcgm_absent"], r["capacity_zero"]) for r in a["gpu_rules"]}


def test_parser_gets_right_what_the_text_heuristic_got_wrong():
    """Each of these the heuristic judged from the text (shown in the comment); the evaluation of the parsed
    expression judges what Prometheus would do in that state."""
    a = _audit(
        # heuristic: "an 'or vector(…)' fallback gives a value" -> fires. vector(0) > 0 is empty: silent
        ("FallbackCompared", "(sum(DCGM_FI_DEV_GPU_UTIL) or vector(0)) > 0"),
        # heuristic: absent() over a text with DCGM_FI_ in it -> fires. It is a label value; up stays 1
        ("NameInAString", 'absent(label_replace(up{job="dcgm-exporter"}, "metric", "DCGM_FI_DEV_GPU_TEMP", "", ""))'),
        # heuristic: '< 8' holds for 0 -> fires. '!= 0' removes the 0 first: silent
        ("Band", 'kube_node_status_capacity{resource="nvidia_com_gpu"} != 0 '
                 'and kube_node_status_capacity{resource="nvidia_com_gpu"} < 8'),
        # heuristic: "nvidia" in the text, '== 0' -> a GPU capacity rule that fires. It excludes the GPU
        ("NotTheGPU", 'kube_node_status_capacity{resource!="nvidia_com_gpu"} == 0'),
        # heuristic: recording rules one level deep -> not a GPU rule. Two levels down it is DCGM's
        ("TwoLevels", "node:gpu_temp:max > 90"),
        # and the right ones stay right
        ("Absent", "absent(DCGM_FI_DEV_GPU_TEMP)"),
        ("Hot", "DCGM_FI_DEV_GPU_TEMP > 85"),
        ("NoDCGMAnywhere", "(count(DCGM_FI_DEV_GPU_UTIL) or vector(0)) == 0"),
        recording=(("gpu:temp", "DCGM_FI_DEV_GPU_TEMP"), ("node:gpu_temp:max", "max by (node) (gpu:temp)")))
    assert _verdicts(a) == {"FallbackCompared": (False, None), "NameInAString": (False, None), "Band": (None, False),
                            "TwoLevels": (False, None), "Absent": (True, None), "Hot": (False, None),
                            "NoDCGMAnywhere": (True, None)}
    rec = {r["name"]: r for r in a["gpu_rules"]}
    assert rec["NameInAString"]["depends_on"] == ["dcgm-up"]  # the up series only
    assert "'> 0' does not hold: vector(0) always returns a value" in rec["FallbackCompared"]["reasons"][0]
    assert "'!= 0' does not hold" in rec["Band"]["reasons"][0]
    assert a["fires_when_dcgm_absent"] == ["Absent", "NoDCGMAnywhere"] and a["fires_when_capacity_zero"] == []
    assert a["gap"] == {"capacity_zero": True, "dcgm_absent": False} and a["undetermined"] == []


def test_unparsable_and_undetermined_rules_are_named():
    a = _audit(("Broken", "DCGM_FI_DEV_GPU_TEMP{ > 85"), ("NotGPUBroken", "rate(x[5m) > 1"),
               ("AnyResource", "kube_node_status_capacity == 0"),
               ("TwoVectors", "DCGM_FI_DEV_GPU_TEMP > on (gpu) DCGM_FI_DEV_MEMORY_TEMP"),
               ("Capacity", 'sum by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"}) < 1'))
    assert [u["name"] for u in a["unparsed"]] == ["Broken", "NotGPUBroken"]
    assert "inside braces" in a["unparsed"][0]["error"]
    assert a["undetermined"] == ["Broken", "AnyResource"]  # NotGPUBroken names no GPU metric
    assert _verdicts(a) == {"Broken": (None, None), "AnyResource": (None, None), "TwoVectors": (False, None),
                            "Capacity": (None, True)}
    assert "undetermined: Broken, AnyResource" in a["summary"]
    rec = {r["name"]: r for r in a["gpu_rules"]}
    assert rec["Broken"]["reasons"] == ["undetermined: the expression does not parse "
                                        "(unexpected character inside braces: '>')"]


def test_the_shipped_gpu_rules_are_judged_to_fire_in_their_state():
    rules = [(r["alert"], r["expr"]) for r in alert_rules.seed_group()["rules"]]
    a = _audit(*rules)
    assert _verdicts(a) == {"GPUCapacityZero": (None, True), "DCGMMetricsAbsent": (True, None),
                            "DCGMMetricsMissingOnGPUNode": (True, False)}


def test_without_promql_parser_analysis_goes_on_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "promql_parser", None)  # import fails as where it is not installed
    import forensics.findings
    monkeypatch.delitem(sys.modules, "forensics.findings.promql_eval", raising=False)
    monkeypatch.delattr(forensics.findings, "promql_eval", raising=False)
    a = _audit(("Hot", "DCGM_FI_DEV_GPU_TEMP > 85"))
    assert a == {"audited": False, "reason": "promql-parser is not installed (pip install 'gpu-forensics[report]')",
                 "suggested_rules_yaml": alerts.rules_yaml()}
