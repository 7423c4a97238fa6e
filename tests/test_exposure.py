"""forensics.findings.exposure: container records (the shape collectors/containers/ writes) judged against a node
whose runtime facts come from collectors.runtime_config run over a host root built in tmp_path.
The cases read like the incidents in docs/sources.md "Cases" (C01, C05, C07, C08, C09, C14)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from collectors import runtime_config as rc
from collectors.containers.parse import DEVICE_PLUGIN_DIR
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext, HostFacts
from forensics.events import NodeFacts
from forensics.findings.device_plugin import device_plugin_settings
from forensics.findings.exposure import assess

PROC_DEVICES = "Character devices:\n  1 mem\n136 pts\n195 nvidia\n226 drm\n508 nvidia-uvm\n511 nvidia-caps\n\n" \
               "Block devices:\n  8 sd\n"
CONTAINERD = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = {sc}
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
      BinaryName = "/usr/bin/nvidia-container-runtime"
      SystemdCgroup = {sc}
"""
TOOLKIT = '[nvidia-container-runtime]\nmode = "{mode}"\n'
#: containerd's default rules for a Kubernetes container (C05), GPU-free
BASE_RULES = [{"allow": False, "type": None, "major": None, "minor": None, "access": "rwm"}] + [
    {"allow": True, "type": "c", "major": M, "minor": m, "access": "rwm"}
    for M, m in ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2), (10, 200))]
#: systemd's transient drop-in for a container with no GPU in its spec (C08, "only the base set")
BASE_DROPIN = ["/dev/char/1:3 rwm", "/dev/char/1:5 rwm", "/dev/char/1:7 rwm", "/dev/char/1:8 rwm",
               "/dev/char/1:9 rwm", "/dev/char/5:0 rwm", "/dev/char/5:1 rwm", "/dev/char/5:2 rwm",
               "/dev/char/10:200 rwm", "char-136 rwm", "char-* m", "block-* m"]
GPU = [("/dev/nvidiactl", 195, 255), ("/dev/nvidia0", 195, 0), ("/dev/nvidia-uvm", 508, 0)]
LEGACY_HOOK = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["/usr/bin/nvidia-container-runtime-hook", "prestart"]}
CDI_HOOK = {"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"]}


def node(tmp_path: Path, *, systemd_cgroup=True, mode="auto", versions=None, links=True, containerised=False,
         cdi: str | None = None) -> dict:
    """Build a host root, run the runtime_config collector over it, and return ``facts["runtime"]``."""
    root = tmp_path / "host"
    files = {"/etc/containerd/config.toml": CONTAINERD.format(sc=str(systemd_cgroup).lower()),
             "/etc/nvidia-container-runtime/config.toml": TOOLKIT.format(mode=mode), "/proc/devices": PROC_DEVICES}
    if cdi:
        files["/etc/cdi/nvidia.yaml"] = cdi
    for path, text in files.items():
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(text)
    dev = "run/nvidia/driver/dev" if containerised else "dev"
    for path, M, m in GPU:
        p = root / dev / os.path.basename(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(M, m))
    (root / "dev/char").mkdir(parents=True)
    if links:
        for path, M, m in GPU:
            os.symlink(f"..{path[4:]}", root / f"dev/char/{M}:{m}")
    w = BundleWriter(tmp_path / "bundle")
    pv = {"nvidia-container-toolkit": "1.17.8-1", "runc": "1.1.12+ds1-1", **(versions or {})}
    rc.acquire(CollectContext(root=root, writer=w, node=HostFacts(package_versions=pv, systemd_version="252.39-1")))
    w.finish()
    return rc.read(Bundle.open(tmp_path / "bundle"), NodeFacts()).facts["runtime"]


