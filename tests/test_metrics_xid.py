"""DCGM's Xid history (collectors/metrics/xid.py) against a real Prometheus (tests/promlab.py: OpenMetrics
history backfilled with promtool, served by a prometheus process on 127.0.0.1): a ``metrics.xid`` event at
the first sample of each new non-zero ``DCGM_FI_DEV_XID_ERRORS`` value of the node's GPUs, and the
per-GPU history. A missing prometheus/promtool fails (scripts/prometheus-deps.sh)."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

import promlab
from collectors import metrics
from collectors.metrics import xid
from forensics.events import NodeFacts

from test_metrics import EVERY, NODE, TARGET, OTHER, collect

H = int(time.time() // 3600 * 3600)
BASE = H - 2 * 86400 + 17          # a scrape every 30 s from 17 s past the hour
END = H - 4 * 3600
X1 = BASE + EVERY * 1000           # GPU 0: Xid 79 (fallen off the bus) from this scrape on
X2 = BASE + EVERY * 2500           # GPU 1: 13 held from the start, then 31
X3 = BASE + EVERY * 2600           # GPU 1: 0 (the exporter restarted: DCGM watches anew)
X4 = BASE + EVERY * 2700           # GPU 1: 31 again
GPU0 = {**TARGET, "gpu": "0", "UUID": "GPU-aaaa", "Hostname": NODE}
GPU1 = {**TARGET, "gpu": "1", "UUID": "GPU-bbbb", "hostname": NODE}    # the lowercase spelling
OTHER_NODE = {**OTHER, "gpu": "0", "UUID": "GPU-cccc", "Hostname": "node-b"}


def gpu1(t: float) -> int:
    return 13 if t < X2 else 31 if t < X3 else 0 if t < X4 else 31


def history() -> list[promlab.Series]:
    s = promlab.scrapes
    return [promlab.Series("DCGM_FI_DEV_XID_ERRORS", GPU0, s(BASE, END, EVERY, fn=lambda t: 79 if t >= X1 else 0)),
            promlab.Series("DCGM_FI_DEV_XID_ERRORS", GPU1, s(BASE, END, EVERY, fn=gpu1)),
            promlab.Series("DCGM_FI_DEV_XID_ERRORS", OTHER_NODE, s(BASE, END, EVERY, fn=lambda t: 48 if t >= X1 else 0)),
            *[promlab.Series("DCGM_FI_DEV_GPU_UTIL", lab, s(BASE, END, EVERY, 50)) for lab in (GPU0, GPU1, OTHER_NODE)],
            promlab.Series("up", TARGET, s(BASE, END, EVERY, 1)), promlab.Series("up", OTHER, s(BASE, END, EVERY, 1))]


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("promlab-xid")
    promlab.backfill_series(history(), tmp / "blocks", tmp)
    srv = promlab.PromServer(tmp / "blocks", retention="100y").start()
    try:
        yield srv
    finally:
        srv.stop()


def utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def test_each_new_xid_value_is_an_event_at_its_first_sample(prom, tmp_path):
    b = collect(tmp_path, prom.url)
    r = metrics.read(b, NodeFacts())
    ev = [e for e in r.events if e.kind == "metrics.xid"]
    assert [(e.at, e.attrs["uuid"], e.attrs["gpu"], e.attrs["xid"], e.attrs["hostname"]) for e in
            sorted(ev, key=lambda e: e.at)] == [(utc(X1), "GPU-aaaa", "0", 79, NODE), (utc(X2), "GPU-bbbb", "1", 31, NODE),
                                                 (utc(X4), "GPU-bbbb", "1", 31, NODE)]
    assert all((e.attrs["job"], e.attrs["instance"]) == ("dcgm-exporter", "10.0.0.5:9400") for e in ev)
    assert all(e.evidence["query"].startswith("DCGM_FI_DEV_XID_ERRORS{") for e in ev)   # the raw samples' answer
    hist = {g["uuid"]: g["values"] for g in r.facts["metrics"]["xid_history"]}
    assert set(hist) == {"GPU-aaaa", "GPU-bbbb"}                     # node-b's GPU is not this node's
    assert [(v["at"], v["xid"], v["first_held"]) for v in hist["GPU-bbbb"]] == [
        (iso(BASE), 13, True), (iso(X2), 31, False), (iso(X3), 0, False), (iso(X4), 31, False)]
    assert [(v["xid"], v["resolution"]) for v in hist["GPU-aaaa"]] == [(0, "sample"), (79, "sample")]
    assert r.facts["metrics"]["xid_history_basis"].startswith("DCGM_FI_DEV_XID_ERRORS")
    idx = json.loads(b.path("metrics/index.json").read_text())
    refine = [c for c in idx["calls"] if c["role"] == "xid-refine"]
    assert 0 < len(refine) <= xid.MAX_REFINE


def iso(t: float) -> str:
    return utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_without_raw_samples_a_change_keeps_the_coarse_step_and_says_so(prom, tmp_path, monkeypatch):
    monkeypatch.setattr(xid, "MAX_REFINE", 0)
    b = collect(tmp_path, prom.url)
    r = metrics.read(b, NodeFacts())
    step = json.loads(b.path("metrics/index.json").read_text())["coarse_step"]
    e79 = next(e for e in r.events if e.kind == "metrics.xid" and e.attrs["xid"] == 79)
    assert utc(X1) <= e79.at <= utc(X1 + 2 * step) and f"within the {step} s step" in e79.summary


def test_a_node_without_the_xid_field_asks_nothing_and_says_why(tmp_path):
    s = promlab.scrapes
    series = [promlab.Series("DCGM_FI_DEV_GPU_UTIL", GPU0, s(BASE, END, EVERY, 50)),
              promlab.Series("up", TARGET, s(BASE, END, EVERY, 1))]
    promlab.backfill_series(series, tmp_path / "blocks", tmp_path)
    srv = promlab.PromServer(tmp_path / "blocks", retention="100y").start()
    try:
        b = collect(tmp_path, srv.url)
    finally:
        srv.stop()
    r = metrics.read(b, NodeFacts())
    m = r.facts["metrics"]
    assert m["xid_history"] is None and "hold no DCGM_FI_DEV_XID_ERRORS" in m["xid_history_basis"]
    assert not [c for c in json.loads(b.path("metrics/index.json").read_text())["calls"] if c["role"].startswith("xid")]
    assert not [e for e in r.events if e.kind == "metrics.xid"]
