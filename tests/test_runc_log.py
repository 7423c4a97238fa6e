"""runc's log.json and the /dev/char trap (issue 13 item 4), without the lab: the collector over a built
containerd task directory holding the files a real runc 1.1.5 + containerd 1.6.20 wrote in the systemd lab
(docs/sources.md "The systemd lab", no ``/dev/char`` links), the event it becomes, and the exposure and
remedies it leads to. The real-systemd check of the same trap is the lab's end-to-end test."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from collectors import containers
from collectors import runtime_config as rc
from collectors.containers import parse as cp
from forensics.bundle import Bundle, BundleWriter
from forensics.events import KINDS, NodeFacts
from forensics.findings.exposure import assess
from forensics.source import CollectContext, HostFacts
from reports import styles

from test_exposure import BASE_DROPIN, CONTAINERD, GPU, PROC_DEVICES, container, node

#: runc 1.1.5's log.json of the spec container, byte for byte as the lab wrote it (/dev without /dev/char)
LOG_JSON = (
    '{"level":"warning","msg":"skipping device /dev/char/195:0 for systemd: stat /sys/dev/char/195:0: no such file '
    'or directory","time":"2026-12-01T11:30:14Z"}\n'
    '{"level":"warning","msg":"skipping device /dev/char/195:255 for systemd: stat /sys/dev/char/195:255: no such '
    'file or directory","time":"2026-12-01T11:30:14Z"}\n')
POD = "kubepods-besteffort-pod0b5e1d2a_6c1f_4f0e_9c57_1ab2c3d4e5f6.slice"
CG = f"/sys/fs/cgroup/devices/kubepods.slice/kubepods-besteffort.slice/{POD}/cri-containerd-lab-spec.scope"
#: the lab's lab-spec spec: the GPU in linux.devices and linux.resources.devices
SPEC = {"ociVersion": "1.0.2-dev", "process": {"args": ["/bin/busybox", "sleep", "3600"], "env": ["PATH=/bin"]},
        "annotations": {"io.kubernetes.cri.sandbox-name": "lab-spec", "io.kubernetes.cri.sandbox-namespace": "lab",
                        "io.kubernetes.cri.container-name": "spec"},
        "linux": {"cgroupsPath": f"{POD}:cri-containerd:lab-spec",
                  "devices": [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255, "fileMode": 438},
                              {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 438}],
                  "resources": {"devices": [{"allow": False, "access": "rwm"},
                                            {"allow": True, "type": "c", "major": 195, "minor": 255, "access": "rw"},
                                            {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"}]}}}


def _w(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _task(root: Path, log: str | None = LOG_JSON) -> Path:
    """containerd's task directory for lab-spec (v1 devices cgroup, systemd driver), with runc's state."""
    task = root / "run/containerd/io.containerd.runtime.v2.task/k8s.io/lab-spec"
    _w(task / "config.json", json.dumps(SPEC))
    _w(task / "options.json", json.dumps({"binary_name": "runc", "systemd_cgroup": True}))
    if log is not None:
        _w(task / "log.json", log)
    _w(root / "run/containerd/runc/k8s.io/lab-spec/state.json", json.dumps(
        {"id": "lab-spec", "init_process_pid": 999999, "init_process_start": 1, "created": "2026-12-01T11:30:14.2Z",
         "config": {"cgroups": {"Systemd": True}}, "cgroup_paths": {"devices": CG}}))
    return task


def _collect(root: Path, out: Path) -> Bundle:
    w = BundleWriter(out)
    containers.acquire(CollectContext(root=root, writer=w))
    w.meta["collection"] = {"start": "2026-12-01T11:31:00Z", "end": "2026-12-01T11:31:01Z"}
    w.finish()
    return Bundle.open(out)


def test_runc_log_parser_reads_the_real_lines_and_skips_the_rest():
    text = ('{"level":"info","msg":"container started","time":"2026-12-01T11:30:14Z"}\n' + LOG_JSON
            + '{"level":"error","msg":"runc run failed: boom","time":"2026-12-01T11:30:15+01:00"}\n'
            + '{"level":"warning","msg":"torn')
    assert cp.runc_log(text) == [
        {"time": "2026-12-01T11:30:14Z", "level": "warning", "device": "/dev/char/195:0",
         "msg": "skipping device /dev/char/195:0 for systemd: stat /sys/dev/char/195:0: no such file or directory"},
        {"time": "2026-12-01T11:30:14Z", "level": "warning", "device": "/dev/char/195:255",
         "msg": "skipping device /dev/char/195:255 for systemd: stat /sys/dev/char/195:255: no such file or directory"},
        {"time": "2026-12-01T10:30:15Z", "level": "error", "device": None, "msg": "runc run failed: boom"}]
    assert cp.runc_log("not json\n[1]\n" * 10) == []
    assert cp.runc_log("[" * 200000 + "\n" + LOG_JSON)[0]["device"] == "/dev/char/195:0"  # nested too deeply
    assert len(cp.runc_log(LOG_JSON * 200)) == cp.RUNC_LOG_MAX


def test_log_json_is_collected_redacted_and_read_into_the_record_and_events(tmp_path):
    root = tmp_path / "root"
    _task(root, LOG_JSON + '{"level":"warning","msg":"pull via https://u:s3cr3t@registry/x",'
                           '"time":"2026-12-01T11:30:15Z"}\n')
    b = _collect(root, tmp_path / "b")
    stored = b.path("containers/k8s.io/lab-spec/log.json").read_bytes()
    assert b"s3cr3t" not in stored and stored.startswith(LOG_JSON.encode())
    art, = [a for a in b.artifacts() if a.path == "containers/k8s.io/lab-spec/log.json"]
    assert art.method == "copy-redacted" and any("credentials redacted" in n for n in art.notes)
    r = containers.read(b, NodeFacts())
    rec, = r.facts["containers"]
    assert rec["skipped_devices"] == ["/dev/char/195:0", "/dev/char/195:255"]
    assert [e["device"] for e in rec["runc_log"]] == ["/dev/char/195:0", "/dev/char/195:255", None]
    assert rec["systemd_unit"] is None  # --root is not /: systemd's view is not read (test_systemd_scope.py)
    warn = [e for e in r.events if e.kind == "container.runc-warning"]
    assert [e.attrs["device"] for e in warn] == ["/dev/char/195:0", "/dev/char/195:255", None]
    e = warn[1]
    assert set(e.attrs) == set(KINDS["container.runc-warning"].attrs)
    assert e.attrs == {"id": "lab-spec", "pod": "lab-spec", "level": "warning", "device": "/dev/char/195:255",
                       "message": "skipping device /dev/char/195:255 for systemd: stat /sys/dev/char/195:255: no "
                                  "such file or directory"}
    assert e.at.isoformat() == "2026-12-01T11:30:14+00:00"
    assert e.evidence == {"artifact": "containers/k8s.io/lab-spec/log.json"}
    assert styles.style({"kind": e.kind})[0] == "containers"


def test_a_task_without_log_json_records_it_absent(tmp_path):
    root = tmp_path / "root"
    _task(root, log=None)
    b = _collect(root, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    assert (rec["runc_log"], rec["skipped_devices"]) == (None, [])
    assert any(a.source.endswith("/lab-spec/log.json") and a.status.value == "absent" for a in b.artifacts())


def _record(tmp_path: Path, log: str = LOG_JSON, **kw) -> dict:
    """The collected lab-spec record (the GPU nodes inside, as a live one has), with the lab's drop-in:
    runc's defaults, no 195 (it skipped them)."""
    root = tmp_path / "root"
    _task(root, log)
    rec, = containers.read(_collect(root, tmp_path / "b"), NodeFacts()).facts["containers"]
    rec["pid"] = 4242
    rec["dev_entries"] = [{"path": p, "kind": "c", "major": 195, "minor": m, "mode": "0666"}
                          for p, m in (("/dev/nvidiactl", 255), ("/dev/nvidia0", 0))]
    rec["cgroup"]["systemd_drop_in"] = {"policy": "strict", "allow": BASE_DROPIN}
    rec.update(kw)
    return rec


