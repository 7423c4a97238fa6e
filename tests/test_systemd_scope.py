"""systemd's view of each runc scope (issue 13 item 3): ``systemctl show`` parsed from the exact text systemd 252
printed in the systemd lab (docs/sources.md "The systemd lab"; captured with ``lab-systemd.sh sh systemctl show
--no-pager -p NeedDaemonReload -p DevicePolicy -p DeviceAllow -p ControlGroup -p LoadState <unit>``), the
collection path with a fake ``--root`` (recorded absent) and with a stand-in systemctl, and what the exposure makes of
``NeedDaemonReload=yes``. The live path against a real systemd is the lab's end-to-end test."""
from __future__ import annotations

import os
from pathlib import Path

from collectors import containers
from collectors.containers import parse as cp, unit
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.findings.exposure import assess
from forensics.source import CollectContext

from test_exposure import LEGACY_HOOK, container, node
from test_runc_log import POD, _collect, _task

SCOPE = "cri-containerd-lab-spec.scope"
#: lab-spec with no /dev/char links, before the reload (runc 1.1.5 left 195:* out)
SHOW_BEFORE = f"""ControlGroup=/kubepods.slice/kubepods-besteffort.slice/{POD}/{SCOPE}
DevicePolicy=strict
DeviceAllow=char-pts rwm
DeviceAllow=/dev/char/10:200 rwm
DeviceAllow=/dev/char/5:2 rwm
DeviceAllow=/dev/char/5:0 rwm
DeviceAllow=/dev/char/1:9 rwm
DeviceAllow=/dev/char/1:8 rwm
DeviceAllow=/dev/char/1:7 rwm
DeviceAllow=/dev/char/1:5 rwm
DeviceAllow=/dev/char/1:3 rwm
DeviceAllow=char-* m
DeviceAllow=block-* m
LoadState=loaded
NeedDaemonReload=yes
"""
#: the same scope after `systemctl daemon-reload` (the list comes back reversed)
SHOW_AFTER = f"""ControlGroup=/kubepods.slice/kubepods-besteffort.slice/{POD}/{SCOPE}
DevicePolicy=strict
DeviceAllow=block-* m
DeviceAllow=char-* m
DeviceAllow=/dev/char/1:3 rwm
LoadState=loaded
NeedDaemonReload=no
"""
#: a unit systemd does not know: an empty list prints no line, an empty string prints ``ControlGroup=``
SHOW_NOT_FOUND = "ControlGroup=\nDevicePolicy=auto\nLoadState=not-found\nNeedDaemonReload=no\n"


def test_systemctl_show_parser_on_systemd_252_text():
    before = cp.parse_systemctl_show(SHOW_BEFORE)
    assert before["NeedDaemonReload"] is True and before["DevicePolicy"] == "strict"
    assert before["LoadState"] == "loaded" and before["ControlGroup"].endswith(f"/{POD}/{SCOPE}")
    assert before["DeviceAllow"][0] == "char-pts rwm" and before["DeviceAllow"][-1] == "block-* m"
    assert len(before["DeviceAllow"]) == 11 and not any("195:" in a for a in before["DeviceAllow"])
    after = cp.parse_systemctl_show(SHOW_AFTER)
    assert (after["NeedDaemonReload"], after["DeviceAllow"]) == (False, ["block-* m", "char-* m", "/dev/char/1:3 rwm"])
    assert cp.parse_systemctl_show(SHOW_NOT_FOUND) == {
        "NeedDaemonReload": False, "DevicePolicy": "auto", "DeviceAllow": [], "ControlGroup": None,
        "LoadState": "not-found"}
    assert cp.parse_systemctl_show("garbage\nNeedDaemonReload=maybe\nOther=1\n")["NeedDaemonReload"] is None


def test_when_systemctl_may_run(tmp_path, monkeypatch):
    assert unit.Systemctl(tmp_path).why == f"--root is {tmp_path}, not /: the node's systemd is not the one this " \
                                           "process reaches"
    assert unit.Systemctl("/", which=lambda name: None).why == "systemctl is not installed"
    monkeypatch.setattr(unit, "SYSTEMD_SOCKETS", (str(tmp_path / "private"), str(tmp_path / "bus")))
    gone = unit.Systemctl("/", which=lambda name: "/usr/bin/systemctl")
    assert gone.path is None and gone.why.startswith("systemd is not reachable (no ")
    (tmp_path / "private").touch()
    assert unit.Systemctl("/", which=lambda name: "/usr/bin/systemctl").path == "/usr/bin/systemctl"


