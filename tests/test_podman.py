"""Podman as the proof that a container engine is one unit (forensics/engines/podman.py): real rootful Podman
containers run by runc under the cgroupfs driver (no systemd), in storage roots of their own under a temporary
directory, one with its GPU nodes in the spec (``--device``) and one given them by the toolkit's OCI hook from a
hooks dir (the legacy stand-in of tests/lab.py, which makes the nodes inside the container behind runc's back).

Found: engine ``podman``, the bundle runc ran (the graph root's static ``userdata``, not the run root's), the
roots learnt from conmon's command line. Exposed: hook against spec, the driver from runc's own state. Remedied
for Podman: CDI devices by ``podman run --device``, never containerd's CRI snippet or a daemon restart. Needs
root, cgroup v1's devices controller, podman, conmon, runc and busybox-static (scripts/lab-deps.sh); a machine
without them fails here, it does not skip. Then the same under a real systemd (tests/syslab.py), Podman's default
systemd cgroup manager, and a real ``systemctl daemon-reload``: broken, and the report says why."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import lab as L
from collectors import containers
from forensics.bundle import Bundle
from forensics.events import NodeFacts
from forensics.findings import exposure, remedies
from forensics.findings.stacks import recognise
from test_syslab import LAYOUTS, _close, _lab
from test_syslab_e2e import _tool

IMAGE = "localhost/gfpm-busybox:1"


class Podman:
    """Rootful podman with every root of its own under ``base`` (``podman --root --runroot --tmpdir``, runc's
    ``--root`` by ``--runtime-flag``), the cgroupfs manager and a hooks dir."""

    def __init__(self, base: Path):
        self.base = base
        self.dirs = {k: base / k for k in ("graph", "run", "runc", "tmp", "hooks", "dev")}
        for d in self.dirs.values():
            d.mkdir()
        self.argv = ["podman", "--root", str(self.dirs["graph"]), "--runroot", str(self.dirs["run"]),
                     "--runtime", "runc", "--runtime-flag", f"root={self.dirs['runc']}", "--cgroup-manager",
                     "cgroupfs", "--tmpdir", str(self.dirs["tmp"]), "--events-backend", "none", "--log-level",
                     "error", "--hooks-dir", str(self.dirs["hooks"])]

    def __call__(self, *args: str, stdin: bytes | None = None) -> str:
        cp = subprocess.run(self.argv + list(args), input=stdin, capture_output=True, timeout=120)
        if cp.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {cp.stderr.decode(errors='replace')[-2000:]}")
        return cp.stdout.decode().strip()

    def start(self) -> "Podman":
        rootfs = self.base / "rootfs"
        for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "run"):
            (rootfs / d).mkdir(parents=True)
        shutil.copy2(shutil.which("busybox"), rootfs / "bin" / "busybox")
        for applet in L.BUSYBOX_APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True).stdout
        self("import", "-", IMAGE, stdin=tar)
        hook = self.base / "nvidia-container-runtime-hook"
        hook.write_text(L.legacy_hook_script())
        hook.chmod(0o755)
        # for the annotated container only
        (self.dirs["hooks"] / "oci-nvidia-hook.json").write_text(
            L.oci_hook_json(str(hook), {"annotations": {"^gfpm\\.gpu$": "^hook$"}}))
        for path, ma, mi in L.GPU_NODES:
            os.mknod(self.dirs["dev"] / path.rsplit("/", 1)[1], stat.S_IFCHR | 0o666, os.makedev(ma, mi))
        return self

    def run(self, name: str, *opts: str) -> str:
        n = os.sysconf("SC_OPEN_MAX")  # podman asks for 1048576 open files, more than this machine may give
        return self("run", "-d", "--network", "none", "--ulimit", f"nofile={n}:{n}", "--ulimit", "nproc=4096:4096",
                    "--name", name, *opts, IMAGE, "sleep", "3600")

    def close(self) -> list[str]:
        problems = []
        for args in (("rm", "-fa", "-t", "0"), ("rmi", "-fa")):
            try:
                self(*args)
            except (AssertionError, subprocess.TimeoutExpired) as e:
                problems.append(str(e))
        # the overlay driver bind-mounts <graph>/overlay on itself (containers/storage); nothing else may be left
        for target in sorted(self._mounts(), key=len, reverse=True):
            if target != f"{self.dirs['graph']}/overlay":
                problems.append(f"left mounted: {target}")
            subprocess.run(["umount", target], capture_output=True, timeout=30)
        problems += [f"still mounted: {t}" for t in self._mounts()]
        if not problems:
            shutil.rmtree(self.base, ignore_errors=True)
        return problems


    def _mounts(self) -> list[str]:
        with open("/proc/self/mounts") as f:
            return [ln.split()[1] for ln in f if ln.split()[1].startswith(f"{self.base}/")]


@pytest.fixture(scope="module")
def pm():
    missing = [b for b in ("podman", "conmon", "runc", "busybox", "nsenter") if not shutil.which(b)]
    if missing:
        pytest.fail(f"podman lab cannot run: missing {', '.join(missing)} (scripts/lab-deps.sh)")
    p = Podman(Path(tempfile.mkdtemp(prefix="gfpm-", dir="/tmp"))).start()
    try:
        spec_dev = [a for path, *_ in L.GPU_NODES for a in ("--device", f"{p.dirs['dev']}/{path[5:]}:{path}")]
        ids = {"spec": p.run("gfpm-spec", *spec_dev, "--env", "NVIDIA_VISIBLE_DEVICES=0"),
               "hook": p.run("gfpm-hook", "--annotation", "gfpm.gpu=hook", "--env", "NVIDIA_VISIBLE_DEVICES=all")}
        yield p, ids
    finally:
        problems = p.close()
        assert not problems, problems


@pytest.fixture(scope="module")
def collected(pm, tmp_path_factory):
    p, ids = pm
    b = Bundle.open(L.collect(tmp_path_factory.mktemp("podman") / "b", [], probe=True, timeout=60))
    recs = {r["id"]: r for r in containers.read(b, NodeFacts()).facts.get("containers", [])}
    return b, {k: recs[cid] for k, cid in ids.items()}


def test_podman_containers_are_found_as_podmans_with_the_bundle_runc_ran(pm, collected):
    p, ids = pm
    b, recs = collected
    for kind, rec in recs.items():
        cid = ids[kind]
        assert (rec["engine"], rec["namespace"]) == ("podman", "podman")
        assert rec["bundle"] == f"{p.dirs['graph']}/overlay-containers/{cid}/userdata"   # not the run root's
        assert rec["config"]["status"] == "collected" and rec["annotations"]["io.container.manager"] == "libpod"
        assert rec["cgroup"]["driver"] == "cgroupfs" and rec["cgroup"]["path"].endswith(f"/libpod-{cid}")
        assert rec["pid"] > 1 and rec["pod"] is None
        assert rec["container_name"] == f"gfpm-{kind}" and "conmon -n" in rec["container_name_source"]
        assert any(v.startswith(f"Podman bundle {rec['bundle']}") for v in rec["found_via"])
        assert b.path(f"containers/podman/{cid}/config.json").is_file()
    roots = json.loads(b.path("containers/roots.json").read_text())
    graph = {r["path"]: r["sources"] for r in roots["graph_roots"]}
    assert any("conmon --exit-command podman --root" in s for s in graph[str(p.dirs["graph"])])
    runroots = {r["path"]: r["sources"] for r in roots["crio_runroots"]}
    assert any("--runroot" in s for s in runroots[str(p.dirs["run"])])
    runc = {r["path"]: r["sources"] for r in roots["runc_roots"]}
    assert any("conmon --runtime-arg --root" in s for s in runc[str(p.dirs["runc"])])


def test_the_hook_container_gets_its_gpu_outside_the_spec_and_the_other_inside(collected):
    _, recs = collected
    hook, spec = recs["hook"], recs["spec"]
    assert [h["args"] for h in hook["hooks"]["prestart"]] == [["nvidia-container-runtime-hook", "prestart"]]
    assert not any(d["major"] == 195 for d in hook["linux_devices"])
    assert {(d["path"], d["major"], d["minor"]) for d in spec["linux_devices"]} >= {("/dev/nvidia0", 195, 0),
                                                                                    ("/dev/nvidiactl", 195, 255)}
    assert spec["hooks"]["prestart"] == []
    for rec in (hook, spec):   # both reach the nodes (ENXIO: allowed, no driver behind them)
        assert rec["probe"] == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO"}
        assert {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"} in rec["cgroup"]["rules"] or \
            {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"} in rec["cgroup"]["rules"]
    ex = exposure.assess({}, list(recs.values()), None)
    rows = {r["id"]: r for r in ex["containers"]}
    assert rows[hook["id"]]["gpu_injection"] == "hook" and rows[spec["id"]]["gpu_injection"] == "spec"
    assert {r["engine"] for r in rows.values()} == {"podman"}
    # cgroupfs, from runc's own state: a daemon-reload rebuilds no rule of these containers
    assert rows[hook["id"]]["cgroup_driver"] == "cgroupfs" and rows[hook["id"]]["cgroup_driver_basis"] == "evidence"
    assert not rows[hook["id"]]["at_risk"] and not rows[hook["id"]]["broken"]
    st = ex["stack"]
    assert st["engine"] == "podman" and any(u.startswith("podman container") for u in st["hook_users"])


def test_podman_is_remedied_with_cdi_devices_never_another_engines_steps(collected):
    _, recs = collected
    st = recognise({}, list(recs.values()), None, None)
    st["driver_root"] = "/"
    node = {"systemd_cgroup": None, "enable_cdi": None, "nvidia_runtime_mode": None,
            "nvidia_runtime_mode_resolved": None, "device_list_strategy": None, "pass_device_specs": None,
            "driver_root": "/"}
    out = remedies._spec_remedies(st, node, {}, "/")
    assert [r["what"] for r in out] == ["Generate a CDI spec for the GPUs",
                                        "Start GPU containers with CDI devices instead of the OCI hook"]
    assert out[0]["change"] == "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    assert out[1]["change"].splitlines()[0] == "podman run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi -L"
    assert "Podman >= 4.1.0" in out[1]["needs"]
    text = json.dumps(out)
    for foreign in ("containerd", "systemctl restart", "docker", "enable_cdi"):
        assert foreign not in text


# -- under a real systemd: Podman's default systemd cgroup manager and a real daemon-reload ---------------
@pytest.fixture(scope="module", params=LAYOUTS)
def reloaded(request, tmp_path_factory):
    """A lab (tests/syslab.py: systemd 252 as PID 1 of a namespace) with one hook-injected Podman container in
    ``machine.slice/libpod-<id>.scope``: the probe before and after a real ``systemctl daemon-reload`` from a
    requester unit, then ``gpu-forensics run --probe`` inside: ``{"lab", "id", "before", "after", "analysis",
    "record"}``."""
    lab, dog = _lab(tmp_path_factory, request.param, "podman")
    try:
        lab.up(containers=())
        cid = lab.start_podman("podmangpu")
        before = lab.probe_engine("podmangpu", "podman")
        lab.reload(via_unit="nvidia-driver-upgrade")
        after = lab.probe_engine("podmangpu", "podman")
        out = lab.folder / "out-podman"
        p = _tool(lab, "run", "--root", "/", "--probe", "--out", str(out), "--time-budget", "60")
        assert p.returncode == 0, p.stderr[-2000:]
        recs = [r for r in containers.read(Bundle.open(out), NodeFacts()).facts.get("containers") or []
                if r.get("id") == cid]
        yield {"lab": lab, "id": cid, "before": before, "after": after, "record": recs[0] if recs else None,
               "analysis": json.loads((lab.folder / "out-podman-report" / "analysis.json").read_text())}
    finally:
        _close(lab, dog)


def test_a_podman_container_loses_its_hook_gpu_on_the_real_reload_and_the_report_says_why(reloaded):
    assert (reloaded["before"], reloaded["after"]) == ("ENXIO", "EPERM")  # allowed, no driver; then denied
    rec, cid = reloaded["record"], reloaded["id"]
    assert rec is not None and (rec["engine"], rec["config"]["status"]) == ("podman", "collected")
    assert rec["bundle"] == f"/var/lib/gf-podman/vfs-containers/{cid}/userdata"   # learnt from conmon
    assert rec["cgroup"]["driver"] == "systemd" and rec["cgroup"]["path"].endswith(f"machine.slice/libpod-{cid}.scope")
    a = reloaded["analysis"]
    (row,) = [r for r in a["exposure"]["containers"] if r["id"] == cid]
    assert (row["engine"], row["gpu_injection"], row["at_risk"], row["broken"], row["probe"]) == \
        ("podman", "hook", True, True, "EPERM")
    assert (row["broken_basis"], row["cgroup_driver"], row["cgroup_driver_basis"]) == ("probe", "systemd", "evidence")
    reloads = [c for i in a["incidents"] for c in i["causes"] if c["kind"] == "daemon-reload"]
    assert [c["verdict"] for c in reloads] == ["confirmed"]
    assert reloads[0]["requested_by"]["unit"] == "nvidia-driver-upgrade.service"
    assert a["exposure"]["stack"]["engine"] == "podman"
    whats = [r["what"] for r in a["exposure"]["remedies"]]
    assert "Start GPU containers with CDI devices instead of the OCI hook" in whats
    text = json.dumps(a["exposure"]["remedies"])
    assert "podman run --rm --device nvidia.com/gpu=all" in text and "containerd" not in text
    # the spec alone changes nothing until the containers ask for CDI devices: one plan, two steps, in order
    plan = a["exposure"]["remedy_plan"]
    assert plan["fix"]["what"] == "Generate a CDI spec for the GPUs"
    assert plan["then"][0]["what"] == "Start GPU containers with CDI devices instead of the OCI hook"
    assert not [o for o in plan["others"] if "CDI devices" in o["what"]]
    # a container with no pod is said as one, by its short id
    assert a["headline"]["broke"] == {"pods": [], "containers": [f"podmangpu ({cid[:12]})"], "gpus": []}
    assert rec["container_name"] == "podmangpu" and rec["container_name_source"].endswith("conmon -n")
    md = (reloaded["lab"].folder / "out-podman-report" / "report.md").read_text()
    assert f"What broke: container podmangpu ({cid[:12]}), with no pod." in md and f"pods /{cid[:12]}" not in md
    assert f"GPU no longer usable in container {cid[:12]} (no pod):" in md
