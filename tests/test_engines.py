"""Container discovery for every engine (issue 14 item 1), on real files in a built root: Docker's
``moby`` namespace under dockerd's own containerd and under the system one, CRI-O's userdata with its
runtime root from crio.conf.d, plain runc under a ``--root`` learnt from a live command line, one
container met twice, the cgroup driver from the container's own evidence only, and a spec that could
not be read (EACCES, over the bound, a directory, gone mid-run) recorded as unknown, never as "no GPU"."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from collectors import containers
from collectors.containers import container as cc, engines
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import CollectContext
from tests.privdrop import NOBODY, run_as_nobody

D1 = "d0c4e1" + "a" * 58   # Docker, dockerd's containerd
D2 = "d0c4e2" + "b" * 58   # Docker, system containerd
C1 = "c210" + "c" * 60     # CRI-O
K1 = "6e55" + "e" * 60     # containerd CRI, met twice
GPU_SPEC = {"linux": {"devices": [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]},
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "DB_PASSWORD=s3cr3t-env"]}}


def _w(p: Path, obj) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def _state(cid: str, bundle: str, systemd=None, path=None) -> dict:
    cg = {"devices": []} if systemd is None else {"devices": [], "Systemd": systemd}
    st = {"id": cid, "init_process_pid": 999999, "init_process_start": 1, "created": "2026-03-01T10:00:00Z",
          "config": {"labels": [f"bundle={bundle}"], "cgroups": cg}}
    if path:
        st["cgroup_paths"] = {"": path}
    return st


def _cmdline(root: Path, pid: int, *argv: str, cwd: str | None = None, uid: int = 0, exe: str | None = None) -> None:
    """A process of a built root: its cmdline, status (``Uid:`` real, effective, saved, fs) and exe link
    (``argv[0]`` unless given)."""
    _w(root / f"proc/{pid}/cmdline", "\0".join(argv) + "\0")
    _w(root / f"proc/{pid}/status", f"Name:\t{argv[0].rsplit('/', 1)[-1][:15]}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    os.symlink(exe or argv[0], root / f"proc/{pid}/exe")
    if cwd:
        os.symlink(cwd, root / f"proc/{pid}/cwd")


def _acquire(root: Path, out: Path) -> tuple[Bundle, dict]:
    w = BundleWriter(out)
    containers.acquire(CollectContext(root=root, writer=w))
    w.meta["collection"] = {"start": "2026-03-05T00:00:00Z", "end": "2026-03-05T00:00:01Z"}
    w.finish()
    b = Bundle.open(out)
    return b, {r["id"]: r for r in containers.read(b, NodeFacts()).facts["containers"]}


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "root"
    (r / "var").mkdir(parents=True)
    os.symlink("/run", r / "var/run")  # as on every node: /var/run is /run
    return r


def test_docker_under_dockerds_containerd_and_the_system_one(root, tmp_path):
    b1 = root / f"run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{D1}"
    _w(b1 / "config.json", {**GPU_SPEC, "linux": {**GPU_SPEC["linux"], "cgroupsPath": f"/docker/{D1}"}})
    _w(b1 / "options.json", {"binary_name": "runc", "root": "/var/run/docker/runtime-runc"})
    _w(root / f"run/docker/runtime-runc/moby/{D1}/state.json",
       _state(D1, str(b1)[len(str(root)):], systemd=False, path=f"/sys/fs/cgroup/docker/{D1}"))
    _w(root / f"var/lib/docker/containers/{D1}/config.v2.json",
       {"Name": "/trainer", "Config": {"Image": "nvcr.io/nvidia/cuda:12.4.0-base", "Env": ["DB_PASSWORD=s3cr3t-v2"],
                                       "Labels": {"com.example.owner": "s3cr3t-label"}}})
    b2 = root / f"run/containerd/io.containerd.runtime.v2.task/moby/{D2}"
    _w(b2 / "config.json", {"linux": {"cgroupsPath": f"system.slice:docker:{D2}"}})
    b, recs = _acquire(root, tmp_path / "b")
    one, two = recs[D1], recs[D2]
    assert (one["engine"], one["namespace"], one["pod"], one["pod_namespace"]) == ("docker", "moby", None, None)
    assert (one["container_name"], one["image"]) == ("trainer", "nvcr.io/nvidia/cuda:12.4.0-base")
    assert one["config"] == {"status": "collected", "detail": None} and one["gpu"] is True
    assert one["cgroup"]["driver"] == "cgroupfs"
    assert one["cgroup"]["driver_source"] == "runc state.json config.cgroups.Systemd=false"
    assert one["found_via"] == [f"containerd task directory /run/docker/containerd/daemon/io.containerd.runtime.v2.task"
                                f"/moby/{D1}",
                                f"runc state /run/docker/runtime-runc/moby/{D1}/state.json (root /run/docker/runtime-runc: "
                                f"default; options.json Root of moby/{D1} (/var/run/docker/runtime-runc))"]
    assert (two["engine"], two["namespace"], two["container_name"], two["gpu"]) == ("docker", "moby", None, False)
    assert two["cgroup"]["driver"] == "systemd"
    assert two["cgroup"]["driver_source"] == (f"config.json linux.cgroupsPath system.slice:docker:{D2} "
                                              "(slice:prefix:name, the systemd driver's form)")
    assert two["linux_devices"] == [] and two["config"]["status"] == "collected"  # read, and it has none
    raw = b"".join(p.read_bytes() for p in b.root.rglob("*") if p.is_file())
    assert b"s3cr3t" not in raw  # config.v2.json is not copied, only its name/image/k8s labels
    assert [a.status.value for a in b.artifacts()
            if a.source == f"/var/lib/docker/containers/{D2}/config.v2.json"] == ["absent"]


def test_crio_userdata_with_its_runtime_root_from_crio_conf(root, tmp_path):
    ud = f"/run/containers/storage/overlay-containers/{C1}/userdata"
    _w(root / ud.lstrip("/") / "config.json",
       {**GPU_SPEC, "annotations": {"io.kubernetes.pod.name": "infer-0", "io.kubernetes.pod.namespace": "ml",
                                    "io.kubernetes.container.name": "server",
                                    "io.kubernetes.cri-o.ContainerType": "container"},
        "linux": {"cgroupsPath": f"kubepods-besteffort-pod1.slice:crio:{C1}"}})
    _w(root / "etc/crio/crio.conf.d/10-runc.conf", '[crio.runtime.runtimes.runc]\nruntime_root = "/run/crio-runc"\n')
    _w(root / f"run/crio-runc/{C1}/state.json",
       _state(C1, ud, systemd=True,
              path=f"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/crio-{C1}.scope"))
    b, recs = _acquire(root, tmp_path / "b")
    rec = recs[C1]
    assert (rec["engine"], rec["namespace"], rec["bundle"]) == ("crio", "crio", ud)
    assert (rec["pod"], rec["pod_namespace"], rec["container_name"]) == ("infer-0", "ml", "server")
    assert (rec["cgroup"]["driver"], rec["cgroup"]["driver_source"]) == \
        ("systemd", "runc state.json config.cgroups.Systemd=true")
    assert rec["created"] == "2026-03-01T10:00:00Z" and rec["env"] == {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert rec["found_via"] == [f"CRI-O userdata {ud}", f"runc state /run/crio-runc/{C1}/state.json (root "
                                "/run/crio-runc: /etc/crio/crio.conf.d/10-runc.conf [crio.runtime.runtimes.runc] "
                                "runtime_root)"]
    stored = json.loads(b.path("containers/roots.json").read_text())
    assert {"path": "/run/crio-runc", "sources": ["/etc/crio/crio.conf.d/10-runc.conf [crio.runtime.runtimes.runc] "
                                                  "runtime_root"]} in stored["runc_roots"]


def test_plain_runc_under_a_root_learnt_from_a_live_command_line(root, tmp_path):
    _cmdline(root, 777, "/usr/local/sbin/runc", "--root", "/run/custom-runc", "run", "-d", "web")
    _w(root / "srv/web/config.json", GPU_SPEC)
    _w(root / "run/custom-runc/web/state.json", _state("web", "/srv/web", path="/sys/fs/cgroup/custom/web"))
    b, recs = _acquire(root, tmp_path / "b")
    rec = recs["web"]
    assert (rec["engine"], rec["namespace"], rec["bundle"], rec["gpu"]) == ("runc", "runc", "/srv/web", True)
    assert rec["cgroup"]["driver"] == "cgroupfs"
    assert rec["cgroup"]["driver_source"] == ("cgroup path /sys/fs/cgroup/custom/web from runc state.json "
                                              "cgroup_paths (no systemd slice or scope: the cgroupfs shape)")
    assert rec["found_via"] == ["runc state /run/custom-runc/web/state.json (root /run/custom-runc: "
                                "/proc/777/cmdline runc --root)"]
    assert b.path("containers/runc/web/config.json").is_file()


def test_a_container_met_twice_is_one_record(root, tmp_path):
    """A CRI container in a state dir learnt from its shim's working directory, whose runc state is
    under the Root its options.json names: found as a task directory and as a runc state, one record."""
    bundle = f"/run/alt/io.containerd.runtime.v2.task/k8s.io/{K1}"
    _w(root / bundle.lstrip("/") / "config.json", {**GPU_SPEC, "annotations": {
        "io.kubernetes.cri.sandbox-name": "job-7", "io.kubernetes.cri.sandbox-namespace": "batch",
        "io.kubernetes.cri.container-name": "main"}})
    _w(root / bundle.lstrip("/") / "options.json", {"Root": "/run/alt-runc", "SystemdCgroup": True})
    _w(root / f"run/alt-runc/k8s.io/{K1}/state.json", _state(K1, bundle))  # no Systemd key, no cgroup path
    _cmdline(root, 888, "/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", K1,
             "-address", "/run/alt/containerd.sock", cwd=bundle)
    b, recs = _acquire(root, tmp_path / "b")
    assert list(recs) == [K1]
    rec = recs[K1]
    assert (rec["engine"], rec["namespace"], rec["pod"], rec["pod_namespace"]) == ("containerd", "k8s.io", "job-7", "batch")
    assert rec["found_via"] == [f"containerd task directory {bundle}",
                                f"runc state /run/alt-runc/k8s.io/{K1}/state.json (root /run/alt-runc: options.json "
                                f"Root of k8s.io/{K1})"]
    # neither runc's state nor a cgroup path shows the driver; the task's options.json does
    assert (rec["cgroup"]["driver"], rec["cgroup"]["driver_source"]) == ("systemd", "options.json SystemdCgroup=true")
    dirs = {d["path"]: d["sources"] for d in json.loads(b.path("containers/roots.json").read_text())["containerd_state_dirs"]}
    assert dirs["/run/alt"] == [f"/proc/888/cmdline working directory {bundle}",
                                "/proc/888/cmdline -address /run/alt/containerd.sock"]


def test_driver_is_unknown_when_the_container_does_not_show_it(root, tmp_path):
    _w(root / "srv/x/config.json", {"linux": {}})
    _w(root / "run/runc/x/state.json", _state("x", "/srv/x"))  # no Systemd, no cgroup path, no cgroupsPath
    _, recs = _acquire(root, tmp_path / "b")
    assert (recs["x"]["cgroup"]["driver"], recs["x"]["cgroup"]["driver_source"]) == (None, None)


def test_cgroupfs_path_shape_of_a_kubelet_pod():
    assert containers.cp.cgroup_driver({}, {"linux": {"cgroupsPath": "/kubepods/besteffort/pod1/abc"}}, None, None,
                                       None) == ("cgroupfs", "config.json linux.cgroupsPath /kubepods/besteffort/pod1/abc "
                                                 "(a plain path, the cgroupfs form)")
    # a cgroup directory that is not named by the container (the hierarchy's root) shows nothing
    assert containers.cp.cgroup_driver({}, {}, "/sys/fs/cgroup/", "/proc/1/cgroup", None, "abc") == (None, None)


def _unknown(rec: dict) -> tuple:
    return (rec["linux_devices"], rec["resources_devices"], rec["hooks"], rec["env"], rec["annotations"])


def test_spec_over_the_bound_and_a_directory_in_its_place(root, tmp_path):
    big = root / "srv/big"
    _w(big / "config.json", '{"a": "' + "x" * cc.JSON_LIMIT + '"}')
    _w(root / "run/runc/big/state.json", _state("big", "/srv/big"))
    (root / "srv/dir/config.json").mkdir(parents=True)
    _w(root / "run/runc/dir/state.json", _state("dir", "/srv/dir"))
    _w(root / "run/runc/nobundle/state.json", _state("nobundle", "/srv/never"))
    _w(root / "srv/list/config.json", "[]")
    _w(root / "run/runc/list/state.json", _state("list", "/srv/list"))
    _, recs = _acquire(root, tmp_path / "b")
    assert recs["list"]["config"] == {"status": "error", "detail": "not a JSON object (list)"}
    assert recs["big"]["config"] == {"status": "truncated", "detail": "over the 8 MiB bound; not read"}
    assert recs["dir"]["config"]["status"] == "error" and recs["dir"]["config"]["detail"].startswith("EINVAL: not a regular file")
    assert recs["nobundle"]["config"] == {"status": "absent", "detail": "ENOENT: the bundle directory /srv/never "
                                                                        "runc's state names does not exist"}
    for cid in ("big", "dir", "nobundle", "list"):
        assert _unknown(recs[cid]) == (None,) * 5 and recs[cid]["device_plugin_socket_mount"] is None
        assert recs[cid]["gpu"] is None


def test_spec_gone_mid_run(root, tmp_path, monkeypatch):
    """The task directory is listed, then the container is deleted before its spec is read."""
    bundle = root / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{K1}"
    _w(bundle / "config.json", GPU_SPEC)
    real = engines.discover

    def then_deleted(*a, **kw):
        out = real(*a, **kw)
        shutil.rmtree(bundle)
        return out
    monkeypatch.setattr(engines, "discover", then_deleted)
    _, recs = _acquire(root, tmp_path / "b")
    rec = recs[K1]
    assert rec["config"] == {"status": "absent", "detail": f"gone mid-run: the bundle directory "
                                                           f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{K1} "
                                                           "was listed, then no longer there"}
    assert _unknown(rec) == (None,) * 5 and rec["engine"] == "containerd"


def test_spec_unreadable_eacces_as_an_unprivileged_collector():
    """Collected as ``nobody`` (tests run as root): a config.json of mode 0600 owned by root is EACCES."""
    top = Path(tempfile.mkdtemp(prefix="engines-eacces-"))
    try:
        os.chmod(top, 0o755)
        root = top / "root"
        _w(root / "srv/locked/config.json", GPU_SPEC).chmod(0o600)
        _w(root / "run/runc/locked/state.json", _state("locked", "/srv/locked"))
        for d in [root, *root.rglob("*")]:
            if d.is_dir():
                d.chmod(0o755)
        (root / "run/runc/locked/state.json").chmod(0o644)
        out = top / "out"
        out.mkdir()
        os.chown(out, NOBODY, NOBODY)

        def collect():
            b, recs = _acquire(root, out / "b")
            return recs["locked"]
        rec = run_as_nobody(collect)
    finally:
        shutil.rmtree(top)
    assert rec["config"] == {"status": "unreadable", "detail": "EACCES: Permission denied"}
    assert _unknown(rec) == (None,) * 5 and rec["gpu"] is None  # unknown, not "no GPU"


def test_a_docker_container_shows_the_pod_its_dockershim_labels_name(root, tmp_path):
    """Issue 29: a GPU container of a Docker node run by the kubelet through dockershim or cri-dockerd (HAMi's
    nodes among them) carries its pod in Docker's own config labels, not in OCI annotations: the record and
    the exposure's remedy name the pod, never "(it has no pod)"."""
    from forensics.findings.exposure import assess
    b1 = root / f"run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{D1}"
    _w(b1 / "config.json", {**GPU_SPEC, "process": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-1"]},
                            "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                                    "args": ["nvidia-container-runtime-hook", "prestart"]}]},
                            "linux": {"devices": [], "cgroupsPath": f"system.slice:docker:{D1}"}})
    _w(root / f"var/lib/docker/containers/{D1}/config.v2.json",
       {"Name": "/k8s_vllm_infer-0_ml_5d1e_0", "Config": {"Image": "vllm/vllm-openai:v0.6.3", "Labels": {
           "io.kubernetes.pod.name": "infer-0", "io.kubernetes.pod.namespace": "ml",
           "io.kubernetes.container.name": "vllm", "io.kubernetes.docker.type": "container",
           "io.kubernetes.pod.uid": "5d1e"}}})
    _, recs = _acquire(root, tmp_path / "b")
    one = recs[D1]
    assert (one["engine"], one["pod"], one["pod_namespace"], one["container_name"]) == ("docker", "infer-0", "ml", "vllm")
    exp = assess({"systemd_cgroup": None}, [one], None)
    row = exp["containers"][0]
    assert (row["pod"], row["namespace"], row["gpu_injection"]) == ("infer-0", "ml", "hook")
    assert not any("it has no pod" in r["change"] for r in exp["remedies"])


