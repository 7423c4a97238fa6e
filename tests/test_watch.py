"""``gpu-forensics watch`` without a lab (the real reloads are in tests/test_watch_lab.py): the journal trigger
on real ``journalctl -o export`` output, PID 1's trusted fields, the sweep and the agent on a generated node
root (tests/nodegen.py: no live process, so no probe answers), the state file and the bundle bounds."""
from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import nodegen as N
from forensics.ops.cli import main
from forensics.ops.watch import parse_listen, state as st
from forensics.ops.watch.agent import Agent
from forensics.ops.watch.sweep import access_of, sweep
from forensics.ops.watch.triggers import export_entries, pid1_reload_line

ROOT = N.BY_ID["cri-v1-nvdp-ubuntu2204"]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A generated node root: ``(root, {name: container id})``."""
    root = tmp_path_factory.mktemp("watch") / "root"
    names, _ = N.make_root(root, ROOT)
    return root, names


def test_export_format_text_and_binary_fields():
    blob = b"line one\nline two"
    data = (b"__REALTIME_TIMESTAMP=1796141679403033\n_PID=1\nMESSAGE\n" + struct.pack("<Q", len(blob)) + blob
            + b"\n_COMM=systemd\n\n_PID=2\nMESSAGE=x\n\n")
    got = list(export_entries(io.BytesIO(data)))
    assert got == [{"__REALTIME_TIMESTAMP": "1796141679403033", "_PID": "1", "MESSAGE": "line one\nline two",
                    "_COMM": "systemd"}, {"_PID": "2", "MESSAGE": "x"}]


def test_pid1_reload_lines_need_trusted_fields():
    pid1 = {"_PID": "1", "_COMM": "systemd", "_TRANSPORT": "journal"}
    assert pid1_reload_line({**pid1, "MESSAGE": "Reloading."}) == {"kind": "reload"}
    assert pid1_reload_line({**pid1, "MESSAGE": "Reloading..."}) == {"kind": "reload"}
    assert pid1_reload_line({**pid1, "MESSAGE": "Reexecuting."}) == {"kind": "reexec"}
    assert pid1_reload_line({**pid1, "MESSAGE": "Reloading requested from client PID 4242 ('systemctl') "
                             "(unit apt-daily.service)..."})["pid"] == 4242
    assert pid1_reload_line({**pid1, "MESSAGE": "Reloading finished in 312 ms."})["duration_ms"] == 312
    assert pid1_reload_line({**pid1, "MESSAGE": "Started apt-daily.service - Daily apt download activities."}) is None
    # `logger -t systemd --id=1 Reloading.`: what the writer says about itself is no evidence
    assert pid1_reload_line({"_PID": "4711", "_COMM": "logger", "_TRANSPORT": "syslog", "SYSLOG_IDENTIFIER": "systemd",
                             "SYSLOG_PID": "1", "MESSAGE": "Reloading."}) is None
    assert pid1_reload_line({**pid1, "_TRANSPORT": "stdout", "MESSAGE": "Reloading."}) is None
    assert pid1_reload_line({**pid1, "_COMM": "bash", "MESSAGE": "Reloading."}) is None


def test_the_fallback_parser_reads_journalctl_export_of_a_real_journal(node):
    root, _ = node
    p = subprocess.run(["journalctl", "--root", str(root), "-q", "-o", "export", "_PID=1"], capture_output=True,
                       timeout=60, check=True)
    lines = [pid1_reload_line(e) for e in export_entries(io.BytesIO(p.stdout))]
    texts = subprocess.run(["journalctl", "--root", str(root), "-q", "-o", "cat", "_PID=1"], capture_output=True,
                           text=True, timeout=60, check=True).stdout.splitlines()
    assert [x["kind"] for x in lines if x] == ["reload"] == ["reload" for t in texts if t == "Reloading."]


def test_access_from_probe_results():
    assert access_of({"/dev/nvidiactl": "ENXIO", "/dev/nvidia0": "ok"}) == 1
    assert access_of({"/dev/nvidiactl": "EPERM", "/dev/nvidia0": "ENXIO"}) == 0
    assert access_of({"/dev/nvidiactl": "not-run"}) is None
    assert access_of({"/dev/nvidiactl": "timeout", "/dev/nvidia0": "not-run"}) is None
    assert access_of({"/dev/nvidiactl": "ENOENT"}) is None
    assert access_of({}) is None


def test_a_sweep_of_a_root_without_live_processes(node, tmp_path):
    root, names = node
    s = sweep(root, tmp_path)
    assert sorted(s.seen) == sorted([names["plugin"], names["trainer"]])
    t = s.seen[names["trainer"]]
    assert t.labels() == {"namespace": "ml", "pod": "trainer-0", "container": "trainer", "id": names["trainer"]}
    assert t.at_risk is True and t.access is None          # hook-injected under the systemd driver; no live init
    assert s.errors == 2 and all("no probe answer" in w for w in s.why)
    assert os.listdir(tmp_path) == []                       # the scratch bundle is gone


def _samples(agent: Agent) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in agent.metrics.registry.collect() for s in fam.samples}


def test_the_agent_exports_keeps_state_and_drops_a_container_that_went(node, tmp_path):
    root, names = node
    copy = tmp_path / "root"
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True, timeout=60)  # device nodes as nodes
    out = tmp_path / "out"
    out.mkdir()
    logs: list[str] = []
    a = Agent(str(copy), out, 60, 3, 1 << 30, logs.append)
    a.notify("journal-reload", "journal", 1796141679.5)    # no D-Bus: the journal's line counts
    a.notify("journal", "journal", 1796141679.6)           # the caller line of the same reload does not
    a.sweep_once("test")
    m = _samples(a)
    trainer = tuple(sorted({"namespace": "ml", "pod": "trainer-0", "container": "trainer",
                            "id": names["trainer"]}.items()))
    assert m[("gpu_forensics_container_at_risk", trainer)] == 1
    assert ("gpu_forensics_container_gpu_access", trainer) not in m  # no probe answer: unknown, no series
    assert m[("gpu_forensics_probe_errors_total", ())] == 2
    assert m[("gpu_forensics_daemon_reloads_total", ())] == 1
    assert m[("gpu_forensics_last_reload_timestamp_seconds", ())] == 1796141679.5
    saved = json.loads((out / st.STATE).read_text())
    assert (saved["reloads_total"], saved["probe_errors_total"], saved["sweeps_total"]) == (1, 2, 1)
    assert sorted(os.listdir(out)) == [st.STATE]
    # restarted: the counters come back; the trainer's task directory is gone: its series go too
    b = Agent(str(copy), out, 60, 3, 1 << 30, logs.append)
    m = _samples(b)
    assert m[("gpu_forensics_daemon_reloads_total", ())] == 1 and m[("gpu_forensics_probe_errors_total", ())] == 2
    shutil.rmtree(copy / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{names['trainer']}")
    shutil.rmtree(copy / f"run/containerd/runc/k8s.io/{names['trainer']}")
    b.sweep_once("test")
    m = _samples(b)
    assert ("gpu_forensics_container_at_risk", trainer) not in m
    assert m[("gpu_forensics_probe_errors_total", ())] == 3
    assert names["trainer"] not in json.loads((out / st.STATE).read_text())["labels"]


def test_state_survives_a_bad_file_and_saves_atomically(tmp_path):
    (tmp_path / st.STATE).write_text("{half")
    logs: list[str] = []
    s = st.load(tmp_path, logs.append)
    (bad,) = tmp_path.glob(st.STATE + ".bad-*")  # tests/test_watch_hostile.py: every other way a state is bad
    assert s == st.empty() and bad.read_text() == "{half" and len(logs) == 1
    s["access"]["abc"] = 1
    s["reloads_total"] = 7
    st.save(tmp_path, s)
    assert st.load(tmp_path)["access"] == {"abc": 1} and st.load(tmp_path)["reloads_total"] == 7
    assert not (tmp_path / (st.STATE + ".tmp")).exists()


def test_prune_by_count_and_bytes(tmp_path):
    for i, n in enumerate((100, 200, 300, 400)):
        d = tmp_path / f"{st.PREFIX}2026120{i}T000000.000000Z"
        d.mkdir()
        (d / "f").write_bytes(b"x" * n)
    for other in ("other", f"{st.PREFIX}notastamp", f"{st.PREFIX}20261200T000000Z"):  # not named as the agent names
        (tmp_path / other).mkdir()
    removed = st.prune(tmp_path, 3, 10_000)
    assert [p.name for p in removed] == [f"{st.PREFIX}20261200T000000.000000Z"]
    newest = tmp_path / f"{st.PREFIX}20261203T000000.000000Z"
    removed = st.prune(tmp_path, 3, 450)
    assert [p.name for p in removed] == [f"{st.PREFIX}20261201T000000.000000Z", f"{st.PREFIX}20261202T000000.000000Z"]
    assert [p.name for p in st.bundles(tmp_path)] == [newest.name]
    assert all((tmp_path / o).is_dir() for o in ("other", f"{st.PREFIX}notastamp", f"{st.PREFIX}20261200T000000Z"))


def test_sizes_and_listen_addresses():
    assert st.parse_size("500M") == 500 << 20 and st.parse_size("1.5GiB") == 3 << 29 and st.parse_size("42") == 42
    with pytest.raises(ValueError):
        st.parse_size("lots")
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    with pytest.raises(ValueError):
        parse_listen("9464")


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["watch", "--out", str(tmp_path), "--listen", "nohost"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    assert main(["watch", "--out", str(tmp_path), "--interval", "0"]) == 2
    assert not os.listdir(tmp_path)


def test_watch_is_declared_for_the_node():
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    base = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert '"prometheus-client' in base and '"jeepney' in base
