"""Regression tests for the security review's findings (P1-P7, L1-L7): each test reproduces what the
reviewer's scripts did to the tool and checks that it no longer works. The lab tests use a real
containerd + runc (tests/lab.py), as tests/test_containers_lab.py does.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path

import pytest

import lab as L
from collectors import containers, podlogs
from collectors.containers import probe
from collectors import runtime_config as rc
from collectors.containers import parse as cp
from forensics import redact
from forensics.ops.pipeline import analyze
from forensics.ops import fleet
from forensics import hostfs
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext, HostFacts
from forensics.events import NodeFacts
from forensics.findings.exposure import assess
from reports import render

SECRETS = ("SECRETARG1", "SECRETARG2", "SECRETARG3", "SECRETARG4", "SECRETARG5", "SECRETARG6", "SECRETARG7",
           "SECRETARG8", "SECRETANN1", "SECRETANN2", "SECRETHOOK1", "SECRETENV1", "SECRETENV2", "SECRETENV3",
           "SECRETENV4")


def _w(p: Path, data: bytes | str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


# -- the lab ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab():
    with L.running("gfr-") as lb:
        yield lb


def _records(lab, out: Path) -> dict:
    b = Bundle.open(L.collect(out, [str(lab.state)], probe=True, timeout=60))
    return {r["id"]: r for r in containers.read(b, NodeFacts()).facts.get("containers", [])}


def test_p1_mknod_gpu_nodes_in_a_gpuless_container_is_not_broken(lab, tmp_path):
    """P1: a container without a GPU mknods /dev/nvidiactl (CAP_MKNOD is in the default set); its EPERM
    and the device cgroup's denial are no evidence, so no broken row and no incident. A hook-injected
    container whose access a reload really revoked is still broken."""
    forger = lab.run("gfr-forger")
    legacy = lab.run("gfr-legacy", legacy=True, env=["NVIDIA_VISIBLE_DEVICES=all"])
    time.sleep(0.05)
    for name, minor in (("nvidiactl", 255), ("nvidia3", 3)):
        os.mknod(f"/proc/{forger.pid}/root/dev/{name}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    lab.reload(legacy)
    recs = _records(lab, tmp_path / "b")
    f, g = recs["gfr-forger"], recs["gfr-legacy"]
    assert f["probe"] == {"/dev/nvidia3": "EPERM", "/dev/nvidiactl": "EPERM"}  # the bait works as before
    # ctime is recorded; the nodes made after the container's creation are flagged, the hook's are not
    assert all(e["ctime"].endswith("Z") for e in f["dev_entries"] + g["dev_entries"])
    assert {e["path"]: e["made_inside"] for e in f["dev_entries"]} == {"/dev/nvidia3": True, "/dev/nvidiactl": True}
    assert {e["made_inside"] for e in g["dev_entries"]} == {False}
    exp = assess({}, [f, g], None)
    rows = {r["id"]: r for r in exp["containers"]}
    assert (rows["gfr-forger"]["gpu_injection"], rows["gfr-forger"]["broken"], rows["gfr-forger"]["at_risk"]) == \
        ("none", False, False)
    assert "made inside the container" in rows["gfr-forger"]["reason"]
    assert rows["gfr-forger"]["made_inside"] == ["/dev/nvidia3", "/dev/nvidiactl"]
    assert (rows["gfr-legacy"]["gpu_injection"], rows["gfr-legacy"]["broken"], rows["gfr-legacy"]["probe"]) == \
        ("hook", True, "EPERM")


def _run_spec(lab, cid: str, *, args: list, env: list, annotations: dict, hooks: dict) -> L.Container:
    """Like ``Lab.run``, with the process args and hooks given (the reviewer's run2)."""
    rootfs = lab.make_rootfs(cid)
    spec = lab.base_spec()
    spec["process"].update(args=args, terminal=False)
    spec["process"]["env"] = list(spec["process"].get("env") or []) + env
    spec["root"] = {"path": str(rootfs), "readonly": False}
    spec["linux"]["cgroupsPath"] = f"/{lab.cg_parent}/{cid}"
    spec["annotations"] = {"io.kubernetes.cri.sandbox-name": f"pod-{cid}", "io.kubernetes.cri.sandbox-namespace": "lab",
                           "io.kubernetes.cri.container-name": cid, **annotations}
    spec["hooks"] = hooks
    path = lab.base / f"{cid}.spec.json"
    path.write_text(json.dumps(spec))
    lab.ctr("run", "-d", "--config", str(path), "--runc-root", str(lab.runc_root), cid, timeout=60)
    bundle = lab.state / "io.containerd.runtime.v2.task" / L.NS / cid
    c = L.Container(cid, int((bundle / "init.pid").read_text().strip()), bundle, rootfs)
    lab.containers.append(c)
    return c


def test_p3_p4_no_planted_secret_reaches_the_bundle(lab, tmp_path):
    """P3/P4 end to end against real containerd and runc (config.json and runc's state.json, whose
    labels hold the annotations): the reviewer's planted values are nowhere in the bundle."""
    _run_spec(lab, "gfr-evil",
              args=["/bin/sh", "-c", "sleep 3600 # TOKEN=SECRETARG2 Authorization: Bearer SECRETARG3",
                    "--password", "SECRETARG1", "--api-key", "SECRETARG4", "-p", "SECRETARG5",
                    "--db=postgres://u:SECRETARG6@h/db", "Bearer SECRETARG7", "password=SECRETARG8"],
              env=["DB_PASSWORD=SECRETENV1", "NVIDIA_API_KEY=nvapi-SECRETENV2", "CUDA_AUTH_TOKEN=SECRETENV3",
                   "PATH\n=SECRETENV4", "NVIDIA_VISIBLE_DEVICES=void"],
              annotations={"my-note": "SECRETANN1", "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                  {"spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": "SECRETANN2"}]}]}})},
              hooks={"poststop": [{"path": "/bin/true", "args": ["true", "--token", "SECRETHOOK1"]}]})
    out = L.collect(tmp_path / "b", [str(lab.state)], probe=False, timeout=60)
    raw = b"".join(p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file())
    assert [s for s in SECRETS if s.encode() in raw] == []
    rec = json.loads((out / "containers/k8s.io/gfr-evil/record.json").read_text())
    assert rec["env"] == {"NVIDIA_VISIBLE_DEVICES": "void"} and rec["pod"] == "pod-gfr-evil"
    state = json.loads((out / "containers/k8s.io/gfr-evil/state.json").read_text())
    assert any(lb.startswith("bundle=/") for lb in state["config"]["labels"])


def test_p1_only_given_nodes_count():
    """P1 without the lab: nothing counts when inj is none; for the hook path only the nodes
    NVIDIA_VISIBLE_DEVICES selects (indices: the control nodes and /dev/nvidiaN) count."""
    # the kernel still allows what NVIDIA_VISIBLE_DEVICES=0 gave (nvidiactl, nvidia0), not 195:3
    rules = [{"allow": True, "type": "c", "major": 195, "minor": m, "access": "rwm"} for m in (0, 255)]

    def rec(cid, env, entries, probe_, hooks=None):
        return {"id": cid, "pod": cid, "pod_namespace": "ns", "created": "2026-01-01T00:00:00Z", "pid": 10,
                "hooks": hooks or {}, "linux_devices": [], "resources_devices": [], "env": env, "annotations": {},
                "cgroup": {"version": 1, "driver": "cgroupfs", "rules": rules, "systemd_drop_in": None},
                "dev_entries": [{"path": p, "kind": "c", "major": M, "minor": m, "ctime": "2025-12-31T23:59:59Z"}
                                for p, M, m in entries], "probe": probe_}
    hook = {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": []}]}
    none = rec("none", {}, [("/dev/nvidiactl", 195, 255)], {"/dev/nvidiactl": "EPERM"})
    # legacy mode with nvidia as default runtime: every container carries the hook; asking for nothing
    unasked = rec("unasked", {}, [("/dev/nvidiactl", 195, 255)], {"/dev/nvidiactl": "EPERM"}, hook)
    idx = rec("idx", {"NVIDIA_VISIBLE_DEVICES": "0"}, [("/dev/nvidia3", 195, 3)], {"/dev/nvidia3": "EPERM"}, hook)
    real = rec("real", {"NVIDIA_VISIBLE_DEVICES": "0"}, [("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255)],
               {"/dev/nvidia0": "EPERM", "/dev/nvidiactl": "EPERM"}, hook)
    rows = {r["id"]: r for r in assess({}, [none, unasked, idx, real], None)["containers"]}
    assert [rows[k]["broken"] for k in ("none", "unasked", "idx", "real")] == [False, False, False, True]
    assert rows["none"]["gpu_injection"] == "none" and rows["unasked"]["gpu_injection"] == "none"
    assert "not given by the runtime" in rows["idx"]["reason"]


@pytest.mark.parametrize("nvd", ["\u00b2", "9" * 5000, "0,\u0661", " 1 , 2 "],
                         ids=["superscript-two", "5000-digits", "arabic-indic-digit", "spaces"])
def test_p2_hostile_visible_devices_do_not_crash_the_assessment(nvd):
    c = {"id": "x", "env": {"NVIDIA_VISIBLE_DEVICES": nvd}, "hooks": {}, "dev_entries": None,
         "cgroup": {"driver": "cgroupfs", "rules": []}}
    row = assess({}, [c], None)["containers"][0]
    assert row["gpu_injection"] == "hook"
    assert all(len(d) < 60 for d in row["devices"])


def test_p2_a_failing_assessment_is_a_problem_not_a_crash(tmp_path, monkeypatch):
    w = BundleWriter(tmp_path / "b")
    w.write_json("containers/k8s.io/x/record.json", {"id": "x", "env": {}}, source="test", method="containers")
    w.finish()

    def boom(*a, **k):
        raise ValueError("invalid literal for int() with base 10: '\u00b2'")
    monkeypatch.setattr("forensics.findings.exposure.assess", boom)
    a = analyze(Bundle.open(tmp_path / "b"))
    assert a["exposure"]["assessed"] is False and "ValueError" in a["exposure"]["reason"]
    assert any(p["artifact"] == "exposure" and "assessment failed" in p["message"] for p in a["problems"])
    assert "Not assessed: the assessment failed" in render.markdown(a)


def test_p3_credential_names_and_newline_names_are_not_allowlisted():
    env = ["DB_PASSWORD=SECRETENV1", "NVIDIA_API_KEY=nvapi-SECRETENV2", "CUDA_AUTH_TOKEN=SECRETENV3",
           "PATH\n=SECRETENV4", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4.1", "PATH=/usr/bin"]
    out = redact.redact_env(env)
    assert not any(s in json.dumps(out) for s in SECRETS)
    assert "NVIDIA_VISIBLE_DEVICES=all" in out and "CUDA_VERSION=12.4.1" in out and "PATH=/usr/bin" in out
    assert any(e.startswith("NVIDIA_API_KEY=<redacted hmac:") for e in out)
    kept = cp.env_allowlisted({"process": {"env": env}})
    assert set(kept) == {"NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "PATH"}
    assert not redact.ENV_ALLOW.match("PATH\n") and not redact.ENV_ALLOW.match("NVIDIA_API_KEY")


def test_p4_annotations_args_and_hook_args_keep_no_secret():
    spec = {
        "process": {"args": ["/bin/sh", "-c", "sleep 3600 # TOKEN=SECRETARG2 Authorization: Bearer SECRETARG3",
                             "--password", "SECRETARG1", "--api-key", "SECRETARG4", "-p", "SECRETARG5",
                             "--db=postgres://u:SECRETARG6@h/db", "Bearer SECRETARG7", "password=SECRETARG8",
                             "-pSECRETARG5"]},
        "annotations": {"my-note": "SECRETANN1",
                        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                            {"spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": "SECRETANN2"}]}]}}),
                        "io.kubernetes.cri.sandbox-name": "pod-a", "cdi.k8s.io/gpu": "nvidia.com/gpu=0"},
        "hooks": {"poststop": [{"path": "/bin/true", "args": ["true", "--token", "SECRETHOOK1"]}]},
    }
    out = redact.redact_spec(spec)
    dumped = json.dumps(out)
    assert not any(s in dumped for s in SECRETS), dumped
    # names kept, evidence kept
    assert set(out["annotations"]) == set(spec["annotations"])
    assert out["annotations"]["io.kubernetes.cri.sandbox-name"] == "pod-a"
    assert out["annotations"]["cdi.k8s.io/gpu"] == "nvidia.com/gpu=0"
    assert out["process"]["args"][:2] == ["/bin/sh", "-c"] and "TOKEN=<redacted hmac:" in out["process"]["args"][2]
    assert "--db=postgres://<redacted>@h/db" in out["process"]["args"]
    # runc's labels: the annotations as key=value; the bundle label stays
    labels = redact.redact_spec({"labels": ["bundle=/run/x", "my-note=SECRETANN1", "io.kubernetes.cri.sandbox-name=p"]})
    assert labels["labels"][0] == "bundle=/run/x" and labels["labels"][2] == "io.kubernetes.cri.sandbox-name=p"
    assert "SECRETANN1" not in labels["labels"][1]


def test_p4_redaction_is_linear_on_hostile_strings():
    """Each rule is linear: args of a hostile spec can be megabytes (a quadratic regex took minutes on
    40 kB before). No wall-clock limit (speed goals live in bench/): the CPU time of this process for
    8x the input must stay within 24x that of the smaller one (a quadratic rule gives 64x), with a
    10 ms floor for timer noise."""
    shapes = (lambda n: "a-" * n, lambda n: "--" + "key" * n + "!", lambda n: "-" + "token" * n + "=",
              lambda n: "a://" + "a@" * n, lambda n: "bearer x " * n, lambda n: "x" * (2 * n) + "=")
    for make in shapes:
        cost = []
        for n in (20_000, 160_000):
            arg = make(n)
            started = time.process_time()
            redact.redact_args([arg])
            cost.append(time.process_time() - started)
        assert cost[1] < 24 * max(cost[0], 0.01), (make(1), cost)


def _pods_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    pods = root / "var/log/pods"
    _w(pods / "ml_gpu-a_u1/main/0.log",
       b"2024-05-01T10:00:00Z stdout F ok https://admin:SECRETLOG1@db/x Bearer SECRETLOG2 token=SECRETLOG3\n"
       b"2024-05-01T10:00:01Z stdout F Failed to initialize NVML: Unknown Error password=SECRETLOG4\n")
    _w(root / "etc/shadow", "root:SECRETSHADOW:1:0:99999:7:::\n")
    _w(pods / "ml_gpu-abs_u2/main/.keep", b"")
    (pods / "ml_gpu-abs_u2/main/0.log").symlink_to("/etc/shadow")
    _w(pods / "ml_gpu-rel_u3/main/.keep", b"")
    (pods / "ml_gpu-rel_u3/main/0.log").symlink_to("../../../../../../etc/shadow")
    (pods / "ml_gpu-dir_u4").symlink_to(root / "etc")
    _w(root / "etc/main/0.log", "2024-05-01T10:00:00Z stdout F SECRETSHADOW via a dir link\n")
    _w(root / "srv/c/0.log", "2024-05-01T10:00:00Z stdout F SECRETSHADOW via a container dir link\n")
    (pods / "ml_gpu-cdir_u5").mkdir()
    (pods / "ml_gpu-cdir_u5/main").symlink_to(root / "srv/c")
    return root


def _podlogs(root: Path, out: Path, **ctx_kw) -> Bundle:
    w = BundleWriter(out)
    ctx = CollectContext(root=root, writer=w, **ctx_kw)
    podlogs.acquire(ctx)
    w.meta["redaction"] = {"enabled": ctx.redact}
    w.finish()
    return Bundle.open(out)


def _all_bytes(b: Bundle) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(Path(b.root).rglob("*")) if p.is_file())


