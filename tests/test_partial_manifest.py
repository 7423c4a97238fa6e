"""A partial bundle's manifest.json always parses (issue 27 item 4): a full disk during collection, at
whatever point it fills, leaves a manifest that lists what was kept; a collection killed outright
leaves the one written when the directory was claimed. Real tmpfs mounts of a few sizes (the sample
bundle takes about 700 KiB), the real CLI in a subprocess (tests run as root)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.output import RESERVE
from forensics.ops.cli import SAMPLE_ROOT

CLI = [sys.executable, "-m", "forensics.ops.cli"]


@pytest.fixture(scope="module", autouse=True)
def sample_journal():
    sys.path.insert(0, str(SAMPLE_ROOT.parent))
    import build
    build.ensure_journal()


@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"fs-{size}"
        mnt.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
        mounted.append(mnt)
        return mnt
    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.mark.parametrize("size", ["64k", "128k", "256k", "400k", "600k"])
def test_a_disk_that_fills_during_collection_leaves_a_manifest_that_parses_and_lists_what_is_there(tmpfs, size):
    mnt = tmpfs(size)
    p = subprocess.run(CLI + ["collect", "--root", str(SAMPLE_ROOT), "--out", str(mnt / "b")], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 5 and "No space left on device (ENOSPC)" in p.stderr, p.stderr
    kept = mnt / "b.incomplete"
    m = json.loads((kept / "manifest.json").read_text())  # before: empty or cut mid-record on most sizes
    assert m["complete"] is False and "No space left on device" in m["incomplete_reason"]
    assert m["schema"] == "gpu-forensics/manifest/v1" and m["artifacts"]
    # every collected record is a file that is there with the bytes it says
    for a in m["artifacts"]:
        if a["status"] == "collected":
            data = (kept / a["path"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (a["size"], a["sha256"]), a["path"]
    assert not (kept / RESERVE).exists() and not (kept / "manifest.json.tmp").exists()


def test_a_collection_killed_outright_leaves_a_manifest_that_parses(tmp_path):
    """SIGKILL (the OOM killer, a node going down) gives no chance to write anything: the manifest
    written when the directory was claimed says so."""
    out = tmp_path / "b"
    p = subprocess.Popen(CLI + ["collect", "--root", str(SAMPLE_ROOT), "--out", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kept = tmp_path / "b.incomplete"
    deadline = time.monotonic() + 60
    while not (kept / "node").is_dir() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    m = json.loads((kept / "manifest.json").read_text())
    assert (m["complete"], m["artifacts"]) == (False, [])
    assert m["incomplete_reason"].startswith("collection under way, or stopped before it could say why")


def test_a_whole_bundle_holds_no_reserve(tmp_path):
    from forensics.bundle import verify
    from forensics.ops import pipeline
    path, _digest, _arts = pipeline.collect(SAMPLE_ROOT, tmp_path / "b", time_budget=None)
    assert verify(path) == [] and sorted(os.listdir(path))[0] != RESERVE and not (path / RESERVE).exists()