def test_roots_from_the_command_lines_of_conmon_the_v1_shim_and_dockerd(tmp_path):
    roots = engines.Roots(str(tmp_path))  # an empty root: no path resolves to another
    engines.roots_from_cmdline(["/usr/bin/conmon", "-b", "/x/userdata", "-r", "/usr/bin/runc", "--runtime-arg",
                                "--root=/run/crio-alt", "-c", "abc"], None, "/proc/1/cmdline", roots)
    engines.roots_from_cmdline(["conmon", "--runtime-arg", "--root", "--runtime-arg", "/run/crio-two"], None,
                               "/proc/2/cmdline", roots)
    engines.roots_from_cmdline(["containerd-shim", "-namespace", "moby", "-workdir", "/var/lib/containerd/x",
                                "-address", "/run/containerd/containerd.sock", "-runtime-root",
                                "/var/run/docker/runtime-runc"], None, "/proc/3/cmdline", roots)
    engines.roots_from_cmdline(["/usr/bin/dockerd", "--exec-root=/run/dock", "--data-root", "/data/docker"], None,
                               "/proc/4/cmdline", roots)
    engines.roots_from_cmdline(["/usr/bin/runc", "init"], None, "/proc/5/cmdline", roots)  # no root: nothing
    assert roots.runc == {"/run/crio-alt": ["/proc/1/cmdline conmon --runtime-arg --root"],
                          "/run/crio-two": ["/proc/2/cmdline conmon --runtime-arg --root"],
                          "/var/run/docker/runtime-runc": ["/proc/3/cmdline -runtime-root"],
                          "/run/dock/runtime-runc": ["/proc/4/cmdline dockerd --exec-root"]}
    assert list(roots.containerd) == ["/run/containerd", "/run/containerd/daemon", "/run/dock/containerd/daemon"]
    assert roots.docker == {"/data/docker": ["/proc/4/cmdline dockerd --data-root"]}


