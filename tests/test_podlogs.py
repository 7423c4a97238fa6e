"""CRI pod logs: which containers are taken, bounded tails, rotations, and the first NVML error with
the last clean line before it, on a built /var/log/pods tree."""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from collectors import podlogs
from forensics.bundle import Bundle, BundleWriter
from collectors.containers import parse as cp
from forensics.source import CollectContext, GpuContainer
from forensics.events import NodeFacts

PODS = "var/log/pods"


def _w(p: Path, data: bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def _line(t: str, msg: str, stream: str = "stdout", tag: str = "F") -> bytes:
    return f"{t} {stream} {tag} {msg}\n".encode()


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    trainer = r / PODS / "ml_trainer-0_0b7e-11" / "main"
    _w(trainer / "0.log.20260301-100000.gz", gzip.compress(
        _line("2026-03-01T09:00:00.000000001Z", "epoch 1 loss 0.9") +
        _line("2026-03-01T09:59:59.5Z", "epoch 2 loss 0.8")))
    _w(trainer / "0.log.20260301-110000",
       _line("2026-03-01T10:00:00Z", "nvidia-smi: GPU 0: NVIDIA A100") +
       _line("2026-03-01T19:12:14.123456789+09:00", "step 7 ok ") +
       _line("2026-03-01T10:12:15Z", "part one, ", tag="P") + _line("2026-03-01T10:12:15Z", "part two"))
    _w(trainer / "0.log",
       _line("2026-03-01T10:12:22Z", "Failed to initialize NVML: Unknown Error", "stderr") +
       _line("2026-03-01T10:12:32Z", "Failed to initialize NVML: Unknown Error", "stderr") +
       b"not a cri line at all\n")
    exporter = r / PODS / "gpu-operator_nvidia-dcgm-exporter-x7_22aa" / "nvidia-dcgm-exporter"
    _w(exporter / "0.log", _line("2026-03-01T08:00:00Z", "Starting dcgm-exporter") +
       b"2026-03-01T10:12:20Z stdout F \x1b[31mred\x1b[0m <script>alert(1)</script> \xff\n")
    _w(r / PODS / "default_web_33bb/web/0.log", _line("2026-03-01T10:00:00Z", "GET / 200"))
    _w(r / PODS / "batch_job_44cc/worker/2.log", _line("2026-03-01T10:00:00Z", "start") +
       _line("2026-03-01T10:00:01Z", "cudaErrorNoDevice -> CUDA_ERROR_NO_DEVICE") + b"x" * 10 + b"\n")
    _w(r / PODS / "ml_infer-1_55dd/server/0.log", _line("2026-03-01T10:00:00Z", "serving"))
    return r


def _acquire(root: Path, out: Path, records=()) -> Bundle:
    w = BundleWriter(out)
    for rec in records:
        w.write_json(f"containers/k8s.io/{rec['id']}/record.json", rec, source="test", method="containers")
    # the containers collector hands its GPU containers over as ctx.gpu_containers
    gpu = [GpuContainer(r.get("pod_namespace"), r.get("pod"), r.get("container_name"), r["id"])
           for r in records if cp.is_gpu(r)]
    ctx = CollectContext(root=root, writer=w, gpu_containers=gpu)
    podlogs.acquire(ctx)
    w.finish()
    return Bundle.open(out)


def test_first_error_and_last_clean_line_across_rotations(root, tmp_path):
    b = _acquire(root, tmp_path / "b")
    r = podlogs.read(b, NodeFacts())
    errs = [e for e in r.events if e.kind == "container.log-error"]
    ok = [e for e in r.events if e.kind == "container.log-healthy"]
    trainer_err = next(e for e in errs if e.attrs["pod"] == "trainer-0")
    assert trainer_err.at.isoformat() == "2026-03-01T10:12:22+00:00"
    assert trainer_err.attrs == {"pod": "trainer-0", "namespace": "ml", "container": "main", "restart": 0,
                                 "truncated": False, "signature": "nvml-unknown-error", "stream": "stderr",
                                 "message": "Failed to initialize NVML: Unknown Error"}
    assert trainer_err.evidence == {"artifact": "podlogs/ml_trainer-0_0b7e-11/main/0.log", "line": 1}
    healthy = next(e for e in ok if e.attrs["pod"] == "trainer-0")
    assert healthy.at.isoformat() == "2026-03-01T10:12:15+00:00"
    assert healthy.attrs["message"] == "part one, part two"  # P + F joined
    assert healthy.evidence["artifact"] == "podlogs/ml_trainer-0_0b7e-11/main/0.log.20260301-110000"
    # a CUDA error in a container nobody knew was a GPU one is found by scanning its tail; CUDA_ERROR_NO_DEVICE
    # (error 100) is a neighbouring failure (forensics/neighbours.py), never the EPERM class's log-error
    assert not [e for e in errs if e.attrs["pod"] == "job"]
    [job] = [e for e in r.events if e.kind == "container.log-symptom" and e.attrs["pod"] == "job"]
    assert job.attrs["signature"] == "cuda-no-device" and job.attrs["restart"] == 2
    assert job.at.isoformat() == "2026-03-01T10:00:01+00:00"
    facts = {(f["pod"], f["container"]): f for f in r.facts["podlogs"]}
    exp = facts[("nvidia-dcgm-exporter-x7", "nvidia-dcgm-exporter")]
    assert exp["exporter"] and exp["first_error"] is None
    assert exp["last_line"]["message"] == "\\x1b[31mred\\x1b[0m <script>alert(1)</script> \ufffd"
    assert exp["last_line"]["at"] == "2026-03-01T10:12:20Z"
    # web (no GPU, no error) and infer (not known as GPU) are not taken
    paths = {a.path for a in b.artifacts() if a.path}
    assert not any("default_web" in p or "infer-1" in p for p in paths)
    assert "podlogs/ml_trainer-0_0b7e-11/main/0.log.20260301-100000" in paths  # .gz stored decompressed
    assert any(p["message"].startswith("line 3") for p in r.problems)


def test_gpu_container_from_the_container_records(root, tmp_path):
    rec = {"id": "abc", "pod": "infer-1", "pod_namespace": "ml", "container_name": "server",
           "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    b = _acquire(root, tmp_path / "b", [rec])
    assert "podlogs/ml_infer-1_55dd/server/0.log" in {a.path for a in b.artifacts()}
    f = {x["pod"]: x for x in podlogs.read(b, NodeFacts()).facts["podlogs"]}["infer-1"]
    assert f["first_error"] is None and f["last_healthy"] is None and f["last_line"]["message"] == "serving"


def test_only_a_bounded_tail_is_copied(root, tmp_path, monkeypatch):
    monkeypatch.setattr(podlogs, "TAIL_LIMIT", 4096)
    big = root / PODS / "ml_trainer-0_0b7e-11" / "main" / "1.log"
    lines = b"".join(_line(f"2026-03-02T00:00:{i % 60:02d}Z", f"ok {i}") for i in range(2000))
    _w(big, lines + _line("2026-03-02T01:00:00Z", "CUDA_ERROR_UNKNOWN: cuInit failed"))
    b = _acquire(root, tmp_path / "b")
    art = next(a for a in b.artifacts() if a.path == "podlogs/ml_trainer-0_0b7e-11/main/1.log")
    assert art.status.value == "truncated" and art.size <= 4096
    assert b.path(art.path).read_bytes().startswith(b"2026-03-02T")  # cut at a whole line
    err = next(e for e in podlogs.read(b, NodeFacts()).events
               if e.kind == "container.log-error" and e.attrs["restart"] == 1)
    assert err.attrs["truncated"] is True and err.attrs["signature"] == "cuinit-failed"


def test_hostile_files_survive(root, tmp_path):
    d = root / PODS / "ml_trainer-0_0b7e-11" / "main"
    _w(d / "3.log.20260301-100000.gz", b"this is not gzip")
    os.mkfifo(d / "4.log")
    _w(d / "5.log", b"\x00\xff" * 100 + b"\n" + _line("2026-13-45T99:99:99Z", "bad time") +
       _line("2026-03-01T10:00:00Z", "Failed to initialize NVML: Unknown Error " + "A" * 5000))
    b = _acquire(root, tmp_path / "b")
    by = {a.source.rsplit("/", 1)[1]: a for a in b.artifacts() if a.source.startswith("/var/log/pods/ml_trainer")}
    assert by["3.log.20260301-100000.gz"].status.value == "truncated"
    assert by["4.log"].status.value == "error"  # a FIFO: never opened for reading, never blocks
    r = podlogs.read(b, NodeFacts())
    err = next(e for e in r.events if e.kind == "container.log-error" and e.attrs["restart"] == 5)
    assert len(err.attrs["message"]) == podlogs.MESSAGE_CAP + 1 and err.attrs["message"].endswith("…")


def test_no_pods_dir_is_recorded(tmp_path):
    b = _acquire(tmp_path / "empty", tmp_path / "b")
    assert [a.status.value for a in b.artifacts() if a.source == "/var/log/pods"] == ["absent"]
    assert podlogs.read(b, NodeFacts()).facts == {"podlogs": []}


def test_line_grammar():
    assert podlogs.parse_time("2026-03-01T19:12:14.123456789+09:00").isoformat() == "2026-03-01T10:12:14.123456+00:00"
    assert podlogs.parse_time("yesterday") is None
    assert podlogs.split_pod_dir("kube-system_nvidia-device-plugin-daemonset-abc_1234") == \
        ("kube-system", "nvidia-device-plugin-daemonset-abc", "1234")
    assert podlogs.split_pod_dir("nounderscore") is None
    assert sorted(["0.log", "0.log.20260301-110000", "0.log.20260301-100000.gz", "1.log"], key=podlogs.order_key) == \
        ["0.log.20260301-100000.gz", "0.log.20260301-110000", "0.log", "1.log"]
    assert podlogs.error_signature(b"nvmlInit: NVML_ERROR_LIB_RM_VERSION_MISMATCH") == "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
    assert podlogs.clean(b"a\x1bb\x00c\td\xff") == "a\\x1bb\\x00c\td\ufffd"


def test_partial_lines_join_per_stream():
    data = (_line("2026-03-01T10:00:00Z", "out-a ", tag="P") + _line("2026-03-01T10:00:01Z", "err-x", "stderr") +
            _line("2026-03-01T10:00:02Z", "out-b"))
    got = [(ll.stream, ll.message, ll.line) for ll in podlogs.parse_lines(data, "x")]
    assert got == [("stderr", b"err-x", 2), ("stdout", b"out-a out-b", 1)]
