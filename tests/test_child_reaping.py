"""Nothing a collection started outlives it (issue 27 item 5): the journal's child and its reader
children (collectors.journal.fileset.keep_each forks them) are killed and reaped on every way out: a
second Ctrl-C, SIGTERM or SIGHUP twice, the tool killed outright. The first signal comes while the
parent collects the sources after the journal (the containers' collector made slow too). A real CLI process collecting two
real journal files, its readers made slow (each sleeps before its share, as the share of a huge
journal takes its time), real signals; then /proc says whether any of them still runs."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.ops.cli import SAMPLE_ROOT

PROJECT = Path(__file__).resolve().parent.parent
JOURNAL = next((SAMPLE_ROOT / "var/log/journal").rglob("system.journal"), None)

_SLOW_READERS = """
import os, sys, time
import collectors.journal.fileset as fileset
fileset.WORKERS = 2  # two readers whatever this machine's CPUs
real = fileset._FileSet._keep_share

def slow(self, *a, **k):  # in each reader child: say who it is, then take its time
    with open(sys.argv[4], "a") as f:
        f.write(f"{os.getpid()} {os.getppid()}\\n")
    time.sleep(600)
    return real(self, *a, **k)
fileset._FileSet._keep_share = slow
import collectors.containers as containers
containers.acquire = lambda ctx: time.sleep(600)  # the parent busy meanwhile: the first signal comes here
from forensics.ops.cli import main
sys.exit(main(["collect", "--root", sys.argv[3], "--journal-dir", sys.argv[2], "--out", sys.argv[1],
               "--time-budget", "900"]))
"""


@pytest.fixture(scope="module", autouse=True)
def sample_journal():
    sys.path.insert(0, str(SAMPLE_ROOT.parent))
    import build
    build.ensure_journal()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _readers(pidfile: Path, want: int, proc: subprocess.Popen) -> list[tuple[int, int]]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        lines = pidfile.read_text().split("\n") if pidfile.exists() else []
        got = [tuple(map(int, x.split())) for x in lines if x.strip()]
        if len(got) >= want:
            return got
        time.sleep(0.05)
    raise AssertionError(f"the readers did not start: {proc.poll()}")


@pytest.mark.parametrize("signals", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGTERM),
                                     (signal.SIGHUP, signal.SIGHUP), (signal.SIGINT, signal.SIGTERM),
                                     (signal.SIGKILL,)], ids=lambda s: "-".join(x.name for x in s))
def test_no_child_or_reader_outlives_a_collection_that_is_stopped(tmp_path, signals):
    assert JOURNAL is not None, "the sample journal was not built"
    jdir = tmp_path / "journals"
    jdir.mkdir()
    for name in ("a.journal", "b.journal"):
        shutil.copyfile(JOURNAL, jdir / name)
    (tmp_path / "root").mkdir()
    out, pidfile = tmp_path / "b", tmp_path / "readers"
    p = subprocess.Popen([sys.executable, "-c", _SLOW_READERS, str(out), str(jdir), str(tmp_path / "root"), str(pidfile)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=PROJECT,
                         start_new_session=True)
    try:
        readers = _readers(pidfile, 2, p)
        child = {ppid for _pid, ppid in readers}
        assert len(child) == 1 and child != {p.pid}  # grandchildren: the journal's child forked them
        for i, sig in enumerate(signals):
            if i:  # the first one is answered: the parent waits for the journal's child, which reads on
                time.sleep(1.0)
                assert p.poll() is None and all(_running(pid) for pid, _ in readers)
            os.kill(p.pid, sig)
        _out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    gone = [pid for pid, _ in readers] + list(child)
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in gone) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in gone if _running(pid)], f"still running after {signals}: {err}"
    if signals[-1] == signal.SIGKILL:
        assert p.returncode == -signal.SIGKILL
        return
    last = signals[-1]
    assert p.returncode == 128 + last, err
    assert err.strip().splitlines()[-1].startswith(f"gpu-forensics: interrupted by {last.name}"), err
    kept = tmp_path / "b.incomplete"
    m = json.loads((kept / "manifest.json").read_text())
    assert m["complete"] is False and m["incomplete_reason"] == f"interrupted by {last.name} while collecting"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_nvidia_smi_that_hangs_goes_with_an_interrupted_collection(tmp_path, sig):
    """``--nvidia-smi`` runs it in a session of its own (a terminal's Ctrl-C does not reach it): when the
    collection is interrupted while it waits on one that hangs (ignoring SIGTERM, as one stuck in the driver
    may), the child is killed on the way out, not left to run (before, only its time bound killed it, and
    an interruption skipped that)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pidfile = tmp_path / "smi.pid"
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\necho $$ > {pidfile}\ntrap '' TERM INT HUP\n"
                                       "while :; do sleep 1; done\n")
    (bindir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(PROJECT)}
    p = subprocess.Popen([sys.executable, "-m", "forensics.ops.cli", "collect", "--root", "/", "--out",
                          str(tmp_path / "b"), "--nvidia-smi"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=PROJECT, env=env,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        smi = int(pidfile.read_text())  # nvidia-smi's own bound is 20 s: the signal comes well before
        assert _running(smi)
        p.send_signal(sig)
        _out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 128 + sig, err
    deadline = time.monotonic() + 5
    while _running(smi) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(smi), f"nvidia-smi (PID {smi}) still runs after {sig.name}"
