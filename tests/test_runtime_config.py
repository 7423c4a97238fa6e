"""collectors.runtime_config: containerd, toolkit, CDI, /proc/devices and /dev nodes, acquired from a host
root built in tmp_path (real files copied in at test time, device nodes made with mknod) into a real
bundle, and read back. No mocks."""
from __future__ import annotations

import json
import os
import shutil
import stat
import tomllib
from pathlib import Path

import pytest

from collectors import runtime_config as rc
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext, HostFacts
from forensics.events import NodeFacts

PROC_DEVICES = """Character devices:
  1 mem
  4 tty
136 pts
195 nvidia-frontend
226 drm
236 nvidia-caps
237 nvidia-uvm
254 gpiochip

Block devices:
  7 loop
  8 sd
259 blkext
"""


def host(tmp_path: Path, files: dict[str, str | bytes | Path]) -> Path:
    """A host root holding ``files`` (host path -> text, bytes, or a real file to copy in)."""
    root = tmp_path / "host"
    root.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, Path):
            shutil.copyfile(data, p)
        else:
            p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def chardev(root: Path, path: str, major: int, minor: int) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(p, 0o666)


def collect(root: Path, tmp_path: Path, versions: dict | None = None, name: str = "bundle"):
    out = tmp_path / name
    w = BundleWriter(out)
    facts = HostFacts(package_versions=versions or {}, systemd_version="252.39-1~deb12u1",
                      systemd_version_basis="/var/lib/dpkg/status")
    rc.acquire(CollectContext(root=root, writer=w, node=facts))
    w.finish()
    b = Bundle.open(out)
    return b, rc.read(b, NodeFacts())


def record(bundle: Bundle, source: str):
    return next(a for a in bundle.artifacts() if a.source == source)


# -- containerd config, real files -----------------------------------------------------------------
@pytest.mark.corpus
def test_aero_faas_systemd_cgroup_on_runc_and_cdi_off(real_inputs, tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml":
                           real_inputs / "containerd/aero-faas-containerd-1.7-systemdcgroup-config.toml"})
    b, r = collect(root, tmp_path, {"containerd": "1.7.24-1"})
    c = r.facts["runtime"]["containerd"]
    assert c["config_version"] == 2
    assert c["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2", "SystemdCgroup": True,
                                     "SystemdCgroup_basis": "config", "BinaryName": None}
    assert c["runtimes"]["kata-fc"]["SystemdCgroup"] is False
    assert c["default_runtime"] == "runc" and c["gpu_runtime"] == "runc" and c["nvidia_binary"] is None
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (False, "config")
    assert c["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert r.facts["runtime"]["systemd_cgroup"] is True
    assert r.facts["preconditions"] == {"systemd_cgroup": True}
    assert r.problems == []
    assert record(b, "/etc/containerd/config.toml").path == "runtime/etc/containerd/config.toml"


@pytest.mark.corpus
def test_salilkadam_cdi_enabled_and_self_import_is_loaded_once(real_inputs, tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml":
                           real_inputs / "containerd/salilkadam-k3s-containerd-1.7-cdi-enabled-config.toml"})
    b, r = collect(root, tmp_path)
    c = r.facts["runtime"]["containerd"]
    assert c["files"] == ["/etc/containerd/config.toml"]  # imports = ["/etc/containerd/config.toml"]: a loop
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (True, "config")
    assert c["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert c["runtimes"]["runc"]["SystemdCgroup"] is False and c["runtimes"]["runc"]["SystemdCgroup_basis"] == "config"
    assert "nvidia" not in c["runtimes"]
    assert r.facts["preconditions"] == {"systemd_cgroup": False}
    assert [a.source for a in b.artifacts()].count("/etc/containerd/config.toml") == 1


@pytest.mark.corpus
def test_kubuverse_invalid_toml_is_a_problem_naming_the_duplicate_table(real_inputs, tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml":
                           real_inputs / "containerd/kubuverse-invalid-v2-plus-v3-concatenated-config.toml"})
    b, r = collect(root, tmp_path)
    assert r.facts["runtime"]["containerd"] is None
    assert r.facts["runtime"]["systemd_cgroup"] is None and r.facts["runtime"]["enable_cdi"] is None
    assert r.facts["preconditions"] == {"systemd_cgroup": None}
    [p] = r.problems
    assert p["artifact"] == "runtime/etc/containerd/config.toml"
    assert "Cannot declare ('plugins', 'io.containerd.grpc.v1.cri') twice" in p["message"]
    assert "line 471" in p["message"]


