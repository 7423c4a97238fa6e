"""A container's memory counters (collectors/containers/memory.py): a real OOM kill in a real cgroup v1 memory
cgroup of this machine, read back through the containers collector; cgroup v2 ``memory.events`` in the
kernel's own format; absent and unreadable files are never read as "no OOM"."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from collectors import containers
from collectors.containers import memory
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import CollectContext

from test_containers import CG, CID, _acquire, _w, node  # noqa: F401  (node: the v2 node fixture)

V1 = Path("/sys/fs/cgroup/memory")


def _real_oom_kill() -> tuple[str, str, int]:
    """Run a process that outgrows a 32 MiB limit in a fresh v1 memory cgroup of this machine; return the
    cgroup's ``memory.oom_control`` and ``memory.failcnt`` texts and the child's return code."""
    cg = V1 / f"gf-oom-test-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(32 << 20))
        if (cg / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
            (cg / "memory.memsw.limit_in_bytes").write_text(str(32 << 20))
        child = subprocess.run(["/usr/bin/python3", "-c", "x = b'x' * (256 << 20)"],
                               preexec_fn=lambda: (cg / "cgroup.procs").write_text(str(os.getpid())), timeout=60)
        return (cg / "memory.oom_control").read_text(), (cg / "memory.failcnt").read_text(), child.returncode
    finally:
        cg.rmdir()


def test_a_real_oom_kill_in_a_v1_memory_cgroup_reaches_the_container_record(tmp_path):
    assert V1.is_dir(), "this test needs the cgroup v1 memory controller mounted at /sys/fs/cgroup/memory"
    oom_control, failcnt, rc = _real_oom_kill()
    assert rc == -9                                              # SIGKILL from the OOM killer
    assert memory.parse_counters(oom_control) == {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 1}
    assert failcnt.strip().isdigit()  # (0 here: with memsw at the same limit, memory.memsw.failcnt counts the hits)
    # the same files under a node root, where runc's state names the container's memory cgroup
    root = tmp_path / "root"
    bundle = root / "srv/bundles/train"
    _w(bundle / "config.json", json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}))
    _w(root / "run/runc/train/state.json", json.dumps({
        "id": "train", "init_process_pid": 99999999, "created": "2026-01-01T00:00:00Z",
        "config": {"labels": ["bundle=/srv/bundles/train"], "cgroups": {"devices": []}},
        "cgroup_paths": {"devices": "/sys/fs/cgroup/devices/train", "memory": "/sys/fs/cgroup/memory/train"}}))
    _w(root / "sys/fs/cgroup/memory/train/memory.oom_control", oom_control)
    _w(root / "sys/fs/cgroup/memory/train/memory.failcnt", failcnt)
    b = _acquire(root, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    m = rec["memory"]
    assert (m["source"], m["status"], m["oom_kill"], m["oom"], m["oom_group_kill"]) == (
        "memory.oom_control", "collected", 1, None, None)
    assert m["failcnt"] == int(failcnt) and m["path"] == "/sys/fs/cgroup/memory/train"
    assert b.path("containers/runc/train/memory.oom_control").read_text() == oom_control


# mm/memcontrol.c __memory_events_show: "low %lu\nhigh %lu\nmax %lu\noom %lu\noom_kill %lu\noom_group_kill %lu\n"
# (sock_throttled from 6.11); this machine binds the memory controller to v1, so there is no v2 file to read
EVENTS_AFTER_OOM = "low 0\nhigh 0\nmax 35\noom 1\noom_kill 1\noom_group_kill 0\nsock_throttled 0\n"


def test_cgroup_v2_memory_events_of_the_container(node, tmp_path):  # noqa: F811
    _w(node / CG.lstrip("/") / "memory.events", EVENTS_AFTER_OOM)
    b = _acquire(node, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    m = rec["memory"]
    assert (m["source"], m["status"], m["oom"], m["oom_kill"], m["oom_group_kill"], m["failcnt"]) == (
        "memory.events", "collected", 1, 1, 0, None)
    assert m["events"] == {"low": 0, "high": 0, "max": 35, "oom": 1, "oom_kill": 1, "oom_group_kill": 0,
                           "sock_throttled": 0}
    assert b.path(f"containers/k8s.io/{CID}/memory.events").read_text() == EVENTS_AFTER_OOM


def test_a_missing_file_is_unknown_not_zero(node, tmp_path):  # noqa: F811
    b = _acquire(node, tmp_path / "b")  # the cgroup directory exists, memory.events does not
    m = containers.read(b, NodeFacts()).facts["containers"][0]["memory"]
    assert (m["status"], m["oom_kill"], m["oom"], m["events"]) == ("absent", None, None, None)
    old = memory.parse_counters("oom_kill_disable 0\nunder_oom 0\n")  # a kernel before 4.13: no oom_kill line
    assert old.get("oom_kill") is None


def test_an_unreadable_memory_events_is_unreadable(tmp_path):
    from privdrop import run_as_nobody
    base = Path(tempfile.mkdtemp(prefix="gf-mem-"))
    try:
        root = base / "root"
        f = _w(root / "sys/fs/cgroup/pod/ctr/memory.events", EVENTS_AFTER_OOM)
        f.chmod(0o600)
        for d in [base, root, *[p for p in root.rglob("*") if p.is_dir()]]:
            d.chmod(0o755)
        out = base / "out"
        out.mkdir()
        out.chmod(0o777)

        def child():
            w = BundleWriter(out / "b")
            m = memory.memory(CollectContext(root=root, writer=w), "containers/x/y", {"": "/sys/fs/cgroup/pod/ctr"})
            w.finish()
            return m
        m = run_as_nobody(child)
        assert (m["status"], m["oom_kill"]) == ("unreadable (Permission denied)", None)
    finally:
        shutil.rmtree(base)


def test_no_path_known_says_so():
    m = memory.memory(None, "containers/x/y", {})
    assert m["source"] is None and m["oom_kill"] is None and m["status"].startswith("no memory cgroup path known")


@pytest.mark.parametrize("text, want", [("oom 3\noom_kill 2\n", {"oom": 3, "oom_kill": 2}),
                                        ("oom x\n\n  \noom_kill 1 2\nmax 4", {"max": 4}), ("", {})])
def test_counter_lines(text, want):
    assert memory.parse_counters(text) == want
