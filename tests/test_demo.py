"""The embedded sample node end to end: `gpu-forensics demo` gives the issue's verdicts."""
from __future__ import annotations

import json
import re

import pytest

from forensics.ops.cli import main
from forensics.bundle import verify


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--out", str(out)]) == 0
    return out, json.loads((out / "analysis.json").read_text())


def _causes(inc):
    return {c["kind"]: c for c in inc["causes"]}


def test_september_reload_confirmed_and_requested_by_snapd(demo):
    _, a = demo
    sept = [i for i in a["incidents"] if i["window"]["end"].startswith("2026-09-02")]
    assert len(sept) == 1
    inc = sept[0]
    assert inc["window"] == {"start": "2026-09-02T04:04:58Z", "end": "2026-09-02T04:05:27Z",
                             "start_local": "2026-09-02T13:04:58+09:00", "end_local": "2026-09-02T13:05:27+09:00"}
    c = _causes(inc)
    assert c["daemon-reload"]["verdict"] == "confirmed"
    assert c["daemon-reload"]["at"].startswith("2026-09-02T04:05:13")
    assert c["daemon-reload"]["requested_by"] == {"unit": "snapd.service", "pid": 48211, "comm": "systemctl",
                                                  "basis": "caller-line"}
    assert c["package-transaction"]["verdict"] == "excluded"
    assert c["reboot"]["verdict"] == "excluded"


def test_july_reload_inferred_with_the_journal_gap_named(demo):
    _, a = demo
    # dated from the metrics: DCGM last seen 2026-07-11 12:34 KST while its exporter kept answering
    july = [i for i in a["incidents"] if i["window"]["start"].startswith("2026-07")]
    assert len(july) == 1 and july[0]["origin"] == "metrics"
    july = july[0]
    assert july["window"]["start_local"] == "2026-07-11T12:34:00+09:00"
    assert july["window"]["end"] == "2026-07-11T03:35:00Z"  # first exporter scrape without DCGM series
    assert any("capacity already 0" in n and "2026-08-02T00:00:00+09:00" in n for n in july["notes"])
    c = _causes(july)
    assert c["daemon-reload"]["verdict"] == "inferred"
    assert any("journal holds data from 2026-07-16T15:00:05Z only" in g for g in c["daemon-reload"]["gaps"])
    assert c["package-transaction"]["verdict"] == "excluded"
    assert c["reboot"]["verdict"] == "excluded"


def test_report_html_opens_with_the_verdicts(demo):
    out, a = demo
    html = (out / "report.html").read_text()
    first_h2 = html.index("<h2")
    assert html[first_h2:].startswith('<h2 id="verdicts">Verdicts</h2>')
    assert "CONFIRMED at 2026-09-02 13:05:13 +09:00 (04:05:13 UTC), requested by snapd.service" in html
    assert "INFERRED, not confirmed" in html
    assert re.search(r"journal holds data from 2026-07-16T15:00:05Z only", html)
    md = (out / "report.md").read_text()
    assert "**confirmed**" in md and a["bundle"]["manifest_sha256"] in md


def test_demo_bundle_verifies_and_records_its_gaps(demo):
    out, a = demo
    bundles = [p for p in out.iterdir() if p.name.startswith("bundle-") and p.is_dir()]
    assert len(bundles) == 1 and verify(bundles[0]) == []
    gaps = {g["source"]: g for g in a["gaps"]}
    assert gaps["journal"]["covers"]["start"] == "2026-07-16T15:00:05Z"
    assert gaps["dpkg"]["covers"]["start"] == "2025-08-21T01:02:11Z"
    assert gaps["unattended-upgrades"]["covers"]["start"] is None
    assert a["timezone"]["name"] == "Asia/Seoul" and a["node"] == "node3-gpu"
    assert a["node_facts"]["systemd_version"] == "255.4-1ubuntu8.6"


def test_demo_metrics_retention_gap_and_alert_audit(demo):
    import subprocess
    out, a = demo
    gaps = {g["source"]: g for g in a["gaps"]}
    assert gaps["prometheus"]["covers"]["start"] == "2026-07-02T22:00:00Z"
    assert "retention 150d" in gaps["prometheus"]["reason"]
    audit = a["metrics"]["alert_audit"]
    assert audit["audited"] and audit["gap"] == {"capacity_zero": True, "dcgm_absent": True}
    html = (out / "report.html").read_text()
    assert '<h2 id="alerts">Would the alerts have fired?</h2>' in html
    rules = out / "gpu-alerts.rules.yml"
    r = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS: 3 rules found" in r.stdout


def test_report_md_is_paste_ready_under_4000_characters(demo):
    out, a = demo
    md = (out / "report.md").read_text()
    assert len(md) < 4000
    assert md.count("\n- Incident ") == len(a["verdicts"])
    assert "| I1 " in md and "**inferred**" in md and "**confirmed**" in md


def test_timesketch_export_has_the_columns_timesketch_imports(demo, capsys):
    import json as _json
    out, _a = demo
    bundle = next(p for p in out.iterdir() if p.name.startswith("bundle-") and p.is_dir())
    capsys.readouterr()
    assert main(["timeline", str(bundle), "--format", "timesketch"]) == 0
    rows = [_json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert all({"message", "datetime", "timestamp_desc", "timestamp"} <= r.keys() for r in rows)
    reload = next(r for r in rows if r["data_type"] == "gpu_forensics:journal.reload")
    assert reload["datetime"].startswith("2026-09-02T04:05:13") and reload["timestamp_desc"] == "Reload Requested Time"
    assert reload["timestamp"] == 1788321913211000


def test_report_md_of_a_big_node_is_cut_but_keeps_the_bundle_hash(demo):
    from reports import render
    _out, a = demo
    big = dict(a, exposure=dict(a["exposure"], containers=a["exposure"]["containers"] * 200))
    md = render.markdown(big)
    assert len(md) < render.MD_LIMIT and "cut to fit a ticket" in md
    assert md.rstrip().endswith(f"`{a['bundle']['manifest_sha256']}`.")


def test_reports_written_piece_by_piece_are_the_reports(demo, tmp_path):
    from reports import render
    _out, a = demo
    written = render.write(a, tmp_path / "r.html", tmp_path / "r.md", tmp_path / "r.json")
    assert [p.name for p in written] == ["gpu-alerts.rules.yml", "r.html", "r.md", "r.json"]
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == render.to_json(a)
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == a
    stamp = re.compile(r"report generated \S+")  # the only part that moves between two renderings
    assert stamp.sub("", (tmp_path / "r.html").read_text(encoding="utf-8")) == stamp.sub("", render.html(a))