def test_unit_name_from_the_cgroup_path_or_runcs_cgroups_path():
    assert unit.unit_name("x", {"path": f"/sys/fs/cgroup/devices/kubepods.slice/{SCOPE}"}, {}) == SCOPE
    spec = {"linux": {"cgroupsPath": f"{POD}:cri-containerd:lab-spec"}}
    assert unit.unit_name("lab-spec", {"path": None}, spec) == SCOPE
    assert unit.unit_name("c1", {"path": "/sys/fs/cgroup/kubepods/besteffort/podx/c1"}, {}) is None  # cgroupfs
    assert unit.unit_name("c1", {"path": "/sys/fs/cgroup/-x.scope"}, {}) is None  # would read as an option
    assert unit.unit_name("c1", {"path": None}, {"linux": {"cgroupsPath": "s.slice:a b:c"}}) is None


def test_collection_with_a_fake_root_records_systemctl_absent_once(tmp_path):
    root = tmp_path / "root"
    _task(root)
    b = _collect(root, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    assert rec["gpu"] and rec["cgroup"]["driver"] == "systemd" and rec["systemd_unit"] is None
    absent = [a for a in b.artifacts() if a.source == unit.SOURCE]
    assert len(absent) == 1 and absent[0].status.value == "absent"
    assert absent[0].message.startswith(f"--root is {root}, not /")


def _fake_systemctl(tmp_path: Path, text: str, sleep: float = 0) -> str:
    tool = tmp_path / "bin/systemctl"
    tool.parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "out.txt").write_text(text)
    tail = f"exec sleep {sleep}" if sleep else f"cat {tmp_path}/out.txt"  # exec: the kill ends the sleep too
    tool.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/argv\n{tail}\n')
    tool.chmod(0o755)
    return str(tool)


def test_collection_with_a_reachable_systemd_stores_and_reads_systemctl_show(tmp_path, monkeypatch):
    """The live path with a stand-in systemctl that prints what systemd 252 printed (--root stays a built
    tree: a test must not read this machine's containers)."""
    root = tmp_path / "root"
    _task(root)
    live = unit.Systemctl(tmp_path)  # as Systemctl("/") is on a node whose systemd answers
    live.path, live.why = _fake_systemctl(tmp_path, SHOW_BEFORE), None
    monkeypatch.setattr(containers, "Systemctl", lambda root: live)
    b = _collect(root, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    assert rec["systemd_unit"] == cp.parse_systemctl_show(SHOW_BEFORE)
    assert (tmp_path / "argv").read_text().split() == [
        "show", "--no-pager", "-pNeedDaemonReload", "-pDevicePolicy", "-pDeviceAllow", "-pControlGroup",
        "-pLoadState", SCOPE]
    assert b.path("containers/k8s.io/lab-spec/systemctl-show.txt").read_text() == SHOW_BEFORE


def test_a_systemd_that_does_not_answer_stops_the_calls(tmp_path, monkeypatch):
    monkeypatch.setattr(unit, "SHOW_TIMEOUT_S", 0.3)
    sysctl = unit.Systemctl(tmp_path)
    sysctl.path = _fake_systemctl(tmp_path, SHOW_BEFORE, sleep=5)
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=Path("/"), writer=w)
    assert unit.show(ctx, sysctl, "containers/k8s.io/x", SCOPE) is None
    assert sysctl.left_s <= 0
    assert unit.show(ctx, sysctl, "containers/k8s.io/y", SCOPE) is None
    w.finish()
    arts = [a for a in Bundle.open(tmp_path / "b").artifacts() if a.source.startswith(sysctl.path)]
    assert [a.status.value for a in arts] == ["error", "truncated"]
    assert arts[0].message == "no answer in 0.3 s; no more systemctl calls"
    assert os.path.exists(tmp_path / "argv")


def test_need_daemon_reload_is_a_note_and_systemctl_show_stands_in_for_missing_drop_ins(tmp_path):
    rt = node(tmp_path)
    c = container("a1", pod="trainer-0", hooks={"prestart": [LEGACY_HOOK]})  # drop-in files not read
    c["systemd_unit"] = cp.parse_systemctl_show(SHOW_BEFORE)
    spec = container("s1", pod="spec-0", spec_gpu=True)
    spec["systemd_unit"] = cp.parse_systemctl_show(SHOW_BEFORE.replace(
        "DeviceAllow=char-pts rwm", "DeviceAllow=/dev/char/195:255 rw\nDeviceAllow=/dev/char/195:0 rw\n"
        "DeviceAllow=char-nvidia-uvm rw\nDeviceAllow=char-pts rwm").replace("=yes", "=no"))
    exp = assess(rt, [c, spec], None)
    a, s = exp["containers"]
    assert a["systemd_unit"]["NeedDaemonReload"] is True and a["at_risk"] is True
    assert "not in the scope's DeviceAllow= (systemctl show), so the next daemon-reload revokes access" in a["reason"]
    assert "NeedDaemonReload" not in a["reason"]  # evidence, not a cause
    assert s["at_risk"] is False  # systemd holds the spec's rules
    note, = [n for n in exp["notes"] if "NeedDaemonReload" in n]
    assert note.startswith("systemd reports NeedDaemonReload=yes for the scope of 1 GPU container (ml/trainer-0): ")
    assert "runc#4568" in note and "not a cause" in note
