"""The container collector on built trees: runc rune types, redaction, cgroup v2 evidence (systemd's
transient drop-ins, bpftool's device programs), plain runc, and a /dev that is itself a symlink.
The real-runtime checks live in test_containers_lab.py."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import containers
from collectors.containers import cgroup, parse as cp, probe
from forensics import redact
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext
from forensics.events import NodeFacts

CID = "3f1c0ffee0ddba11"
SCOPE = f"cri-containerd-{CID}.scope"
CG = f"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/{SCOPE}"
# docs/sources.md "Cases" C08: the healthy container's drop-in
DROP_IN = """# This is a drop-in unit file extension, created via "systemctl set-property"
# or an equivalent operation. Do not edit.
[Scope]
DeviceAllow=
DeviceAllow=/dev/char/195:255 rwm
DeviceAllow=/dev/char/195:0 rwm
DeviceAllow=char-136 rwm
DeviceAllow=/dev/char/1:3 rwm
DeviceAllow=char-* m
DeviceAllow=block-* m
"""


def _w(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _spec(**extra) -> dict:
    spec = {
        "ociVersion": "1.2.0",
        "process": {"args": ["/app", "--api-token=s3cr3t-arg", "--password", "s3cr3t-next"],
                    "env": ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=void", "AWS_SECRET_ACCESS_KEY=s3cr3t-env",
                            "NVIDIA_VISIBLE_DEVICES=GPU-1", "PROXY=http://u:s3cr3t-url@proxy:3128"]},
        "hooks": {"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"],
                                       "env": ["TOKEN=s3cr3t-hook"]}]},
        "annotations": {"io.kubernetes.cri.sandbox-name": "trainer-0", "io.kubernetes.cri.sandbox-namespace": "ml",
                        "io.kubernetes.cri.container-name": "main", "cdi.k8s.io/nvidia": "nvidia.com/gpu=0",
                        "vault.example/auth-token": "s3cr3t-ann"},
        "linux": {"cgroupsPath": f"kubepods-besteffort-pod1.slice:cri-containerd:{CID}",
                  "devices": [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 438}],
                  "resources": {"devices": [{"allow": False, "access": "rwm"},
                                            {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
                                            {"allow": True, "type": "c", "major": 195, "access": "m"}]}},
    }
    spec.update(extra)
    return spec


def _state(pid: int, start: int) -> dict:
    return {"id": CID, "init_process_pid": pid, "init_process_start": start,
            "created": "2026-03-01T10:00:00.123456789Z",
            "config": {"cgroups": {"Systemd": True, "devices": [
                {"type": 97, "major": -1, "minor": -1, "permissions": "rwm", "allow": False},
                {"type": 99, "major": 195, "minor": 0, "permissions": "rwm", "allow": True}]},
                "labels": ["bundle=/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + CID,
                           "vault.example/auth-token=s3cr3t-ann"],
                "Hooks": {"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "env": ["TOKEN=s3cr3t-hook"]}]}},
            "cgroup_paths": {"": CG}}


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A v2 node: a containerd bundle, runc state, /proc of the init, systemd transient files, a
    bpftool stand-in on PATH."""
    root = tmp_path / "root"
    bundle = root / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}"
    _w(bundle / "config.json", json.dumps(_spec()))
    _w(bundle / "options.json", json.dumps({"binary_name": "/usr/bin/nvidia-container-runtime", "systemd_cgroup": True}))
    _w(root / f"run/containerd/runc/k8s.io/{CID}/state.json", json.dumps(_state(4242, 777)))
    _w(root / "proc/4242/stat", "4242 (sleep) S " + " ".join(["0"] * 18) + " 777 0 0\n")
    dev = root / "proc/4242/root/dev"
    dev.mkdir(parents=True)
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    os.mknod(dev / "nvidiactl", stat.S_IFCHR | 0o666, os.makedev(195, 255))
    os.symlink("/etc/shadow", dev / "nvidia-uvm")
    (dev / "null").touch()
    (root / CG.lstrip("/")).mkdir(parents=True)
    _w(root / f"run/systemd/transient/{SCOPE}", "[Scope]\nDevicePolicy=strict\nDeviceAllow=/dev/char/1:3 rwm\n")
    _w(root / f"run/systemd/transient/{SCOPE}.d/50-DeviceAllow.conf", DROP_IN)
    _w(root / f"run/systemd/transient/{SCOPE}.d/50-DevicePolicy.conf", "[Scope]\nDevicePolicy=strict\n")
    _w(root / "proc/devices", "Character devices:\n  1 mem\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n  8 sd\n")
    bindir = tmp_path / "bin"
    tool = _w(bindir / "bpftool", """#!/bin/sh
case "$*" in
  *"cgroup show"*) echo '[{"id":42,"attach_type":"cgroup_device","attach_flags":"multi","name":"sd_devices"},{"id":7,"attach_type":"cgroup_inet_ingress","name":"x"}]';;
  *"prog show id 42"*) echo '{"id":42,"type":"cgroup_device","name":"sd_devices","loaded_at":1772445600,"uid":0}';;
esac
""")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return root


