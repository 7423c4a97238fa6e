"""collectors.kubelet: flags, KubeletConfiguration, CPU/memory manager checkpoints and the device-plugin
checkpoint, from real files (tests/fixtures/kubelet/SOURCES.md) laid out in a temporary root, and from a
real process named kubelet on this machine. No mocks."""
from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from collectors import kubelet
from collectors.kubelet import allocresp, checkpoints, config as kc
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import CollectContext

FIX = Path(__file__).resolve().parent / "fixtures" / "kubelet"
POD_A = "9388acc6-a396-4f03-a353-ce153da46aaf"   # 16cpu-numa-batch-pod, GPU on NUMA 0
POD_B = "f21fe02b-e6e2-4d04-9a4a-9e57367fa324"   # GPU on NUMA 1, no /var/log/pods directory here
KUBECONFIG_SECRET = "client-key-data: c2VjcmV0LWtleS1ub3QtdG8tYmUtY29waWVk"


def put(root: Path, path: str, src: str | bytes, mode: int | None = None) -> Path:
    """Write a fixture file (by name) or text at ``path`` under ``root``."""
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(src, str) and len(src) < 80 and "\n" not in src and (FIX / src).is_file():
        shutil.copyfile(FIX / src, p)
    else:
        p.write_bytes(src.encode() if isinstance(src, str) else src)
    if mode is not None:
        os.chmod(p, mode)
    return p


def collect(root: Path, out: Path, redact: bool = True) -> Bundle:
    w = BundleWriter(out)
    kubelet.acquire(CollectContext(root=root, writer=w, redact=redact))
    w.finish()
    return Bundle.open(out)


def fact(b: Bundle) -> dict:
    r = kubelet.read(b, NodeFacts())
    assert r.problems == []
    return r.facts["kubelet"]


def kubeadm_root(root: Path, extra_args: str = "--topology-manager-policy=single-numa-node "
                                                "--feature-gates=CPUManager=false,InPlacePodVerticalScaling=true") -> Path:
    put(root, "/lib/systemd/system/kubelet.service", "kubelet.service")
    put(root, "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", "10-kubeadm.conf")
    put(root, "/var/lib/kubelet/kubeadm-flags.env", "kubeadm-flags.env")
    put(root, "/etc/default/kubelet", f"KUBELET_EXTRA_ARGS={extra_args}\n")
    put(root, "/var/lib/kubelet/config.yaml", "kubeadm-1614-config.yaml")
    put(root, "/var/lib/kubelet/cpu_manager_state", "cpu_manager_state.numa-note")
    put(root, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "kubelet_internal_checkpoint.numa-note")
    put(root, "/etc/kubernetes/kubelet.conf", f"apiVersion: v1\nkind: Config\nusers:\n- user:\n    {KUBECONFIG_SECRET}\n")
    (root / f"var/log/pods/default_16cpu-numa-batch-pod_{POD_A}/app").mkdir(parents=True)
    for uid in (POD_A, POD_B):
        (root / f"var/lib/kubelet/pods/{uid}").mkdir(parents=True)
    return root