def container(cid, *, pod, hooks=None, spec_gpu=False, env=None, annotations=None, driver="systemd", drop_in=None,
              rules=None, inside=True, probe=None, image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", name="cuda"):
    """A container record in collectors/containers/'s shape."""
    devs = [{"path": p, "type": "c", "major": M, "minor": m} for p, M, m in GPU] if spec_gpu else []
    res = BASE_RULES + ([{"allow": True, "type": "c", "major": M, "minor": m, "access": "rwm"} for _, M, m in GPU]
                        if spec_gpu else [])
    return {"id": cid, "namespace": "k8s.io", "pod": pod, "pod_namespace": "ml", "container_name": name,
            "created": "2025-03-14T09:00:00Z", "pid": 4242, "image": image,
            "hooks": {"prestart": [], "createRuntime": [], "createContainer": [], "startContainer": [],
                      "poststart": [], "poststop": [], **(hooks or {})},
            "linux_devices": devs, "resources_devices": res,
            "env": {"NVIDIA_VISIBLE_DEVICES": "GPU-8d0b4e66-1b7a-4b9f-a1c3-4f0d3c1e2a77", **(env or {})},
            "annotations": annotations or {"io.kubernetes.cri.sandbox-name": pod},
            "cgroup": {"version": 1 if rules is not None else 2, "path": f"/kubepods.slice/cri-containerd-{cid}.scope",
                       "driver": driver, "rules": rules,
                       "systemd_drop_in": None if drop_in is None else {"policy": "strict", "allow": drop_in},
                       "bpf": None},
            "dev_entries": [{"path": p, "kind": "c", "major": M, "minor": m, "mode": "0666"} for p, M, m in GPU]
            if inside else [],
            "probe": probe if probe is not None else {p: "ok" for p, _, _ in GPU}}


def plugin(env, socket_mount=True):
    """The device plugin's record; ``socket_mount``: its spec mounts /var/lib/kubelet/device-plugins, as a
    real plugin's does (``...``: a record from a version without that field)."""
    c = container("dp1", pod="nvidia-device-plugin-daemonset-x7k2p", hooks={"prestart": [LEGACY_HOOK]},
                  image="nvcr.io/nvidia/k8s-device-plugin:v0.15.0", name="nvidia-device-plugin-ctr",
                  env={"NVIDIA_VISIBLE_DEVICES": "all", **env}, drop_in=BASE_DROPIN)
    c["pod_namespace"] = "kube-system"
    return c if socket_mount is ... else {**c, "device_plugin_socket_mount": socket_mount}


def kept(name: str) -> bool:
    """An env allowlist that keeps the device plugin's settings (NVIDIA_*, CUDA_* and the plugin's own)."""
    return name.startswith(("NVIDIA_", "CUDA_")) or name in ("DEVICE_LIST_STRATEGY", "PASS_DEVICE_SPECS",
                                                             "DEVICE_ID_STRATEGY", "CDI_ANNOTATION_PREFIX")


def changes(exp):
    return [r["change"] for r in exp["remedies"]]


def test_legacy_hook_under_systemd_cgroup_is_at_risk_with_cdi_and_pass_device_specs_remedies(tmp_path):
    rt = node(tmp_path)
    assert (rt["nvidia_runtime_mode"], rt["nvidia_runtime_mode_resolved"]) == ("auto", "legacy")
    gfd = container("gfd1", pod="gpu-feature-discovery-abcde", image="nvcr.io/nvidia/k8s-device-plugin:v0.15.0",
                    name="gpu-feature-discovery", env={"NVIDIA_VISIBLE_DEVICES": "all", "DEVICE_LIST_STRATEGY": "volume-mounts"},
                    hooks={"prestart": [LEGACY_HOOK]}, inside=False, probe={})
    cs = [container("a1", pod="trainer-0", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN),
          plugin({"DEVICE_LIST_STRATEGY": "envvar", "PASS_DEVICE_SPECS": "false"}), gfd]
    dp = device_plugin_settings(cs, kept)
    assert (dp["id"], dp["device_list_strategy"], dp["pass_device_specs"], dp["driver_root"]) == (
        "dp1", ["envvar"], False, "/")
    exp = assess(rt, cs, dp)
    a = exp["containers"][0]
    assert (a["gpu_injection"], a["at_risk"], a["broken"], a["probe"]) == ("hook", True, False, "ok")
    assert a["not_reapplied"] == ["/dev/nvidiactl (195:255)", "/dev/nvidia0 (195:0)", "/dev/nvidia-uvm (508:0)"]
    assert "nvidia-container-runtime-hook prestart hook, outside the OCI spec" in a["reason"]
    assert "not in systemd's transient DeviceAllow drop-in" in a["reason"]
    assert (exp["containers"][1]["gpu_injection"], exp["containers"][1]["at_risk"]) == ("hook", True)
    g = exp["containers"][2]  # GFD shares the plugin's image but is not the plugin; /dev not seen: env says all
    assert (g["gpu_injection"], g["at_risk"], g["probe"]) == ("hook", True, "not-run")
    assert g["devices"] == ["/dev/nvidiactl (195:255)", "/dev/nvidia-uvm (508:0)", "/dev/nvidia0 (195:0)"]
    assert exp["systemd_cgroup"] is True and exp["enable_cdi"] is False and exp["gpu_outside_spec"] is True
    assert (exp["device_list_strategy"], exp["pass_device_specs"], exp["driver_root"]) == (["envvar"], False, "/")
    ch = changes(exp)
    assert "nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml" in ch
    assert "nvidia-ctk config --in-place --set nvidia-container-runtime.mode=cdi" in ch
    # issue 14: commands only (the TOML snippet and "(env ...)" prose were not copy-paste safe), and the static
    # manifest's DaemonSet (kube-system/nvidia-device-plugin-daemonset) is not a Helm release
    assert exp["stack"]["engine"] == "containerd" and exp["stack"]["device_plugin"] == "nvidia-device-plugin"
    assert exp["stack"]["driver_root"] == "/"
    assert "nvidia-ctk runtime configure --runtime=containerd --cdi.enabled\nsystemctl restart containerd" in ch
    assert "kubectl -n kube-system set env daemonset/nvidia-device-plugin-daemonset DEVICE_LIST_STRATEGY=cdi-cri" in ch
    assert "kubectl -n kube-system set env daemonset/nvidia-device-plugin-daemonset PASS_DEVICE_SPECS=true" in ch
    assert [r["order"] for r in exp["remedies"]] == list(range(1, len(exp["remedies"]) + 1))
    assert exp["verdict"] == ("Exposed: 3 containers are hook-injected under SystemdCgroup=true; "
                              "one daemon-reload away from losing their GPU.")


def test_spec_injected_is_not_at_risk(tmp_path):
    rt = node(tmp_path, versions={"runc": "1.1.12"})
    c = container("b1", pod="trainer-1", hooks={"prestart": [LEGACY_HOOK]}, spec_gpu=True,
                  drop_in=BASE_DROPIN + ["/dev/char/195:255 rwm", "/dev/char/195:0 rwm", "/dev/char/508:0 rwm"])
    exp = assess(rt, [c], None)
    [b] = exp["containers"]
    assert (b["gpu_injection"], b["at_risk"], b["broken"], b["not_reapplied"]) == ("spec", False, False, [])
    assert exp["gpu_outside_spec"] is False
    assert exp["verdict"].startswith("Not exposed: all 1 GPU container keep their devices across a daemon-reload "
                                     "(devices in the OCI spec)")


def test_spec_injected_judged_from_the_spec_when_no_drop_in_is_known(tmp_path):
    rt = node(tmp_path)
    exp = assess(rt, [container("b2", pod="p", spec_gpu=True)], None)
    assert (exp["containers"][0]["gpu_injection"], exp["containers"][0]["at_risk"]) == ("spec", False)


def test_cdi_injected_is_not_at_risk(tmp_path):
    rt = node(tmp_path, mode="cdi")
    c = container("c1", pod="probe", hooks={"createContainer": [CDI_HOOK]}, spec_gpu=True,
                  env={"NVIDIA_VISIBLE_DEVICES": "void"}, annotations={"cdi.k8s.io/nvidia-device-plugin_uuid": "nvidia.com/gpu=0"},
                  drop_in=BASE_DROPIN + ["/dev/char/195:255 rwm", "/dev/char/195:0 rwm", "/dev/char/508:0 rwm"])
    exp = assess(rt, [c], {"device_list_strategy": ["cdi-cri"], "pass_device_specs": False, "driver_root": "/"})
    assert (exp["containers"][0]["gpu_injection"], exp["containers"][0]["at_risk"]) == ("cdi", False)
    assert exp["nvidia_runtime_mode"] == "cdi" and exp["new_pods_exposed"] is False and exp["remedies"] == []
    assert exp["verdict"] == ("Not exposed: all 1 GPU container keep their devices across a daemon-reload "
                              "(devices in the OCI spec).")


def test_cgroupfs_driver_is_not_at_risk(tmp_path):
    rt = node(tmp_path, systemd_cgroup=False)
    c = container("d1", pod="trainer-2", hooks={"prestart": [LEGACY_HOOK]}, driver="cgroupfs")
    exp = assess(rt, [c], None)
    [d] = exp["containers"]
    assert (d["gpu_injection"], d["at_risk"], d["cgroup_driver"]) == ("hook", False, "cgroupfs")
    assert "cgroupfs driver" in d["reason"]
    assert exp["systemd_cgroup"] is False and exp["new_pods_exposed"] is False
    assert exp["verdict"] == ("Not exposed: all 1 GPU container keep their devices across a daemon-reload "
                              "(cgroupfs driver).")


def test_runc_1_1_5_with_missing_dev_char_link_is_at_risk(tmp_path):
    rt = node(tmp_path, versions={"runc": "1.1.5+ds1-1"}, links=False)
    assert rt["dev_char"] == []
    exp = assess(rt, [container("e1", pod="trainer-3", spec_gpu=True)], None)
    [e] = exp["containers"]
    assert (e["gpu_injection"], e["at_risk"]) == ("spec", True)
    assert e["dev_char_missing"] == ["/dev/char/195:255", "/dev/char/195:0", "/dev/char/508:0"]
    assert "missing on the host, and runc 1.1.5+ds1-1 drops device rules without that link" in e["reason"]
    assert "nvidia-ctk system create-dev-char-symlinks --create-all" in changes(exp)
    assert exp["verdict"] == ("Exposed: 1 container is caught by the /dev/char trap under SystemdCgroup=true; "
                              "one daemon-reload away from losing its GPU.")


def test_runc_1_1_5_with_links_present_or_runc_1_1_7_without_them_is_safe(tmp_path):
    with_links = node(tmp_path / "a", versions={"runc": "1.1.5"}, links=True)
    fixed = node(tmp_path / "b", versions={"runc": "1.1.7"}, links=False)
    for rt in (with_links, fixed):
        exp = assess(rt, [container("e2", pod="p", spec_gpu=True)], None)
        assert exp["containers"][0]["at_risk"] is False
        assert not any("dev-char" in c for c in changes(exp))


def test_systemd_older_than_240_drops_a_drop_in_rule_whose_link_is_missing(tmp_path):
    rt = node(tmp_path, versions={"runc": "1.1.12"}, links=False)
    rt["versions"]["systemd"] = {"version": "239 (239-78.el8)", "basis": "systemctl --version"}
    c = container("e3", pod="p", spec_gpu=True,
                  drop_in=BASE_DROPIN + ["/dev/char/195:255 rw", "/dev/char/195:0 rw", "char-nvidia-uvm rw"])
    [e] = assess(rt, [c], None)["containers"]
    assert e["at_risk"] is True
    assert e["not_reapplied"] == ["/dev/nvidiactl (195:255)", "/dev/nvidia0 (195:0)"]  # char-NAME needs no link
    assert e["dev_char_missing"] == ["/dev/char/195:255", "/dev/char/195:0"]
    assert "and systemd 239 drops device rules without that link" in e["reason"]


def test_containerised_driver_trap(tmp_path):
    spec = ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n"
            "  - path: /dev/nvidia-uvm\ndevices:\n- name: '0'\n  containerEdits:\n    deviceNodes:\n"
            "    - path: /dev/nvidia0\n")
    rt = node(tmp_path, mode="cdi", containerised=True, cdi=spec)
    assert rt["driver_root"] == "/run/nvidia/driver" and rt["host_devices"] == []
    dp = device_plugin_settings([plugin({"DEVICE_LIST_STRATEGY": "cdi-cri", "NVIDIA_DRIVER_ROOT": "/"})], kept)
    exp = assess(rt, [], dp)
    [fix] = [r for r in exp["remedies"] if "containerised driver" in r["what"]]
    # issue 14: one command a line, the static manifest's DaemonSet set directly (no "helm upgrade ..." placeholder)
    assert fix["change"] == ("kubectl -n kube-system set env daemonset/nvidia-device-plugin-daemonset "
                             "NVIDIA_DRIVER_ROOT=/run/nvidia/driver\n"
                             "nvidia-ctk cdi generate --driver-root=/run/nvidia/driver --output=/var/run/cdi/nvidia.yaml")
    assert "CDI spec /etc/cdi/nvidia.yaml points at /dev/nvidia-uvm, /dev/nvidia0, /dev/nvidiactl" in fix["why"]
    assert "the device plugin has NVIDIA_DRIVER_ROOT=/" in fix["why"]
    assert "Containerised-driver trap" in exp["verdict"]
    # the same spec regenerated with --driver-root: no trap
    good = spec.replace("- path: /dev/nvidiactl", "- path: /dev/nvidiactl\n    hostPath: /run/nvidia/driver/dev/nvidiactl")
    good = good.replace("- path: /dev/nvidia-uvm", "- path: /dev/nvidia-uvm\n    hostPath: /run/nvidia/driver/dev/nvidia-uvm")
    good = good.replace("    - path: /dev/nvidia0\n", "    - path: /dev/nvidia0\n      hostPath: /run/nvidia/driver/dev/nvidia0\n")
    rt2 = node(tmp_path / "ok", mode="cdi", containerised=True, cdi=good)
    dp2 = device_plugin_settings([plugin({"DEVICE_LIST_STRATEGY": "cdi-cri", "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"})],
                                 kept)
    assert not any("containerised driver" in r["what"] for r in assess(rt2, [], dp2)["remedies"])


