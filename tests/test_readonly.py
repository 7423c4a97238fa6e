"""Collection is read-only on the host (issue 6 item 1; the fourth investigation mistake).

Every file of a ``--root`` tree (the sample node, and a real containerd+runc lab with a hook-injected
and a spec container) is hashed with its metadata before and after ``collect --probe``: nothing may
be created, modified, deleted or chmodded. Access times are not compared: the collector opens files
with O_NOATIME as root, and no behaviour relies on them.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

import lab as L
from forensics.ops.cli import SAMPLE_ROOT, main

#: files the lab's containerd writes by itself while it runs: its log and its bolt metadata database
#: (garbage collection and leases touch meta.db with no client call)
SKIP_NAMES = {"containerd.log", "meta.db"}


def snapshot(top: Path) -> dict[str, tuple]:
    """``{relative path: (type, mode, uid, gid, size, mtime_ns, ctime_ns, sha256 or link target)}``."""
    out = {}
    for dirpath, dirs, files in os.walk(top, followlinks=False):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            if name in SKIP_NAMES:
                continue
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(p)
            else:
                digest = None
            out[os.path.relpath(p, top)] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_uid, st.st_gid,
                                            st.st_size if not stat.S_ISDIR(st.st_mode) else None,
                                            st.st_mtime_ns, st.st_ctime_ns, digest)
    return out


def diff(before: dict, after: dict) -> list[str]:
    return ([f"created: {k}" for k in after.keys() - before.keys()] +
            [f"deleted: {k}" for k in before.keys() - after.keys()] +
            [f"changed: {k}" for k in before.keys() & after.keys() if before[k] != after[k]])


def test_collect_leaves_the_sample_node_untouched(tmp_path):
    sys.path.insert(0, str(SAMPLE_ROOT.parent))
    import build
    build.ensure_journal()
    before = snapshot(SAMPLE_ROOT)
    assert len(before) > 40
    assert main(["collect", "--root", str(SAMPLE_ROOT), "--out", str(tmp_path / "b")]) == 0
    assert diff(before, snapshot(SAMPLE_ROOT)) == []


def test_collect_with_probe_leaves_a_live_container_lab_untouched(tmp_path):
    missing = L.requirements()
    assert not missing, "container lab cannot run: missing " + "; ".join(missing)
    lb = L.Lab(Path(tempfile.mkdtemp(prefix="gfro-", dir="/tmp")))
    try:
        lb.start()
        lb.run("ro-legacy", legacy=True)
        lb.run("ro-spec", gpu_in_spec=True)
        before = snapshot(lb.base)
        out = L.collect(tmp_path / "bundle", [str(lb.state)], probe=True, timeout=30)
        assert (out / "manifest.json").is_file()
        assert diff(before, snapshot(lb.base)) == []
    finally:
        problems = lb.close()
    assert not problems, problems
