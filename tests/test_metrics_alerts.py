"""What Prometheus itself recorded of the node's alerts (collectors/metrics/alerts.py, forensics/findings/alerts.py
``recorded_of``) against a real Prometheus (tests/promlab.py): ``ALERTS``/``ALERTS_FOR_STATE`` history
backfilled with promtool as an earlier server wrote it, plus rules the live server evaluates and fires
itself over the backfilled window (their series end 4 h before now, so ``absent()`` holds). A missing
prometheus/promtool fails (scripts/prometheus-deps.sh)."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
import requests

import promlab
from collectors import metrics
from collectors.metrics import alerts as alert_series
from forensics.events import NodeFacts
from forensics.findings import alerts
from forensics.timeutil import iso_z

from test_metrics import EVERY, NODE, TARGET, OTHER, collect

H = int(time.time() // 3600 * 3600)
BASE = H - 2 * 86400 + 17          # a scrape every 30 s from 17 s past the hour
END = H - 4 * 3600                 # the DCGM series end here: the live rules' absent() holds from then on
P0 = BASE + EVERY * 1000           # GPUXidCritical pending from this evaluation ...
P1 = P0 + EVERY * 10               # ... firing from this one ...
P2 = P1 + EVERY * 120              # ... until this one (its last sample)
GPU0 = {"gpu": "0", "UUID": "GPU-aaaa", "Hostname": NODE}
XID = {"alertname": "GPUXidCritical", "severity": "critical", **GPU0}
LIVE_RULES = f"""groups:
- name: gpu-live
  rules:
  - alert: NodeDCGMGone
    expr: absent(DCGM_FI_DEV_GPU_UTIL{{Hostname="{NODE}"}})
    labels: {{severity: critical}}
  - alert: NoDCGMCopyAnywhere
    expr: absent(DCGM_FI_DEV_MEM_COPY_UTIL)
  - alert: Watchdog
    expr: vector(1)
"""


def history() -> list[promlab.Series]:
    s = promlab.scrapes
    return [promlab.Series("DCGM_FI_DEV_GPU_UTIL", {**TARGET, **GPU0}, s(BASE, END, EVERY, 50)),
            promlab.Series("up", TARGET, s(BASE, END, EVERY, 1)),
            promlab.Series("ALERTS", {**XID, "alertstate": "pending"}, s(P0, P1 - EVERY, EVERY, 1)),
            promlab.Series("ALERTS", {**XID, "alertstate": "firing"}, s(P1, P2, EVERY, 1)),
            promlab.Series("ALERTS_FOR_STATE", XID, s(P0, P2, EVERY, P0)),
            # another node's alert: never asked for
            promlab.Series("ALERTS", {**XID, "alertstate": "firing", "Hostname": "node-b", **{
                "instance": OTHER["instance"]}}, s(P0, P2, EVERY, 1))]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("promlab-alerts")
    promlab.backfill_series(history(), tmp / "blocks", tmp)
    (tmp / "rules.yml").write_text(LIVE_RULES)
    srv = promlab.PromServer(tmp / "blocks", retention="100y", rule_files=[tmp / "rules.yml"]).start()
    try:
        _wait_for_alerts(srv, 3)
        b = collect(tmp, srv.url)
        yield {"bundle": b, "reading": metrics.read(b, NodeFacts()), "started": time.time()}
    finally:
        srv.stop()


def _wait_for_alerts(srv, n: int, timeout: float = 30) -> None:
    """Until the live rules' ALERTS series are queryable: the first evaluation's samples come a moment
    after the rule group reports it evaluated."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = requests.get(f"{srv.url}/api/v1/query", params={"query": "ALERTS"}, timeout=5).json()
        if len(got["data"]["result"]) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"the live rules did not fire within {timeout} s")


def iso(t: float) -> str:
    return iso_z(datetime.fromtimestamp(t, timezone.utc))


def test_a_backfilled_episode_reads_at_its_own_samples(lab):
    rec = lab["reading"].facts["metrics"]["alerts_recorded"]
    assert rec["names_answered"] and set(rec["names_anywhere"]) == {"GPUXidCritical", "NodeDCGMGone",
                                                                     "NoDCGMCopyAnywhere", "Watchdog"}
    xid = {a["alertstate"]: a for a in rec["alerts"] if a["alertname"] == "GPUXidCritical"}
    assert set(xid) == {"pending", "firing"}                       # node-b's firing one was not asked for
    assert all(a["labels"]["Hostname"] == NODE for a in xid.values())
    assert [(e["start"], e["end"], e["open"], e["resolution"]) for e in xid["pending"]["episodes"]] == [
        (iso(P0), iso(P1 - EVERY), False, "sample")]
    assert [(e["start"], e["end"], e["open"], e["resolution"]) for e in xid["firing"]["episodes"]] == [
        (iso(P1), iso(P2), False, "sample")]
    assert xid["firing"]["active_since"] == [iso(P0)]              # ALERTS_FOR_STATE's value: activeAt
    assert (xid["firing"]["gpu"], xid["firing"]["uuid"], xid["firing"]["node_bound"]) == ("0", "GPU-aaaa", True)
    ev = sorted((e.at, e.attrs["alertstate"]) for e in lab["reading"].events
                if e.kind == "metrics.alert" and e.attrs["alertname"] == "GPUXidCritical")
    assert ev == [(datetime.fromtimestamp(P0, timezone.utc), "pending"), (datetime.fromtimestamp(P1, timezone.utc), "firing")]


