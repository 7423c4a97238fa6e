"""The collector contract (forensics/source.py): every collector's OPTIONS become the CLI's flags, an
option's value reaches its collector, and podlogs takes its GPU containers from the typed fact the
containers collector hands over."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from collectors import COLLECTORS, containers, podlogs
from forensics.bundle import Bundle, BundleWriter
from forensics.ops.cli import SAMPLE_ROOT, build_parser, main
from forensics.source import CollectContext, GpuContainer, Option, option_values

#: every collector flag of the command line (issue 12: journal, containers, metrics, kube; issue 26: nvidia_host)
FLAGS = {"--journal-dir", "--since", "--probe", "--prometheus", "--dcgm-url", "--prometheus-token-env",
         "--prometheus-token-file", "--prometheus-ca", "--kube", "--kubeconfig", "--nvidia-smi"}


def _actions(cmd: str) -> dict:
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    return {s: a for a in sub.choices[cmd]._actions for s in a.option_strings}


def test_every_collector_declares_its_options_and_the_parser_has_them():
    names = [mod.NAME for mod in COLLECTORS]
    assert names == ["node", "nvidia_host", "runtime_config", "journal", "kernlog", "packages", "containers", "kubelet",
                     "podlogs", "metrics", "kube"]
    declared = {o.flag: o for mod in COLLECTORS for o in mod.OPTIONS if o.flag}
    assert set(declared) == FLAGS
    assert all(isinstance(o, Option) for mod in COLLECTORS for o in mod.OPTIONS)
    for cmd in ("collect", "run"):
        acts = _actions(cmd)
        assert FLAGS | {"--root", "--out", "--incident", "--node", "--time-budget", "--no-redact"} <= set(acts)
        for flag, o in declared.items():
            assert (acts[flag].dest, acts[flag].help) == (o.dest, o.help), flag
    args = build_parser().parse_args(["collect", "--journal-dir", "/a", "--journal-dir", "/b", "--since", "2026-09-02",
                                      "--probe", "--prometheus", "http://p:9090", "--kube", "--kubeconfig", "kc"])
    assert (args.journal_dirs, args.since, args.probe, args.prometheus, args.kube, args.kubeconfig) == (
        ["/a", "/b"], "2026-09-02", True, "http://p:9090", True, "kc")
    # the append default is never shared between parses
    assert build_parser().parse_args(["collect"]).journal_dirs == []


def test_option_values_fill_defaults_and_refuse_unknown_names():
    opts = [o for mod in COLLECTORS for o in mod.OPTIONS]
    v = option_values(opts, {"probe": True})
    assert v["probe"] is True and v["since"] is None and v["journal_dirs"] == () and v["prometheus_budget"] == 60.0
    with pytest.raises(ValueError, match="prob"):
        option_values(opts, {"prob": True})


def test_since_reaches_the_journal_collector_and_the_manifest(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
    import build
    build.ensure_journal()
    out = tmp_path / "b"
    assert main(["-q", "collect", "--root", str(SAMPLE_ROOT), "--out", str(out),
                 "--since", "2026-09-02T13:00+09:00", "--node", "gpu-7"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["options"] == {"nvidia_smi": False, "journal_dirs": [], "since": "2026-09-02T04:00:00Z", "probe": False,
                            "prometheus": None, "dcgm_url": None, "kube": False, "kubeconfig": None,
                            "time_budget_s": 600}
    # the journal collector got it as a datetime, and scanned from it on
    assert json.loads((out / "journal/coverage.json").read_text())["since"] == "2026-09-02T04:00:00Z"
    entries = [json.loads(line) for line in (out / "journal/entries.jsonl").read_text().splitlines()]
    assert entries and all(e["__REALTIME_TIMESTAMP"] >= 1788321600_000000 for e in entries
                           if set(e["_GF_SELECTED_BY"]) - {"boot", "coverage"})
    assert m["node"] == "gpu-7" and m["node_facts"]["hostname_override"] == "gpu-7"
    assert m["node_facts"]["hostname"] == "node3-gpu" and m["timezone"]["name"] == "Asia/Seoul"


@pytest.mark.parametrize("argv, message", [
    # issue 16: "yesterday" is read in the node's zone; this root does not say its zone, so it is refused
    (["--since", "yesterday"], "--since 'yesterday': time 'yesterday' is read in the node's zone, and the node's "
                               "time zone is unknown"),
    (["--journal-dir", "/no/such/journal"], "--journal-dir /no/such/journal: no such file or directory"),
    (["--kubeconfig", "/etc/hostname"], "--kubeconfig is only used with --kube"),
    (["--kube", "--kubeconfig", "/no/such/kubeconfig"], "--kubeconfig /no/such/kubeconfig: no such file"),
])
def test_an_option_check_is_a_usage_error_with_its_message(tmp_path, capsys, argv, message):
    assert main(["collect", "--root", str(tmp_path), "--out", str(tmp_path / "b")] + argv) == 2
    assert capsys.readouterr().err.startswith(f"gpu-forensics: error: {message}")
    assert not (tmp_path / "b").exists()


def _w(p: Path, data: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(data)


def _container(root: Path, cid: str, pod: str, env: list[str]) -> None:
    spec = {"ociVersion": "1.0.2", "process": {"env": env, "args": ["python3"]}, "linux": {},
            "annotations": {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-name": pod,
                            "io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.container-name": "main"}}
    _w(root / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json", json.dumps(spec))
    # a neutral pod name and a log without NVML/CUDA errors: only the GPU fact selects the log
    _w(root / f"var/log/pods/ml_{pod}_{cid}-uid/main/0.log", "2026-03-01T10:00:00Z stdout F epoch 1\n")


def test_podlogs_keeps_the_logs_of_the_gpu_containers_the_containers_collector_found(tmp_path):
    root = tmp_path / "root"
    _container(root, "c1", "trainer", ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"])
    _container(root, "c2", "web", ["PATH=/usr/bin"])
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=root, writer=w)
    containers.acquire(ctx)
    assert ctx.gpu_containers == [GpuContainer("ml", "trainer", "main", "c1")]
    podlogs.acquire(ctx)
    w.finish()
    kept = sorted(a.path for a in Bundle.open(tmp_path / "b").artifacts() if (a.path or "").startswith("podlogs/"))
    assert kept == ["podlogs/ml_trainer_c1-uid/main/0.log"]