def test_kubeadm_node_flags_from_its_unit_config_from_its_file(tmp_path):
    b = collect(kubeadm_root(tmp_path / "root"), tmp_path / "b")
    k = fact(b)
    c = k["config"]
    assert c["flags_source"].startswith("systemd unit (/lib/systemd/system/kubelet.service, "
                                        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf")
    assert c["source"] == "/var/lib/kubelet/config.yaml"   # from KUBELET_CONFIG_ARGS=--config=...
    assert c["cpuManagerPolicy"] == {"value": "static", "source": "/var/lib/kubelet/config.yaml cpuManagerPolicy"}
    assert c["topologyManagerPolicy"]["value"] == "single-numa-node"
    assert "--topology-manager-policy (a flag overrides the file)" in c["topologyManagerPolicy"]["source"]
    assert c["memoryManagerPolicy"] == {"value": None, "source": "not set (kubelet default: none)"}
    assert c["cpuManagerReconcilePeriod"]["value"] is None
    # a gate on the command line is overridden by the file's; one only on the command line stands
    assert c["featureGates"]["value"] == {"CPUManager": True, "HugePages": True, "InPlacePodVerticalScaling": True}
    assert c["InPlacePodVerticalScaling"]["value"] is True and "--feature-gates" in c["InPlacePodVerticalScaling"]["source"]
    assert c["root_dir"]["value"] == "/var/lib/kubelet"
    cpu = k["cpu_manager_state"]
    assert (cpu["version"], cpu["policy"], cpu["default_cpuset"], cpu["checksum"]) == ("v2", "static", "0,20-27",
                                                                                      4055801500)
    assert cpu["entries"] == {POD_A: {"app": "1-13,17-19"}, POD_B: {"app": "14-16"}}
    dev = k["device_checkpoint"]
    assert dev["format"] == "numa" and dev["checksum"] == 4148283274
    a = next(e for e in dev["entries"] if e["pod_uid"] == POD_A)
    assert (a["namespace"], a["pod"], a["container"], a["resource"]) == ("default", "16cpu-numa-batch-pod", "app",
                                                                         "nvidia.com/gpu")
    assert a["device_ids"] == ["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"] and a["numa"] == {"0": a["device_ids"]}
    assert a["device_specs_passed"] is True and a["cdi_devices_passed"] is False and a["alloc_error"] is None
    bb = next(e for e in dev["entries"] if e["pod_uid"] == POD_B)
    assert (bb["namespace"], bb["pod"], bb["numa"]) == (None, None, {"1": ["GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]})
    assert len(dev["registered"]["nvidia.com/gpu"]) == 3
    assert k["pods"][POD_B] == {"namespace": None, "pod": None, "log_dir": False, "pod_dir": True}
    assert k["memory_manager_state"] is None
    assert k["status"]["/var/lib/kubelet/memory_manager_state"] == "absent"
    assert k["status"]["/var/lib/kubelet/config.yaml"] == "collected"
    # the kubeconfig is never read, and the raw AllocResp never stored
    raw = b"".join(p.read_bytes() for p in b.root.rglob("*") if p.is_file())
    assert b"c2VjcmV0LWtleS1ub3QtdG8tYmUtY29waWVk" not in raw and b"CkIKFk5WSURJQV9WSVNJQkxF" not in raw
    stored = json.loads(b.path("kubelet/kubelet_internal_checkpoint.json").read_text())
    decoded = stored["Data"]["PodDeviceEntries"][1]["AllocResp"]["decoded"]
    assert decoded["envs"] == {"NVIDIA_VISIBLE_DEVICES": "GPU-77a702db-e37f-3a74-d46d-c5713f66058c"}  # allowlisted
    assert [d["host_path"] for d in decoded["devices"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                                            "/dev/nvidia-modeset", "/dev/nvidia0"]
    assert {d["permissions"] for d in decoded["devices"]} == {"rw"}


def test_flags_parse_as_pflag_and_units_expand_as_systemd():
    f = kc.flags(["/usr/bin/kubelet", "--config", "/a.yaml", "-cpu-manager-policy=static", "--feature-gates=A=true",
                  "--feature-gates", "B=false", "--root-dir=/data/kubelet", "--v=2"])
    assert f == {"config": "/a.yaml", "cpu-manager-policy": "static", "feature-gates": "A=true,B=false",
                 "root-dir": "/data/kubelet"}
    assert kc.feature_gates(f["feature-gates"]) == {"A": True, "B": False}
    env, files, exec_start = kc.unit_settings([(FIX / "kubelet.service").read_text(),
                                               (FIX / "10-kubeadm.conf").read_text()])
    assert files == ["/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet"]
    env.update(kc.env_file((FIX / "kubeadm-flags.env").read_text()))
    assert kc.expand(exec_start, env) == [
        "/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
        "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
        "--pod-infra-container-image=registry.k8s.io/pause:3.10"]


def test_eks_config_at_its_known_path_when_no_command_line_is_found(tmp_path):
    root = tmp_path / "root"
    put(root, "/etc/kubernetes/kubelet/kubelet-config.json", "eks-al2-kubelet-config.json")
    c = fact(collect(root, tmp_path / "b"))["config"]
    assert c["source"] == "/etc/kubernetes/kubelet/kubelet-config.json" and c["flags_source"] is None
    assert c["config_file_basis"].startswith("known path of EKS (Amazon Linux 2)")
    # the file does not set it, and the command line was not found: None, and the basis says both
    assert c["cpuManagerPolicy"]["value"] is None
    assert c["cpuManagerPolicy"]["source"].startswith("not set in /etc/kubernetes/kubelet/kubelet-config.json")
    assert "a flag would override the file" in c["cpuManagerPolicy"]["source"]
    assert c["featureGates"]["value"] == {"NodeSwap": False, "RotateKubeletServerCertificate": True}


def test_nothing_found_is_unknown_not_unset(tmp_path):
    k = fact(collect(tmp_path / "empty", tmp_path / "b"))
    assert k["config"]["cpuManagerPolicy"] == {
        "value": None, "source": "unknown: no kubelet command line, unit, k3s config or config file was found"}
    assert k["cpu_manager_state"] is None and k["device_checkpoint"] is None
    assert k["status"]["/proc"] == "absent" and k["status"]["/var/lib/kubelet/cpu_manager_state"] == "absent"


def test_k3s_kubelet_arg(tmp_path):
    root = tmp_path / "root"
    put(root, "/etc/rancher/k3s/config.yaml", "k3s-config.yaml")
    c = fact(collect(root, tmp_path / "b"))["config"]
    assert c["flags_source"] == "/etc/rancher/k3s/config.yaml kubelet-arg"
    assert c["cpuManagerPolicy"]["value"] == "static"
    assert c["cpuManagerReconcilePeriod"]["value"] == "5s"
    assert kc.k3s_args([{"kubelet-arg": ["a=1"]}, {"kubelet-arg+": "b=2"}, {"x": 1}]) == ["--a=1", "--b=2"]


def _script(d: Path) -> Path:
    """An executable named kubelet (a python script: its comm is ``kubelet``, its argv what we pass)."""
    p = d / "kubelet"
    p.write_text("#!/usr/bin/python3\nimport time\ntime.sleep(60)\n")  # (the system's: nobody can run it)
    p.chmod(0o755)
    return p


def test_only_a_root_process_named_kubelet_steers_what_is_read(tmp_path):
    """Issue 27's hole for runc: an unprivileged process named like the daemon must not choose the files."""
    d = Path(tempfile.mkdtemp(prefix="gf-kubelet-"))
    try:
        d.chmod(0o755)
        exe = _script(d)
        state = d / "state"
        put(state, "/cpu_manager_state", "cpu_manager_state.numa-note")
        put(d, "/evil/cpu_manager_state", '{"policyName":"static","defaultCpuSet":"0","entries":{"x":{"y":"1"}}}')
        put(d, "/cfg.yaml", "kubeadm-1614-config.yaml")
        evil = subprocess.Popen([str(exe), f"--root-dir={d}/evil", "--cpu-manager-policy=none"], user=65534)
        good = subprocess.Popen([str(exe), f"--config={d}/cfg.yaml", f"--root-dir={state}",
                                 "--topology-manager-policy", "restricted"])
        try:
            time.sleep(0.5)
            b = collect(Path("/"), tmp_path / "b")
        finally:
            for p in (evil, good):
                p.kill()
                p.wait()
        k = fact(b)
        c = k["config"]
        assert c["flags_source"] == f"/proc/{good.pid}/cmdline"
        assert c["cpuManagerPolicy"] == {"value": "static", "source": f"{d}/cfg.yaml cpuManagerPolicy"}
        assert c["topologyManagerPolicy"]["value"] == "restricted"
        assert k["cpu_manager_state"]["entries"] == {POD_A: {"app": "1-13,17-19"}, POD_B: {"app": "14-16"}}
        ignored = [a for a in b.artifacts() if a.source == f"/proc/{evil.pid}/cmdline"]
        assert len(ignored) == 1 and "not root" in ignored[0].message and "65534" in ignored[0].message
        assert json.loads(b.path("kubelet/process.json").read_text())["pid"] == good.pid
    finally:
        shutil.rmtree(d)


def test_device_checkpoint_formats_of_three_kubelet_generations(tmp_path):
    old = checkpoints.device_checkpoint(json.loads((FIX / "kubelet_internal_checkpoint.k8s-75880").read_text()))
    assert old["format"] == "list" and old["checksum"] == 3364951114
    assert [(e["pod_uid"], e["device_ids"], e["numa"]) for e in old["entries"]] == [
        ("9a422c32-4fc2-11e9-bb64-505dac4c3a38", ["GPU-ad63c684-5593-111a-cbb1-c1451ebcd0aa"], None),
        ("368e63c4-2d97-11e9-8954-505dac4a7d28", ["GPU-72cbf723-9f70-7d49-a6bb-626fcb3f8c30"], None)]
    root = tmp_path / "root"
    put(root, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "kubelet_internal_checkpoint.kind-tegra")
    dev = fact(collect(root, tmp_path / "b"))["device_checkpoint"]
    e = dev["entries"][0]
    assert (e["numa"], e["device_specs_passed"], e["cdi_devices_passed"]) == ({"-1": ["tegra"]}, False, False)
    old_root = tmp_path / "old"
    put(old_root, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "kubelet_internal_checkpoint.k8s-75880")
    dev = fact(collect(old_root, tmp_path / "b2"))["device_checkpoint"]
    assert [e["device_specs_passed"] for e in dev["entries"]] == [False, False]   # envvar only: the hook's way


# kubernetes' own test vectors (pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go @ 0411cc70); Go's
# decoder matches "defaultCPUSet" to the tag defaultCpuSet, and so does the reader
V1 = '{"policyName": "static", "defaultCPUSet": "7-9", "entries": {"containerID1": "4-6", "containerID2": "1-3"}, ' \
     '"checksum": 2026311253}'
V3 = ('{"policyName": "static", "defaultCPUSet": "1-2", "entries": {"pod1": {"container1": "5-6", "container2": "3-4"}},'
      ' "podEntries": {"pod2": {"cpuSet":"7-9"}}, "checksum": 766259872}')
V4 = ('{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234, "data": "{\\"policyName\\":\\"static\\",'
      '\\"defaultCPUSet\\":\\"7-9\\",\\"entries\\":{\\"pod\\":{\\"container1\\":\\"4-6\\",\\"container2\\":\\"1-3\\"}}}",'
      ' "dataChecksum": 1420829534}')


def test_cpu_manager_state_v1_to_v4():
    v1 = checkpoints.cpu_manager_state(json.loads(V1))
    assert (v1["version"], v1["default_cpuset"], v1["entries"]) == ("v1", "7-9", {})
    assert v1["container_id_entries"] == {"containerID1": "4-6", "containerID2": "1-3"}
    v2 = checkpoints.cpu_manager_state(json.loads((FIX / "cpu_manager_state.numa-note").read_text()))
    assert v2["version"] == "v2" and v2["entries"][POD_B] == {"app": "14-16"}
    v3 = checkpoints.cpu_manager_state(json.loads(V3))
    assert (v3["version"], v3["entries"], v3["pod_entries"]) == (
        "v3", {"pod1": {"container1": "5-6", "container2": "3-4"}}, {"pod2": "7-9"})
    v4 = checkpoints.cpu_manager_state(json.loads(V4))   # the legacy fields are deliberately wrong: data wins
    assert (v4["version"], v4["policy"], v4["default_cpuset"], v4["checksum"]) == ("v4", "static", "7-9", 1420829534)
    assert v4["entries"] == {"pod": {"container1": "4-6", "container2": "1-3"}}
    for junk in (None, [], {"entries": "x", "podEntries": 3, "data": "{"}, {"entries": {"a": [1]}}):
        checkpoints.cpu_manager_state(junk)   # raises nothing


def test_memory_manager_state_shape():
    doc = {"policyName": "Static", "machineState": {"0": {"numberOfAssignments": 1, "memoryMap": {}, "cells": [0]},
                                                    "1": {"numberOfAssignments": 0, "memoryMap": {}, "cells": [1]}},
           "entries": {"pod1": {"c1": [{"numaAffinity": [0], "type": "memory", "size": 1073741824}]}},
           "checksum": 1}  # the struct tags of pkg/kubelet/cm/memorymanager/state/state.go
    m = checkpoints.memory_manager_state(doc)
    assert m == {"policy": "Static", "numa_nodes": [0, 1], "checksum": 1,
                 "entries": {"pod1": {"c1": [{"numa_affinity": [0], "type": "memory", "size": 1073741824}]}}}


def _ld(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2, len(payload)]) + payload


def test_alloc_resp_wire_format_cdi_and_secrets(tmp_path):
    # CDI: the 77 bytes a public write-up printed from a cdi-cri plugin's checkpoint (field 5, wire type 2)
    cdi = _ld(5, _ld(1, b"k8s.device-plugin.nvidia.com/gpu=GPU-472e819b-4b07-4fd5-ce17-9f1d2b6c17c6"))
    assert cdi[:4].hex() == "2a4b0a49" and len(cdi) == 77
    d = allocresp.decode(base64.b64encode(cdi).decode())
    assert d["cdi_devices"] == ["k8s.device-plugin.nvidia.com/gpu=GPU-472e819b-4b07-4fd5-ce17-9f1d2b6c17c6"]
    secret = _ld(1, _ld(1, b"HF_TOKEN") + _ld(2, b"hf_planted_9c1e")) + _ld(4, _ld(1, b"x/auth") + _ld(2, b"tok-77"))
    doc = {"Data": {"PodDeviceEntries": [
        {"PodUID": "u1", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-1"]},
         "AllocResp": base64.b64encode(secret).decode()},
        {"PodUID": "u2", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-2"]},
         "allocresp": "!!not base64 Bearer tok-planted-0d"},
        {"PodUID": "u3", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-3"]},
         "AllocResp": base64.b64encode(cdi).decode()}]}, "Checksum": 1}
    root = tmp_path / "root"
    put(root, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", json.dumps(doc))
    b = collect(root, tmp_path / "b")
    raw = b.path("kubelet/kubelet_internal_checkpoint.json").read_bytes()
    for planted in (b"hf_planted_9c1e", b"tok-77", b"tok-planted-0d", base64.b64encode(secret)):
        assert planted not in raw
    entries = fact(b)["device_checkpoint"]["entries"]
    assert [(e["pod_uid"], e["device_specs_passed"], e["cdi_devices_passed"]) for e in entries] == [
        ("u1", False, False), ("u2", None, None), ("u3", False, True)]
    assert entries[1]["alloc_error"].startswith("not base64")


def test_alloc_resp_reader_survives_fuzzing():
    real = base64.b64decode(json.loads((FIX / "kubelet_internal_checkpoint.numa-note").read_text())
                            ["Data"]["PodDeviceEntries"][0]["AllocResp"])
    rng = random.Random(26)
    cases = [bytes(rng.randrange(256) for _ in range(rng.randrange(64))) for _ in range(3000)]
    for _ in range(3000):  # the real message with a byte changed, cut, or both
        b = bytearray(real)
        b[rng.randrange(len(b))] = rng.randrange(256)
        cases.append(bytes(b[:rng.randrange(len(b) + 1)]))
    cases += [b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x0b", b"\x00", b"\x0a\x80", b"\x80" * 20]
    decoded = 0
    for c in cases:
        try:
            allocresp.decode(base64.b64encode(c).decode())
            decoded += 1
        except allocresp.WireError:
            pass
    assert 0 < decoded < len(cases)
    with pytest.raises(allocresp.WireError):
        allocresp.decode("A" * (allocresp.MAX_BYTES * 2))


def test_hostile_checkpoint_files_are_errors_not_tracebacks(tmp_path):
    root = tmp_path / "root"
    put(root, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "{" * 100000)
    put(root, "/var/lib/kubelet/cpu_manager_state", b"\xff\xfe not json")
    put(root, "/var/lib/kubelet/config.yaml", "a: [\n")
    put(root, "/etc/rancher/k3s/config.yaml", "kubelet-arg: {a: 1}\n")
    b = collect(root, tmp_path / "b")
    r = kubelet.read(b, NodeFacts())
    k = r.facts["kubelet"]
    assert k["device_checkpoint"] is None and k["cpu_manager_state"] is None
    assert k["status"]["/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"].startswith("error (not JSON")
    assert {p["artifact"] for p in r.problems} == {"kubelet/cpu_manager_state", "kubelet/files/var/lib/kubelet/config.yaml"}
    assert k["config"]["cpuManagerPolicy"]["source"].startswith("unknown: /var/lib/kubelet/config.yaml")


def test_a_checkpoint_root_cannot_read_is_unreadable_not_absent(tmp_path):
    from privdrop import run_as_nobody
    base = Path(tempfile.mkdtemp(prefix="gf-kubelet-"))
    try:
        for p in (base,):
            p.chmod(0o755)
        root = base / "root"
        put(root, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "kubelet_internal_checkpoint.kind-tegra",
            mode=0o600)
        for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            d.chmod(0o755)
        out = base / "out"
        out.mkdir()
        out.chmod(0o777)

        def child():
            b = collect(root, out / "b")
            return fact(b)["status"]
        status = run_as_nobody(child)
        assert status["/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"] == "unreadable (Permission denied)"
    finally:
        shutil.rmtree(base)