def test_an_alert_the_live_server_fires_is_open_at_collection(lab):
    rec = lab["reading"].facts["metrics"]["alerts_recorded"]
    live = {a["alertname"]: a for a in rec["alerts"] if a["alertname"] != "GPUXidCritical"}
    assert set(live) == {"NodeDCGMGone", "NoDCGMCopyAnywhere", "Watchdog"}
    gone = live["NodeDCGMGone"]
    assert gone["alertstate"] == "firing" and gone["node_bound"] and gone["labels"] == {"Hostname": NODE,
                                                                                        "severity": "critical"}
    (ep,) = gone["episodes"]
    start = datetime.fromisoformat(ep["start"].replace("Z", "+00:00")).timestamp()
    assert ep["open"] and ep["resolution"] == "sample" and H - 3600 < start <= lab["started"]
    assert not live["Watchdog"]["node_bound"] and not live["NoDCGMCopyAnywhere"]["node_bound"]


def test_the_report_keeps_the_nodes_and_the_gpu_rules_alerts_and_says_when(lab):
    m = lab["reading"].facts["metrics"]
    shown = alerts.recorded_of(m, alerts.audit_of(m))
    # Watchdog is cluster-wide and not a GPU rule; NoDCGMCopyAnywhere is cluster-wide but a GPU rule
    assert shown["left_out"] == 1 and {a["alertname"] for a in shown["alerts"]} == {
        "GPUXidCritical", "NodeDCGMGone", "NoDCGMCopyAnywhere"}
    assert shown["fired"] == ["GPUXidCritical", "NodeDCGMGone", "NoDCGMCopyAnywhere"]
    s = shown["summary"]
    assert s.startswith("Prometheus recorded 3 alerts firing for this node: GPUXidCritical firing for GPU 0 from "
                        + datetime.fromtimestamp(P1, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    assert "NoDCGMCopyAnywhere firing (cluster-wide)" in s and "still active at collection" in s


def test_the_calls_are_bounded_and_kept(lab):
    idx = json.loads(lab["bundle"].path("metrics/index.json").read_text())
    roles = [c["role"] for c in idx["calls"]]
    assert roles.count("alerts-names") == 1 and 0 < roles.count("alerts-refine") <= alert_series.MAX_REFINE
    assert not [c for c in idx["calls"] if c.get("error")]
    assert idx["alerts"]["selectors"][0] == f'Hostname="{NODE}"'


def test_a_server_that_recorded_no_alert_says_so(tmp_path):
    promlab.backfill_series([promlab.Series("up", TARGET, promlab.scrapes(BASE, END, EVERY, 1))],
                            tmp_path / "blocks", tmp_path)
    with promlab.PromServer(tmp_path / "blocks", retention="100y") as srv:
        b = collect(tmp_path, srv.url)
    m = metrics.read(b, NodeFacts()).facts["metrics"]
    assert m["alerts_recorded"]["names_answered"] and m["alerts_recorded"]["alerts"] == []
    shown = alerts.recorded_of(m, alerts.audit_of(m))
    assert shown["summary"].startswith("Prometheus recorded no alert at all in its window (no ALERTS series)")


def test_a_tampered_record_of_alerts_reads_what_holds_and_raises_nothing(tmp_path):
    """Stored answers of every wrong shape (a bundle opened on a laptop trusts nothing): samples that are not
    pairs or not numbers, a metric that is not an object, args that are not an object, a raw answer whose
    series is not a label list. What is well formed is read; the rest is passed over."""
    from forensics.bundle import Bundle, BundleWriter
    w = BundleWriter(tmp_path / "b")

    def answer(n, result, data=None):
        w.write_json(f"metrics/{n:03d}.json", {"status": "success", "data": data if data is not None else
                                               {"resultType": "matrix", "result": result}},
                     source="test", method="prometheus-api")
        return f"metrics/{n:03d}.json"
    good = {"alertname": "GPUDown", "alertstate": "firing", "node": NODE}
    calls = [
        {"role": "alerts-names", "request": "/api/v1/label/alertname/values", "file": answer(1, None, ["GPUDown", 7]),
         "args": {}},
        {"role": "alerts-coarse", "request": "/api/v1/query_range?query=x", "args": {"metric": "ALERTS"},
         "file": answer(2, [{"metric": good, "values": [[600, "1"], [660, "1"], [7, "x"], [8], "9", None,
                                                       ["inf", "1"], [1e12, "1"]]},
                            {"metric": "not an object", "values": [[600, "1"]]}, 5, None])},
        {"role": "alerts-coarse", "request": "/api/v1/query_range?query=y", "args": "not an object", "file": answer(3, [])},
        {"role": "alerts-refine", "request": "/api/v1/query?query=z", "args": {"series": [[1, 2], "x"], "t": 600},
         "file": answer(4, [{"values": [[590, "1"]]}])},
    ]
    w.write_json("metrics/index.json", {"now": 10_000, "coarse_step": 60, "alerts": {"selectors": [f'node="{NODE}"']},
                                        "calls": calls}, source="test", method="prometheus-api")
    w.finish()
    b = Bundle.open(tmp_path / "b")
    idx = json.loads(b.path("metrics/index.json").read_text())
    rec, events = alert_series.read(b.root, idx["calls"], idx)
    assert rec["names_anywhere"] == ["7", "GPUDown"]
    (a,) = rec["alerts"]
    assert (a["alertname"], a["alertstate"], a["node_bound"]) == ("GPUDown", "firing", True)
    assert [(e["start"], e["end"], e["resolution"]) for e in a["episodes"]] == [(iso(540), iso(660), "coarse")]
    assert [e.attrs["alertname"] for e in events] == ["GPUDown"]
    broken = dict(idx, coarse_step="sixty")
    assert alert_series.read(b.root, idx["calls"], broken) == (None, [])
