"""Record the sample node's Prometheus answers into ``samples/node3-gpu-prometheus/``.

The demo needs no server: ``collectors.metrics`` reads these recorded answers through the same code
path as a live Prometheus when given ``--prometheus file://<this folder>``. This script records them
again from a real one:

1. write the history below as OpenMetrics and backfill it with ``promtool tsdb
   create-blocks-from openmetrics`` (tests/promlab.py);
2. start ``prometheus`` on 127.0.0.1 with ``--storage.tsdb.retention.time=150d`` and the cluster's
   alert rules (``CLUSTER_RULES``: every GPU alert needs DCGM metrics to exist);
3. run the collector's queries against it (``collectors.metrics.acquire``) and keep its ``metrics/``
   answers and ``index.json`` here.

The history (node3-gpu, Asia/Seoul; every scrape 60 s; data from 2026-07-01 to 2026-11-29 23:00 UTC):
- dcgm-exporter (job nvidia-dcgm-exporter, pod nvidia-dcgm-exporter-x7k9q, 10.42.3.17:9400) exports
  three DCGM metrics for GPU 0 (allocated to ml/trainer-0) and GPU 1 until **2026-07-11 03:34:00 UTC
  (12:34 KST)**, then none, while its target stays up (``up`` = 1) to the end;
- kube-state-metrics is scraped from 2026-08-01 15:00 UTC (**2026-08-02 00:00 KST**) on, and reports
  ``nvidia_com_gpu`` capacity and allocatable 0 for node3-gpu from its first sample;
- retention 150d, counted from the newest block (2026-11-29 23:00), deletes the blocks before
  2026-07-02 23:00 UTC at start-up: Prometheus holds data from 2026-07-02 22:00 UTC only.

Run ``bash scripts/prometheus-deps.sh`` first, then ``python3 samples/record_prometheus.py``. The
answers are stamped with the recording server's clock (``time()``), so the replay asks exactly the
recorded queries.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests")]

import promlab  # noqa: E402  (tests/promlab.py)
from collectors import metrics  # noqa: E402
from forensics.bundle import BundleWriter  # noqa: E402
from forensics.source import CollectContext, HostFacts  # noqa: E402

OUT = HERE / "node3-gpu-prometheus"
NODE = "node3-gpu"
RETENTION = "150d"
EVERY = 60


def ts(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp())


START, END = ts("2026-07-01T00:00:00"), ts("2026-11-29T23:00:00")
DCGM_LAST = ts("2026-07-11T03:34:00")
KSM_FIRST = ts("2026-08-01T15:00:00")
TARGET = {"job": "nvidia-dcgm-exporter", "instance": "10.42.3.17:9400", "namespace": "gpu-operator",
          "pod": "nvidia-dcgm-exporter-x7k9q", "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics"}
GPUS = [{"gpu": "0", "UUID": "GPU-5a8e2c41-7d3b-4f0e-9c6a-1b2d3e4f5a60", "exported_pod": "trainer-0",
         "exported_namespace": "ml", "exported_container": "trainer"},
        {"gpu": "1", "UUID": "GPU-9c1f7e22-0a4b-4d8c-b3e5-6f7a8b9c0d11"}]
CLUSTER_RULES = """groups:
- name: gpu.rules
  rules:
  - alert: GPUHighTemperature
    expr: DCGM_FI_DEV_GPU_TEMP > 85
    for: 5m
    labels: {severity: warning}
  - alert: GPUMemoryAlmostFull
    expr: DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.95
    for: 10m
    labels: {severity: warning}
  - alert: GPUIdleForHours
    expr: avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]) < 5
    for: 6h
    labels: {severity: info}
  - alert: DCGMExporterDown
    expr: up{job="nvidia-dcgm-exporter"} == 0
    for: 5m
    labels: {severity: critical}
"""


def history() -> list[promlab.Series]:
    """The sample's series (see the module docstring)."""
    out = []
    for name, value in (("DCGM_FI_DEV_GPU_UTIL", 87), ("DCGM_FI_DEV_GPU_TEMP", 61), ("DCGM_FI_DEV_FB_USED", 61440),
                        ("DCGM_FI_DEV_FB_FREE", 20019)):
        for g in GPUS:
            labels = {**TARGET, **g, "Hostname": NODE, "device": f"nvidia{g['gpu']}",
                      "modelName": "NVIDIA H100 80GB HBM3", "DCGM_FI_DRIVER_VERSION": "550.90.07"}
            v = value if g.get("exported_pod") or name.startswith("DCGM_FI_DEV_FB") or name.endswith("TEMP") else 0
            out.append(promlab.Series(name, labels, promlab.scrapes(START, DCGM_LAST, EVERY, v)))
    out.append(promlab.Series("up", TARGET, promlab.scrapes(START, END, EVERY, 1)))
    ksm = {"job": "kube-state-metrics", "instance": "10.42.0.9:8080", "node": NODE, "resource": "nvidia_com_gpu",
           "unit": "integer"}
    for name in ("kube_node_status_capacity", "kube_node_status_allocatable"):
        out.append(promlab.Series(name, ksm, promlab.scrapes(KSM_FIRST, END, EVERY, 0)))
    return out


def record(out: Path = OUT) -> Path:
    """Backfill, start prometheus, run the collector's queries, and replace ``out`` with the answers.
    Returns ``out``. Raises ``promlab.PromLabError`` when prometheus/promtool are missing or fail."""
    with tempfile.TemporaryDirectory(prefix="record-prometheus-") as tmp:
        t = Path(tmp)
        _, n = promlab.backfill_series(history(), t / "blocks", t)
        (t / "rules.yml").write_text(CLUSTER_RULES)
        with promlab.PromServer(t / "blocks", retention=RETENTION, rule_files=[t / "rules.yml"]) as srv:
            w = BundleWriter(t / "bundle")
            ctx = CollectContext(root=Path("/"), writer=w, node=HostFacts(hostname=NODE),
                                 options={"prometheus": srv.url, "prometheus_budget": 300})
            metrics.acquire(ctx)
            w.finish()
        idx = json.loads((t / "bundle" / "metrics" / "index.json").read_text())
        failed = [c for c in idx["calls"] if c.get("error")]
        if failed or idx.get("aborted"):
            raise RuntimeError(f"recording failed: {idx.get('aborted') or failed}")
        idx["recorded_by"] = (f"samples/record_prometheus.py: prometheus {RETENTION} retention, {n} backfilled samples, "
                              f"recorded {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for c in idx["calls"]:
            shutil.copy(t / "bundle" / c["file"], out / Path(c["file"]).name)
        (out / "index.json").write_text(json.dumps(idx, indent=2, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    started = time.monotonic()
    d = record()
    size = sum(p.stat().st_size for p in d.iterdir())
    print(f"{d}: {len(list(d.iterdir()))} files, {size} bytes, {time.monotonic() - started:.1f} s")
