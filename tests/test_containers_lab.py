"""The container lab (tests/lab.py): real containerd and runc (the cgroupfs driver, no systemd), a
legacy-hook container and a spec container, and hostile containers.

What a real ``daemon-reload`` does to these containers (probe ENXIO -> EPERM for the hook one,
device rules before and after, systemd's drop-ins, the probe's events and report in the bundle) is
tested on a real systemd in tests/test_syslab.py and tests/test_syslab_e2e.py, no longer with this
lab's reload stand-in. What stays here is what the real lab's tests do not cover: a runtime
wrapper that adds the hook to the on-disk config.json only (containerd's view lacks it), the
cgroupfs driver's records, redaction of planted secrets, hostile /dev content (links, fifos,
sockets, undecodable names), the probe child's own re-checks, and a dead container.

These tests need root, cgroup v1's devices controller and the Debian packages containerd, runc and
busybox-static (scripts/lab-deps.sh). A machine without them FAILS here, on purpose: the lab is the
proof that the collector works against the real runtime, and skipping it would hide that.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

import lab as L
from collectors import containers
from collectors.containers import probe
from forensics.bundle import Bundle
from forensics.events import NodeFacts

SECRET = "hunter2-planted-9f3a"
TOKEN = "tok-planted-77c1"
URL_PASS = "pw-planted-51d0"


@pytest.fixture(scope="module")
def lab():
    with L.running("gfl-") as lb:
        yield lb


def _collect(lab, tmp_path, name, probe_on=True):
    out = L.collect(tmp_path / name, [str(lab.state)], probe=probe_on, timeout=20)
    b = Bundle.open(out)
    r = containers.read(b, NodeFacts())
    return b, r, {rec["id"]: rec for rec in r.facts.get("containers", [])}


def _bundle_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


def test_legacy_hook_and_spec_containers_are_recorded_under_the_cgroupfs_driver(lab, tmp_path):
    a = lab.run("gflab-legacy", legacy=True,
                env=["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all", f"DB_PASSWORD={SECRET}",
                     f"MIRROR=https://bob:{URL_PASS}@mirror.example/repo"],
                annotations={"example.com/api-token": TOKEN})
    lab.run("gflab-spec", gpu_in_spec=True, env=["NVIDIA_VISIBLE_DEVICES=0", f"OTHER={SECRET}"])

    bundle, reading, recs = _collect(lab, tmp_path, "before")
    ra, rb = recs["gflab-legacy"], recs["gflab-spec"]
    # before the reload: both can reach the device (ENXIO: allowed, but no driver behind it)
    assert ra["probe"] == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
    assert rb["probe"] == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
    # A: GPU via the hook, outside the spec; B: in the spec
    assert [h["args"] for h in ra["hooks"]["prestart"]] == [["nvidia-container-runtime-hook", "prestart"]]
    assert not any(d["major"] == 195 for d in ra["linux_devices"])
    assert not any(r["major"] == 195 for r in ra["resources_devices"])
    assert {(d["path"], d["type"], d["major"], d["minor"]) for d in rb["linux_devices"]} >= \
        {("/dev/nvidia0", "c", 195, 0), ("/dev/nvidiactl", "c", 195, 255)}
    assert {"allow": True, "type": "c", "major": 195, "minor": 255, "access": "rw"} in rb["resources_devices"]
    assert rb["hooks"]["prestart"] == []
    # both: cgroup v1, cgroupfs driver, the hook's rules are in A's devices.list now
    for rec in (ra, rb):
        assert rec["cgroup"]["version"] == 1 and rec["cgroup"]["driver"] == "cgroupfs"
        assert {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"} in rec["cgroup"]["rules"]
        assert {(e["path"], e["kind"], e["major"], e["minor"]) for e in rec["dev_entries"]} == \
            {("/dev/nvidia0", "c", 195, 0), ("/dev/nvidiactl", "c", 195, 255)}
        assert rec["pod"] == f"pod-{rec['id']}" and rec["pod_namespace"] == "lab"
        assert rec["container_name"] == rec["id"] and rec["pid"] > 1 and rec["created"].endswith("Z")
        assert rec["bundle"] == str(lab.state / "io.containerd.runtime.v2.task" / "k8s.io" / rec["id"])
    # the same variable twice: the last one wins; other values redacted (hash prefix kept)
    assert ra["env"]["NVIDIA_VISIBLE_DEVICES"] == "all" and "DB_PASSWORD" not in ra["env"]
    stored = json.loads(bundle.path("containers/k8s.io/gflab-legacy/config.json").read_text())
    env = stored["process"]["env"]
    assert any(e.startswith("DB_PASSWORD=<redacted hmac:") for e in env)
    shared = [e.split("=", 1)[1] for e in env if e.startswith("DB_PASSWORD=")]
    other = json.loads(bundle.path("containers/k8s.io/gflab-spec/config.json").read_text())["process"]["env"]
    assert [e.split("=", 1)[1] for e in other if e.startswith("OTHER=")] == shared  # equal values match
    assert "MIRROR=<redacted hmac:" in " ".join(env)
    assert stored["annotations"]["example.com/api-token"].startswith("<redacted hmac:")
    raw = _bundle_bytes(bundle.root)
    for planted in (SECRET, TOKEN, URL_PASS):
        assert planted.encode() not in raw
    # containerd's view of A's spec lacks the hook; the on-disk config.json (and the bundle) has it
    info = json.loads(lab.ctr("containers", "info", "gflab-legacy").stdout)
    assert not (info["Spec"].get("hooks") or {}).get("prestart")
    on_disk = json.loads((a.bundle / "config.json").read_text())
    assert on_disk["hooks"]["prestart"][0]["args"] == ["nvidia-container-runtime-hook", "prestart"]
    assert stored["hooks"]["prestart"][0]["path"].endswith("/nvidia-container-runtime-hook")
    # events
    created = {e.attrs["id"]: e for e in reading.events if e.kind == "container.created"}
    assert created["gflab-legacy"].attrs["gpu"] and created["gflab-spec"].attrs["gpu"]
    assert created["gflab-legacy"].evidence == {"artifact": "containers/k8s.io/gflab-legacy/record.json"}
    probes = {(e.attrs["id"], e.attrs["path"]): e.attrs["result"] for e in reading.events if e.kind == "container.probe"}
    assert probes[("gflab-legacy", "/dev/nvidiactl")] == "ENXIO"

    # without --probe nothing is opened and every result says so
    _, _, recs3 = _collect(lab, tmp_path, "noprobe", probe_on=False)
    assert set(recs3["gflab-legacy"]["probe"].values()) == {"not-run"}


# -- hostile containers (issue 6 item 2) -----------------------------------------------------------
@pytest.fixture(scope="module")
def hostile(lab):
    """A container whose /dev holds everything a hostile image author could put there."""
    c = lab.run("gflab-hostile")
    canary = lab.base / "host-canary"
    canary.write_text("CANARY-host-file-never-read-3b8e\n")
    dev = str(c.dev)
    os.symlink("/etc/shadow", f"{dev}/nvidiactl")
    os.symlink("../../../../etc/passwd", f"{dev}/nvidia0")
    os.symlink("/proc/self/root/etc/shadow", f"{dev}/nvidia-uvm")
    os.symlink(str(canary), f"{dev}/nvidia5")
    os.mkfifo(f"{dev}/nvidia1")
    L.make_socket(f"{dev}/nvidia2")
    with open(f"{dev}/nvidia3", "wb") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse
    os.mkdir(f"{dev}/nvidia-caps")
    os.symlink("..", f"{dev}/nvidia-caps/loop")
    os.symlink(".", f"{dev}/nvidia-caps/self")
    os.mknod(f"{dev}/nvidia-caps/nvidia-cap1", stat.S_IFCHR | 0o666, os.makedev(195, 1))
    os.symlink("/", f"{dev}/dri")
    os.mknod(f"{dev}/nvidia\nline", stat.S_IFCHR | 0o666, os.makedev(195, 3))
    os.mknod(os.fsencode(dev) + b"/nvidia\xff\xfe", stat.S_IFCHR | 0o666, os.makedev(195, 4))
    open(f"{dev}/nvidia<script>alert(1)<\\script>", "w").close()
    os.mknod(f"{dev}/nvidia-wd", stat.S_IFCHR | 0o600, os.makedev(10, 130))  # a watchdog's numbers
    return c, canary


def test_hostile_dev_entries_are_recorded_never_followed_nor_opened(lab, hostile, tmp_path):
    c, canary = hostile
    bundle, reading, recs = _collect(lab, tmp_path, "hostile")  # L.collect fails after 20 s
    rec = recs["gflab-hostile"]
    by = {e["path"]: e for e in rec["dev_entries"]}
    assert (by["/dev/nvidiactl"]["kind"], by["/dev/nvidiactl"]["target"]) == ("symlink", "/etc/shadow")
    assert (by["/dev/nvidia0"]["kind"], by["/dev/nvidia0"]["target"]) == ("symlink", "../../../../etc/passwd")
    assert by["/dev/nvidia-uvm"]["target"] == "/proc/self/root/etc/shadow"
    assert by["/dev/nvidia1"]["kind"] == "fifo"
    assert by["/dev/nvidia2"]["kind"] == "socket"
    assert by["/dev/nvidia3"]["kind"] == "regular"
    assert by["/dev/nvidia-caps"]["kind"] == "dir"
    assert (by["/dev/nvidia-caps/loop"]["kind"], by["/dev/nvidia-caps/loop"]["target"]) == ("symlink", "..")
    assert by["/dev/nvidia-caps/nvidia-cap1"]["major"] == 195
    assert (by["/dev/dri"]["kind"], by["/dev/dri"]["target"]) == ("symlink", "/")
    assert not any(p.startswith("/dev/dri/") for p in by)  # a symlinked directory is not entered
    assert by["/dev/nvidia\nline"]["kind"] == "c"
    assert by["/dev/nvidia\\xff\\xfe"]["kind"] == "c"       # undecodable bytes kept visible, as text
    assert by["/dev/nvidia<script>alert(1)<\\script>"]["kind"] == "regular"
    # the probe opened only NVIDIA character devices, and only after lstat said so
    pr = rec["probe"]
    for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia5", "/dev/nvidia1",
              "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia-caps/loop", "/dev/nvidia-wd"):
        assert pr[p] == "not-run", p
    assert pr["/dev/nvidia\nline"] == "EPERM"            # not in this container's cgroup rules
    assert pr["/dev/nvidia\\xff\\xfe"] == "EPERM"          # opened by its real (non-UTF-8) name
    assert pr["/dev/nvidia-caps/nvidia-cap1"] == "EPERM"
    report = json.loads(bundle.path("containers/k8s.io/gflab-hostile/probe.json").read_text())
    assert len(report["targets"]) == 3 and not report["timed_out"]
    # nothing of the host's files came in through the container's links
    raw = _bundle_bytes(bundle.root)
    assert b"CANARY-host-file-never-read" not in raw
    for line in Path("/etc/shadow").read_bytes().splitlines() + Path("/etc/passwd").read_bytes().splitlines()[:1]:
        if len(line) >= 8:
            assert line not in raw
    # the text survives the round trip as data
    assert any(e.kind == "container.probe" and e.attrs["path"] == "/dev/nvidia\nline" for e in reading.events)


def test_probe_child_rechecks_and_never_opens_a_fifo_or_symlink(lab, hostile):
    """Even when told to (a race swapped the node after listing), the child lstat()s again and
    refuses anything that is not the NVIDIA character device it was given."""
    c, _ = hostile
    cg = [lab.runc_state(c)["cgroup_paths"]["devices"]]
    res, report = probe.probe("/", c.pid, cg, [("/dev/nvidia1", 195, 1), ("/dev/nvidiactl", 195, 255),
                                                ("/dev/nvidia3", 195, 3), ("/dev/nvidia-wd", 195, 7),
                                                ("/dev/missing", 195, 9)], timeout=5)
    assert res == ["not-run", "not-run", "not-run", "not-run", "ENOENT"]
    assert report["elapsed_s"] < 5 and not report["timed_out"]


def test_probe_refuses_a_path_that_is_not_a_cgroup(lab, hostile):
    c, _ = hostile
    res, report = probe.probe("/", c.pid, ["/etc"], [("/dev/nvidia0", 195, 0)])
    assert res == ["not-run"] and "not a cgroup directory" in report["error"]


def test_a_dead_container_is_recorded_without_live_evidence(lab, tmp_path):
    c = lab.run("gflab-stopped")
    lab.ctr("task", "kill", "-s", "SIGKILL", c.id)
    for _ in range(50):
        if "STOPPED" in lab.ctr("task", "ls").stdout.split(c.id, 1)[-1].split("\n", 1)[0]:
            break
        time.sleep(0.1)
    bundle, _, recs = _collect(lab, tmp_path, "stopped")
    rec = recs["gflab-stopped"]
    assert rec["dev_entries"] is None and rec["probe"] == {}  # /dev not read: no live init
    assert any(a.source in (f"/proc/{c.pid}/stat", f"/proc/{c.pid}/root") and a.status.value != "collected"
               for a in bundle.artifacts())
