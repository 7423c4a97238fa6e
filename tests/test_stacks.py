"""forensics.findings.stacks and the per-stack remedies (issue 14, item 6): one node root per GPU stack, built
in tmp_path from the files that identify it (docs/sources.md "GPU stacks"), run through the runtime_config
collector, with container records in collectors/containers/'s shape; each test asserts the stack recognised,
the evidence behind it, and the remedy list (what / stack / order) a careful SRE would follow on that stack."""
from __future__ import annotations

import json
import os
import re
import shlex
import stat

from collectors import runtime_config as rc
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.findings.device_plugin import device_plugin_settings
from forensics.findings.exposure import assess
from forensics.source import CollectContext, HostFacts
from test_exposure import BASE_DROPIN, CONTAINERD, GPU, LEGACY_HOOK, PROC_DEVICES, container, kept

TOOLKIT = '[nvidia-container-runtime]\nmode = "auto"\n'
HOOK_JSON = json.dumps({"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-runtime-hook",
                                                    "args": ["nvidia-container-runtime-hook", "prestart"]},
                        "when": {"always": True}, "stages": ["prestart"]})
EPERM = {p: "EPERM" for p, _, _ in GPU}


def node(tmp_path, files: dict[str, str], dev: str | None = "/dev", toolkit: str = "1.17.8-1"):
    """A host root holding ``files`` and the GPU nodes under ``dev``; returns the runtime_config facts."""
    root = tmp_path / "host"
    for path, text in {"/proc/devices": PROC_DEVICES, **files}.items():
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(text)
    if dev:
        for path, M, m in GPU:
            p = root / dev.lstrip("/") / os.path.basename(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(M, m))
    (root / "dev/char").mkdir(parents=True, exist_ok=True)
    w = BundleWriter(tmp_path / "bundle")
    rc.acquire(CollectContext(root=root, writer=w, node=HostFacts(
        package_versions={"nvidia-container-toolkit": toolkit, "runc": "1.1.12"}, systemd_version="252.39-1")))
    w.finish()
    return rc.read(Bundle.open(tmp_path / "bundle"), NodeFacts()).facts


def plugin_record(pod, ns, image, name, env):
    c = container("dp1", pod=pod, hooks={"prestart": [LEGACY_HOOK]}, image=image, name=name,
                  env={"NVIDIA_VISIBLE_DEVICES": "all", **env}, drop_in=BASE_DROPIN)
    return {**c, "pod_namespace": ns, "device_plugin_socket_mount": True}