def test_eperm_probe_means_broken_and_the_pod_must_be_recreated(tmp_path):
    rt = node(tmp_path)
    c = container("f1", pod="trainer-4", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN,
                  probe={"/dev/nvidiactl": "EPERM", "/dev/nvidia0": "EPERM", "/dev/nvidia-uvm": "EPERM"})
    exp = assess(rt, [c], None)
    [f] = exp["containers"]
    assert (f["broken"], f["probe"]) == (True, "EPERM")
    assert "kubectl delete pod -n ml trainer-4" in changes(exp)
    assert exp["verdict"] == "Broken: 1 container already lost GPU access; recreate them and apply the remedies."


def test_no_gpu_containers_but_new_pods_would_be_exposed(tmp_path):
    rt = node(tmp_path)
    plain = container("g1", pod="web", env={"NVIDIA_VISIBLE_DEVICES": "void"}, inside=False, probe={})
    exp = assess(rt, [plain], None)
    assert exp["containers"][0]["gpu_injection"] == "none" and exp["gpu_outside_spec"] is None
    assert exp["new_pods_exposed"] is True
    assert exp["verdict"] == ("Not exposed now: no GPU containers were found; new GPU pods would be, though: "
                              "SystemdCgroup=true with the toolkit in legacy mode and device specs not known to be "
                              "passed (the device plugin's PASS_DEVICE_SPECS is unknown).")
    dp = device_plugin_settings([plugin({"PASS_DEVICE_SPECS": "false"})], kept)
    exp = assess(rt, [plain], dp)
    assert exp["verdict"] == ("Not exposed now: no GPU containers were found; new GPU pods would be, though: "
                              "SystemdCgroup=true with the toolkit in legacy mode and no device specs passed.")
    assert exp["notes"] == []  # the plugin mounts the kubelet's socket directory: nothing to say about it