def _acquire(root: Path, out: Path, **attrs) -> Bundle:
    w = BundleWriter(out)
    ctx = CollectContext(root=root, writer=w, options=attrs)  # containers' options (probe=True)
    containers.acquire(ctx)
    w.meta["collection"] = {"start": "2026-03-05T00:00:00Z", "end": "2026-03-05T00:00:01Z"}
    w.finish()
    return Bundle.open(out)


def test_cgroup_v2_node_record_drop_in_and_bpf(node, tmp_path):
    b = _acquire(node, tmp_path / "b")
    r = containers.read(b, NodeFacts())
    rec, = r.facts["containers"]
    assert (rec["pod"], rec["pod_namespace"], rec["container_name"]) == ("trainer-0", "ml", "main")
    assert rec["created"] == "2026-03-01T10:00:00.123456Z" and rec["pid"] == 4242 and rec["gpu"]
    assert rec["env"] == {"PATH": "/usr/bin", "NVIDIA_VISIBLE_DEVICES": "GPU-1"}  # last one wins
    assert rec["hooks"]["createContainer"] == [{"path": "/usr/bin/nvidia-cdi-hook",
                                                "args": ["nvidia-cdi-hook", "update-ldcache"]}]
    assert rec["linux_devices"] == [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]
    assert rec["resources_devices"][2] == {"allow": True, "type": "c", "major": 195, "minor": None, "access": "m"}
    assert rec["annotations"]["cdi.k8s.io/nvidia"] == "nvidia.com/gpu=0"
    cg = rec["cgroup"]
    assert (cg["version"], cg["path"], cg["driver"], cg["rules"]) == (2, CG, "systemd", None)
    assert cg["systemd_drop_in"]["policy"] == "strict"
    assert cg["systemd_drop_in"]["allow"] == ["/dev/char/195:255 rwm", "/dev/char/195:0 rwm", "char-136 rwm",
                                              "/dev/char/1:3 rwm", "char-* m", "block-* m"]  # reset honoured
    assert cg["bpf"] == [{"id": 42, "name": "sd_devices", "loaded_at": "2026-03-02T10:00:00Z"}]
    assert rec["device_plugin_socket_mount"] is False  # a spec without mounts[]
    kinds = {e["path"]: (e["kind"], e["major"], e["minor"], e["target"]) for e in rec["dev_entries"]}
    assert kinds == {"/dev/nvidia0": ("c", 195, 0, None), "/dev/nvidiactl": ("c", 195, 255, None),
                     "/dev/nvidia-uvm": ("symlink", None, None, "/etc/shadow")}
    assert set(rec["probe"].values()) == {"not-run"}
    ev = {e.kind: e for e in r.events}
    assert ev["container.device-rules-applied"].attrs == {"id": CID, "pod": "trainer-0", "prog_id": 42,
                                                          "prog_name": "sd_devices"}
    assert ev["container.device-rules-applied"].at.isoformat() == "2026-03-02T10:00:00+00:00"
    assert ev["container.created"].attrs["gpu"] is True
    assert "container.probe" not in ev  # not-run results are not events
    names = {a.path for a in b.artifacts() if a.path}
    base = f"containers/k8s.io/{CID}"
    assert {f"{base}/systemd/{SCOPE}", f"{base}/systemd/{SCOPE}.d/50-DeviceAllow.conf",
            f"{base}/bpftool-cgroup.json", f"{base}/bpftool-prog-42.json", f"{base}/options.json"} <= names