def test_spec_container_whose_rules_runc_skipped_is_at_risk_and_the_reason_cites_the_log(tmp_path):
    rt = node(tmp_path / "n", versions={"runc": "unknown"}, links=False)
    rt["versions"]["runc"] = {}
    exp = assess(rt, [_record(tmp_path)], None)
    e, = exp["containers"]
    assert (e["gpu_injection"], e["at_risk"], e["broken"]) == ("spec", True, False)
    assert e["runc_skipped"] == ["/dev/char/195:255", "/dev/char/195:0"]
    assert e["dev_char_missing"] == ["/dev/char/195:255", "/dev/char/195:0"]
    assert e["not_reapplied"] == ["/dev/nvidiactl (195:255)", "/dev/nvidia0 (195:0)"]
    assert ('runc logged "skipping device /dev/char/195:255 for systemd: stat /sys/dev/char/195:255: no such file '
            'or directory" (log.json, 2026-12-01T11:30:14Z)') in e["reason"]
    assert "out of the scope's DeviceAllow=, so the next daemon-reload revokes them although the spec lists them" \
        in e["reason"]
    assert "the node has no such link now either" in e["reason"]  # runtime_config's /dev/char listing
    assert "not in systemd's transient DeviceAllow drop-in" not in e["reason"]  # the cause is known
    assert exp["verdict"].startswith("Exposed: 1 container is caught by the /dev/char trap")
    fix, = [r for r in exp["remedies"] if "create-dev-char-symlinks" in r["change"]]
    assert fix["change"] == "nvidia-ctk system create-dev-char-symlinks --create-all"
    assert "runc logged 'skipping device /dev/char/195:255 for systemd' (log.json of lab/lab-spec)" in fix["why"]
    assert "NVIDIA Container Toolkit >= 1.12.0" in fix["why"] and "recreate them" in fix["why"]
    redo, = [r for r in exp["remedies"] if r["what"].startswith("Recreate")]
    assert redo["change"] == "kubectl delete pod -n lab lab-spec"
    assert redo["what"].endswith(", and those runc created without the /dev/char links")
    assert [r["what"] for r in exp["remedies"]].index(fix["what"]) < [r["what"] for r in exp["remedies"]].index(
        redo["what"])