def test_engine_of_a_bundle_path():
    assert engines.engine_of_bundle(f"/run/containerd/io.containerd.runtime.v2.task/moby/{D1}") == ("docker", "moby")
    assert engines.engine_of_bundle(f"/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{K1}/") == \
        ("containerd", "k8s.io")
    assert engines.engine_of_bundle(f"/run/containers/storage/overlay-containers/{C1}/userdata") == ("crio", None)
    assert engines.engine_of_bundle("/srv/web") == ("runc", None)


def _forged_root(d: Path, cid: str) -> Path:
    """A runc root in ``d`` holding one forged container: a GPU spec under the systemd driver, in pod ml/evil."""
    spec = {**GPU_SPEC, "annotations": {"io.kubernetes.cri.sandbox-namespace": "ml;curl x|sh;:",
                                        "io.kubernetes.cri.sandbox-name": "evil-0"}}
    _w(d / "bundle" / cid / "config.json", spec)
    _w(d / "state" / cid / "state.json", _state(cid, str(d / "bundle" / cid), systemd=True))
    return d / "state"


def test_a_runtime_root_is_learnt_only_from_roots_runtime_binary(tmp_path):
    """Issue 27: any local user could start ``runc --root DIR`` (its own copy of a binary, named runc)
    over a forged state.json and have ``run --root /`` record a GPU container "at risk" whose namespace
    reached the remedies. Three real processes with ``--root``: nobody's runc (refused: not root), root's
    process named runc whose executable is cat (refused: not runc's binary), root's runc (learnt)."""
    d = Path(tempfile.mkdtemp(prefix="gf-runc-"))
    procs = []
    try:
        d.chmod(0o755)
        bins = d / "bin"
        bins.mkdir()
        shutil.copy(shutil.which("cat"), bins / "runc")  # blocks on its stdin: `runc -- - --root X` reads "-" first
        shutil.copy(shutil.which("cat"), bins / "cat")
        evil, named, good = (d / n for n in ("evil", "named", "good"))
        for x in (evil, named, good):
            x.mkdir()
        os.chown(evil, NOBODY, NOBODY)
        roots = [_forged_root(x, f"forged-{x.name}") for x in (evil, named, good)]
        for x in evil.rglob("*"):
            os.chown(x, NOBODY, NOBODY)
        for exe, root, user in ((bins / "runc", roots[0], NOBODY), (bins / "cat", roots[1], None),
                                (bins / "runc", roots[2], None)):
            procs.append(subprocess.Popen(["runc", "--", "-", "--root", str(root)], executable=str(exe),
                                          stdin=subprocess.PIPE, user=user))
        time.sleep(0.3)
        assert all(p.poll() is None for p in procs)
        inv_roots = engines.Roots("/")
        engines._proc_roots("/", inv_roots, lambda: False)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert str(roots[2]) in inv_roots.runc and inv_roots.runc[str(roots[2])] == [f"/proc/{procs[2].pid}/cmdline runc --root"]
    assert str(roots[0]) not in inv_roots.runc and str(roots[1]) not in inv_roots.runc
    assert (f"/proc/{procs[0].pid} (runc): it runs as uids {NOBODY} {NOBODY} {NOBODY} {NOBODY} (real, effective, "
            "saved, fs), not root; no root learnt from it") in inv_roots.ignored
    assert f"/proc/{procs[1].pid} (runc): its executable is '{bins}/cat', not runc's binary; no root learnt from it" \
        in inv_roots.ignored
    shutil.rmtree(d)