def test_p5_credentials_in_pod_logs_are_neither_stored_nor_shown(tmp_path):
    b = _podlogs(_pods_root(tmp_path), tmp_path / "b")
    raw = _all_bytes(b)
    r = podlogs.read(b, NodeFacts())
    shown = json.dumps([e.attrs for e in r.events]) + json.dumps(r.facts)
    for s in ("SECRETLOG1", "SECRETLOG2", "SECRETLOG3", "SECRETLOG4"):
        assert s.encode() not in raw and s not in shown
    assert "https://<redacted>@db/x" in shown and "Failed to initialize NVML" in shown
    assert podlogs.clean(b"Bearer abc token=xyz") == f"Bearer {redact.redacted('abc')} token={redact.redacted('xyz')}"
    assert podlogs.clean(b"Bearer abc", redact=False) == "Bearer abc"
    # --no-redact keeps them (and says so in the manifest)
    b2 = _podlogs(_pods_root(tmp_path / "nr"), tmp_path / "b2", redact=False)
    assert b"SECRETLOG2" in _all_bytes(b2)
    assert "SECRETLOG2" in json.dumps(podlogs.read(b2, NodeFacts()).facts)


def test_l1_no_symlink_below_var_log_pods_is_followed(tmp_path):
    b = _podlogs(_pods_root(tmp_path), tmp_path / "b")
    assert b"SECRETSHADOW" not in _all_bytes(b)
    refused = {a.source for a in b.artifacts() if a.status.value == "error" and "symlink refused" in (a.message or "")}
    assert refused == {"/var/log/pods/ml_gpu-abs_u2/main/0.log", "/var/log/pods/ml_gpu-rel_u3/main/0.log",
                       "/var/log/pods/ml_gpu-dir_u4", "/var/log/pods/ml_gpu-cdir_u5/main"}