def test_env_request_without_hook_or_gpu_nodes_is_none(tmp_path):
    rt = node(tmp_path)
    c = container("h1", pod="cuda-cpu-only", env={"NVIDIA_VISIBLE_DEVICES": "all"}, inside=False, probe={})
    [h] = assess(rt, [c], None)["containers"]
    assert h["gpu_injection"] == "none" and h["at_risk"] is False
    assert "NVIDIA_VISIBLE_DEVICES=all requested, but no hook ran" in h["reason"]


def test_device_plugin_settings_defaults_redaction_and_hami():
    assert device_plugin_settings([container("x", pod="web")]) is None
    dp = device_plugin_settings([plugin({"PASS_DEVICE_SPECS": "<redacted hmac:5e884898>",
                                         "DEVICE_LIST_STRATEGY": '["envvar","cdi-annotations"]'})], kept)
    assert dp["pass_device_specs"] is None and dp["basis"]["PASS_DEVICE_SPECS"] == "redacted in the container record: unknown"
    assert dp["device_list_strategy"] == ["envvar", "cdi-annotations"]
    assert dp["driver_root"] == "/" and dp["basis"]["NVIDIA_DRIVER_ROOT"] == "not set; the plugin's default '/' applies"
    assert dp["device_id_strategy"] == "uuid"
    hami = container("hm", pod="hami-device-plugin-9zq", image="projecthami/hami:v2.4.1", name="device-plugin",
                     env={"DEVICE_LIST_STRATEGY": "envvar,volume-mounts", "PASS_DEVICE_SPECS": "T"})
    hami["device_plugin_socket_mount"] = True
    dp = device_plugin_settings([hami], kept)
    assert (dp["id"], dp["device_list_strategy"], dp["pass_device_specs"]) == ("hm", ["envvar", "volume-mounts"], True)


