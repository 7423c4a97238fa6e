"""collectors.metrics, forensics.findings.alerts and the metrics incident opener against a real Prometheus
(tests/promlab.py): OpenMetrics history backfilled with promtool, served by a prometheus process on 127.0.0.1. No mocks, no skips: a
missing prometheus/promtool fails (install with scripts/prometheus-deps.sh)."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import yaml

import promlab
from collectors import metrics, node as node_collector
from collectors.metrics import promclient
from forensics.findings import alerts
from forensics.findings.openers import metric_incidents
from forensics.artifact import Status
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext, HostFacts
from forensics.events import NodeFacts
from forensics.timeutil import iso_z
from datetime import datetime, timezone

PROJECT = Path(__file__).resolve().parent.parent
NODE = "node-a"
EVERY = 30
H = int(time.time() // 3600 * 3600)
BASE = H - 3 * 86400 + 17         # scrapes every 30 s from 17 s past the hour (not minute-aligned)
END = H - 4 * 3600                # backfill stops 4 h before now: the live head stays empty
DCGM_LAST = BASE + EVERY * 4321   # the chosen second of the node's last DCGM sample
FLAP = BASE + EVERY * 1200        # capacity and allocatable 4 -> 0 for 3 scrapes, then back to 4
ALLOC_3 = BASE + EVERY * 2000     # allocatable 4 -> 3 (one GPU unhealthy)
CAP_0 = BASE + EVERY * 5555       # capacity and allocatable -> 0 for good
TARGET = {"job": "dcgm-exporter", "instance": "10.0.0.5:9400", "pod": "dcgm-exporter-7xk2p"}
OTHER = {"job": "dcgm-exporter", "instance": "10.0.0.6:9400", "pod": "dcgm-exporter-q9w8e"}
CLUSTER_RULES = """groups:
- name: gpu
  rules:
  - record: node:gpu_util:avg
    expr: avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)
  - alert: GPUHot
    expr: DCGM_FI_DEV_GPU_TEMP > 85
    for: 5m
  - alert: GPUMissingFromExporter
    expr: count by (Hostname) (DCGM_FI_DEV_GPU_UTIL) < 2
  - alert: GPUIdle
    expr: node:gpu_util:avg < 5
    for: 1h
  - alert: DCGMExporterDown
    expr: up{job="dcgm-exporter"} == 0
  - alert: TooManyGPUs
    expr: kube_node_status_capacity{resource="nvidia_com_gpu"} > 8
"""
FIRING_RULES = """groups:
- name: firing
  rules:
  - alert: NodeDCGMGone
    expr: absent_over_time(DCGM_FI_DEV_GPU_UTIL{Hostname="node-a"}[15m])
  - alert: NoDCGMAnywhere
    expr: (count(DCGM_FI_DEV_GPU_UTIL) or vector(0)) == 0
  - alert: NoAllocatableGPU
    expr: sum by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"}) < 1
