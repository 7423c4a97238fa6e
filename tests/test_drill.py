"""The reload drill (forensics/ops/drill.py): its refusals, and its fresh probe container in the
container lab (tests/lab.py: real containerd and runc, the cgroupfs driver, and the lab's reload
stand-in, which rebuilds every lab container's device rules from its spec the way systemd does).

The drill's live path (a real ``systemctl daemon-reload``: the hook-injected container still exposed,
the spec one fixed, one that already lost its GPU refused) runs on a real systemd in
tests/test_syslab_e2e.py, on cgroup v1 and v2. What stays here is what that lab cannot do: the
fresh probe container needs a runtime binary that injects the legacy hook itself
(``--runtime-binary``: the stand-in lab's nvidia-container-runtime wrapper; the systemd lab puts
its hook into the spec it gives ctr), and its start and removal through ``ctr``. Like
test_containers_lab.py, these tests need root, cgroup v1's devices controller and containerd, runc
and busybox-static, and fail (not skip) without them.
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