def test_plugin_settings_trust_only_a_container_with_the_kubelet_socket_mount(tmp_path):
    """L6: a name is no proof. Candidates that mount /var/lib/kubelet/device-plugins win; without any, no
    env is trusted; records from older versions (no field) are still read, saying the mount was not checked."""
    tenant = container("t1", pod="nvidia-device-plugin-x", name="nvidia-device-plugin", inside=False, probe={},
                       env={"NVIDIA_VISIBLE_DEVICES": "void", "PASS_DEVICE_SPECS": "true",
                            "DEVICE_LIST_STRATEGY": "cdi-cri", "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"})
    tenant["device_plugin_socket_mount"] = False
    real = plugin({"PASS_DEVICE_SPECS": "false", "DEVICE_LIST_STRATEGY": "envvar"})
    for order in ([tenant, real], [real, tenant]):
        dp = device_plugin_settings(order, kept, DEVICE_PLUGIN_DIR)
        assert (dp["id"], dp["pass_device_specs"], dp["device_list_strategy"], dp["driver_root"]) == (
            "dp1", False, ["envvar"], "/")
        assert (dp["socket_mount"], dp["ignored"]) == (True, ["ml/nvidia-device-plugin-x (nvidia-device-plugin)"])
        assert dp["basis"]["device_plugin"] == (
            "kube-system/nvidia-device-plugin-daemonset-x7k2p (nvidia-device-plugin-ctr) mounts "
            "/var/lib/kubelet/device-plugins, where the device plugin registers with the kubelet; named like the "
            "plugin but without that mount, so not taken as it: ml/nvidia-device-plugin-x (nvidia-device-plugin)")
    sandbox = {**tenant, "id": "s1", "container_name": None,
               "annotations": {"io.kubernetes.cri.container-type": "sandbox"}}
    dp = device_plugin_settings([tenant, sandbox], kept, DEVICE_PLUGIN_DIR)
    assert {k: dp[k] for k in ("id", "pod", "image", "device_list_strategy", "pass_device_specs", "driver_root",
                               "dev_root", "device_id_strategy", "cdi_annotation_prefix", "nvidia_ctk_path",
                               "socket_mount")} == {k: None for k in ("id", "pod", "image", "device_list_strategy",
                                                                      "pass_device_specs", "driver_root", "dev_root",
                                                                      "device_id_strategy", "cdi_annotation_prefix",
                                                                      "nvidia_ctk_path")} | {"socket_mount": False}
    why = ("no container named like the device plugin (ml/nvidia-device-plugin-x (nvidia-device-plugin)) mounts "
           "/var/lib/kubelet/device-plugins, where a real plugin registers with the kubelet, so its settings are "
           "not trusted (a tenant pod could carry the name)")
    assert dp["basis"]["device_plugin"] == why and dp["basis"]["PASS_DEVICE_SPECS"] == "unknown: " + why
    exp = assess(node(tmp_path), [tenant], dp)
    assert (exp["pass_device_specs"], exp["device_list_strategy"], exp["new_pods_exposed"]) == (None, None, True)
    assert exp["notes"] == ["Device plugin settings unknown: " + why + "."]
    assert exp["verdict"].startswith("Not exposed now: no GPU containers were found; new GPU pods would be, though")
    old = plugin({"PASS_DEVICE_SPECS": "true"}, socket_mount=...)  # a bundle from before the field
    dp = device_plugin_settings([old], kept, DEVICE_PLUGIN_DIR)
    assert (dp["id"], dp["pass_device_specs"], dp["socket_mount"]) == ("dp1", True, None)
    assert dp["basis"]["device_plugin"] == (
        "kube-system/nvidia-device-plugin-daemonset-x7k2p (nvidia-device-plugin-ctr) is taken as the device plugin "
        "by its name alone: its record predates the check of the /var/lib/kubelet/device-plugins mount, so the "
        "mount could not be checked")
    assert assess(node(tmp_path / "old"), [], dp)["notes"] == ["Device plugin: " + dp["basis"]["device_plugin"] + "."]


