"""The mechanism on a real systemd (tests/syslab.py): a real ``systemctl daemon-reload`` takes the
GPU from a container whose access came from a prestart hook outside the spec, and leaves it to one
whose access is in the spec, on both cgroup layouts.

Each lab boots once per module and layout; the fixture records what the node shows before and after
one real reload, and the tests assert on those records. A lab that cannot start FAILS (it needs root,
the hybrid host layout for v1, and scripts/lab-deps.sh): skipping would hide that the mechanism went
untested. A watchdog takes every lab down after :data:`LAB_DEADLINE_S`, so a hung lab cannot hang CI,
and each teardown asserts that nothing is left (process, cgroup).
"""
from __future__ import annotations

import json
import os
import sys
import threading
from datetime import datetime, timezone
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


@pytest.fixture(scope="module", params=LAYOUTS)
def no_dev_char(request, tmp_path_factory):
    """A lab without /dev/char/195:* links and with a persistent journal: ``(lab, before, after)``."""
    lab, dog = _lab(tmp_path_factory, request.param, "nochar", dev_char=False, persistent_journal=True)
    try:
        lab.up(containers=("pause", "spec"))
        before = lab.probe("spec")
        lab.reload()
        yield lab, before, lab.probe("spec")
    finally:
        _close(lab, dog)


def test_without_dev_char_links_the_spec_container_loses_the_gpu_too(no_dev_char):
    lab, before, after = no_dev_char
    assert (before, after) == ("ENXIO", "EPERM")
    log = lab.read(f"/run/containerd/io.containerd.runtime.v2.task/{S.NS}/{S.cid('spec')}/log.json")
    assert "skipping device /dev/char/195:255 for systemd" in log
    assert "195" not in lab.show("spec", "DeviceAllow")["DeviceAllow"]


def test_volatile_journal_in_run_log_journal(observed):
    lab = observed[0]
    mid = lab.read("/etc/machine-id").strip()
    root = f"/proc/{lab.pid1()}/root"
    assert os.path.exists(f"{root}/run/log/journal/{mid}/system.journal")
    assert not os.path.exists(f"{root}/var/log/journal")
    out = lab.sh("journalctl", "-q", "--no-pager", "-o", "cat", "_PID=1").stdout
    assert "Reloading." in out.splitlines()


def test_persistent_journal_in_var_log_journal(no_dev_char):
    lab = no_dev_char[0]
    mid = lab.read("/etc/machine-id").strip()
    assert os.path.exists(f"/proc/{lab.pid1()}/root/var/log/journal/{mid}/system.journal")
    assert "Reloading." in lab.sh("journalctl", "-q", "--no-pager", "-o", "cat", "_PID=1").stdout.splitlines()


def _pid1_reloads(lab) -> list[dict]:
    """PID 1's ``Reloading.`` entries in the lab's journal: ``{"realtime", "source"}`` as UTC ISO times
    (journald's receive stamp ``__REALTIME_TIMESTAMP``, PID 1's own ``_SOURCE_REALTIME_TIMESTAMP``)."""
    out = lab.sh("journalctl", "-q", "--no-pager", "-o", "json", "_PID=1", "MESSAGE=Reloading.").stdout
    iso = lambda us: datetime.fromtimestamp(int(us) / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa
    return [{"realtime": iso(e["__REALTIME_TIMESTAMP"]), "source": iso(e["_SOURCE_REALTIME_TIMESTAMP"])}
            for e in map(json.loads, out.splitlines())]


@pytest.fixture(scope="module", params=LAYOUTS)
def collected(request, tmp_path_factory):
    """A fresh lab where a transient unit named like a requester ran ``systemctl daemon-reload``, then
    the project's ``run --probe`` ran inside as the DaemonSet would (the checkout is visible through
    the overlay's lower layer; the bundle goes under the lab folder): ``(lab, analysis)``."""
    lab, dog = _lab(tmp_path_factory, request.param, "e2e")
    try:
        lab.up()
        lab.reload(via_unit="nvidia-driver-upgrade")
        out = lab.folder / "out"
        p = lab.sh("/bin/sh", "-c", f"cd {PROJECT} && {sys.executable} -m forensics.ops.cli run --root / --probe "
                   f"--out {out} --time-budget 60", timeout=90, check=False)
        assert p.returncode == 0, p.stderr[-2000:]
        yield lab, json.loads((lab.folder / "out-report" / "analysis.json").read_text())
    finally:
        _close(lab, dog)


def test_the_collector_lists_the_containers_and_their_exposure(collected):
    _, a = collected
    exposure = {c["container_name"]: c for c in a["exposure"]["containers"]}
    assert a["exposure"]["systemd_cgroup"] is True
    assert sorted(exposure) == ["hook", "nogpu", "pause", "spec"]
    assert {c["id"] for c in exposure.values()} == {S.cid(n) for n in exposure}
    hook, spec = exposure["hook"], exposure["spec"]
    assert (hook["gpu_injection"], hook["at_risk"], hook["broken"], hook["probe"]) == ("hook", True, True, "EPERM")
    assert (spec["gpu_injection"], spec["at_risk"], spec["broken"], spec["probe"]) == ("spec", False, False, "ENXIO")
    assert hook["not_reapplied"] == ["/dev/nvidia0 (195:0)", "/dev/nvidiactl (195:255)"]
    assert hook["cgroup_driver"] == spec["cgroup_driver"] == "systemd"


def test_the_collector_confirms_the_reload_at_pid1s_time(collected):
    lab, a = collected
    reloads = [c for i in a["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert [c["verdict"] for c in reloads] == ["confirmed"]
    (logged,) = _pid1_reloads(lab)
    assert reloads[0]["at"] == logged["realtime"]       # journald's stamp; PID 1's own is a few µs earlier
    assert reloads[0]["requested_by"]["unit"] == "nvidia-driver-upgrade.service"
    assert reloads[0]["requested_by"]["basis"] == "inferred"


def test_the_collector_keeps_the_device_rules_of_each_scope(collected):
    lab, a = collected
    rec = json.loads((lab.folder / "out" / "containers" / S.NS / S.cid("hook") / "record.json").read_text())
    cg = rec["cgroup"]
    assert (cg["driver"], cg["version"]) == ("systemd", 1 if lab.layout == "v1" else 2)
    assert cg["path"] == lab.cgroup_dir("hook")
    assert cg["systemd_drop_in"]["policy"] == "strict" and "/dev/char/1:3 rwm" in cg["systemd_drop_in"]["allow"]
    if lab.layout == "v1":
        assert not [r for r in cg["rules"] if r["major"] == 195] and {"major": 1, "minor": 3, "type": "c",
                                                                       "access": "rwm", "allow": True} in cg["rules"]
    else:
        assert [p["name"] for p in cg["bpf"]] == ["lab_gpu_repl", "sd_devices"]