"""
DCGM_SCRAPE = """# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaaa",Hostname="node-a"} 40
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bbbb",Hostname="node-a"} 41
"""


def utc(t: float) -> str:
    return iso_z(datetime.fromtimestamp(t, timezone.utc))


def capacity(t):
    return 0 if FLAP <= t < FLAP + 90 or t >= CAP_0 else 4


def allocatable(t):
    return 0 if FLAP <= t < FLAP + 90 or t >= CAP_0 else (3 if t >= ALLOC_3 else 4)


def history() -> list[promlab.Series]:
    s = promlab.scrapes
    gpu0 = {**TARGET, "gpu": "0", "UUID": "GPU-aaaa", "Hostname": NODE, "exported_pod": "trainer-0"}
    gpu1 = {**TARGET, "gpu": "1", "UUID": "GPU-bbbb", "hostname": NODE}  # the lowercase spelling
    gpu_b = {**OTHER, "gpu": "0", "UUID": "GPU-cccc", "Hostname": "node-b"}
    ksm = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080", "resource": "nvidia_com_gpu", "unit": "integer"}
    out = [promlab.Series(m, labels, s(BASE, last, EVERY, 50))
           for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP")
           for labels, last in ((gpu0, DCGM_LAST), (gpu1, DCGM_LAST), (gpu_b, END))]
    out += [promlab.Series("up", TARGET, s(BASE, END, EVERY, 1)), promlab.Series("up", OTHER, s(BASE, END, EVERY, 1)),
            promlab.Series("kube_node_status_capacity", {**ksm, "node": NODE}, s(BASE, END, EVERY, fn=capacity)),
            promlab.Series("kube_node_status_allocatable", {**ksm, "node": NODE}, s(BASE, END, EVERY, fn=allocatable)),
            promlab.Series("kube_node_status_capacity", {**ksm, "node": "node-b"}, s(BASE, END, EVERY, 2))]
    return out


def collect(tmp: Path, url: str, name: str = "bundle", node: str = NODE, **attrs) -> Bundle:
    w = BundleWriter(tmp / name)
    # attrs: more of metrics' options (dcgm_url, prometheus_ca, prometheus_token_file, prometheus_budget)
    ctx = CollectContext(root=Path("/nonexistent"), writer=w, node=HostFacts(hostname=node),
                         options={"prometheus": url, **attrs})
    metrics.acquire(ctx)
    w.finish()
    return Bundle.open(tmp / name)


def calls(b: Bundle) -> list[dict]:
    return json.loads(b.path("metrics/index.json").read_text())["calls"]


class _Static(BaseHTTPRequestHandler):
    body, status = b"", 200

    def do_GET(self):
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


def http_server(body: bytes, status: int = 200) -> ThreadingHTTPServer:
    handler = type("H", (_Static,), {"body": body, "status": status})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# -- one Prometheus with long retention, shared by the module ------------------------------------
@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("promlab")
    promlab.backfill_series(history(), tmp / "blocks", tmp)
    (tmp / "rules.yml").write_text(CLUSTER_RULES)
    srv = promlab.PromServer(tmp / "blocks", retention="100y", rule_files=[tmp / "rules.yml"]).start()
    dcgm = http_server(DCGM_SCRAPE.encode())
    try:
        b = collect(tmp, srv.url, dcgm_url=f"http://127.0.0.1:{dcgm.server_port}/metrics")
        yield {"srv": srv, "tmp": tmp, "bundle": b, "reading": metrics.read(b, NodeFacts())}
    finally:
        dcgm.shutdown()
        srv.stop()


def test_dcgm_last_seen_is_the_samples_own_time_per_gpu(lab):
    r = lab["reading"]
    seen = {g["uuid"]: g for g in r.facts["metrics"]["dcgm_last_seen"]}
    assert set(seen) == {"GPU-aaaa", "GPU-bbbb"}  # node-b's GPU is not this node's
    for g in seen.values():
        assert g["last_seen"] == utc(DCGM_LAST) and g["hostname"] == NODE and not g["still_reporting"]
        assert g["up_after_last_seen"] == "1" and g["scrape_interval_s"] == EVERY
    assert seen["GPU-aaaa"]["pod"] == "trainer-0"
    ev = [e for e in r.events if e.kind == "metrics.dcgm-last-seen"]
    assert sorted(e.attrs["gpu"] for e in ev) == ["0", "1"] and {iso_z(e.at) for e in ev} == {utc(DCGM_LAST)}
    assert all(e.attrs["metric"].startswith("DCGM_FI_") and e.evidence["artifact"].startswith("metrics/") for e in ev)
    assert all(set(e.attrs) == {"gpu", "uuid", "hostname", "metric", "job", "instance"} for e in ev)


def test_timestamp_of_last_over_time_is_the_evaluation_time(lab):
    """The trap the collector avoids (docs/sources.md "Prometheus"): timestamp() of anything but a plain selector."""
    def q(expr):
        return requests.get(lab["srv"].url + "/api/v1/query", params={"query": expr, "time": END}).json()
    wrong = q(f'timestamp(last_over_time(DCGM_FI_DEV_GPU_UTIL{{Hostname="{NODE}"}}[3d]))')
    assert float(wrong["data"]["result"][0]["value"][1]) == END  # "now", not the last sample
    right = q(promclient.stats_expr(["DCGM_FI_DEV_GPU_UTIL"], [f'Hostname="{NODE}"'], 3 * 86400, 60, ("last",)))
    assert float(right["data"]["result"][0]["value"][1]) == DCGM_LAST


def test_dcgm_vanished_while_exporter_up_opens_an_incident(lab):
    inc = [i for i in metric_incidents(lab["reading"].facts["metrics"]) if i["detector"] == "dcgm-vanished"]
    assert len(inc) == 1
    assert inc[0]["start"] == utc(DCGM_LAST) and inc[0]["end"] == utc(DCGM_LAST + EVERY)  # next up=1 scrape
    assert "stayed up" in inc[0]["symptom"] and any("up{" in e.get("query", "") for e in inc[0]["evidence"])


def test_every_capacity_change_point_to_the_scrape(lab):
    got = [(c["series"], c["at"], c["last_old_at"], c["old"], c["new"], c["resolution"])
           for c in lab["reading"].facts["metrics"]["capacity_changes"]]
    assert got == [("capacity", utc(FLAP), utc(FLAP - EVERY), 4, 0, "sample"),
                   ("capacity", utc(FLAP + 90), utc(FLAP + 60), 0, 4, "sample"),
                   ("capacity", utc(CAP_0), utc(CAP_0 - EVERY), 4, 0, "sample"),
                   ("allocatable", utc(FLAP), utc(FLAP - EVERY), 4, 0, "sample"),
                   ("allocatable", utc(FLAP + 90), utc(FLAP + 60), 0, 4, "sample"),
                   ("allocatable", utc(ALLOC_3), utc(ALLOC_3 - EVERY), 4, 3, "sample"),
                   ("allocatable", utc(CAP_0), utc(CAP_0 - EVERY), 3, 0, "sample")]
    ev = [e for e in lab["reading"].events if e.kind == "metrics.capacity-change"]
    assert len(ev) == 7 and {e.attrs["resource"] for e in ev} == {"nvidia_com_gpu"}
    assert all(set(e.attrs) == {"resource", "series", "old", "new", "last_old_at"} for e in ev)


def test_capacity_falling_to_zero_opens_incidents_from_last_positive_sample(lab):
    inc = [(i["detector"], i["start"], i["end"]) for i in metric_incidents(lab["reading"].facts["metrics"])
           if i["detector"] != "dcgm-vanished"]
    # allocatable fell with capacity both times, so it adds no incident of its own
    assert inc == [("capacity-zero", utc(FLAP - EVERY), utc(FLAP)), ("capacity-zero", utc(CAP_0 - EVERY), utc(CAP_0))]


def test_queries_are_bounded_and_under_the_point_limit(lab):
    c = calls(lab["bundle"])
    assert len(c) <= 30 and not [x for x in c if x.get("error")]
    for x in c:
        if x["request"].startswith("/api/v1/query_range"):
            p = dict(pair.split("=", 1) for pair in x["request"].split("?", 1)[1].split("&"))
            assert (int(p["end"]) - int(p["start"])) / int(p["step"]) <= 11000
    over = requests.get(lab["srv"].url + "/api/v1/query_range",
                        params={"query": "up", "start": BASE, "end": BASE + 11001 * 10, "step": 10}).json()
    assert over["status"] == "error" and "11,000" in over["error"]


def test_coarse_queries_in_chunks_find_the_same_changes(lab, tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "CHUNK_POINTS", 300)
    b = collect(tmp_path, lab["srv"].url)
    chunks = {x["args"]["chunk"] for x in calls(b) if x["role"] == "capacity-coarse"}
    assert len(chunks) > 2
    def strip(changes):
        return [{k: v for k, v in c.items() if k != "evidence"} for c in changes]
    r = metrics.read(b, NodeFacts())
    assert strip(r.facts["metrics"]["capacity_changes"]) == strip(lab["reading"].facts["metrics"]["capacity_changes"])


def test_changes_beyond_the_refine_bound_keep_coarse_resolution(lab, tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_REFINE", 1)  # only the first span (first sample) gets raw samples
    b = collect(tmp_path, lab["srv"].url)
    step = json.loads(b.path("metrics/index.json").read_text())["coarse_step"]
    got = [c for c in metrics.read(b, NodeFacts()).facts["metrics"]["capacity_changes"] if c["series"] == "capacity"]
    assert [c["resolution"] for c in got] == ["coarse"] * 3
    for c, real in zip(got, (FLAP, FLAP + 90, CAP_0)):
        at = datetime.fromisoformat(c["at"].replace("Z", "+00:00")).timestamp()
        assert real <= at <= real + 2 * step  # dated to the coarse step only, and said so
        assert at - datetime.fromisoformat(c["last_old_at"].replace("Z", "+00:00")).timestamp() == step


def test_retention_and_raw_answers_are_kept(lab):
    b, r = lab["bundle"], lab["reading"]
    ret = r.facts["metrics"]["retention"]
    assert ret["storage_retention"] == "100y" and ret["retention_time_flag"] == "100y"
    assert ret["oldest_sample"] == utc(BASE) and ret["oldest_sample_basis"].startswith("prometheus_tsdb")
    assert ret["oldest_by_series"]["kube_node_status_capacity"] == utc(BASE)
    cov = [c for c in r.coverage if c.source == "prometheus"]
    assert iso_z(cov[0].start) == utc(BASE) and "Prometheus retention 100y: holds data from" in cov[0].reason
    arts = {a.path: a for a in b.artifacts() if (a.path or "").startswith("metrics/")}
    for x in calls(b):
        a = arts[x["file"]]
        assert a.status == Status.COLLECTED and any(n.startswith("GET /api/v1/") or n == "GET /metrics" for n in a.notes)
    assert not any(c.source.startswith("/") for c in arts.values())


def test_dcgm_exporter_scraped_once_and_kept(lab):
    now = lab["reading"].facts["metrics"]["dcgm_exporter_now"]
    assert now["answered"] and now["gpus"] == ["GPU-aaaa", "GPU-bbbb"] and now["dcgm_samples"] == 2
    assert lab["bundle"].path(now["artifact"]).read_text() == DCGM_SCRAPE


def test_audit_of_metric_dependent_rules_says_silent(lab):
    a = alerts.audit_of(lab["reading"].facts["metrics"])
    assert a["audited"] and a["alerting_rules"] == 5 and a["recording_rules"] == 1
    assert a["fires_when_dcgm_absent"] == [] and a["fires_when_capacity_zero"] == []
    assert sorted(a["silent_when_dcgm_absent"]) == ["DCGMExporterDown", "GPUHot", "GPUIdle", "GPUMissingFromExporter"]
    assert a["gap"] == {"capacity_zero": True, "dcgm_absent": True} and "no alert rule fires" in a["summary"]


def test_recorded_answers_replay_through_the_same_path(lab, tmp_path):
    rec = tmp_path / "recorded"
    rec.mkdir()
    for x in calls(lab["bundle"]):
        shutil.copy(lab["bundle"].path(x["file"]), rec)
    shutil.copy(lab["bundle"].path("metrics/index.json"), rec)
    r = metrics.read(collect(tmp_path, f"file://{rec}"), NodeFacts())
    for k in ("dcgm_last_seen", "capacity_changes", "retention"):
        assert json.dumps(r.facts["metrics"][k]) == json.dumps(lab["reading"].facts["metrics"][k])


# -- retention that already deleted the start, behind TLS and basic auth --------------------------
def test_retention_deleted_the_start_tls_and_basic_auth(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    web = (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:\n"
           "  admin: $2b$10$abcdefghijklmnopqrstuu3KWNuWLhBnmgYfnzONPueahDuedC/lu\n")  # bcrypt of s3cret
    start, gone = H - 4 * 86400 + 17, H - 3 * 86400
    ksm = {"node": NODE, "resource": "nvidia_com_gpu", "unit": "integer"}
    series = [promlab.Series("DCGM_FI_DEV_GPU_UTIL", {**TARGET, "gpu": "0", "UUID": "GPU-aaaa", "Hostname": NODE},
                             promlab.scrapes(start, gone, EVERY, 9)),
              promlab.Series("up", TARGET, promlab.scrapes(start, END, EVERY, 1)),
              promlab.Series("kube_node_status_capacity", ksm,
                             promlab.scrapes(start, END, EVERY, fn=lambda t: 2 if t < gone else 0))]
    promlab.backfill_series(series, tmp_path / "blocks", tmp_path)
    alerts.write_rules(tmp_path / "suggested.yml")
    (tmp_path / "firing.yml").write_text(FIRING_RULES)
    srv = promlab.PromServer(tmp_path / "blocks", retention="1d", web_config=web, scheme="https",
                             rule_files=[tmp_path / "suggested.yml", tmp_path / "firing.yml"],
                             client={"auth": ("admin", "s3cret"), "verify": str(cert)})
    (tmp_path / "token").write_text("Basic admin:s3cret\n")
    with srv:
        denied = collect(tmp_path, srv.url, "denied", prometheus_ca=str(cert))
        b = collect(tmp_path, srv.url, prometheus_token_file=str(tmp_path / "token"), prometheus_ca=str(cert))
    assert any(a.status == Status.ERROR and "401" in (a.message or "") for a in denied.artifacts())
    assert not [x for x in calls(b) if x.get("error")]
    for f in b.root.rglob("*"):
        assert not f.is_file() or b"s3cret" not in f.read_bytes()
    r = metrics.read(b, NodeFacts())
    oldest = r.coverage[0].start.timestamp()
    assert END - 86400 - 2 * 3600 - 60 <= oldest <= END - 86400 + 60 and oldest > gone  # blocks deleted
    assert r.facts["metrics"]["dcgm_last_seen"] == []  # nothing of the DCGM series is left
    inc = metric_incidents(r.facts["metrics"])
    assert len(inc) == 1 and inc[0]["start"] is None and inc[0]["detector"] == "capacity-zero"
    assert "capacity already 0 when retention starts on" in inc[0]["symptom"]
    assert abs(datetime.fromisoformat(inc[0]["end"].replace("Z", "+00:00")).timestamp() - oldest) <= EVERY
    a = alerts.audit_of(r.facts["metrics"])
    assert set(a["fires_when_dcgm_absent"]) == {"DCGMMetricsAbsent", "DCGMMetricsMissingOnGPUNode", "NodeDCGMGone",
                                                "NoDCGMAnywhere"}
    assert set(a["fires_when_capacity_zero"]) == {"GPUCapacityZero", "NoAllocatableGPU"}
    assert a["gap"] == {"capacity_zero": False, "dcgm_absent": False}


def test_generated_rules_pass_promtool_check_rules(tmp_path):
    path = alerts.write_rules(tmp_path / "gpu-forensics.rules.yml")
    p = promlab.check_rules(path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 3 rules found" in p.stdout
    doc = yaml.safe_load(path.read_text())
    rules = {r["alert"]: r for r in doc["groups"][0]["rules"]}
    assert rules["GPUCapacityZero"]["expr"].endswith("== 0") and rules["DCGMMetricsAbsent"]["expr"].startswith("absent(")
    assert all(r["for"] and r["labels"] and r["annotations"]["summary"] for r in rules.values())


# -- servers that fail ---------------------------------------------------------------------------
def test_server_that_never_answers_is_an_error_and_collection_goes_on(tmp_path):
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text(NODE + "\n")
    w = BundleWriter(tmp_path / "bundle")
    with socket.socket() as s:  # accepts connections (kernel backlog) and never replies
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        ctx = CollectContext(root=root, writer=w, node=HostFacts(hostname=NODE),
                             options={"prometheus": f"http://127.0.0.1:{port}",
                                      "prometheus_timeout": 2.0, "prometheus_budget": 4.0})
        t0 = time.monotonic()
        for mod in (metrics, node_collector):  # the collection loop: the next source still runs
            mod.acquire(ctx)
        elapsed = time.monotonic() - t0
    w.finish()
    b = Bundle.open(tmp_path / "bundle")
    assert elapsed < 4.0 + 3
    errors = [a for a in b.artifacts() if a.status == Status.ERROR and a.method.startswith("prometheus")]
    # one plain sentence naming the peer and the limit (issue 28), not urllib3's ReadTimeoutError text
    assert len(errors) == 1 and errors[0].message == f"no answer from 127.0.0.1:{port} within 2 s"
    assert any(a.path == "node/hostname" and a.status == Status.COLLECTED for a in b.artifacts())
    r = metrics.read(b, NodeFacts())
    assert r.coverage[0].start is None and "did not answer" in r.coverage[0].reason


def test_server_answering_errors_is_an_error_artifact_with_its_message(tmp_path):
    body = json.dumps({"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}).encode()
    srv = http_server(body, 503)
    try:
        b = collect(tmp_path, f"http://127.0.0.1:{srv.server_port}", prometheus_budget=5.0)
    finally:
        srv.shutdown()
    errors = [a for a in b.artifacts() if a.status == Status.ERROR]
    assert len(errors) == 1 and "HTTP 503: unavailable: TSDB not ready" in errors[0].message
    assert b.path(errors[0].path).read_bytes() == body  # the error answer itself is kept
    assert json.loads(b.path("metrics/index.json").read_text())["aborted"].startswith("HTTP 503")


def test_no_prometheus_no_artifact(tmp_path):
    w = BundleWriter(tmp_path / "b")
    metrics.acquire(CollectContext(root=tmp_path, writer=w, node=HostFacts(hostname=NODE)))
    assert w.artifacts == []


def test_credentials_and_urls():
    from collectors.metrics.promclient import auth_for
    from forensics.redact import redact_url
    assert auth_for("tok123", "http://p") == ({"Authorization": "Bearer tok123"}, None)
    assert auth_for("Bearer tok123", "http://p")[0] == {"Authorization": "Bearer tok123"}
    assert auth_for("Basic bob:pw:x", "http://p") == ({}, ("bob", "pw:x"))
    assert auth_for(None, "https://bob:pw@p:9090") == ({}, ("bob", "pw"))
    assert redact_url("https://bob:pw@prom.example:9090/prom?token=abc") == "https://prom.example:9090/prom?<redacted>"


# -- the sample node's recorded answers ------------------------------------------------------------
def test_sample_node3_gpu_july_window_from_recorded_metrics(tmp_path):
    rec = PROJECT / "samples" / "node3-gpu-prometheus"
    assert sum(p.stat().st_size for p in rec.iterdir()) < 500_000
    b = collect(tmp_path, f"file://{rec}", node="node3-gpu")
    assert not [a for a in b.artifacts() if a.status != Status.COLLECTED]
    r = metrics.read(b, NodeFacts())
    inc = {i["detector"]: i for i in metric_incidents(r.facts["metrics"])}
    assert inc["dcgm-vanished"]["start"] == "2026-07-11T03:34:00Z"  # 12:34 KST
    assert inc["capacity-zero"]["start"] is None and inc["capacity-zero"]["end"] == "2026-08-01T15:00:00Z"
    assert "capacity already 0" in inc["capacity-zero"]["symptom"]
    assert alerts.audit_of(r.facts["metrics"])["gap"] == {"capacity_zero": True, "dcgm_absent": True}
    assert r.facts["metrics"]["retention"]["storage_retention"] == "150d"


def test_a_malformed_prometheus_url_is_an_error_artifact_not_a_lost_bundle(tmp_path):
    """A typo in --prometheus (bad port) used to raise while the manifest was written."""
    from forensics.bundle import verify
    from forensics.ops.cli import main
    (tmp_path / "root").mkdir()
    out = tmp_path / "b"
    assert main(["collect", "--root", str(tmp_path / "root"), "--out", str(out),
                 "--prometheus", "http://prom:99999x/"]) == 1
    assert verify(out) == []
    import json
    m = json.loads((out / "manifest.json").read_text())
    assert m["options"]["prometheus"] == "<redacted>"
    assert any(a["status"] == "error" and "prometheus" in (a["method"] + a["source"]).lower() for a in m["artifacts"])


def _lying_server(body_chunks, announce: int):
    """A real HTTP server on loopback that announces ``announce`` bytes and sends ``body_chunks`` (an
    iterable of (bytes, seconds to wait before it))."""
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(announce))
            self.end_headers()
            try:
                for chunk, wait in body_chunks:
                    time.sleep(wait)
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                pass

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_a_dcgm_scrape_is_bounded_by_the_tool_not_by_what_the_peer_says(tmp_path, monkeypatch):
    """issue 27 item 1: the dcgm-exporter scrape read the whole body into memory (``r.content``) before
    cutting it, and a server that trickles never ended it. Now: at most MAX_BYTES kept whatever was
    announced, and an overall deadline."""
    monkeypatch.setattr(promclient, "MAX_BYTES", 1 << 20)
    big = _lying_server([(b"x" * 65536, 0)] * 64, announce=1 << 30)  # 4 MiB sent, 1 GiB announced
    w = BundleWriter(tmp_path / "b")
    text = promclient.fetch_text(f"http://127.0.0.1:{big.server_port}/metrics", w, "metrics/dcgm.txt", timeout=10)
    assert len(text) == 1 << 20 and (w.dir / "metrics/dcgm.txt").stat().st_size == 1 << 20
    slow = _lying_server([(b"#", 0.3)] * 100, announce=100)  # a byte every 0.3 s: each read is in time
    t0 = time.monotonic()
    with pytest.raises(promclient.PrometheusError) as e:
        promclient.fetch_text(f"http://127.0.0.1:{slow.server_port}/metrics", w, "metrics/slow.txt", timeout=1.5)
    assert time.monotonic() - t0 < 3
    assert str(e.value).startswith(f"no complete answer from 127.0.0.1:{slow.server_port} within 1.5 s: answer not "
                                   "complete after ")
    big.shutdown(), slow.shutdown()