def test_plugin_settings_the_env_allowlist_drops_are_unknown_not_defaults():
    dp = device_plugin_settings([plugin({"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"})])  # NVIDIA_*, CUDA_* kept only
    assert (dp["device_list_strategy"], dp["pass_device_specs"], dp["driver_root"]) == (None, None, "/run/nvidia/driver")
    assert dp["basis"]["PASS_DEVICE_SPECS"] == "not kept in the container record's env (allowlist): unknown"


# -- real inputs -------------------------------------------------------------------------------------
def record_from_config(cfg: dict, cid: str) -> dict:
    """The fields of a container record that come straight from an on-disk config.json."""
    env = dict(e.split("=", 1) for e in (cfg.get("process") or {}).get("env") or [] if "=" in e)
    linux = cfg.get("linux") or {}
    return {"id": cid, "pod": None, "pod_namespace": None, "container_name": None, "pid": None,
            "hooks": {k: [{"path": h["path"], "args": h.get("args") or []} for h in v]
                      for k, v in (cfg.get("hooks") or {}).items()},
            "linux_devices": linux.get("devices") or [],
            "resources_devices": [{"allow": d["allow"], "type": d.get("type"), "major": d.get("major"),
                                   "minor": d.get("minor"), "access": d.get("access")}
                                  for d in (linux.get("resources") or {}).get("devices") or []],
            "env": {k: v for k, v in env.items() if k.startswith(("NVIDIA_", "CUDA_"))},
            "annotations": cfg.get("annotations") or {}, "cgroup": {"driver": "systemd"}, "dev_entries": [], "probe": {}}


