"""The embedded sample node end to end: `gpu-forensics demo` gives the issue's verdicts."""
from __future__ import annotations

import json
import re

import pytest

from forensics.cli import main
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
    july = [i for i in a["incidents"] if i["label"] == "july-outage"][0]
    assert july["window"]["start"] == "2026-07-11T03:34:00Z" and july["window"]["end"] == "2026-08-01T15:00:00Z"
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
