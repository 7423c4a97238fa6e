"""The reload drill (forensics/ops/drill.py): its refusals, which need no container.

The drill itself runs on a real systemd in tests/test_syslab_e2e.py, on cgroup v1 and v2: its live
``systemctl daemon-reload`` (the hook-injected container still exposed, the spec one fixed, one that
already lost its GPU refused) and (v1, and v2 on a host whose cgroup2 has the cpu controller) its
fresh probe container, started through the lab's legacy-mode nvidia-container-runtime and removed
afterwards. The container lab's reload stand-in (tests/lab.py) is no longer used here.
"""
from __future__ import annotations

import json

from forensics.ops import drill


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