def test_known_runc_1_1_5_gives_one_reason_not_two(tmp_path):
    rt = node(tmp_path / "n", versions={"runc": "1.1.5+ds1-1"}, links=False)
    e, = assess(rt, [_record(tmp_path)], None)["containers"]
    assert e["at_risk"] and e["runc_skipped"] == ["/dev/char/195:255", "/dev/char/195:0"]
    assert "runc logged" in e["reason"] and "runc 1.1.5+ds1-1 drops device rules" not in e["reason"]


def test_links_made_after_the_container_still_leave_it_at_risk(tmp_path):
    rt = node(tmp_path / "n", versions={"runc": "1.1.5"}, links=True)
    e, = assess(rt, [_record(tmp_path)], None)["containers"]
    assert e["at_risk"] is True
    assert "the link exists on the node now, made after the container was created, so only recreating it" in e["reason"]


def test_after_the_reload_the_spec_container_is_broken_and_the_log_says_why(tmp_path):
    rt = node(tmp_path / "n", versions={"runc": "1.1.5"}, links=False)
    rules = cp.parse_devices_list("c 136:* rwm\nc 10:200 rwm\nc 1:3 rwm\nc *:* m\nb *:* m\n")
    rec = _record(tmp_path, probe={"/dev/nvidiactl": "EPERM", "/dev/nvidia0": "EPERM"})
    rec["cgroup"]["rules"] = rules
    e, = assess(rt, [rec], None)["containers"]
    assert (e["broken"], e["probe"]) == (True, "EPERM")
    assert "runc logged" in e["reason"] and "access already revoked" in e["reason"]


def test_a_hook_container_and_a_drop_in_that_allows_the_gpu_ignore_the_log(tmp_path):
    rt = node(tmp_path / "n", versions={"runc": "1.1.5"}, links=False)
    allowed = _record(tmp_path / "a")
    allowed["cgroup"]["systemd_drop_in"]["allow"] = BASE_DROPIN + ["/dev/char/195:255 rw", "/dev/char/195:0 rw"]
    hook = container("h1", pod="legacy", hooks={"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]},
                     drop_in=BASE_DROPIN)
    hook["runc_log"] = []
    a, h = assess(rt, [allowed, hook], None)["containers"]
    assert (a["at_risk"], a["runc_skipped"]) == (False, [])  # systemd holds the rule: the line is history
    assert (h["gpu_injection"], h["at_risk"], h["runc_skipped"]) == ("hook", True, [])


def _node_without_dev_char(tmp_path: Path) -> dict:
    """runtime_config over a node whose /dev has the GPU nodes but no /dev/char directory at all (the lab's
    ``LAB_DEV_CHAR=0``, a node where nothing made the links)."""
    root = tmp_path / "host"
    _w(root / "etc/containerd/config.toml", CONTAINERD.format(sc="true"))
    _w(root / "proc/devices", PROC_DEVICES)
    (root / "dev").mkdir()
    for path, M, m in GPU:
        os.mknod(root / path.lstrip("/"), 0o666 | stat.S_IFCHR, os.makedev(M, m))
    w = BundleWriter(tmp_path / "bundle")
    rc.acquire(CollectContext(root=root, writer=w, node=HostFacts(package_versions={"runc": "1.1.5+ds1-1"})))
    w.finish()
    return rc.read(Bundle.open(tmp_path / "bundle"), NodeFacts()).facts["runtime"]


def test_a_node_without_dev_char_has_no_links_rather_than_unknown_ones(tmp_path):
    rt = _node_without_dev_char(tmp_path)
    assert (rt["dev_char"], rt["dev_char_absent"]) == (None, True)
    # an older bundle's record (no log.json read) and no drop-in: runc 1.1.5 and no /dev/char decide it
    e, = assess(rt, [container("old", pod="p", spec_gpu=True)], None)["containers"]
    assert e["at_risk"] is True  # before: "not known", so judged safe
    assert e["dev_char_missing"] == ["/dev/char/195:255", "/dev/char/195:0", "/dev/char/508:0"]
    e, = assess(rt, [_record(tmp_path / "r")], None)["containers"]
    assert "runc logged" in e["reason"] and "the node has no such link now either" in e["reason"]