def devices_list(path: Path) -> list[dict]:
    """cgroup v1 devices.list lines (``c 195:255 rw``) as rules."""
    out = []
    for line in path.read_text().split("\n"):
        if line:
            t, mm, access = line.split()
            M, m = mm.split(":")
            out.append({"allow": True, "type": t, "major": None if M == "*" else int(M),
                        "minor": None if m == "*" else int(m), "access": access})
    return out


@pytest.mark.corpus
def test_real_config_json_legacy_hook_with_bare_path_is_hook_injected(real_inputs, tmp_path):
    rt = node(tmp_path)
    cfg = json.loads((real_inputs / "oci/nvidia-ctk-tests-output-bundle-config.json").read_text())
    exp = assess(rt, [record_from_config(cfg, "legacy")], None)
    [c] = exp["containers"]
    # NVIDIA's test bundle has the hook but no NVIDIA_VISIBLE_DEVICES: the hook injects nothing there
    # (legacy mode puts it on every container, pause and CPU-only ones too)
    assert c["gpu_injection"] == "none"
    cfg["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=all")
    [c] = assess(rt, [record_from_config(cfg, "legacy")], None)["containers"]
    assert c["gpu_injection"] == "hook"  # path "nvidia-container-runtime-hook", not absolute
    example = json.loads((real_inputs / "oci/runtime-spec-schema-test-good-spec-example.json").read_text())
    [c] = assess(rt, [record_from_config(example, "example")], None)["containers"]
    assert (c["gpu_injection"], c["at_risk"]) == ("none", False)  # /dev/fuse and /dev/sda are not GPUs


@pytest.mark.corpus
def test_real_devices_list_before_and_after_the_reload(real_inputs, tmp_path):
    rt = node(tmp_path)
    before = devices_list(real_inputs / "cgroup/k8s-gpu-pod-cgroupv1-before-daemon-reload/devices.list")
    after = devices_list(real_inputs / "cgroup/docker-container-default/devices.list")
    gpu = [("/dev/nvidiactl", 195, 255), ("/dev/nvidia7", 195, 7), ("/dev/nvidia-uvm", 508, 0)]

    def pod(rules):
        c = container("v1", pod="trainer-5", hooks={"prestart": [LEGACY_HOOK]}, rules=rules)
        c["dev_entries"] = [{"path": p, "kind": "c", "major": M, "minor": m, "mode": "0666"} for p, M, m in gpu]
        c["probe"] = {p: "not-run" for p, _, _ in gpu}
        return assess(rt, [c], None)["containers"][0]

    ok, lost = pod(before), pod(after)
    assert (ok["gpu_injection"], ok["at_risk"], ok["broken"]) == ("hook", True, False)
    assert (lost["broken"], lost["probe"]) == (True, "not-run")
    assert "devices.list no longer allows /dev/nvidiactl (195:255), /dev/nvidia7 (195:7), /dev/nvidia-uvm (508:0)" \
        in lost["reason"]