def nvdp_plugin():
    """NVIDIA's chart installed as release nvdp (pod <release>-nvidia-device-plugin-<hash>), envvar, no specs."""
    return plugin_record("nvdp-nvidia-device-plugin-x7k2p", "nvidia-device-plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                         "nvidia-device-plugin-ctr", {"DEVICE_LIST_STRATEGY": "envvar", "PASS_DEVICE_SPECS": "false"})


def trainer(**kw):
    return container("a1", pod="trainer-0", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN, **kw)


def listing(exp):
    return [(r["what"], r["stack"], r["order"]) for r in exp["remedies"]]


def text(exp):
    return "\n".join(r["change"] for r in exp["remedies"])


def code_lines_are_commands(exp):
    """Nothing but commands and ``# `` comment lines: no prose such as "(env ...)" inside a command line."""
    for r in exp["remedies"]:
        for line in r["change"].splitlines():
            assert line and "(env " not in line and not line.startswith(("Or", "or ")), line
            words = shlex.split(line, comments=True)  # a shell paste: quotes balanced, a comment is a comment
            assert not words or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*|[a-z/][a-z0-9._/-]*", words[0]), line
            assert not any(w.startswith("(") for w in words), line


def test_containerd_with_nvidia_chart(tmp_path):
    facts = node(tmp_path, {"/etc/containerd/config.toml": CONTAINERD.format(sc="true"),
                            "/etc/nvidia-container-runtime/config.toml": TOOLKIT})
    rt = facts["runtime"]
    assert facts["engine_cgroup_driver"] == {"containerd": {
        "value": "systemd", "source": "/etc/containerd/config.toml: SystemdCgroup=true (runtime nvidia)"}}
    cs = [trainer(), nvdp_plugin()]
    exp = assess(rt, cs, device_plugin_settings(cs, kept))
    st = exp["stack"]
    assert (st["engine"], st["device_plugin"], st["driver_root"], st["hook_users"]) == (
        "containerd", "nvidia-device-plugin", "/", [])
    assert "engine containerd: 2 container records of containerd" in st["evidence"]
    s = "containerd + nvidia-device-plugin"
    assert listing(exp) == [("Have the device plugin pass device specs", s, 1),
                            ("Enable CDI in containerd's CRI plugin", s, 2),
                            ("Or: have the device plugin request devices through CDI (cdi-cri)", s, 3),
                            ("Generate a CDI spec for the GPUs", s, 4),
                            ("Switch nvidia-container-runtime to CDI mode", s, 5)]
    assert exp["remedies"][0]["change"] == (
        "RELEASE=nvdp\nNAMESPACE=nvidia-device-plugin\n# check both with: helm list -A\n"
        'helm upgrade "$RELEASE" nvdp/nvidia-device-plugin -n "$NAMESPACE" --reuse-values --set compatWithCPUManager=true')
    assert "privileged" in exp["remedies"][0]["breaks"] and "--set-string" in exp["remedies"][0]["needs"]
    assert exp["remedies"][1]["change"] == ("nvidia-ctk runtime configure --runtime=containerd --cdi.enabled\n"
                                           "systemctl restart containerd")
    code_lines_are_commands(exp)


def test_gpu_operator_gets_its_cluster_policy_not_the_chart(tmp_path):
    ctd = CONTAINERD.format(sc="true").replace("/usr/bin/nvidia-container-runtime",
                                               "/usr/local/nvidia/toolkit/nvidia-container-runtime")
    facts = node(tmp_path, {"/etc/containerd/config.toml": ctd,
                            "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml": TOOLKIT,
                            "/run/nvidia/validations/driver-ready":
                                "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n"
                                "DRIVER_ROOT_CTR_PATH=/driver-root\n"}, dev="/run/nvidia/driver/dev")
    dcgm = container("d1", pod="nvidia-dcgm-exporter-x7k9q", hooks={"prestart": [LEGACY_HOOK]}, drop_in=BASE_DROPIN,
                     image="nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5", name="nvidia-dcgm-exporter",
                     env={"NVIDIA_VISIBLE_DEVICES": "all"})
    cs = [dcgm, plugin_record("nvidia-device-plugin-daemonset-abcde", "gpu-operator",
                              "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "nvidia-device-plugin",
                              {"PASS_DEVICE_SPECS": "true", "DEVICE_LIST_STRATEGY": "envvar"})]
    exp = assess(facts["runtime"], cs, device_plugin_settings(cs, kept))
    st = exp["stack"]
    assert (st["engine"], st["device_plugin"], st["driver_root"]) == ("containerd", "gpu-operator", "/run/nvidia/driver")
    assert ("driver root /run/nvidia/driver: /run/nvidia/validations/driver-ready NVIDIA_DRIVER_ROOT=/run/nvidia/driver "
            "IS_HOST_DRIVER=false") in st["evidence"]
    assert any(e.startswith("device plugin gpu-operator") and "/usr/local/nvidia/toolkit" in e for e in st["evidence"])
    assert listing(exp) == [("Enable CDI in the GPU Operator's ClusterPolicy", "containerd + gpu-operator", 1)]
    assert exp["remedies"][0]["change"].splitlines()[0] == (
        "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p '{\"spec\":{\"cdi\":{\"enabled\":true}}}'")
    t = text(exp)  # not the plugin chart, no nvidiaDriverRoot by Helm, no edit of the toolkit config the operator owns
    assert "helm" not in t and "nvidiaDriverRoot" not in t and "mode=cdi" not in t
    assert not any("containerised driver" in r["what"] for r in exp["remedies"])  # driver root comes from the operator
    code_lines_are_commands(exp)


def test_hami_gets_its_own_chart_values(tmp_path):
    facts = node(tmp_path, {"/etc/containerd/config.toml": CONTAINERD.format(sc="true"),
                            "/etc/nvidia-container-runtime/config.toml": TOOLKIT})
    cs = [trainer(), plugin_record("hami-device-plugin-k2x9p", "kube-system", "docker.io/projecthami/hami:v2.5.1",
                                   "device-plugin", {"PASS_DEVICE_SPECS": "false", "DEVICE_LIST_STRATEGY": "envvar"})]
    exp = assess(facts["runtime"], cs, device_plugin_settings(cs, kept))
    assert (exp["stack"]["engine"], exp["stack"]["device_plugin"]) == ("containerd", "hami")
    s = "containerd + hami"
    assert listing(exp) == [("Have HAMi's device plugin pass device specs", s, 1),
                            ("Enable CDI in containerd's CRI plugin", s, 2),
                            ("Or: have HAMi's device plugin request devices through CDI", s, 3),
                            ("Generate a CDI spec for the GPUs", s, 4),
                            ("Switch nvidia-container-runtime to CDI mode", s, 5)]
    t = text(exp)
    assert "RELEASE=hami\nNAMESPACE=kube-system" in t and "--set devicePlugin.passDeviceSpecsEnabled=true" in t
    assert "compatWithCPUManager" not in t and "nvdp/" not in t  # NVIDIA's values are ignored by the HAMi chart
    code_lines_are_commands(exp)


def test_bottlerocket_gets_its_settings_api(tmp_path):
    facts = node(tmp_path, {
        "/etc/os-release": 'NAME=Bottlerocket\nID=bottlerocket\nVARIANT_ID=aws-k8s-1.31-nvidia\n',
        "/etc/containerd/config.toml": CONTAINERD.format(sc="true"),
        "/etc/nvidia-container-runtime/config.toml": '[nvidia-container-runtime]\nmode = "legacy"\n',
        "/etc/nvidia-k8s-device-plugin/settings.yaml": "version: v1\nflags:\n  plugin:\n    passDeviceSpecs: false\n",
        "/etc/shimpei/nvidia-oci-hooks.json": HOOK_JSON})
    exp = assess(facts["runtime"], [trainer()], None)
    st = exp["stack"]
    assert (st["engine"], st["device_plugin"]) == ("containerd", "bottlerocket")
    assert "device plugin bottlerocket (host service, stacks.md 5): /etc/os-release ID=bottlerocket " \
           "VARIANT_ID=aws-k8s-1.31-nvidia; /etc/nvidia-k8s-device-plugin/settings.yaml" in st["evidence"]
    assert st["hook_users"] == ["Bottlerocket's /etc/shimpei/nvidia-oci-hooks.json (prestart nvidia-container-runtime-hook)"]
    assert listing(exp) == [("Restore Bottlerocket's pass-device-specs setting", "containerd + bottlerocket", 1)]
    assert text(exp) == "apiclient set settings.kubelet-device-plugins.nvidia.pass-device-specs=true"
    assert facts["stack"]["bottlerocket_plugin"] == {"pass_device_specs": False, "device_list_strategy": None}
    assert exp["remedies"][0]["why"].startswith("PASS_DEVICE_SPECS is False (flags.plugin.passDeviceSpecs in "
                                                "/etc/nvidia-k8s-device-plugin/settings.yaml)")
    assert "helm" not in exp["remedies"][0]["why"].lower() or "Helm remedies do not apply" in exp["remedies"][0]["why"]


def test_docker_host_with_gpus_hooks(tmp_path):
    facts = node(tmp_path, {"/etc/containerd/config.toml": 'disabled_plugins = ["cri"]\n',
                            "/etc/docker/daemon.json": json.dumps({
                                "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
                                "exec-opts": ["native.cgroupdriver=systemd"]}),
                            "/etc/nvidia-container-runtime/config.toml": TOOLKIT})
    rt = facts["runtime"]
    assert facts["engine_cgroup_driver"]["docker"] == {"value": "systemd",
                                                       "source": "/etc/docker/daemon.json: exec-opts native.cgroupdriver=systemd"}
    assert facts["engine_cgroup_driver"]["containerd"]["value"] is None  # CRI disabled: unknown, never False
    assert rt["enable_cdi"] is None and rt["stack"]["docker"]["runtimes"] == {"nvidia": "nvidia-container-runtime"}
    c = container("9f3c2a1b7e4d", pod=None, hooks={"prestart": [LEGACY_HOOK]}, probe=EPERM, drop_in=BASE_DROPIN)
    c.update(namespace="moby", engine="docker", pod_namespace=None)
    c["cgroup"]["path"] = "/system.slice/docker-9f3c2a1b7e4d.scope"
    exp = assess(rt, [c], None, facts["engine_cgroup_driver"])
    st = exp["stack"]
    assert (st["engine"], st["device_plugin"], st["docker"]) == ("docker", "none", True)
    assert st["hook_users"] == ["docker container 9f3c2a1b7e4d has the nvidia-container-runtime-hook prestart hook"]
    s = "docker + none"
    assert listing(exp) == [("Generate a CDI spec for the GPUs", s, 1), ("Enable CDI in dockerd", s, 2),
                            ("Start GPU containers with CDI devices instead of --gpus", s, 3),
                            ("Recreate the containers that lost their GPU", "every stack", 4)]
    assert exp["remedies"][0]["change"] == "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    assert exp["remedies"][1]["breaks"] == "restarting dockerd stops every running container: daemon.json does not set live-restore"
    assert "--device nvidia.com/gpu=all" in exp["remedies"][2]["change"]
    t = text(exp)  # no CRI snippet, no containerd restart, no toolkit CDI mode (it would stop the --gpus hook)
    assert "containerd" not in t and "enable_cdi" not in t and "mode=cdi" not in t and "helm" not in t
    code_lines_are_commands(exp)


def test_crio_with_hooks_d(tmp_path):
    facts = node(tmp_path, {
        "/etc/crio/crio.conf": '[crio.runtime]\ncgroup_manager = "cgroupfs"\n',
        "/etc/crio/crio.conf.d/10-gpu.conf": '[crio.runtime]\ncgroup_manager = "systemd"\n'
                                              'hooks_dir = ["/usr/share/containers/oci/hooks.d"]\n',
        "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": HOOK_JSON,
        "/etc/nvidia-container-runtime/config.toml": '[nvidia-container-runtime]\nmode = "legacy"\n'})
    assert facts["engine_cgroup_driver"] == {"crio": {  # the drop-in overrides crio.conf
        "value": "systemd", "source": "/etc/crio/crio.conf, /etc/crio/crio.conf.d/10-gpu.conf: cgroup_manager = systemd"}}
    t1 = trainer()
    t1.update(engine="crio", namespace=None)
    t1["cgroup"]["path"] = "/kubepods.slice/kubepods-besteffort.slice/crio-a1.scope"
    cs = [t1, nvdp_plugin()]
    cs[1].update(engine="crio", namespace=None)
    kube = {"node": {"container_runtime_version": "cri-o://1.29.1", "labels": {}}}
    exp = assess(facts["runtime"], cs, device_plugin_settings(cs, kept), kube=kube)
    st = exp["stack"]
    assert (st["engine"], st["device_plugin"]) == ("crio", "nvidia-device-plugin")
    assert "engine crio: the Node reports containerRuntimeVersion cri-o://1.29.1" in st["evidence"]
    assert st["hook_users"][0] == ("OCI hook file /usr/share/containers/oci/hooks.d/oci-nvidia-hook.json runs "
                                   "/usr/bin/nvidia-container-runtime-hook for every container")
    s = "crio + nvidia-device-plugin"
    assert listing(exp) == [("Have the device plugin pass device specs", s, 1),
                            ("Or: have the device plugin request devices through CDI (cdi-cri)", s, 2)]
    # the kubelet's own report of its runtime is the version where no binary or package was read
    assert st["engine_version"] == {"engine": "crio", "version": "1.29.1",
                                    "basis": "the Node's containerRuntimeVersion cri-o://1.29.1"}
    assert ("CDI enabled in the engine first (CRI-O >= 1.24 (this node: 1.29.1, from the Node's containerRuntimeVersion "
            "cri-o://1.29.1): always on from there)") in exp["remedies"][1]["needs"]
    t = text(exp)  # never containerd's CRI plugin on CRI-O, never the CDI mode while the hooks.d hook is in use
    assert "containerd" not in t and "mode=cdi" not in t
    code_lines_are_commands(exp)


def test_k3s_edits_its_config_toml_tmpl(tmp_path):
    d = "/var/lib/rancher/k3s/agent/etc/containerd"
    facts = node(tmp_path, {f"{d}/config.toml": CONTAINERD.format(sc="true"),
                            f"{d}/config.toml.tmpl": CONTAINERD.format(sc="true"),
                            "/etc/nvidia-container-runtime/config.toml": TOOLKIT})
    assert facts["stack"]["rancher"] == [{"distro": "k3s", "config": True,
                                          "templates": [{"path": f"{d}/config.toml.tmpl", "directives": False}]}]
    cs = [trainer(), nvdp_plugin()]
    kube = {"node": {"container_runtime_version": "containerd://1.7.23-k3s2", "labels": {}}}
    exp = assess(facts["runtime"], cs, device_plugin_settings(cs, kept), kube=kube)
    assert (exp["stack"]["engine"], exp["stack"]["device_plugin"]) == ("k3s", "nvidia-device-plugin")
    s = "k3s + nvidia-device-plugin"
    assert [w for w, _, _ in listing(exp)][:3] == [
        "Have the device plugin pass device specs",
        "Enable CDI in k3s's embedded containerd, through its config.toml.tmpl",
        "Or: have the device plugin request devices through CDI (cdi-cri)"]
    assert {x for _, x, _ in listing(exp)} == {s}
    assert exp["remedies"][1]["change"] == (
        f"nvidia-ctk runtime configure --runtime=containerd --cdi.enabled --config={d}/config.toml.tmpl\n"
        "# on an agent node the unit is k3s-agent\nsystemctl restart k3s")
    assert not any(p in text(exp) for p in (" /etc/containerd", "=/etc/containerd"))  # k3s does not read it
    # a template with Go template actions is edited by hand, not by nvidia-ctk
    tmp2 = tmp_path / "t"
    tmp2.mkdir()
    facts2 = node(tmp2, {f"{d}/config.toml": CONTAINERD.format(sc="true"),
                         f"{d}/config.toml.tmpl": '{{ template "base" . }}\n',
                         "/etc/nvidia-container-runtime/config.toml": TOOLKIT})
    exp2 = assess(facts2["runtime"], cs, device_plugin_settings(cs, kept), kube=kube)
    [k3s] = [r for r in exp2["remedies"] if r["what"].startswith("Enable CDI in k3s")]
    assert "nvidia-ctk runtime configure" not in k3s["change"] and f"grep -n enable_cdi {d}/config.toml.tmpl" in k3s["change"]


def test_plain_runc(tmp_path):
    facts = node(tmp_path, {"/etc/nvidia-container-runtime/config.toml": TOOLKIT})
    c = container("5e1d0c", pod=None, probe=EPERM, drop_in=BASE_DROPIN)
    c.update(engine="runc", namespace=None)
    c["cgroup"]["path"] = "/system.slice/runc-5e1d0c.scope"
    exp = assess(facts["runtime"], [c], None)
    st = exp["stack"]
    assert (st["engine"], st["device_plugin"], st["hook_users"]) == ("runc", "none", [])
    assert listing(exp) == [("Generate a CDI spec for the GPUs", "runc + none", 1),
                            ("Switch nvidia-container-runtime to CDI mode", "runc + none", 2),
                            ("Recreate the containers that lost their GPU", "every stack", 3)]
    assert exp["remedies"][2]["change"] == "# recreate container 5e1d0c with the same arguments (it has no pod)"


def test_unrecognised_stack_gets_only_checks(tmp_path):
    facts = node(tmp_path, {"/etc/nvidia-container-runtime/config.toml": TOOLKIT,
                            "/etc/containerd/config.toml": CONTAINERD.format(sc="true")})
    rt = facts["runtime"]
    rt["containerd"] = None  # nothing says which engine runs here
    exp = assess(rt, [], None)
    assert (exp["stack"]["engine"], exp["stack"]["device_plugin"]) == (None, None)
    assert [w for w, _, _ in listing(exp)] == ["Stack not recognised: check it before changing anything"]
    assert all(line.startswith(("nvidia-ctk --version", "cat ", "ls ")) for line in text(exp).splitlines())


def test_dockers_cdi_gates_are_said_against_the_version_this_node_runs():
    """stacks.md 6: features.cdi exists from Docker 25.0 and is on by default from 28.2. A Docker below 25.0 is
    told to upgrade first; on 28.2+ an unset features.cdi is on, so no restart of dockerd is advised; an explicit
    false still is; an unknown version is said as unknown, never taken for either."""
    from forensics.engines import docker
    old = {"version": "5:24.0.7-1~debian.12~bookworm", "basis": "/var/lib/dpkg/status (docker-ce)"}
    new = {"version": "28.3.2", "basis": "dockerd --version"}
    steps = docker.cdi_steps({"cdi": None}, [], old)
    assert [s["what"] for s in steps] == ["Enable CDI in dockerd", docker.RUN_WHAT]
    assert steps[0]["needs"].startswith("Docker >= 25.0 (this node: 24.0.7, read as 5:24.0.7-1~debian.12~bookworm from "
                                        "/var/lib/dpkg/status (docker-ce): below it, upgrade Docker first)")
    assert steps[0]["why"] == "daemon.json features.cdi is not set, which is off in Docker 24.0.7, on by default only " \
                              "from 28.2"
    steps = docker.cdi_steps({"cdi": None}, [], new)
    assert [s["what"] for s in steps] == [docker.RUN_WHAT]
    assert steps[0]["needs"] == ("the CDI spec and dockerd's CDI support: features.cdi is not set, which is on in "
                                 "Docker 28.3.2, on by default from 28.2 (unless dockerd's command line says "
                                 "--feature cdi=false: not read)")
    steps = docker.cdi_steps({"cdi": False}, [], new)
    assert [s["what"] for s in steps] == ["Enable CDI in dockerd", docker.RUN_WHAT]
    assert steps[0]["needs"].startswith("Docker >= 25.0 (this node: 28.3.2, from dockerd --version), where")
    assert steps[0]["why"] == "daemon.json features.cdi is false"
    assert "only makes it explicit" not in steps[0]["needs"]  # false is off: the step turns CDI on
    steps = docker.cdi_steps({}, [], None)
    assert steps[0]["needs"].startswith("Docker >= 25.0 (this node's version was not seen), where features.cdi "
                                        "exists (on by default from 28.2, where this only makes it explicit)")
    assert steps[0]["why"] == "daemon.json features.cdi is not set (off before Docker 28.2, on from 28.2)"
    # cdi-spec-dirs [""] turns CDI off even on 28.2+ (moby daemon/daemon.go); true on a Docker below 25.0 is no CDI
    steps = docker.cdi_steps({"cdi": None, "cdi_spec_dirs": [""]}, [], new)
    assert [s["what"] for s in steps] == ["Enable CDI in dockerd", docker.RUN_WHAT]
    assert steps[0]["change"][1] == '# and take "cdi-spec-dirs": [""] out of /etc/docker/daemon.json'
    assert steps[0]["why"].endswith('; cdi-spec-dirs is [""], which turns CDI off')
    steps = docker.cdi_steps({"cdi": True}, [], old)
    assert [s["what"] for s in steps] == [docker.RUN_WHAT]
    assert steps[0]["needs"].endswith("; Docker >= 25.0 (this node: 24.0.7, read as 5:24.0.7-1~debian.12~bookworm from "
                                      "/var/lib/dpkg/status (docker-ce): below it, upgrade Docker first)")
    # a release candidate of 28.2 is below 28.2, as dpkg orders it: its unset features.cdi is not taken for on
    steps = docker.cdi_steps({"cdi": None}, [], {"version": "5:28.2.0~rc1-1", "basis": "/var/lib/dpkg/status (docker-ce)"})
    assert [s["what"] for s in steps] == ["Enable CDI in dockerd", docker.RUN_WHAT]