def test_the_forged_container_of_a_users_runc_is_not_recorded(tmp_path):
    """The whole collector, live (``--root /``): nobody's ``runc --root DIR`` leaves no container from DIR in
    the bundle, and containers/roots.json names the process as ignored, with the reason."""
    d = Path(tempfile.mkdtemp(prefix="gf-runc-"))
    d.chmod(0o755)
    (d / "bin").mkdir()
    shutil.copy(shutil.which("cat"), d / "bin" / "runc")
    evil = d / "evil"
    state = _forged_root(evil, "forged-evil")
    for x in [evil, *evil.rglob("*")]:
        os.chown(x, NOBODY, NOBODY)
    p = subprocess.Popen(["runc", "--", "-", "--root", str(state)], executable=str(d / "bin" / "runc"),
                         stdin=subprocess.PIPE, user=NOBODY)
    try:
        time.sleep(0.3)
        w = BundleWriter(tmp_path / "b")
        containers.acquire(CollectContext(root=Path("/"), writer=w))
        w.meta["collection"] = {"start": "2026-03-05T00:00:00Z", "end": "2026-03-05T00:00:01Z"}
        w.finish()
        b = Bundle.open(tmp_path / "b")
        recs = {r["id"]: r for r in containers.read(b, NodeFacts()).facts.get("containers") or []}
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d)
    assert "forged-evil" not in recs
    stored = json.loads(b.path("containers/roots.json").read_text())
    assert str(state) not in [r["path"] for r in stored["runc_roots"]]
    [why] = [w for w in stored["ignored_processes"] if w.startswith(f"/proc/{p.pid} ")]
    assert why.endswith("not root; no root learnt from it")
    [art] = [a for a in b.artifacts() if a.path == "containers/roots.json"]
    assert any("not learnt from" in n for n in art.notes)
