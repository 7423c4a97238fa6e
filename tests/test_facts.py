"""Typed facts (forensics.source.Facts): what each collector's read() gives is declared, with one
producer per key, and read_all refuses what is not."""
from __future__ import annotations

import json

import pytest

import collectors
from forensics.bundle import Bundle
from forensics.ops import pipeline
from forensics.ops.cli import main
from forensics.source import FACT_KEYS, Reading


@pytest.fixture(scope="module")
def demo_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("facts")
    assert main(["demo", "--out", str(out)]) == 0
    return Bundle.open(next(out.glob("bundle-*")))


def test_every_fact_of_the_sample_node_is_declared_and_read_from_its_producer(demo_bundle):
    r = pipeline.read_all(demo_bundle)
    assert set(r.facts) <= FACT_KEYS
    assert not [p for p in r.problems if "undeclared fact" in p["message"]]
    # real values of the sample node, one per producer
    assert r.facts["device_plugin_dir"] == "/var/lib/kubelet/device-plugins"  # containers
    assert r.facts["preconditions"] == {"systemd_cgroup": True}  # runtime_config: SystemdCgroup = true
    assert len([c for c in r.facts["containers"] if c.get("gpu")]) == 4  # containers
    assert {p["pod"] for p in r.facts["podlogs"]} >= {"trainer-0"}  # podlogs
    assert r.facts["metrics"]["retention"] is not None  # metrics (recorded Prometheus answers)
    assert "kube" not in r.facts  # collected without --kube


def test_an_undeclared_fact_is_left_out_and_said(demo_bundle, monkeypatch):
    node = collectors.COLLECTORS[0]
    real = node.read

    def read(bundle, nf) -> Reading:
        r = real(bundle, nf)
        r.facts["gpu_temperature_guess"] = 42
        return r

    monkeypatch.setattr(node, "read", read)
    r = pipeline.read_all(demo_bundle)
    assert "gpu_temperature_guess" not in r.facts
    assert {"artifact": "node", "message": "reading gave an undeclared fact 'gpu_temperature_guess'; it was left "
            "out (declare it in forensics.source.Facts)"} in r.problems
    assert r.facts["package_versions"] == json.loads(json.dumps(r.facts["package_versions"]))