def test_l2_gz_compressed_bytes_are_capped_and_the_budget_is_checked(tmp_path, monkeypatch):
    root = tmp_path / "root"
    d = root / "var/log/pods/ml_gpu-gz_u1/main"
    one = gzip.compress(b"")
    _w(d / "0.log.20240101-000000.gz", one * ((256 << 10) // len(one)))  # 256 KiB of empty members
    _w(d / "0.log", "2024-05-01T10:00:00Z stdout F ok\n")
    monkeypatch.setattr(podlogs, "GZ_COMPRESSED_LIMIT", 64 << 10)
    b = _podlogs(root, tmp_path / "b")
    art = next(a for a in b.artifacts() if a.source.endswith(".gz"))
    assert art.status.value == "truncated" and any("compressed bytes" in n for n in art.notes)
    # a spent budget: nothing more is read, and that is recorded
    b2 = _podlogs(root, tmp_path / "b2", deadline=time.monotonic() - 1)
    assert not any(a.path and a.path.startswith("podlogs/") for a in b2.artifacts())
    assert any(a.status.value == "truncated" and "time budget" in " ".join(a.notes) for a in b2.artifacts())


def test_p6_junk_in_dev_does_not_hide_the_gpu_nodes(tmp_path):
    dev = tmp_path / "root/proc/4242/root/dev"
    dev.mkdir(parents=True)
    for i in range(10_000):
        (dev / f"z{i:05d}").touch()
    for i in range(probe.MAX_DEV_ENTRIES + 10):  # more matching junk than is kept
        (dev / f"nvidia-junk{i:05d}").touch()
    os.mknod(dev / "nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    os.mknod(dev / "nvidiactl", 0o666 | stat.S_IFCHR, os.makedev(195, 255))
    entries, raw, problems = probe.list_dev(tmp_path / "root", 4242)
    found = {e["path"]: (e["kind"], e["major"], e["minor"]) for e in entries}
    assert found["/dev/nvidia0"] == ("c", 195, 0) and found["/dev/nvidiactl"] == ("c", 195, 255)
    assert len(entries) <= probe.MAX_DEV_ENTRIES + len(probe.WELL_KNOWN)
    assert any(a.status.value == "truncated" and "matching entries kept" in a.notes[0] for a in problems)


def _age_atime(p: Path) -> int:
    """Set ``p``'s atime well before its mtime (so relatime would update it on the next read)."""
    st = os.lstat(p)
    old = st.st_mtime_ns - 3600 * 10**9
    os.utime(p, ns=(old, st.st_mtime_ns), follow_symlinks=False)
    return old


def test_p7_listing_directories_leaves_their_atime_alone(tmp_path):
    assert os.geteuid() == 0, "O_NOATIME is only asked for as root"
    dev = tmp_path / "root/proc/7/root/dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    (dev / "nvidia-caps/nvidia-cap1").touch()
    os.mknod(dev / "nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    before = {p: _age_atime(p) for p in (dev, dev / "nvidia-caps")}
    entries, _, _ = probe.list_dev(tmp_path / "root", 7)
    assert {e["path"] for e in entries} >= {"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap1"}
    assert {p: os.lstat(p).st_atime_ns for p in before} == before
    d = tmp_path / "host/var/log/pods"
    (d / "x").mkdir(parents=True)
    old = _age_atime(d)
    assert hostfs.listdir(tmp_path / "host", "/var/log/pods") == ["x"]
    assert os.lstat(d).st_atime_ns == old
    # the final component is opened with O_NOFOLLOW|O_DIRECTORY
    (tmp_path / "host/f").touch()
    with pytest.raises(NotADirectoryError):
        hostfs.listdir(tmp_path / "host", "/f")


def _container_root(tmp_path: Path, cid: str, config: str, state: dict | None = None) -> Path:
    root = tmp_path / "root"
    _w(root / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json", config)
    if state is not None:
        _w(root / f"run/containerd/runc/k8s.io/{cid}/state.json", json.dumps(state))
    return root


def _containers(root: Path, out: Path) -> tuple[Bundle, dict]:
    w = BundleWriter(out)
    ctx = CollectContext(root=root, writer=w)
    containers.acquire(ctx)
    w.finish()
    b = Bundle.open(out)
    return b, {r["id"]: r for r in containers.read(b, NodeFacts()).facts.get("containers", [])}


def test_l3_deeply_nested_config_still_gives_a_record(tmp_path):
    deep = '{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]},"x":' + "[" * 900 + "]" * 900 + "}"
    b, recs = _containers(_container_root(tmp_path, "deep", deep), tmp_path / "b")
    # the spec could not be read: its devices and env are unknown (None), not "none" (issue 14)
    assert recs["deep"]["linux_devices"] is None and recs["deep"]["env"] is None
    assert recs["deep"]["config"] == {"status": "error", "detail": "JSON nested too deeply to read"}
    assert any(a.status.value == "error" and "nested too deeply" in (a.message or "") for a in b.artifacts())
    assert not any(a.path == "containers/k8s.io/deep/config.json" for a in b.artifacts())


def test_l4_cgroup_paths_outside_sys_fs_cgroup_are_not_copied(tmp_path):
    state = {"id": "evil", "cgroup_paths": {"devices": "/sys/fs/cgroup/devices/../../../etc"}}
    root = _container_root(tmp_path, "evil", "{}", state)
    _w(root / "etc/devices.list", "c 195:* rwm\nHOSTSECRET\n")
    b, recs = _containers(root, tmp_path / "b")
    assert b"HOSTSECRET" not in _all_bytes(b)
    assert recs["evil"]["cgroup"]["path"] is None and recs["evil"]["cgroup"]["rules"] is None
    assert any(a.status.value == "error" and "outside /sys/fs/cgroup" in (a.message or "") for a in b.artifacts())


def test_l5_a_pid_without_start_time_must_be_in_the_containers_namespace_and_cgroup(tmp_path):
    def node(tmp, ns_mnt: str, cgroup: str) -> Path:
        root = _container_root(tmp, "c1", '{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]}}',
                               {"id": "c1", "init_process_pid": 4242})
        _w(root / "proc/4242/stat", "4242 (sleep) S " + " ".join(["0"] * 30) + "\n")
        _w(root / "proc/4242/cgroup", cgroup)
        (root / "proc/4242/ns").mkdir(parents=True)
        (root / "proc/1/ns").mkdir(parents=True)
        os.symlink(ns_mnt, root / "proc/4242/ns/mnt")
        os.symlink("mnt:[4026531841]", root / "proc/1/ns/mnt")
        (root / "proc/4242/root/dev").mkdir(parents=True)
        os.mknod(root / "proc/4242/root/dev/nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
        return root

    ok = node(tmp_path / "ok", "mnt:[4026532999]", "4:devices:/kubepods/pod1/c1\n")
    host_ns = node(tmp_path / "hostns", "mnt:[4026531841]", "4:devices:/kubepods/pod1/c1\n")
    other_cg = node(tmp_path / "othercg", "mnt:[4026532999]", "4:devices:/user.slice\n")
    _, recs = _containers(ok, tmp_path / "b1")
    assert [e["path"] for e in recs["c1"]["dev_entries"]] == ["/dev/nvidia0"]
    for root, out in ((host_ns, "b2"), (other_cg, "b3")):
        b, recs = _containers(root, tmp_path / out)
        assert recs["c1"]["dev_entries"] is None
        assert any("not taken for the container's init" in (a.message or "") for a in b.artifacts())


SAMPLE = Path(__file__).resolve().parent.parent / "samples/node3-gpu"
#: the DaemonSet's hostPath volume of the kubelet's device-plugin directory, as containerd writes it
L6_PLUGIN_MOUNT = {"destination": "/var/lib/kubelet/device-plugins", "type": "bind",
                   "source": "/var/lib/kubelet/device-plugins", "options": ["rbind", "rprivate", "rw"]}


def _l6_analysis(tmp_path: Path, pods: dict) -> dict:
    """Collect a node with the sample node's containerd and toolkit settings (SystemdCgroup = true, legacy
    mode) whose containers are ``{cid: (namespace, pod, container, env, mounts)}``, and analyse the bundle."""
    root = tmp_path / "root"
    for rel in ("etc/containerd/config.toml", "etc/nvidia-container-runtime/config.toml", "proc/devices"):
        _w(root / rel, (SAMPLE / rel).read_bytes())
    for cid, (ns, pod, name, env, mounts) in pods.items():
        spec = {"ociVersion": "1.1.0", "process": {"args": ["/bin/sh"], "env": env}, "mounts": mounts,
                "annotations": {"io.kubernetes.cri.container-type": "container",
                                "io.kubernetes.cri.sandbox-name": pod, "io.kubernetes.cri.sandbox-namespace": ns,
                                "io.kubernetes.cri.container-name": name,
                                "io.kubernetes.cri.image-name": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}}
        _w(root / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json", json.dumps(spec))
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=root, writer=w, node=HostFacts(package_versions={"nvidia-container-toolkit": "1.17.8-1"}))
    rc.acquire(ctx)
    containers.acquire(ctx)
    w.finish()
    return analyze(Bundle.open(tmp_path / "b"))


def test_l6_a_tenant_pod_named_like_the_device_plugin_cannot_vouch_for_the_node(tmp_path):
    """L6: a tenant pod named nvidia-device-plugin-x in namespace ml sets PASS_DEVICE_SPECS=true (and
    DEVICE_LIST_STRATEGY=cdi-cri) to make new GPU pods look protected. It cannot mount the kubelet's
    device-plugin directory (hostPath), so alone its settings are unknown and the node is not reported
    safe; next to the real plugin, which mounts it, the real plugin's PASS_DEVICE_SPECS=false wins."""
    tenant = ("ml", "nvidia-device-plugin-x", "nvidia-device-plugin",
              ["PATH=/usr/bin", "PASS_DEVICE_SPECS=true", "DEVICE_LIST_STRATEGY=cdi-cri"],
              [{"destination": "/var/lib/kubelet/device-plugins", "type": "bind", "options": ["rbind", "rw"],
                "source": "/var/lib/kubelet/pods/0c1d/volumes/kubernetes.io~empty-dir/device-plugins"}])
    real = ("kube-system", "nvidia-device-plugin-daemonset-7xk2p", "nvidia-device-plugin-ctr",
            ["PATH=/usr/bin", "PASS_DEVICE_SPECS=false", "DEVICE_LIST_STRATEGY=envvar", "NVIDIA_DRIVER_ROOT=/"],
            [L6_PLUGIN_MOUNT])
    a = _l6_analysis(tmp_path / "a", {"tenant": tenant})
    exp = a["exposure"]
    assert (exp["systemd_cgroup"], exp["nvidia_runtime_mode_resolved"]) == (True, "legacy")
    assert (exp["pass_device_specs"], exp["device_list_strategy"]) == (None, None)
    assert exp["new_pods_exposed"] is True and fleet.classify(exp)[0] == "exposed"
    assert exp["verdict"] == ("Not exposed now: no GPU containers were found; new GPU pods would be, though: "
                              "SystemdCgroup=true with the toolkit in legacy mode and device specs not known to be "
                              "passed (the device plugin's PASS_DEVICE_SPECS is unknown).")
    note = ("Device plugin settings unknown: no container named like the device plugin (ml/nvidia-device-plugin-x "
            "(nvidia-device-plugin)) mounts /var/lib/kubelet/device-plugins, where a real plugin registers with the "
            "kubelet, so its settings are not trusted (a tenant pod could carry the name).")
    assert exp["notes"] == [note]
    assert "Note: " + render.md(note) in render.markdown(a)
    assert any("PASS_DEVICE_SPECS=true" in r["change"] for r in exp["remedies"])
    # (b) the real plugin beside it: its settings, whichever record comes first
    for names in (("tenant", "zreal"), ("real", "ztenant")):
        a = _l6_analysis(tmp_path / names[0], {names[0]: tenant if names[0] == "tenant" else real,
                                               names[1]: real if names[0] == "tenant" else tenant})
        exp = a["exposure"]
        assert (exp["pass_device_specs"], exp["device_list_strategy"], exp["new_pods_exposed"]) == (
            False, ["envvar"], True)
        assert exp["verdict"].endswith("in legacy mode and no device specs passed.")
        assert exp["notes"] == [
            "Device plugin: kube-system/nvidia-device-plugin-daemonset-7xk2p (nvidia-device-plugin-ctr) mounts "
            "/var/lib/kubelet/device-plugins, where the device plugin registers with the kubelet; named like the "
            "plugin but without that mount, so not taken as it: ml/nvidia-device-plugin-x (nvidia-device-plugin)."]


def test_l7_markdown_report_escapes_evidence():
    evil = "x\n\n# FAKE HEADING\n[click](javascript:alert(1)) <img src=x onerror=alert(1)> a|b `c`"
    a = {"node": evil, "collected_at": "2026-01-01T00:00:00Z", "timezone": {"name": "UTC"},
         "verdicts": [f"Incident I1: {evil}"],
         "incidents": [{"id": "I1", "symptom": f"GPU lost in pod {evil}", "label": None,
                        "window": {"start": "a", "end": "b"},
                        "causes": [{"kind": "daemon-reload", "verdict": "confirmed", "at": None}]}],
         "exposure": {"assessed": True, "verdict": evil,
                      "containers": [{"namespace": "ns", "pod": evil, "id": "x", "gpu_injection": "hook",
                                      "at_risk": True, "broken": True, "reason": evil}]},
         "metrics": {"collected": False}, "gaps": [{"source": "journal", "covers": {"start": None, "end": None},
                                                    "reason": evil}],
         "bundle": {"path": "/tmp/b`x", "manifest_sha256": "ab" * 32}}
    out = render.markdown(a)
    assert not re.search(r"(?<!\\)[<\[]", out) and "](" not in out.replace("\\](", "")  # no raw tag or link
    assert not any(line.lstrip().startswith("# FAKE") for line in out.splitlines())
    assert "\\<img src=x onerror=alert(1)\\>" in out and "\\[click\\]" in out and "a\\|b" in out
    assert "GPU lost in pod x # FAKE HEADING" in out  # symptoms shown, on one line
    assert "**confirmed**" in out and "ab" * 32 in out
    assert render.md(None) == "" and render.md("a\r\nb\u2028c") == "a b c"