@pytest.mark.corpus
def test_concourse_commented_out_nvidia_runtime_is_not_active(real_inputs, tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml": real_inputs / "containerd/concourse-gpgpu-legacy-v1-config.toml"})
    _, r = collect(root, tmp_path)
    c = r.facts["runtime"]["containerd"]
    assert c["config_version"] == 1
    assert c["linux_runtime"] is None  # '#runtime = "nvidia-container-runtime"' is a comment
    assert list(c["runtimes"]) == ["runc"] and c["nvidia_binary"] is None
    assert c["runtimes"]["runc"]["SystemdCgroup_basis"] == "default"
    # no CRI plugin table anywhere: unknown, not containerd's default presented as a fact (issue 14)
    assert r.facts["runtime"]["systemd_cgroup"] is None and r.facts["runtime"]["enable_cdi"] is None
    assert r.facts["engine_cgroup_driver"]["containerd"]["value"] is None


@pytest.mark.corpus
def test_nvidia_ctk_v1_config_default_runtime_is_the_v1_linux_shim(real_inputs, tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml": real_inputs / "containerd/nvidia-ctk-tests-config_v1.toml"})
    _, r = collect(root, tmp_path)
    c = r.facts["runtime"]["containerd"]
    assert c["config_version"] == 1
    assert c["default_runtime"] == "default" and c["linux_runtime"] == "runc"
    assert c["runtimes"]["default"] == {"runtime_type": "io.containerd.runtime.v1.linux", "SystemdCgroup": False,
                                        "SystemdCgroup_basis": "config", "BinaryName": "runc"}
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (
        False, "default for config version 1 (containerd 1.7; 1.6 has no CDI; containerd version unknown)")


@pytest.mark.corpus
def test_nvidia_ctk_v2_config_defaults(real_inputs, tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml": real_inputs / "containerd/nvidia-ctk-tests-config_v2.toml"})
    _, r = collect(root, tmp_path, {"containerd": "1.6.20~ds1-1+b1"})
    c = r.facts["runtime"]["containerd"]
    assert c["default_runtime"] == "runc"
    assert c["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v1", "SystemdCgroup": False,
                                     "SystemdCgroup_basis": "default", "BinaryName": None}
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (
        False, "default for containerd 1.6.20~ds1-1+b1 (no CDI support before 1.7)")


@pytest.mark.corpus
def test_every_containerd_input_reads_without_raising(real_inputs, tmp_path):
    for i, f in enumerate(sorted((real_inputs / "containerd").iterdir())):
        root = host(tmp_path / str(i), {"/etc/containerd/config.toml": f})
        _, r = collect(root, tmp_path / str(i))
        assert (r.facts["runtime"]["containerd"] is None) == ("invalid" in f.name), f.name


# -- nvidia-container-runtime config ---------------------------------------------------------------
@pytest.mark.corpus
@pytest.mark.parametrize("name,version,mode,resolved,basis", [
    ("canonical-tegra-docker-snap-config.toml", "1.17.8-1", "cdi", "cdi", "set explicitly"),
    ("nvidia-ctk-config.toml.ubuntu", "1.17.8-1", "auto", "legacy", "auto with toolkit 1.17.8-1 (< 1.18.0)"),
    ("nvidia-ctk-config.toml.ubuntu", "1.18.1-1", "auto", "jit-cdi", "auto with toolkit 1.18.1-1 (>= 1.18.0)"),
    ("nvidia-ctk-config.toml.ubuntu", None, "auto", None, "auto, and the toolkit version is unknown"),
    ("nvidia-ctk-config.toml.centos", "1.13.5-1", "auto", "legacy", "auto with toolkit 1.13.5-1 (< 1.18.0)"),
    ("nvidia-ctk-config.toml.ubuntu-jetpack", "1.18.0-1", "auto", "jit-cdi", "auto with toolkit 1.18.0-1 (>= 1.18.0)"),
])
def test_toolkit_mode_and_auto_resolution(real_inputs, tmp_path, name, version, mode, resolved, basis):
    root = host(tmp_path, {"/etc/nvidia-container-runtime/config.toml": real_inputs / "nvidia-runtime" / name})
    _, r = collect(root, tmp_path, {"nvidia-container-toolkit-base": version} if version else {})
    t = r.facts["runtime"]["nvidia_runtime"]
    assert (t["mode"], t["mode_resolved"], t["resolved_basis"]) == (mode, resolved, basis)
    assert t["mode_basis"] == ("default (not set)" if "jetpack" in name else "config")
    assert t["no_cgroups"] is False  # '#no-cgroups = false' is commented out: the default
    assert t["source"] == "/etc/nvidia-container-runtime/config.toml"
    assert r.facts["runtime"]["nvidia_runtime_mode"] == mode
    assert r.facts["runtime"]["nvidia_runtime_mode_resolved"] == resolved


@pytest.mark.corpus
def test_tegra_toolkit_spec_dir_is_searched_for_cdi_specs(real_inputs, tmp_path):
    d = "/var/snap/docker/current/etc/nvidia-container-runtime/cdi"
    root = host(tmp_path, {"/etc/nvidia-container-runtime/config.toml":
                           real_inputs / "nvidia-runtime/canonical-tegra-docker-snap-config.toml",
                           f"{d}/nvidia.yaml": real_inputs / "cdi/canonical-tegra-jetson-nvidia-ctk-csv-mode.yaml"})
    _, r = collect(root, tmp_path)
    assert r.facts["runtime"]["nvidia_runtime"]["spec_dirs"] == [d]
    [spec] = r.facts["runtime"]["cdi"]["specs"]
    assert spec["source"] == f"{d}/nvidia.yaml" and spec["kind"] == "nvidia.com/gpu" and spec["devices"] == ["0", "all"]
    assert {"device": "0", "path": "/dev/nvidiactl", "hostPath": None, "type": None, "major": None,
            "minor": None} in spec["device_nodes"]
    assert sum(1 for n in spec["device_nodes"] if n["device"] == "0") == 37
    assert {(h["hookName"], h["path"], tuple(h["args"][:3])) for h in spec["hooks"]} == {
        ("createContainer", "/snap/docker/current/usr/bin/nvidia-ctk", ("nvidia-ctk", "hook", "create-symlinks")),
        ("createContainer", "/snap/docker/current/usr/bin/nvidia-ctk", ("nvidia-ctk", "hook", "update-ldcache"))}


@pytest.mark.corpus
def test_oci_hooks_d_files_from_crio_and_podman(real_inputs, tmp_path):
    root = host(tmp_path, {
        "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": real_inputs / "nvidia-runtime/oci-nvidia-hook.json",
        "/etc/containers/oci/hooks.d/nvidia-tools.json":
            real_inputs / "nvidia-runtime/concourse-gpgpu-oci-hooks.d-nvidia-tools.json"})
    _, r = collect(root, tmp_path)
    hooks = {h["source"]: h for h in r.facts["runtime"]["oci_hooks"]}
    assert hooks["/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"] == {
        "source": "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
        "path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"],
        "stages": ["prestart"], "always": True, "nvidia": True, "problems": []}
    t = hooks["/etc/containers/oci/hooks.d/nvidia-tools.json"]
    assert (t["args"], t["always"], t["nvidia"]) == (["prestart"], True, True)
    assert r.problems == []


# -- CDI specs --------------------------------------------------------------------------------------
@pytest.mark.corpus
def test_cdi_specs_good_and_bad(real_inputs, tmp_path):
    cdi = real_inputs / "cdi"
    root = host(tmp_path, {"/etc/cdi/nvidia.yaml": cdi / "salilkadam-k3s-nvidia-ctk-575.64.03.yaml",
                           "/etc/cdi/good-minimal.json": cdi / "cdi-schema-testdata-good-minimal.json",
                           "/etc/cdi/bad-empty.json": cdi / "cdi-schema-testdata-bad-empty.json",
                           "/run/cdi/spec-example.json": cdi / "cdi-schema-testdata-good-spec-example.json",
                           "/run/cdi/bad-explicit-empty.json": cdi / "cdi-schema-testdata-bad-explicit-empty.json",
                           "/etc/cdi/README.txt": "not a spec"})
    (root / "var").mkdir()
    os.symlink("/run", root / "var/run")  # absolute: hostfs resolves it inside the root
    b, r = collect(root, tmp_path)
    specs = {s["source"]: s for s in r.facts["runtime"]["cdi"]["specs"]}
    assert set(specs) == {"/etc/cdi/nvidia.yaml", "/etc/cdi/good-minimal.json", "/etc/cdi/bad-empty.json",
                          "/var/run/cdi/spec-example.json", "/var/run/cdi/bad-explicit-empty.json"}
    nv = specs["/etc/cdi/nvidia.yaml"]
    assert (nv["cdiVersion"], nv["kind"]) == ("0.5.0", "nvidia.com/gpu")
    assert nv["devices"] == ["0", "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e", "all"]
    assert [n["path"] for n in nv["device_nodes"] if n["device"] is None] == [
        "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"]
    assert [n["path"] for n in nv["device_nodes"] if n["device"] == "0"] == [
        "/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128"]
    assert {h["path"] for h in nv["hooks"]} == {"/usr/bin/nvidia-cdi-hook"}
    assert {h["hookName"] for h in nv["hooks"]} == {"createContainer"}
    assert ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=575.64.03"] in [h["args"] for h in nv["hooks"]]
    assert nv["problems"] == []
    ex = specs["/var/run/cdi/spec-example.json"]
    assert (ex["cdiVersion"], ex["kind"], ex["devices"]) == ("0.6.0", "vendor.com/device", ["myDevice"])
    assert {"device": "myDevice", "path": "/dev/card1", "hostPath": "/vendorroot/dev/card1", "type": None,
            "major": None, "minor": None} in ex["device_nodes"]
    assert [(h["hookName"], h["path"]) for h in ex["hooks"]] == [("createContainer", "/bin/vendor-hook"),
                                                                 ("startContainer", "/usr/bin/ldconfig")]
    assert specs["/etc/cdi/good-minimal.json"]["problems"] == []
    problems = {p["artifact"]: p["message"] for p in r.problems}
    assert problems == {
        "runtime/etc/cdi/bad-empty.json": "CDI spec /etc/cdi/bad-empty.json is empty",
        "runtime/var/run/cdi/bad-explicit-empty.json":
            "CDI spec /var/run/cdi/bad-explicit-empty.json is invalid: missing cdiVersion, kind, devices"}
    assert not any(a.source == "/etc/cdi/README.txt" for a in b.artifacts())


@pytest.mark.corpus
def test_every_cdi_input_parses_to_values_or_problems(real_inputs):
    for f in sorted((real_inputs / "cdi").iterdir()):
        s = rc.cdi_spec(f.read_bytes(), f.name)
        assert bool(s["problems"]) == ("-bad-" in f.name), f.name
        if not s["problems"]:
            assert s["cdiVersion"] and s["kind"] and s["devices"] and s["device_nodes"]


def test_missing_cdi_dirs_are_recorded_absent(tmp_path):
    root = host(tmp_path, {"/etc/hostname": "n1\n"})
    b, r = collect(root, tmp_path)
    assert record(b, "/etc/cdi").status.value == "absent"
    assert record(b, "/etc/containerd/config.toml").status.value == "absent"
    assert r.facts["runtime"]["containerd"] is None and r.facts["preconditions"] == {"systemd_cgroup": None}
    assert r.facts["runtime"]["cdi"]["specs"] == [] and r.facts["runtime"]["proc_devices"] is None


# -- synthetic host: containerd v3 with an imports glob, /proc/devices, /dev nodes --------------------
V3_MAIN = """version = 3
imports = ["conf.d/*.toml"]
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
"""
V3_NVIDIA = """version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'nvidia'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
      BinaryName = '/usr/bin/nvidia-container-runtime'
      SystemdCgroup = true
"""
V3_LOOP = """version = 3
imports = ["../config.toml", "/etc/containerd/conf.d/*.toml"]
"""


def synthetic(tmp_path: Path) -> Path:
    root = host(tmp_path, {"/etc/containerd/config.toml": V3_MAIN,
                           "/etc/containerd/conf.d/99-nvidia.toml": V3_NVIDIA,
                           "/etc/containerd/conf.d/10-loop.toml": V3_LOOP,
                           "/etc/containerd/conf.d/notes.txt": "not imported",
                           "/proc/devices": PROC_DEVICES})
    chardev(root, "/dev/nvidia0", 195, 0)
    chardev(root, "/dev/nvidiactl", 195, 255)
    chardev(root, "/dev/nvidia-uvm", 237, 0)
    chardev(root, "/dev/nvidia-caps/nvidia-cap1", 236, 1)
    os.mkfifo(root / "dev/nvidia-fifo")
    (root / "dev/char").mkdir()
    os.symlink("../nvidiactl", root / "dev/char/195:255")
    return root


def test_v3_imports_glob_deep_merged_for_containerd_2(tmp_path):
    root = synthetic(tmp_path)
    b, r = collect(root, tmp_path, {"containerd": "2.0.4-1", "runc": "1.1.5+ds1-1",
                                    "nvidia-container-toolkit": "1.17.8-1"})
    rt = r.facts["runtime"]
    c = rt["containerd"]
    assert c["files"] == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/10-loop.toml",
                          "/etc/containerd/conf.d/99-nvidia.toml"]
    facts = json.loads(b.path(rc.FACTS).read_text())
    assert [f["imported_by"] for f in facts["containerd_files"]] == [None, "/etc/containerd/config.toml",
                                                                     "/etc/containerd/config.toml"]
    assert c["config_version"] == 3 and c["merge"] == "deep"
    assert c["runtimes"]["runc"]["SystemdCgroup"] is True  # kept: containerd 2.x merges plugin sections
    assert c["runtimes"]["nvidia"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert (c["default_runtime"], c["gpu_runtime"], c["nvidia_binary"]) == (
        "nvidia", "nvidia", "/usr/bin/nvidia-container-runtime")
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (True, "default for containerd 2.0.4-1")
    assert r.facts["preconditions"] == {"systemd_cgroup": True}
    assert rt["proc_devices"] == {"nvidia-frontend": 195, "nvidia-caps": 236, "nvidia-uvm": 237}
    assert rt["nvidia_majors"] == [195, 236, 237]
    dev = {d["path"]: d for d in rt["host_devices"]}
    assert set(dev) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps",
                        "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-fifo"}
    assert dev["/dev/nvidiactl"] == {"path": "/dev/nvidiactl", "kind": "c", "major": 195, "minor": 255, "mode": "0666",
                                     "target": None, "dev_char": "/dev/char/195:255", "dev_char_exists": True}
    assert (dev["/dev/nvidia0"]["dev_char"], dev["/dev/nvidia0"]["dev_char_exists"]) == ("/dev/char/195:0", False)
    assert (dev["/dev/nvidia-uvm"]["major"], dev["/dev/nvidia-uvm"]["dev_char_exists"]) == (237, False)
    assert dev["/dev/nvidia-caps/nvidia-cap1"]["major"] == 236
    assert dev["/dev/nvidia-fifo"]["kind"] == "fifo" and "dev_char" not in dev["/dev/nvidia-fifo"]
    assert dev["/dev/nvidia-caps"]["kind"] == "dir"
    assert rt["dev_char"] == ["195:255"]
    assert rt["driver_root"] == "/" and rt["driver_root_devices"] == []
    v = rt["versions"]
    assert v["runc"] == {"version": "1.1.5+ds1-1", "basis": "/var/lib/dpkg/status (runc)"}
    assert v["systemd"] == {"version": "252.39-1~deb12u1", "basis": "/var/lib/dpkg/status"}
    assert v["nvidia-container-toolkit"]["version"] == "1.17.8-1"
    assert b.path("runtime/proc/devices").read_text() == PROC_DEVICES
    assert not any(a.source.endswith("notes.txt") for a in b.artifacts())


def test_v2_import_replaces_the_whole_cri_section_before_containerd_2(tmp_path):
    main = tomllib.loads(V3_MAIN.replace("version = 3", "version = 2").replace(
        "'io.containerd.cri.v1.runtime'", '"io.containerd.grpc.v1.cri"'))
    drop = tomllib.loads(V3_NVIDIA.replace("version = 3", "version = 2").replace(
        "'io.containerd.cri.v1.runtime'", '"io.containerd.grpc.v1.cri"'))
    old = rc.containerd_settings([main, drop], "1.7.24")
    assert old["merge"] == "plugin sections replaced"
    assert set(old["runtimes"]) == {"nvidia"}  # runc's SystemdCgroup = true went with the replaced section
    assert (old["enable_cdi"], old["enable_cdi_basis"]) == (False, "default for containerd 1.7.24")
    new = rc.containerd_settings([main, drop], "2.1.3")
    assert set(new["runtimes"]) == {"runc", "nvidia"} and new["runtimes"]["runc"]["SystemdCgroup"] is True


def test_containerised_driver_root(tmp_path):
    root = host(tmp_path, {"/proc/devices": PROC_DEVICES})
    chardev(root, "/run/nvidia/driver/dev/nvidiactl", 195, 255)
    chardev(root, "/run/nvidia/driver/dev/nvidia0", 195, 0)
    _, r = collect(root, tmp_path)
    rt = r.facts["runtime"]
    assert rt["driver_root"] == "/run/nvidia/driver"
    assert rt["host_devices"] == []
    assert [(d["path"], d["major"], d["minor"]) for d in rt["driver_root_devices"]] == [
        ("/run/nvidia/driver/dev/nvidia0", 195, 0), ("/run/nvidia/driver/dev/nvidiactl", 195, 255)]
    assert rt["dev_char"] is None and rt["driver_root_devices"][0]["dev_char_exists"] is None


def test_proc_devices_old_and_new_names():
    new = "Character devices:\n195 nvidia\n195 nvidiactl\n507 nvidia-uvm\n510 nvidia-nvlink\n511 nvidia-caps\n" \
          "\nBlock devices:\n195 nvidia-not-a-char\n"
    assert rc.nvidia_majors(new) == {"nvidia": 195, "nvidiactl": 195, "nvidia-uvm": 507, "nvidia-nvlink": 510,
                                     "nvidia-caps": 511}
    assert rc.nvidia_majors(PROC_DEVICES) == {"nvidia-frontend": 195, "nvidia-caps": 236, "nvidia-uvm": 237}


# -- a Docker host: dockerd's own containerd config disables CRI (issue 14, "evidence beats defaults") ----
DOCKER_CONTAINERD = '''# installed by containerd.io for Docker
disabled_plugins = ["cri"]
#root = "/var/lib/containerd"
'''


def test_docker_host_cri_disabled_gives_systemd_cgroup_unknown_with_basis(tmp_path):
    root = host(tmp_path, {"/etc/containerd/config.toml": DOCKER_CONTAINERD})
    _, r = collect(root, tmp_path, {"containerd": "1.7.24-1"})
    rt = r.facts["runtime"]
    assert rt["containerd"]["cri_disabled"] is True
    assert rt["systemd_cgroup"] is None  # not False: no CRI container takes its driver from this file
    assert r.facts["preconditions"] == {"systemd_cgroup": None}
    basis = rt["systemd_cgroup_basis"]
    assert basis.startswith("unknown: disabled_plugins lists cri")
    assert "dockerd" in basis and basis.endswith("read from /etc/containerd/config.toml")


def test_cri_disabled_by_its_full_id_is_unknown_and_defaults_say_they_are_defaults():
    none = rc.containerd_settings([{"version": 2}])  # issue 14: no CRI table is unknown, never False
    assert (none["systemd_cgroup"], none["enable_cdi"], none["cri_table"]) == (None, None, False)
    assert none["systemd_cgroup_basis"].startswith("unknown: the config has no CRI plugin table")
    full = rc.containerd_settings([{"version": 2, "disabled_plugins": ["io.containerd.grpc.v1.cri"], "plugins": {
        "io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"runc": {"options": {"SystemdCgroup": True}}}}}}}])
    assert full["systemd_cgroup"] is None and full["cri_disabled"] is True
    default = rc.containerd_settings([{"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"enable_cdi": True}}}])
    assert (default["systemd_cgroup"], default["systemd_cgroup_basis"]) == (False, "default (runtime runc)")


# -- the engines' versions beside containerd: asked on a live node, else dpkg's -------------------------
def test_engine_versions_are_read_from_their_own_answers_and_else_from_dpkg(tmp_path):
    """``podman --version`` of the real Podman here (scripts/lab-deps.sh installs it; its answer read live); the
    others' wordings as their binaries print them (``dockerd --version`` of Docker 20.10.17 and ``crio --version`` of
    CRI-O 1.19.6, quoted in public bug reports and write-ups); on a mounted root nothing is run and dpkg's
    versions answer, an epoch and all (docker-ce's ``5:``), with the package named as the basis."""
    import re
    import subprocess
    real = subprocess.run(["podman", "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    said = {"podman": real, "docker": "Docker version 20.10.17, build a89b842\n",
            "crio": "crio version 1.19.6\nVersion:       1.19.6\nGitCommit:     c12bb210e9888cf6160134c7e636ee952c45c05a\n"}
    got = {k: re.search(v.pattern, said[k]).group(1) for k, v in rc.versioned().items() if k in said}
    assert got == {"docker": "20.10.17", "crio": "1.19.6", "podman": real.split()[-1]}
    assert real.startswith("podman version 4.")
    root = host(tmp_path, {})
    b, r = collect(root, tmp_path, {"docker-ce": "5:24.0.7-1~debian.12~bookworm", "cri-o": "1.28.1-1.1"})
    v = r.facts["runtime"]["versions"]
    assert v["docker"] == {"version": "5:24.0.7-1~debian.12~bookworm", "basis": "/var/lib/dpkg/status (docker-ce)"}
    assert v["crio"] == {"version": "1.28.1-1.1", "basis": "/var/lib/dpkg/status (cri-o)"}
    assert v["podman"] == {"version": None, "basis": None}
    assert not [a for a in b.artifacts() if a.method == "command"]  # a mounted root: nothing was run


def test_enable_cdi_on_a_containerd_without_cdi_and_k3s_own_containerd(tmp_path):
    """``enable_cdi = true`` in the CRI table of a containerd 1.6 (no CDI before 1.7: the key is ignored) is not
    CDI on; a k3s node's config is read by k3s's embedded containerd, so a Debian containerd package beside it
    (another binary) names no default: the config version does, and says the version is unknown."""
    cri = '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
    _, r = collect(host(tmp_path, {"/etc/containerd/config.toml": "version = 2\n" + cri}), tmp_path,
                   {"containerd": "1.6.20~ds1-1+b1"})
    c = r.facts["runtime"]["containerd"]
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (
        False, "config sets it, but containerd 1.6.20~ds1-1+b1 has no CDI support (1.7+)")
    k3s = tmp_path / "k3s"
    k3s.mkdir()
    _, r = collect(host(k3s, {"/var/lib/rancher/k3s/agent/etc/containerd/config.toml": "version = 2\n"
                              '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.6"\n'}), k3s,
                   {"containerd": "1.6.20~ds1-1+b1"})
    c = r.facts["runtime"]["containerd"]
    assert c["files"] == ["/var/lib/rancher/k3s/agent/etc/containerd/config.toml"]
    assert (c["enable_cdi"], c["enable_cdi_basis"]) == (
        False, "default for config version 2 (containerd 1.7; 1.6 has no CDI; containerd version unknown)")


def test_dpkg_versions_count_a_package_whose_triggers_are_pending_and_never_config_files(tmp_path):
    """dpkg(1)'s package states: ``installed``, ``triggers-pending`` and ``triggers-awaited`` are configured
    packages (their version is the one on disk); ``config-files`` and ``not-installed`` are not."""
    from collectors import node
    status = tmp_path / "status"
    status.write_text("".join(
        f"Package: {p}\nStatus: {s}\nVersion: {v}\nArchitecture: amd64\n\n" for p, s, v in (
            ("docker-ce", "install ok triggers-pending", "5:27.0.3-1~debian.12~bookworm"),
            ("containerd.io", "install ok triggers-awaited", "1.7.19-1"), ("runc", "deinstall ok config-files", "1.1.5"),
            ("podman", "install ok installed", "4.3.1+ds1-8+deb12u1"), ("cri-o", "purge ok not-installed", "1.28.1"))))
    assert node.parse_dpkg_status(status) == {"docker-ce": "5:27.0.3-1~debian.12~bookworm", "containerd.io": "1.7.19-1",
                                              "podman": "4.3.1+ds1-8+deb12u1"}


def test_a_package_whose_upgrade_did_not_finish_is_said_in_the_gate_and_gives_no_version(tmp_path):
    """dpkg(1)'s unfinished states (``half-configured``, ``unpacked``, ``half-installed``): the files on disk
    may be the old version's or the new one's, so no version is taken from the stanza; the gate says what dpkg
    lists and how the upgrade is finished. ``config-files`` (removed) is no unfinished package."""
    from collectors import node
    from forensics.versions import gate

    def stanza(pkg, status, version):
        return (f"Package: {pkg}\nStatus: {status}\nPriority: optional\nSection: admin\nInstalled-Size: 1024\n"
                f"Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>\nArchitecture: amd64\n"
                f"Version: {version}\nDescription: {pkg}\n a long description line\n\n")
    status = (stanza("containerd", "install ok half-configured", "1.7.28-0ubuntu1~24.04.1")
              + stanza("docker-ce", "install ok installed", "5:27.0.3-1~ubuntu.24.04~noble")
              + stanza("runc", "install ok unpacked", "1.1.12-0ubuntu3.1")
              + stanza("cri-o", "deinstall ok config-files", "1.28.1-1.1"))
    root = host(tmp_path, {"/var/lib/dpkg/status": status})
    out = tmp_path / "bundle"
    w = BundleWriter(out)
    ctx = CollectContext(root=root, writer=w, node=HostFacts())
    node.acquire(ctx)
    rc.acquire(ctx)
    w.finish()
    v = rc.read(Bundle.open(out), NodeFacts()).facts["runtime"]["versions"]
    assert v["containerd"] == {"version": None, "basis": None, "unfinished": {
        "package": "containerd", "version": "1.7.28-0ubuntu1~24.04.1", "state": "half-configured"}}
    assert v["runc"]["unfinished"] == {"package": "runc", "version": "1.1.12-0ubuntu3.1", "state": "unpacked"}
    assert v["docker"] == {"version": "5:27.0.3-1~ubuntu.24.04~noble", "basis": "/var/lib/dpkg/status (docker-ce)"}
    assert v["crio"] == {"version": None, "basis": None}
    assert gate("containerd", "1.7", v["containerd"]) == (
        "containerd >= 1.7 (this node's version was not seen: dpkg lists containerd 1.7.28-0ubuntu1~24.04.1 as "
        "half-configured, an install or upgrade that did not finish; `dpkg --configure -a` finishes it)")
