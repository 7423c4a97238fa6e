"""The mechanism on a real systemd (tests/syslab.py): a real ``systemctl daemon-reload`` takes the
GPU from a container whose access came from a prestart hook outside the spec, and leaves it to one
whose access is in the spec, on both cgroup layouts.

Each lab boots once per module and layout; the fixture records what the node shows before and after
one real reload, and the tests assert on those records. A lab that cannot start FAILS (it needs root,
the hybrid host layout for v1, and scripts/lab-deps.sh): skipping would hide that the mechanism went
untested. A watchdog takes every lab down after :data:`LAB_DEADLINE_S`, so a hung lab cannot hang CI,
and each teardown asserts that nothing is left (process, cgroup).

The tool itself on this lab (``run --probe`` before and after a requester's reload, the /dev/char trap,
the drill's live reload) is in tests/test_syslab_e2e.py, which uses :func:`_lab` and :func:`_close`.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import syslab as S

LAB_DEADLINE_S = 90.0
PROJECT = Path(__file__).resolve().parent.parent
LAYOUTS = ("v1", "v2")


def _lab(tmp_path_factory, layout, tag, **kw):
    """A lab (not yet up) in its own folder, whose name (the lab's cgroup name) is unique to this run."""
    folder = tmp_path_factory.getbasetemp() / f"syslab-{layout}-{tag}-{os.getpid()}"
    lab = S.SysLab(folder, layout, **kw)
    dog = threading.Timer(LAB_DEADLINE_S, lab.down)
    dog.daemon = True
    dog.start()
    return lab, dog


def _close(lab, dog):
    dog.cancel()
    left = lab.down()
    assert left == [], f"lab left behind: {left}"
    assert lab.pid1() is None


def _snapshot(lab, names=("hook", "spec", "nogpu")) -> dict:
    snap = {"probe": {n: lab.probe(n) for n in names}, "show": {}, "rules": {}}
    for n in names:
        snap["show"][n] = lab.show(n, "NeedDaemonReload", "DevicePolicy", "DeviceAllow")
        if lab.layout == "v1":
            snap["rules"][n] = lab.read(f"{lab.cgroup_dir(n)}/devices.list").split("\n")
        else:
            snap["rules"][n] = [p.get("name", "") for p in lab.device_programs(n)]
    return snap


@pytest.fixture(scope="module", params=LAYOUTS)
def observed(request, tmp_path_factory):
    """``(lab, before, after)``: one booted lab of each layout and its snapshots around one reload."""
    lab, dog = _lab(tmp_path_factory, request.param, "std")
    try:
        lab.up()
        before = _snapshot(lab)
        dropins = {n: sorted(os.listdir(f"/proc/{lab.pid1()}/root/run/systemd/transient/{S.unit(n)}.d"))
                   for n in ("hook", "spec")}
        lab.reload()
        after = _snapshot(lab)
        after["dropins"] = dropins
        yield lab, before, after
    finally:
        _close(lab, dog)


def test_hook_container_loses_the_gpu_on_a_real_reload(observed):
    _, before, after = observed
    assert before["probe"] == {"hook": "ENXIO", "spec": "ENXIO", "nogpu": "ENOENT"}
    assert after["probe"] == {"hook": "EPERM", "spec": "ENXIO", "nogpu": "ENOENT"}


def test_scopes_need_a_reload_until_one_runs(observed):
    _, before, after = observed
    for n in ("hook", "spec", "nogpu"):
        assert before["show"][n]["NeedDaemonReload"] == "yes", n     # runc#4568: every new runc scope
        assert after["show"][n]["NeedDaemonReload"] == "no", n
        assert before["show"][n]["DevicePolicy"] == after["show"][n]["DevicePolicy"] == "strict"
    spec_allow = before["show"]["spec"]["DeviceAllow"].split("; ")
    assert spec_allow[:2] == ["/dev/char/195:255 rw", "/dev/char/195:0 rw"]
    assert "/dev/char/1:3 rwm" in spec_allow and "char-pts rwm" in spec_allow
    assert "195" not in before["show"]["hook"]["DeviceAllow"]
    assert sorted(after["show"]["spec"]["DeviceAllow"].split("; ")) == sorted(spec_allow)


def test_runc_writes_device_drop_ins(observed):
    lab, _, after = observed
    for n in ("hook", "spec"):
        assert after["dropins"][n] == ["50-DeviceAllow.conf", "50-DevicePolicy.conf"]
    text = lab.read(f"/run/systemd/transient/{S.unit('spec')}.d/50-DeviceAllow.conf")
    assert "DeviceAllow=/dev/char/195:255 rw\nDeviceAllow=/dev/char/195:0 rw\n" in text
    assert "195" not in lab.read(f"/run/systemd/transient/{S.unit('hook')}.d/50-DeviceAllow.conf")
    assert "DevicePolicy=strict" in lab.read(f"/run/systemd/transient/{S.unit('hook')}.d/50-DevicePolicy.conf")


def test_device_rules_before_and_after(observed):
    lab, before, after = observed
    if lab.layout == "v1":
        assert {"c 195:255 rw", "c 195:0 rw"} <= set(before["rules"]["hook"])
        assert not [r for r in after["rules"]["hook"] if "195:" in r]
        assert "c 1:3 rwm" in after["rules"]["hook"]
        assert {"c 195:255 rw", "c 195:0 rw"} <= set(after["rules"]["spec"])
    else:
        # before any reload: runc's program (unnamed) on each scope, the hook's copy in its place
        assert before["rules"] == {"hook": ["lab_gpu_repl"], "spec": [""], "nogpu": [""]}
        # the reload attaches systemd's own program next to what is there
        assert after["rules"] == {"hook": ["lab_gpu_repl", "sd_devices"], "spec": ["", "sd_devices"],
                                  "nogpu": ["", "sd_devices"]}


def test_volatile_journal_in_run_log_journal(observed):
    lab = observed[0]
    mid = lab.read("/etc/machine-id").strip()
    root = f"/proc/{lab.pid1()}/root"
    assert os.path.exists(f"{root}/run/log/journal/{mid}/system.journal")
    assert not os.path.exists(f"{root}/var/log/journal")
    out = lab.sh("journalctl", "-q", "--no-pager", "-o", "cat", "_PID=1").stdout
    assert "Reloading." in out.splitlines()