def test_no_secret_reaches_the_bundle(node, tmp_path):
    b = _acquire(node, tmp_path / "b")
    raw = b"".join(p.read_bytes() for p in b.root.rglob("*") if p.is_file())
    assert b"s3cr3t" not in raw
    stored = json.loads(b.path(f"containers/k8s.io/{CID}/config.json").read_text())
    assert stored["process"]["env"][2] == "AWS_SECRET_ACCESS_KEY=" + redact.redacted("s3cr3t-env")
    assert stored["process"]["env"][4] == "PROXY=" + redact.redacted("http://u:s3cr3t-url@proxy:3128")
    assert stored["process"]["args"][1:] == ["--api-token=" + redact.redacted("s3cr3t-arg"), "--password",
                                             redact.redacted("s3cr3t-next")]
    assert any("env values redacted" in n for a in b.artifacts() if a.path and a.path.endswith("config.json")
               for n in a.notes)


def test_dev_that_is_a_symlink_is_recorded_not_entered(node, tmp_path):
    dev = node / "proc/4242/root/dev"
    for p in dev.iterdir():
        p.unlink()
    dev.rmdir()
    os.symlink("/etc", dev)
    b = _acquire(node, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    assert rec["dev_entries"][0]["ctime"].endswith("Z")  # when the entry was made or last changed
    assert [{k: v for k, v in e.items() if k not in ("ctime", "made_inside")} for e in rec["dev_entries"]] == \
        [{"path": "/dev", "kind": "symlink", "major": None, "minor": None, "mode": "0777", "target": "/etc"}]


def test_stale_pid_is_not_trusted(node, tmp_path):
    _w(node / "proc/4242/stat", "4242 (other) S " + " ".join(["0"] * 18) + " 999 0 0\n")
    b = _acquire(node, tmp_path / "b", probe=True)
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    assert rec["dev_entries"] is None and rec["pid"] == 4242  # not read: the pid is not the init
    assert any("no longer the container's init" in (a.message or "") for a in b.artifacts())


def test_plain_runc_state_and_missing_sources(tmp_path):
    root = tmp_path / "root"
    bundle = tmp_path / "root/srv/bundles/web"
    _w(bundle / "config.json", json.dumps({"process": {"env": ["HOME=/root", "K=v"]}}))
    st = {"id": "web", "init_process_pid": 99999999, "created": "2026-01-01T00:00:00Z",
          "config": {"labels": ["bundle=/srv/bundles/web"], "cgroups": {"devices": []}},
          "cgroup_paths": {"devices": "/sys/fs/cgroup/devices/web"}}
    _w(root / "run/runc/web/state.json", json.dumps(st))
    b = _acquire(root, tmp_path / "b")
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    assert (rec["namespace"], rec["bundle"], rec["env"]) == ("runc", "/srv/bundles/web", {"HOME": "/root"})
    assert rec["cgroup"]["driver"] == "cgroupfs" and rec["cgroup"]["rules"] is None
    statuses = {a.source: a.status.value for a in b.artifacts()}
    assert statuses["/run/containerd/io.containerd.runtime.v2.task"] == "absent"
    assert statuses["/sys/fs/cgroup/devices/web/devices.list"] == "absent"


def test_drop_ins_found_with_and_without_the_transient_listing(node, tmp_path, monkeypatch):
    """The transient directory is listed once per run; names not in it are not looked up, and when it
    cannot be listed every scope name is looked up as before."""
    other = "deadbeef42"
    _w(node / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{other}/config.json", json.dumps({}))
    os.symlink("/nowhere", node / f"run/systemd/transient/cri-containerd-{other}.scope")  # dangling: not there
    want = {"policy": "strict", "allow": ["/dev/char/195:255 rwm", "/dev/char/195:0 rwm", "char-136 rwm",
                                          "/dev/char/1:3 rwm", "char-* m", "block-* m"]}
    listdir = containers.hostfs.listdir
    for n, broken in enumerate((False, True)):
        if broken:
            monkeypatch.setattr(containers.hostfs, "listdir", lambda root, path: (
                (_ for _ in ()).throw(PermissionError(13, "denied")) if path == cgroup.TRANSIENT
                else listdir(root, path)))
        b = _acquire(node, tmp_path / f"b{n}")
        recs = {r["id"]: r for r in containers.read(b, NodeFacts()).facts["containers"]}
        assert recs[CID]["cgroup"]["systemd_drop_in"] == want
        assert recs[other]["cgroup"]["systemd_drop_in"] is None
        assert not any("transient" in a.source for a in b.artifacts() if other in a.source)


def test_state_json_that_is_not_a_file_is_an_error_not_absent(node, tmp_path):
    state = node / f"run/containerd/runc/k8s.io/{CID}/state.json"
    state.unlink()
    state.mkdir()
    b = _acquire(node, tmp_path / "b")
    art, = [a for a in b.artifacts() if a.source.endswith(f"{CID}/state.json")]
    assert art.status.value == "error" and art.path is None and "not a regular file" in (art.message or "")


def test_config_that_is_not_json_is_not_stored(node, tmp_path):
    _w(node / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/config.json", '{"process": {"env": ["A=s3cr3t"')
    b = _acquire(node, tmp_path / "b")
    art = [a for a in b.artifacts() if a.source.endswith(f"{CID}/config.json")]
    assert art[0].status.value == "error" and art[0].path is None and "cannot be redacted" in art[0].message
    rec, = containers.read(b, NodeFacts()).facts["containers"]
    # the spec could not be read: its hooks are unknown (None), not "no hooks" (issue 14)
    assert rec["hooks"] is None and rec["linux_devices"] is None and rec["cgroup"]["version"] == 2
    assert rec["config"]["status"] == "error" and rec["config"]["detail"].startswith("not valid JSON")
    assert rec["device_plugin_socket_mount"] is None  # unknown, not "has no such mount"


# -- parsers ---------------------------------------------------------------------------------------
#: the device plugin DaemonSet's hostPath volume (NVIDIA/k8s-device-plugin deployments/static
#: nvidia-device-plugin.yml) as containerd's CRI plugin writes it into config.json
PLUGIN_MOUNT = {"destination": "/var/lib/kubelet/device-plugins", "type": "bind",
                "source": "/var/lib/kubelet/device-plugins", "options": ["rbind", "rprivate", "rw"]}


def _bind(dest: str, src: str, **kw) -> dict:
    return {"destination": dest, "type": "bind", "source": src, "options": ["rbind", "rprivate", "rw"], **kw}


@pytest.mark.parametrize("mounts, want", [
    ([PLUGIN_MOUNT], True),
    ([_bind("/var/lib/kubelet", "/var/lib/kubelet")], True),  # a parent, same host path
    ([_bind("/var/lib/kubelet/device-plugins/", "/var/lib/kubelet//device-plugins")], True),
    ([_bind("var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins")], True),  # relative: from "/"
    ([{**PLUGIN_MOUNT, "type": None, "options": ["bind", "ro"]}], True),  # CRI-O / runc: the option says bind
    ([_bind("/var/lib/kubelet/device-plugins", "/var/snap/microk8s/common/var/lib/kubelet/device-plugins")], True),
    ([_bind("/var/lib/kubelet/device-plugins", "/var/lib/k0s/kubelet/device-plugins")], True),
    # a tenant's own volumes at the path: emptyDir and subPath sources live under the pod's directory
    ([_bind("/var/lib/kubelet/device-plugins",
            "/var/lib/kubelet/pods/6b1e0c55/volumes/kubernetes.io~empty-dir/device-plugins")], False),
    ([_bind("/var/lib/kubelet", "/var/lib/kubelet/pods/6b1e0c55/volumes/kubernetes.io~empty-dir/kubelet")], False),
    ([{"destination": "/var/lib/kubelet/device-plugins", "type": "tmpfs", "source": "tmpfs"}], False),
    ([_bind("/var/lib/kubelet/device-plugins", "/srv/plugins")], False),
    ([_bind("/var/lib/kubelet/device-plugins", "var/lib/kubelet/device-plugins")], False),  # not a host path
    ([_bind("/var/lib/kubelet/device-plugins/kubelet.sock", "/var/lib/kubelet/device-plugins/kubelet.sock")],
     False),  # the socket alone: the plugin cannot create its own beside it
    ([_bind("/host/var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins")], False),
    ([PLUGIN_MOUNT, {"destination": "/var/lib/kubelet", "type": "tmpfs", "source": "tmpfs"}], False),  # hidden
    ([{"destination": "/var/lib/kubelet", "type": "tmpfs", "source": "tmpfs"}, PLUGIN_MOUNT], True),
    ([{"destination": 7, "source": None}, "x", None, {}], False),
    ("not a list", False),
])
def test_device_plugin_socket_mount(mounts, want):
    assert cp.device_plugin_socket_mount({"mounts": mounts}) is want


def test_device_plugin_socket_mount_in_the_record(node, tmp_path):
    spec = _spec(mounts=[_bind("/etc/hosts", "/var/lib/kubelet/pods/1/etc-hosts"), PLUGIN_MOUNT])
    _w(node / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/config.json", json.dumps(spec))
    rec, = containers.read(_acquire(node, tmp_path / "b"), NodeFacts()).facts["containers"]
    assert rec["device_plugin_socket_mount"] is True
    assert cp.device_plugin_socket_mount({}) is False and cp.device_plugin_socket_mount([]) is False


@pytest.mark.corpus
def test_device_plugin_socket_mount_on_real_specs(real_inputs):
    """Real config.json files (Docker/moby bind mounts of /etc/hosts and friends, runc's example) mount no
    kubelet socket directory; the same Docker spec with the DaemonSet's hostPath added does."""
    specs = {}
    for path in sorted((real_inputs / "oci").glob("*.json")):
        try:
            specs[path.name] = json.loads(path.read_text())
        except ValueError:
            continue
    with_mounts = [n for n, s in specs.items() if isinstance(s, dict) and s.get("mounts")]
    assert "nvidia-ctk-tests-input-config.clone3.json" in with_mounts and len(with_mounts) >= 4
    assert {n: cp.device_plugin_socket_mount(s) for n, s in specs.items()} == {n: False for n in specs}
    docker = specs["nvidia-ctk-tests-input-config.clone3.json"]
    assert any(m.get("type") == "bind" for m in docker["mounts"])
    assert cp.device_plugin_socket_mount({**docker, "mounts": docker["mounts"] + [PLUGIN_MOUNT]}) is True
    assert cp.device_plugin_socket_mount(redact.redact_spec({**docker, "mounts": [PLUGIN_MOUNT] + docker["mounts"]}))
def test_runc_runes_and_wildcards():
    rules = cp.state_rules({"config": {"cgroups": {"devices": [
        {"type": 97, "major": -1, "minor": -1, "permissions": "rwm", "allow": False},
        {"type": 98, "major": 8, "minor": -1, "permissions": "m", "allow": True},
        {"type": 99, "major": 195, "minor": 255, "permissions": "rw", "allow": True}]}}})
    assert [(r["type"], r["major"], r["minor"], r["allow"]) for r in rules] == \
        [("a", None, None, False), ("b", 8, None, True), ("c", 195, 255, True)]


def test_devices_list():
    text = "a *:* rwm\nc 195:* m\nc 195:0 rw\nbogus line\nb 8:0 r\n"
    assert cp.parse_devices_list(text) == [
        {"allow": True, "type": "a", "major": None, "minor": None, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": None, "access": "m"},
        {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"},
        {"allow": True, "type": "b", "major": 8, "minor": 0, "access": "r"}]


def test_url_credentials_and_env_allowlist():
    assert redact.redact_url_credentials("x https://u:p@ss@host/a?b=c@d y") == "x https://<redacted>@host/a?b=c@d y"
    assert redact.redact_url_credentials("mailto me@example.com") == "mailto me@example.com"
    env = redact.redact_env(["NVIDIA_DRIVER_CAPABILITIES=all", "CUDA_VERSION=12.4", "KUBERNETES_SERVICE_PORT_HTTPS=443",
                         "KUBERNETES_TOKEN=x", "NOEQUALS"])
    assert env[:3] == ["NVIDIA_DRIVER_CAPABILITIES=all", "CUDA_VERSION=12.4", "KUBERNETES_SERVICE_PORT_HTTPS=443"]
    assert env[3] == "KUBERNETES_TOKEN=" + redact.redacted("x") and env[4] == "NOEQUALS"
    assert redact.redacted("x") == redact.redacted("x") != redact.redacted("y")


def _walk_redact(obj):
    """The plain recursive walk that :func:`redact.redact_spec` shortcuts (every string through
    ``redact_text``): the reference its fast paths must agree with."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "env" and isinstance(v, list):
                out[k] = redact.redact_env(v)
            elif k == "args" and isinstance(v, list):
                out[k] = redact.redact_args(v)
            elif k in ("annotations", "labels") and isinstance(v, dict):
                out[k] = {ak: (_walk_redact(av) if redact.kept_annotation(ak) else
                               redact.redacted(av if isinstance(av, str) else json.dumps(av, sort_keys=True)))
                          for ak, av in v.items()}
            elif k == "labels" and isinstance(v, list):
                out[k] = [_walk_redact(x) if not isinstance(x, str) else redact._redact_label(x) for x in v]
            else:
                out[k] = _walk_redact(v)
        return out
    if isinstance(obj, list):
        return [_walk_redact(v) for v in obj]
    if isinstance(obj, str):
        return redact.redact_text(obj, p_flag=False)
    return obj


# strings made of the redaction rules' markers and their near misses (K is the Kelvin sign, which
# lowercases to k; \0 is the separator of the list shortcut)
_PIECES = st.sampled_from(["://", "u:p@", "@", "=", "b", "B", "Bearer ", "basic", "BASIC\t", "token", "TOKEN", "token=",
                           "a.passw=", "=v", "Bearer x", "http://u:p@h/",
                           "\u212aey", "key", "passwd", "auth", "credential", "-p", " ", "x", "/", "\0", "\u0130",
                           "\u03a3", "é", "env", "args"])
_TEXT = st.lists(_PIECES, max_size=8).map("".join)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda c: st.lists(c, max_size=5) | st.dictionaries(
                         st.sampled_from(["env", "args", "annotations", "labels", "mounts", "x", "cdi.k8s.io/a"]) | _TEXT,
                         c, max_size=5), max_leaves=25)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_redact_spec_shortcuts_agree_with_the_plain_walk(spec):
    assert redact.redact_spec(spec) == _walk_redact(spec)


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(_TEXT, max_size=4))
def test_redaction_shortcut_tests_never_skip_a_change(texts):
    """``_plain`` / ``_text_unchanged`` say "unchanged" only when ``redact_text`` changes nothing, and
    for a list only when it changes no item."""
    for text in texts:
        if redact._plain(text) or redact._text_unchanged(text):
            assert redact.redact_text(text, p_flag=False) == text
    if redact._text_unchanged("\0".join(texts)):
        assert [redact.redact_text(t, p_flag=False) for t in texts] == texts


def test_drop_in_reset_and_policy_order():
    got = cp.parse_unit_device_settings(["DevicePolicy=auto\nDeviceAllow=/dev/null rw\n",
                                         "[Scope]\nDeviceAllow=\nDeviceAllow=char-pts rwm\n",
                                         "DevicePolicy=strict\n"])
    assert got == {"policy": "strict", "allow": ["char-pts rwm"]}


def test_is_gpu_routes():
    assert not cp.is_gpu({"env": {"NVIDIA_VISIBLE_DEVICES": "void"}})
    assert cp.is_gpu({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}})
    # legacy mode puts the prestart hook on every container (pause, CPU-only): the hook alone is no GPU
    assert not cp.is_gpu({"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": []}]}})
    assert cp.is_gpu({"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": []}]},
                      "env": {"NVIDIA_VISIBLE_DEVICES": "GPU-5d6f"}})
    assert cp.is_gpu({"hooks": {"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": []}]}})
    assert cp.is_gpu({"dev_entries": [{"path": "/dev/nvidiactl", "kind": "c"}]})
    assert not cp.is_gpu({"dev_entries": [{"path": "/dev/nvidiactl", "kind": "symlink"}]})


def test_nvidia_majors_from_proc_devices(tmp_path):
    _w(tmp_path / "proc/devices", "Character devices:\n195 nvidia-frontend\n237 nvidia-caps\n"
                                  "508 nvidia-uvm\n 10 misc\n\nBlock devices:\n259 nvidia-fake-block\n")
    assert probe.nvidia_majors(tmp_path) == {195, 237, 508}
    assert probe.nvidia_majors(tmp_path / "missing") == {195}


def test_read_skips_a_broken_record(tmp_path):
    w = BundleWriter(tmp_path / "b")
    w.write_json("containers/k8s.io/x/record.json", [1, 2], source="x", method="containers")
    w.finish()
    r = containers.read(Bundle.open(tmp_path / "b"), NodeFacts())
    assert r.facts == {} and r.problems[0]["artifact"] == "containers/k8s.io/x/record.json"


def test_probe_deadline_kills_a_stuck_child(tmp_path, monkeypatch):
    """A child stuck in open() (a hung driver, a FUSE /dev) is killed at the deadline."""
    _w(tmp_path / "sys/fs/cgroup/devices/x/cgroup.procs", "")
    monkeypatch.setattr(probe, "_CHILD", "import json, time\n"
                        "print(json.dumps({'stage': 'joined'}), flush=True)\n"
                        "print(json.dumps({'i': 0, 'result': 'EPERM'}), flush=True)\n"
                        "time.sleep(60)\n")
    t0 = time.monotonic()
    res, report = probe.probe(tmp_path, 1, ["/sys/fs/cgroup/devices/x"],
                              [("/dev/nvidia0", 195, 0), ("/dev/nvidia1", 195, 1), ("/dev/nvidiactl", 195, 255)],
                              timeout=1.0)
    assert time.monotonic() - t0 < 3
    assert res == ["EPERM", "timeout", "not-run"] and report["timed_out"] and report["exit"] == -9


def test_dev_scan_keeps_the_known_names_whether_the_listing_ends_or_stops(tmp_path, monkeypatch):
    """The well-known names found in a listing read to its end are those an lstat finds; a listing cut
    short by the bounds still keeps every one that exists (looked up directly)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in ("nvidia0", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-junk1", "nvidia-junk2", "tty", "null"):
        (dev / n).touch()
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECTORY)
    try:
        want = lambda n: n.startswith("nvidia")  # noqa: E731
        problems: list = []
        assert probe._scan(fd, "/dev", want, problems, probe.WELL_KNOWN) == [
            "nvidia-junk1", "nvidia-junk2", "nvidia-uvm", "nvidia0", "nvidia7", "nvidiactl"]
        assert problems == []
        monkeypatch.setattr(probe, "MAX_DEV_SEEN", 1)  # the listing stops after one entry
        got = probe._scan(fd, "/dev", want, problems, probe.WELL_KNOWN)
        assert {"nvidia0", "nvidia7", "nvidiactl", "nvidia-uvm"} <= set(got) and len(problems) == 1
        assert "only the first 1 entries scanned" in problems[0].notes[0]
    finally:
        os.close(fd)
