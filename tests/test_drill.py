"""The reload drill (forensics/ops/drill.py) in the container lab (tests/lab.py): real containerd and runc,
the hook-injected container A, the spec container B, and the lab's reload stand-in, which rebuilds
every lab container's device rules from its spec the way systemd does on daemon-reload.

The drill's real reload (``systemctl daemon-reload``) is tested only on a real node: here it is
always replaced by the stand-in through ``--reload-command``. Like test_containers_lab.py, these
tests need root, cgroup v1's devices controller and containerd, runc and busybox-static, and fail
(not skip) without them.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from forensics.ops import drill
from test_containers_lab import lab  # noqa: F401 - the module-scoped lab fixture, reused

TESTS = Path(__file__).resolve().parent
#: the lab's reload stand-in as a command: Lab.reload for every container with runc state in the lab
STANDIN = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import lab as L
lb = L.Lab(Path(sys.argv[2]))
for d in sorted((lb.runc_root / L.NS).iterdir()):
    if (d / "state.json").is_file():
        try:
            lb.reload(L.Container(d.name, 0, None, None))
            print("reloaded", d.name)
        except OSError as e:
            print("skipped", d.name, e)
"""


def _standin(lab) -> str:  # noqa: F811
    return shlex.join([sys.executable, "-I", "-c", STANDIN, str(TESTS), str(lab.base)])


def _drill(lab, out: Path, *extra: str) -> tuple[int, dict | None]:  # noqa: F811
    rc = drill.main(["--yes-reload-systemd", "--root", "/", "--state-dir", str(lab.state),
                     "--reload-command", _standin(lab), "--out", str(out), *extra])
    report = json.loads((out / "drill.json").read_text()) if (out / "drill.json").exists() else None
    return rc, report


def test_refuses_without_consent_and_touches_nothing(tmp_path, capsys):
    marker = tmp_path / "reloaded"
    rc = drill.main(["--reload-command", f"touch {marker}", "--out", str(tmp_path / "d")])
    assert rc == 2
    assert "--yes-reload-systemd" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "d").exists()


def test_refuses_when_no_gpu_container_can_be_used(tmp_path, capsys):
    marker = tmp_path / "reloaded"
    empty = tmp_path / "state"
    empty.mkdir()
    rc = drill.main(["--yes-reload-systemd", "--root", "/", "--state-dir", str(empty), "--reload-command",
                     f"touch {marker}", "--out", str(tmp_path / "d")])
    assert rc == 2
    assert "no GPU container the test can use" in capsys.readouterr().err
    assert not marker.exists()  # refused before the reload
    assert json.loads((tmp_path / "d/drill.json").read_text())["verdict"] == "inconclusive"


def test_lab_drill_hook_container_still_exposed_spec_container_fixed(lab, tmp_path):  # noqa: F811
    lab.run("gfdrill-legacy", legacy=True, env=["NVIDIA_VISIBLE_DEVICES=all"])
    lab.run("gfdrill-spec", gpu_in_spec=True, env=["NVIDIA_VISIBLE_DEVICES=0"])

    # a named container that does not exist: refused before any reload
    rc, _ = _drill(lab, tmp_path / "none", "--container", "gfdrill-missing")
    assert rc == 2

    rc, rep = _drill(lab, tmp_path / "both")
    rows = {r["id"]: r for r in rep["containers"]}
    assert rc == 4 and rep["verdict"] == "still exposed"
    a, b = rows["gfdrill-legacy"], rows["gfdrill-spec"]
    assert a["verdict"] == "still exposed" and b["verdict"] == "fixed"
    # the evidence: A's open() went from ENXIO (cgroup allowed, no driver) to EPERM; B's did not
    assert a["probe_before"] == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
    assert a["probe_after"] == {"/dev/nvidia0": "EPERM", "/dev/nvidiactl": "EPERM"}
    assert b["probe_after"] == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
    assert "c 195:0 rw" in a["rules_before"] and "c 195:0 rw" not in a["rules_after"]
    assert "c 195:0 rw" in b["rules_after"]
    assert a["prestart_hooks"] and a["spec_gpu_devices"] == []
    assert b["prestart_hooks"] == [] and "/dev/nvidia0" in b["spec_gpu_devices"]
    assert rep["reload"]["exit"] == 0 and "reloaded gfdrill-legacy" in rep["reload"]["output"]
    assert rep["live_systemd"] is False and "only on a real node" in rep["note"]
    # the before/after bundles are ordinary bundles: verifiable, with the on-disk spec and devices.list
    from forensics.bundle import verify
    for side in ("before", "after"):
        assert verify(rep[side]) == []
        assert Path(rep[side], "containers/k8s.io/gfdrill-legacy/config.json").is_file()
        assert Path(rep[side], "containers/k8s.io/gfdrill-legacy/devices.list").is_file()

    rc, rep = _drill(lab, tmp_path / "spec", "--container", "gfdrill-spec")
    assert (rc, rep["verdict"]) == (0, "fixed")
    assert [r["id"] for r in rep["containers"]] == ["gfdrill-spec"]

    # A already lost its GPU: a drill on it cannot show anything
    rc, rep = _drill(lab, tmp_path / "again", "--container", "gfdrill-legacy")
    assert rc == 2  # nothing got past the device cgroup before the reload: not a usable container
    assert not (tmp_path / "again/after").exists()


def test_lab_drill_on_a_fresh_hook_injected_probe_container(lab, tmp_path):  # noqa: F811
    existed = {h: (h / "k8s.io").exists() for h in Path("/sys/fs/cgroup").iterdir()}
    rootfs = lab.make_rootfs("gfdrill-fresh")
    try:
        rc, rep = _drill(lab, tmp_path / "fresh", "--fresh-rootfs", str(rootfs), "--ctr-address", lab.address,
                         "--runtime-binary", str(lab.base / "nvidia-container-runtime"), "--runc-root", str(lab.runc_root),
                         "--container", "ignored-when-fresh")
    finally:
        for h, was in existed.items():
            if not was and (h / "k8s.io").is_dir():
                try:
                    (h / "k8s.io").rmdir()
                except OSError:
                    pass
    fresh = rep["fresh"]["id"]
    assert rc == 4 and rep["verdict"] == "still exposed"
    assert [r["id"] for r in rep["containers"]] == [fresh]
    assert rep["fresh"]["cleanup_problems"] == []
    assert fresh not in lab.ctr("container", "ls", "-q").stdout
