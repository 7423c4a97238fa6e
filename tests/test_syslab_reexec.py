"""Two other ways a running hook-injected container loses its GPU, on a real systemd 252 with containerd and
runc (tests/syslab.py), on both cgroup layouts (the update on v1), and what the tool says of each (issue 26):

- ``reexec``: ``systemctl daemon-reexec`` from a transient unit (a package's postinst, needrestart): the
  hook container's ``open(/dev/nvidiactl)`` turns EPERM exactly as after a reload (docs/sources.md "The systemd lab"), the spec
  container keeps it; the tool confirms the daemon-reload cause at PID 1's ``Reexecuting.`` line, and the
  exposure, the verdict and the headline agree;
- ``update``: ``runc update --cpuset-cpus`` of the hook container (what containerd does with the cpuset for
  the kubelet's static CPU manager, kubernetes#77073), no reload at all: runc rebuilds the device cgroup
  from its config and the hook's GPU is gone. Here runc was called by hand, not by containerd's CRI for the
  kubelet (which logs every call), so neither the CPU manager nor a reload happened as the journal shows:
  both are excluded, and the honest headline is "none of the known causes fits", never a guess.

Fixtures, watchdog and teardown checks are those of tests/test_syslab.py.
"""
from __future__ import annotations

import pytest

import syslab as S
from test_syslab import LAYOUTS, _close, _lab
from test_syslab_e2e import _rows, _run


def _causes(run: dict) -> dict:
    [inc] = [i for i in run["analysis"]["incidents"] if "ml/" not in str(i.get("pods"))] or run["analysis"]["incidents"]
    return {c["kind"]: c for c in inc["causes"]}


@pytest.fixture(scope="module", params=LAYOUTS)
def reexeced(request, tmp_path_factory):
    """``(lab, probes, run)``: the probes of the hook and spec containers after a real daemon-reexec requested
    from a transient unit, and the tool's run then."""
    lab, dog = _lab(tmp_path_factory, request.param, "reexec")
    try:
        lab.up()
        assert lab.probe("hook") == "ENXIO"
        lab.reload(via_unit="systemd-postinst", verb="daemon-reexec")
        probes = {n: lab.probe(n) for n in ("hook", "spec")}
        yield lab, probes, _run(lab, "reexec")
    finally:
        _close(lab, dog)


def test_a_real_reexec_revokes_the_hook_containers_gpu_as_a_reload_does(reexeced):
    _, probes, _ = reexeced
    assert probes == {"hook": "EPERM", "spec": "ENXIO"}


def test_the_tool_confirms_the_reexec_as_the_reload_cause_and_agrees_with_the_exposure(reexeced):
    lab, _, run = reexeced
    a = run["analysis"]
    hook, spec = _rows(run)["hook"], _rows(run)["spec"]
    assert (hook["broken"], hook["broken_basis"], spec["broken"]) == (True, "probe", False)
    logged = lab.sh("journalctl", "-q", "--no-pager", "-o", "json", "_PID=1", "MESSAGE=Reexecuting.").stdout
    assert logged.strip(), "systemd logged no Reexecuting. line"
    causes = [c for i in a["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert causes and all(c["verdict"] == "confirmed" and c["mechanism"] == "shown" for c in causes)
    assert "PID 1 logged the daemon-reexec" in causes[0]["reason"]
    assert causes[0]["requested_by"]["unit"] == "systemd-postinst.service"
    assert a["headline"]["verdict"] == "confirmed" and a["headline"]["cause"] == "daemon-reload"
    assert not [p for p in a["problems"] if p["artifact"] == "analysis"]  # no contradiction


@pytest.fixture(scope="module", params=["v1"])  # the v2 lab's cgroup2 has no cpuset controller on a hybrid host
def updated(request, tmp_path_factory):
    """``(lab, probes, run)``: after ``runc update --cpuset-cpus 0`` of the hook and spec containers (cgroup v1: an update
    that changes nothing leaves the rules alone, and the v2 lab's cgroup2 has no cpuset controller) (no reload)."""
    lab, dog = _lab(tmp_path_factory, request.param, "update")
    try:
        lab.up()
        for name in ("hook", "spec"):
            lab.sh("runc", "--root", f"/run/containerd/runc/{S.NS}", "update", "--cpuset-cpus", "0", S.cid(name))
        probes = {n: lab.probe(n) for n in ("hook", "spec")}
        yield lab, probes, _run(lab, "update")
    finally:
        _close(lab, dog)


def test_runc_update_alone_revokes_the_hook_containers_gpu(updated):
    _, probes, _ = updated
    assert probes == {"hook": "EPERM", "spec": "ENXIO"}


def test_an_update_by_hand_is_no_known_cause_and_the_tool_says_so(updated):
    _, _, run = updated
    a = run["analysis"]
    hook = _rows(run)["hook"]
    assert (hook["broken"], hook["broken_basis"]) == (True, "probe")
    [inc] = [i for i in a["incidents"] if "default/gpu-pod" in i["pods"]]
    causes = {c["kind"]: c for c in inc["causes"]}
    assert causes["daemon-reload"]["verdict"] == "excluded"
    assert causes["cpu-manager"]["verdict"] == "excluded" and "UpdateContainerResources" in causes["cpu-manager"]["reason"]
    assert a["headline"]["verdict"] == "undetermined"
    assert not [p for p in a["problems"] if p["artifact"] == "analysis"]