@pytest.mark.corpus
def test_aero_faas_node_exposes_new_gpu_pods(real_inputs, tmp_path):
    root = tmp_path / "host"
    for path, src in (("etc/containerd/config.toml", "containerd/aero-faas-containerd-1.7-systemdcgroup-config.toml"),
                      ("etc/nvidia-container-runtime/config.toml", "nvidia-runtime/nvidia-ctk-config.toml.ubuntu")):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes((real_inputs / src).read_bytes())
    w = BundleWriter(tmp_path / "b")
    rc.acquire(CollectContext(root=root, writer=w, node=HostFacts(package_versions={"nvidia-container-toolkit": "1.17.8-1"})))
    w.finish()
    rt = rc.read(Bundle.open(tmp_path / "b"), NodeFacts()).facts["runtime"]
    exp = assess(rt, [], None)
    assert (exp["systemd_cgroup"], exp["enable_cdi"], exp["nvidia_runtime_mode_resolved"]) == (True, False, "legacy")
    assert exp["new_pods_exposed"] is True
    # issue 14: a command, not a TOML snippet; no /dev/nvidiactl and no containerised driver seen, so the driver
    # root is unknown: it is looked for first, and no step that names it (CDI spec, cdi-cri, CDI mode) is given
    ch = changes(exp)
    assert "nvidia-ctk runtime configure --runtime=containerd --cdi.enabled\nsystemctl restart containerd" in ch
    assert exp["stack"]["driver_root"] is None and exp["remedies"][0]["what"] == "Find the driver root before any CDI change"
    assert not any("cdi generate" in c or "mode=cdi" in c for c in ch)


def test_on_cgroup_v2_a_broken_container_cites_the_device_programs_of_its_scope(tmp_path):
    """No devices.list on v2: the reason names the programs bpftool listed on the scope (as the lab's hook
    container shows them after a real reload: the hook's replacement and systemd's fresh sd_devices)."""
    c = container("f2", pod="trainer-5", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN,
                  probe={"/dev/nvidiactl": "EPERM", "/dev/nvidia0": "EPERM", "/dev/nvidia-uvm": "EPERM"})
    c["cgroup"]["bpf"] = [{"id": 453, "name": "lab_gpu_repl", "loaded_at": "2025-03-14T09:00:01Z"},
                          {"id": 470, "name": "sd_devices", "loaded_at": "2026-09-02T04:05:13Z"}]
    [f] = assess(node(tmp_path), [c], None)["containers"]
    assert f["broken"] is True
    assert ("gives EPERM: access already revoked; the device programs attached to its scope (cgroup v2, bpftool): "
            "lab_gpu_repl (id 453, loaded 2025-03-14T09:00:01Z), sd_devices (id 470, loaded 2026-09-02T04:05:13Z); "
            "a device is allowed only when every attached program allows it") in f["reason"]


def test_two_broken_containers_of_one_pod_give_one_delete_command(tmp_path):
    rt = node(tmp_path)
    eperm = {"/dev/nvidiactl": "EPERM", "/dev/nvidia0": "EPERM", "/dev/nvidia-uvm": "EPERM"}
    a = container("f1", pod="trainer-4", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN, probe=eperm)
    b = container("f2", pod="trainer-4", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN, probe=eperm)
    exp = assess(rt, [a, b], None)
    assert [f["broken"] for f in exp["containers"]] == [True, True]
    [redo] = [r for r in exp["remedies"] if r["what"].startswith("Recreate the containers")]
    assert redo["change"] == "kubectl delete pod -n ml trainer-4"


def test_a_record_of_wrong_types_is_read_field_by_field_never_raises():
    """forensics.findings.record.Record: each value of another type than its field's is that field's empty
    default (a tampered record.json), the lists keep their objects, and the row says what could be judged."""
    from forensics.findings.exposure_row import Context, row
    from forensics.findings.record import Record
    bad = {"id": "c1", "config": {"status": "collected"}, "linux_devices": {"path": "/dev/nvidia0"},
           "hooks": ["prestart"], "resources_devices": "all", "dev_entries": [7, {"path": "/dev/nvidia0", "kind": "c",
                                                                                   "major": 195, "minor": 0}],
           "env": "NVIDIA_VISIBLE_DEVICES=all", "annotations": None, "probe": ["EPERM"], "cgroup": "v1",
           "runc_log": [None, "x", {"device": "/dev/char/195:0"}], "systemd_unit": "loaded"}
    r = Record.of(bad)
    assert (r.linux_devices, r.hooks, r.resources_devices, r.env, r.annotations, r.probe, r.cgroup) == \
        (None, None, [], {}, {}, {}, {})
    assert r.dev_entries == [bad["dev_entries"][1]] and r.runc_log == [{"device": "/dev/char/195:0"}]
    assert r.unit is None and r.systemd_unit == "loaded"
    out = row(bad, Context({}, None, []))
    assert out["gpu_injection"] == "none" and not out["broken"] and out["probe_detail"] == {}
    assert out["systemd_unit"] == "loaded" and out["reason"].startswith("no GPU")
