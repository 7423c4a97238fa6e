"""Generate a fleet of evidence bundles the way a fleet really produces them: by running the real
collector (:func:`forensics.ops.pipeline.collect`) over one host root per node.

Each host root is a copy of the sample node ``samples/node3-gpu`` varied per node:

- ``/etc/hostname``, ``/etc/machine-id``, the boot ID and (for a few nodes) the kernel;
- a real binary journal, built with systemd-journal-remote (samples/journalbuild.py) from the sample's
  Journal Export text with the node's own host name, machine ID and boot ID, and the node's story:
  snapd's refresh requesting a daemon-reload (``snapd.service``), unattended-upgrades upgrading
  nvidia-container-toolkit (``apt-daily-upgrade.service``, with matching apt history and dpkg.log
  lines), or an operator's ``systemctl daemon-reload`` in a login session; on a broken node the
  kubelet's readiness probe then fails with ``Failed to initialize NVML: Unknown Error``;
- containerd's ``config.toml`` (``SystemdCgroup``, ``enable_cdi``, the nvidia runtime), the NVIDIA
  toolkit's ``config.toml`` (``mode``), ``/proc/devices``, the host's ``/dev/nvidia*`` nodes and
  ``/dev/char`` links;
- containers as containerd and runc leave them on disk: bundle ``config.json`` and ``options.json``,
  runc ``state.json``, ``/proc/<pid>/stat`` and the init's ``/dev`` (real character device nodes, so
  this needs root), the cgroup v1 ``devices.list`` and systemd's transient ``DeviceAllow=`` drop-in:
  the device plugin, a GPU trainer and a sidecar without GPU.

The node classes (what ``gpu-forensics fleet`` must say):

- ``broken``: legacy hook injection under ``SystemdCgroup = true``; a reload already revoked the GPU
  (``devices.list`` lacks the NVIDIA rules) and the journal shows the NVML error after the reload;
- ``exposed``: the same settings, containers created after the last reload (the hook's rules still
  in place): one reload away;
- ``safe``: CDI (toolkit ``mode = "cdi"``, ``enable_cdi``, ``DEVICE_LIST_STRATEGY=cdi-cri``, GPUs in the
  spec), or the cgroupfs driver (``SystemdCgroup = false``), where a reload rewrites nothing.

Usage: ``python3 tests/fleetgen.py OUT_DIR N`` (needs root and systemd-journal-remote).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import stat
import sys
import tempfile
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
SAMPLE = PROJECT / "samples" / "node3-gpu"
EXPORT = PROJECT / "samples" / "node3-gpu.journal.export"
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "samples"))

from journalbuild import build_journal, export_entry  # noqa: E402

BOOT_US = 1766621564 * 1_000_000          #: the sample's boot (btime), µs since the epoch
KST = timezone(timedelta(hours=9))        #: the sample's zone, Asia/Seoul
#: the sample's own scenario entries, replaced per node: snapd's refresh and the trainer's probe
#: lines (2026-09-02 04:03..04:06 UTC), and the operator's reload (2026-10-23 ~09:28 UTC)
SCENARIO_SPANS = ((1788321800_000000, 1788321960_000000), (1791940890_000000, 1791940930_000000))
#: and, wherever they are, lines that would open an incident or date a reload of the sample's own
SCENARIO_WORDS = ("NVML", "Reloading", "SyncLoop (probe)", "Probe failed", "daemon-reload", "CUDA")
#: what is taken from the sample node (its node facts and package history); the runtime, containers,
#: cgroups and pod logs are each node's own (the sample may carry its own, which must not leak in)
SAMPLE_PARTS = ("etc/hostname", "etc/localtime", "etc/machine-id", "etc/os-release", "etc/timezone", "proc/stat",
                "proc/version", "proc/sys/kernel/osrelease", "proc/sys/kernel/random/boot_id", "usr/lib/os-release",
                "usr/share/zoneinfo", "var/lib/dpkg", "var/log/apt", "var/log/dpkg.log", "var/log/dpkg.log.1",
                "var/log/dpkg.log.2.gz", "var/log/dpkg.log.3.gz", "var/log/dpkg.log.4.gz")
SNAPD_AT = datetime(2026, 9, 2, 4, 5, 13, tzinfo=timezone.utc)
PACKAGE_AT = datetime(2026, 10, 13, 21, 12, 4, tzinfo=timezone.utc)  #: 2026-10-14 06:12:04 KST
HUMAN_AT = datetime(2026, 11, 3, 2, 0, 31, tzinfo=timezone.utc)
BROKEN_CREATED = datetime(2026, 8, 30, 9, 0, tzinfo=timezone.utc)
FRESH_CREATED = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)
POOLS = ("gpu-a100", "gpu-h100", "infer-l4")
#: class of node i (i % 10): 4 broken, 3 exposed, 3 safe (2 CDI, 1 cgroupfs)
CYCLE = ("broken", "exposed", "safe-cdi", "broken", "exposed", "safe-cgroupfs", "broken", "exposed",
         "safe-cdi", "broken")
PROC_DEVICES = ("Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n 10 misc\n136 pts\n195 nvidia\n"
                "195 nvidia-frontend\n226 drm\n508 nvidia-uvm\n511 nvidia-caps\n\nBlock devices:\n  8 sd\n259 blkext\n")
HOST_GPU = (("nvidia0", 195, 0), ("nvidia1", 195, 1), ("nvidiactl", 195, 255), ("nvidia-uvm", 508, 0))
CONTAINERD = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = {cdi}
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = {sc}
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
      BinaryName = "/usr/bin/nvidia-container-runtime"
      SystemdCgroup = {sc}
"""
TOOLKIT = ('disable-require = false\n\n[nvidia-container-cli]\n  environment = []\n  ldconfig = "@/sbin/ldconfig.real"\n\n'
           '[nvidia-container-runtime]\n  log-level = "info"\n  mode = "{mode}"\n  runtimes = ["runc"]\n')
CDI_SPEC = """cdiVersion: 0.6.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
"""
#: runc's default allowlist for a Kubernetes container, as runc records it (type runes: 97 a, 99 c)
RUNC_DEFAULTS = [(99, 1, 3), (99, 1, 5), (99, 1, 7), (99, 1, 8), (99, 1, 9), (99, 5, 0), (99, 5, 1), (99, 5, 2),
                 (99, 10, 200), (99, 136, -1)]
BASE_DROPIN = ["/dev/char/1:3 rwm", "/dev/char/1:5 rwm", "/dev/char/1:7 rwm", "/dev/char/1:8 rwm",
               "/dev/char/1:9 rwm", "/dev/char/5:0 rwm", "/dev/char/5:1 rwm", "/dev/char/5:2 rwm",
               "/dev/char/10:200 rwm", "char-136 rwm", "char-* m", "block-* m"]
LEGACY_HOOK = {"path": "/usr/bin/nvidia-container-runtime-hook",
               "args": ["/usr/bin/nvidia-container-runtime-hook", "prestart"]}
CDI_HOOK = {"path": "/usr/bin/nvidia-cdi-hook",
            "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]}


# -- the journal -----------------------------------------------------------------------------------
def base_entries() -> list[dict]:
    """The sample's journal entries (field dicts, in export order) without its scenario entries."""
    out = []
    for block in EXPORT.read_text().split("\n\n"):
        if not block.strip():
            continue
        e = dict(line.split("=", 1) for line in block.splitlines())
        rt = int(e["__REALTIME_TIMESTAMP"])
        if not any(lo <= rt <= hi for lo, hi in SCENARIO_SPANS) and \
                not any(w in e.get("MESSAGE", "") for w in SCENARIO_WORDS):
            out.append(e)
    return out


def _us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def _pid1(at: datetime, message: str, func: str = "invoke_main_loop", line: int = 1961) -> dict:
    return {"__REALTIME_TIMESTAMP": _us(at), "PRIORITY": 6, "SYSLOG_FACILITY": 3, "SYSLOG_IDENTIFIER": "systemd",
            "_PID": 1, "_COMM": "systemd", "_TRANSPORT": "journal", "MESSAGE": message, "_UID": 0, "_GID": 0,
            "_SYSTEMD_UNIT": "init.scope", "_SYSTEMD_CGROUP": "/init.scope", "_EXE": "/usr/lib/systemd/systemd",
            "_CMDLINE": "/sbin/init", "CODE_FILE": "src/core/main.c" if func != "log_caller" else "src/core/dbus-manager.c",
            "CODE_FUNC": func, "CODE_LINE": line}


def _unit_line(at: datetime, unit: str, ident: str, pid: int, message: str) -> dict:
    return {"__REALTIME_TIMESTAMP": _us(at), "PRIORITY": 6, "SYSLOG_FACILITY": 3, "SYSLOG_IDENTIFIER": ident,
            "_PID": pid, "_COMM": ident, "_TRANSPORT": "stdout", "MESSAGE": message, "_SYSTEMD_UNIT": unit, "_UID": 0}


def reload_entries(at: datetime, unit: str, pid: int, ms: int) -> list[dict]:
    """PID 1's three lines for one daemon-reload requested by ``systemctl`` in ``unit`` (systemd 255)."""
    return [_pid1(at, f"Reloading requested from client PID {pid} ('systemctl') (unit {unit})...", "log_caller", 1597),
            _pid1(at + timedelta(microseconds=3000), "Reloading..."),
            _pid1(at + timedelta(milliseconds=ms), f"Reloading finished in {ms} ms.", line=1987)]


def outage_entries(at: datetime, pod: str) -> list[dict]:
    """The kubelet's readiness lines around a reload at ``at``: ready before, NVML errors after."""
    kubelet = lambda t, m: _unit_line(t, "kubelet.service", "kubelet", 2113, m)  # noqa: E731
    fail = (f'"Probe failed" probeType="Readiness" pod="ml/{pod}" podUID="3f9d2a1c-5b7e-4c8d-9e0f-1a2b3c4d5e6f" '
            f'containerName="trainer" probeResult="failure" output="Failed to initialize NVML: Unknown Error\\n"')
    return [kubelet(at - timedelta(seconds=15), f'"SyncLoop (probe)" probe="readiness" status="ready" pod="ml/{pod}"'),
            kubelet(at + timedelta(seconds=14), fail), kubelet(at + timedelta(seconds=24), fail),
            kubelet(at + timedelta(seconds=34), f'"SyncLoop (probe)" probe="readiness" status="" pod="ml/{pod}"')]


def story_entries(story: str, at: datetime, rng: random.Random) -> list[dict]:
    """The journal lines of one trigger at ``at``: ``snapd``, ``package`` or ``human``."""
    pid = rng.randrange(20000, 90000)
    if story == "snapd":
        snapd = lambda t, m: _unit_line(t, "snapd.service", "snapd", 1848, m)  # noqa: E731
        return [snapd(at - timedelta(seconds=33), 'storehelpers.go:923: auto-refresh: refreshing "lxd" from revision '
                                                 '29351 to 31333'),
                *reload_entries(at, "snapd.service", pid, rng.randrange(150, 300)),
                snapd(at + timedelta(seconds=1), 'handlers.go:469: Reported install problem for "lxd" as none')]
    if story == "package":
        uu = lambda t, m: _unit_line(t, "apt-daily-upgrade.service", "unattended-upgrade", pid - 40, m)  # noqa: E731
        return [uu(at - timedelta(seconds=20), "Packages that will be upgraded: nvidia-container-toolkit "
                                               "nvidia-container-toolkit-base"),
                *reload_entries(at, "apt-daily-upgrade.service", pid, rng.randrange(150, 300))]
    if story == "human":
        sudo = _unit_line(at - timedelta(seconds=1), "session-7.scope", "sudo", pid - 2,
                          "      ops : TTY=pts/0 ; PWD=/home/ops ; USER=root ; COMMAND=/usr/bin/systemctl daemon-reload")
        return [sudo, *reload_entries(at, "session-7.scope", pid, rng.randrange(150, 300))]
    raise ValueError(story)


def write_journal(root: Path, host: str, machine_id: str, boot_id: str, extra: list[dict], base: list[dict]) -> None:
    """Build ``<root>/var/log/journal/<machine-id>/system.journal`` from ``base`` plus ``extra``."""
    entries = []
    for e in base + extra:
        e = dict(e)
        rt = int(e["__REALTIME_TIMESTAMP"])
        e.update({"__REALTIME_TIMESTAMP": rt, "__MONOTONIC_TIMESTAMP": rt - BOOT_US, "_BOOT_ID": boot_id,
                  "_MACHINE_ID": machine_id, "_HOSTNAME": host})
        entries.append(e)
    entries.sort(key=lambda e: e["__REALTIME_TIMESTAMP"])
    order = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID", "_MACHINE_ID", "_HOSTNAME")
    data = b"".join(export_entry({**{k: e[k] for k in order}, **{k: v for k, v in e.items() if k not in order}})
                    for e in entries)
    build_journal(data, root / "var/log/journal" / machine_id / "system.journal")


# -- package logs ----------------------------------------------------------------------------------
def package_logs(root: Path, at: datetime) -> None:
    """unattended-upgrades' apt history stanza and dpkg.log lines for the toolkit upgrade (node time)."""
    t = at.astimezone(KST)
    apt_fmt = "%Y-%m-%d  %H:%M:%S"  # apt's history.log puts two spaces between date and time
    s, e = (t - timedelta(seconds=9)).strftime(apt_fmt), (t + timedelta(seconds=6)).strftime(apt_fmt)
    with open(root / "var/log/apt/history.log", "a") as f:
        f.write(f"\nStart-Date: {s}\nCommandline: /usr/bin/unattended-upgrade\n"
                "Upgrade: nvidia-container-toolkit-base:amd64 (1.17.8-1, 1.17.9-1), nvidia-container-toolkit:amd64 "
                f"(1.17.8-1, 1.17.9-1)\nEnd-Date: {e}\n")
    lines = []
    steps = (("upgrade", "nvidia-container-toolkit-base"), ("upgrade", "nvidia-container-toolkit"),
             ("configure", "nvidia-container-toolkit-base"), ("configure", "nvidia-container-toolkit"))
    for i, (action, pkg) in enumerate(steps):
        stamp = (t - timedelta(seconds=8 - 2 * i)).strftime("%Y-%m-%d %H:%M:%S")
        if action == "upgrade":
            lines.append(f"{stamp} startup archives unpack" if i == 0 else None)
            lines.append(f"{stamp} upgrade {pkg}:amd64 1.17.8-1 1.17.9-1")
            lines.append(f"{stamp} status unpacked {pkg}:amd64 1.17.9-1")
        else:
            lines.append(f"{stamp} startup packages configure" if i == 2 else None)
            lines.append(f"{stamp} configure {pkg}:amd64 1.17.9-1 <none>")
            lines.append(f"{stamp} status installed {pkg}:amd64 1.17.9-1")
    with open(root / "var/log/dpkg.log", "a") as f:
        f.write("".join(line + "\n" for line in lines if line))


# -- runtime configuration and containers ----------------------------------------------------------
def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _chr(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def runtime_files(root: Path, kind: str) -> None:
    """containerd and toolkit configs, CDI spec, /proc/devices and the host's NVIDIA nodes for ``kind``."""
    cdi = kind == "safe-cdi"
    sc = "false" if kind == "safe-cgroupfs" else "true"
    _w(root / "etc/containerd/config.toml", CONTAINERD.format(sc=sc, cdi=str(cdi).lower()))
    _w(root / "etc/nvidia-container-runtime/config.toml", TOOLKIT.format(mode="cdi" if cdi else "legacy"))
    if cdi:
        _w(root / "var/run/cdi/nvidia.yaml", CDI_SPEC)
    _w(root / "proc/devices", PROC_DEVICES)
    (root / "dev/char").mkdir(parents=True, exist_ok=True)
    for name, major, minor in HOST_GPU:
        _chr(root / "dev" / name, major, minor)
        os.symlink(f"../{name}", root / f"dev/char/{major}:{minor}")


#: the device plugin DaemonSet's hostPath volume as containerd writes it into the spec: the kubelet's
#: device-plugin socket directory at the same path (NVIDIA/k8s-device-plugin deployments/static)
PLUGIN_MOUNT = {"destination": "/var/lib/kubelet/device-plugins", "type": "bind",
                "source": "/var/lib/kubelet/device-plugins", "options": ["rbind", "rprivate", "rw"]}


def _rules(gpu: list[tuple[str, int, int]]) -> list[dict]:
    """runc's ``config.cgroups.devices``: deny all, the spec's GPU rules, then runc's defaults."""
    out = [{"type": 97, "major": -1, "minor": -1, "permissions": "rwm", "allow": False}]
    out += [{"type": 99, "major": M, "minor": m, "permissions": "rw", "allow": True} for _, M, m in gpu]
    out += [{"type": t, "major": M, "minor": m, "permissions": "rwm", "allow": True} for t, M, m in RUNC_DEFAULTS]
    return out


def container(root: Path, node_i: int, cid: str, *, pod: str, name: str, image: str, kind: str, env: dict,
              gpu: list[tuple[str, int, int]], created: datetime, revoked: bool, pid: int,
              mounts: list[dict] | None = None) -> None:
    """One container's on-disk state under ``root``: containerd bundle, runc state, /proc, cgroup, drop-in.

    ``kind``: the node class (decides the injection route and the cgroup driver); ``gpu``: the NVIDIA
    nodes inside it; ``revoked``: a reload already rebuilt its devices.list without the hook's rules;
    ``mounts``: the spec's ``mounts`` (the device plugin's hostPath of the kubelet's socket directory)."""
    systemd = kind != "safe-cgroupfs"
    in_spec = kind == "safe-cdi" and bool(gpu)
    hooked = bool(gpu) and not in_spec
    pod_uid = f"{node_i:04x}{zlib.crc32(pod.encode()):08x}"
    if systemd:
        parent = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_uid}.slice"
        cg = f"/sys/fs/cgroup/devices{parent}/cri-containerd-{cid}.scope"
        cgroups_path = f"kubepods-burstable-pod{pod_uid}.slice:cri-containerd:{cid}"
    else:
        cg = f"/sys/fs/cgroup/devices/kubepods/burstable/pod{pod_uid}/{cid}"
        cgroups_path = f"/kubepods/burstable/pod{pod_uid}/{cid}"
    spec_gpu = gpu if in_spec else []
    spec = {
        "ociVersion": "1.1.0",
        "process": {"args": ["/bin/sh", "-c", "sleep infinity"], "cwd": "/",
                    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"HOSTNAME={pod}",
                            *(f"{k}={v}" for k, v in env.items())]},
        "root": {"path": "rootfs"},
        "mounts": mounts or [],
        "hooks": {"prestart": [LEGACY_HOOK] if hooked else [], "createContainer": [CDI_HOOK] if in_spec else []},
        "annotations": {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-name": pod,
                        "io.kubernetes.cri.sandbox-namespace": "kube-system" if "plugin" in pod else "ml",
                        "io.kubernetes.cri.container-name": name, "io.kubernetes.cri.image-name": image,
                        **({"cdi.k8s.io/nvidia-device-plugin_" + cid[:8]: "nvidia.com/gpu=0"} if in_spec else {})},
        "linux": {"cgroupsPath": cgroups_path,
                  "devices": [{"path": p, "type": "c", "major": M, "minor": m, "fileMode": 438, "uid": 0, "gid": 0}
                              for p, M, m in spec_gpu],
                  "resources": {"devices": [{"allow": False, "access": "rwm"}]
                                + [{"allow": True, "type": "c", "major": M, "minor": m, "access": "rw"}
                                   for _, M, m in spec_gpu]}},
    }
    bundle = f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}"
    _w(root / bundle.lstrip("/") / "config.json", json.dumps(spec, indent=1))
    _w(root / bundle.lstrip("/") / "options.json",
       json.dumps({"binary_name": "/usr/bin/nvidia-container-runtime", "systemd_cgroup": systemd}))
    start = 100000 + node_i * 10 + pid % 10
    state = {"id": cid, "init_process_pid": pid, "init_process_start": start,
             "created": created.strftime("%Y-%m-%dT%H:%M:%S.123456789Z"),
             "config": {"cgroups": {"Systemd": systemd, "devices": _rules(spec_gpu)}, "labels": [f"bundle={bundle}"]},
             "cgroup_paths": {"devices": cg}}
    _w(root / f"run/containerd/runc/k8s.io/{cid}/state.json", json.dumps(state))
    _w(root / f"proc/{pid}/stat", f"{pid} (sleep) S " + " ".join(["0"] * 18) + f" {start} 0 0\n")
    (root / f"proc/{pid}/root/dev").mkdir(parents=True, exist_ok=True)
    for p, M, m in gpu:
        _chr(root / f"proc/{pid}/root{p}", M, m)
    base = ["a *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", "c 5:0 rwm",
            "c 5:1 rwm", "c 5:2 rwm", "c 10:200 rwm", "c 136:* rwm"]
    keep = [] if (revoked or not gpu) else [f"c {M}:{m} rw" for _, M, m in gpu]
    _w(root / cg.lstrip("/") / "devices.list", "\n".join(base + keep) + "\n")
    if systemd:
        scope = f"run/systemd/transient/cri-containerd-{cid}.scope"
        _w(root / scope, f"# This is a transient unit file, created programmatically via the systemd API. Do not edit.\n"
                         f"[Unit]\nDescription=libcontainer container {cid}\n\n[Scope]\n"
                         f"Slice={parent[1:].rsplit('/', 1)[-1]}\n"
                         "Delegate=yes\nDevicePolicy=strict\n")
        allow = BASE_DROPIN + [f"/dev/char/{M}:{m} rw" for _, M, m in spec_gpu]
        _w(root / f"{scope}.d/50-DeviceAllow.conf", "# This is a drop-in unit file extension, created via "
           '"systemctl set-property"\n# or an equivalent operation. Do not edit.\n[Scope]\nDeviceAllow=\n'
           + "".join(f"DeviceAllow={a}\n" for a in allow))
        _w(root / f"{scope}.d/50-DevicePolicy.conf", "[Scope]\nDevicePolicy=strict\n")


def containers(root: Path, i: int, kind: str, pod: str, created: datetime, revoked: bool) -> None:
    """The device plugin, the trainer and a sidecar without GPU."""
    strategy = "cdi-cri" if kind == "safe-cdi" else "envvar"
    all_gpu = [("/dev/nvidia0", 195, 0), ("/dev/nvidia1", 195, 1), ("/dev/nvidiactl", 195, 255),
               ("/dev/nvidia-uvm", 508, 0)]
    hx = f"{i:06x}"
    container(root, i, f"d1{hx}" + "a" * 56, pod=f"nvidia-device-plugin-daemonset-{hx[-5:]}",
              name="nvidia-device-plugin-ctr",
              image="nvcr.io/nvidia/k8s-device-plugin:v0.17.1", kind=kind, gpu=all_gpu, created=created,
              revoked=revoked, pid=4100 + i % 7, mounts=[PLUGIN_MOUNT],
              env={"NVIDIA_VISIBLE_DEVICES": "all", "DEVICE_LIST_STRATEGY": strategy, "PASS_DEVICE_SPECS": "false",
                   "NVIDIA_DRIVER_ROOT": "/", "FAIL_ON_INIT_ERROR": "true", "MIG_STRATEGY": "none"})
    container(root, i, f"e2{hx}" + "b" * 56, pod=pod, name="trainer", image="nvcr.io/nvidia/pytorch:24.08-py3",
              kind=kind, gpu=all_gpu[:1] + all_gpu[2:], created=created, revoked=revoked, pid=5200 + i % 7,
              env={"NVIDIA_VISIBLE_DEVICES": "GPU-8d0b4e66-1b7a-4b9f-a1c3-" + f"{i:012x}",
                   "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})
    container(root, i, f"f3{hx}" + "c" * 56, pod=pod, name="log-shipper", image="docker.io/fluent/fluent-bit:3.1",
              kind=kind, gpu=[], created=created, revoked=revoked, pid=6300 + i % 7, env={})


# -- one node --------------------------------------------------------------------------------------
def plan(n: int, seed: int = 7) -> list[dict]:
    """What each of ``n`` nodes will be: ``{"i", "node", "pool", "kind", "expected", "story", "at"}``.

    Broken nodes alternate between the snapd story and the package story; the last broken node of a
    fleet of 10 or more had an operator's reload instead. Half the other nodes saw snapd's reload too
    (no GPU lost there: no hook-injected container was running, or the node is safe)."""
    rng = random.Random(seed)
    out = []
    broken = [i for i in range(n) if CYCLE[i % 10] == "broken"]
    for i in range(n):
        kind = CYCLE[i % 10]
        pool = POOLS[i % len(POOLS)]
        story = None
        if kind == "broken":
            k = broken.index(i)
            story = "human" if (n >= 10 and i == broken[-1]) else ("snapd" if k % 2 == 0 else "package")
        elif rng.random() < 0.5:
            story = "snapd"
        base = {"snapd": SNAPD_AT, "package": PACKAGE_AT, "human": HUMAN_AT}.get(story)
        jitter = {"snapd": 90, "package": 240, "human": 0}.get(story, 0)
        at = base + timedelta(seconds=rng.uniform(0, jitter), microseconds=rng.randrange(1000)) if base else None
        out.append({"i": i, "node": f"{pool}-{i:03d}", "pool": pool, "kind": kind,
                    "expected": kind.split("-")[0], "story": story, "at": at})
    return out


def make_root(root: Path, p: dict, base: list[dict]) -> None:
    """Build the host root of node ``p`` (an item of :func:`plan`) at ``root``."""
    for part in SAMPLE_PARTS:
        src, dst = SAMPLE / part, root / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink() or src.is_file():
            shutil.copy2(src, dst, follow_symlinks=False)
        elif src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
    rng = random.Random(p["i"])
    machine_id = f"{rng.getrandbits(128):032x}"
    boot = f"{rng.getrandbits(128):032x}"
    (root / "etc/hostname").write_text(p["node"] + "\n")
    (root / "etc/machine-id").write_text(machine_id + "\n")
    (root / "proc/sys/kernel/random/boot_id").write_text(
        f"{boot[:8]}-{boot[8:12]}-{boot[12:16]}-{boot[16:20]}-{boot[20:]}\n")
    if p["i"] % 17 == 4:  # a node that missed the last kernel roll-out
        (root / "proc/sys/kernel/osrelease").write_text("6.8.0-79-generic\n")
    pod = f"trainer-{p['i']}"
    extra = []
    if p["story"]:
        extra += story_entries(p["story"], p["at"], rng)
        if p["story"] == "package":
            package_logs(root, p["at"])
    if p["kind"] == "broken":
        extra += outage_entries(p["at"], pod)
    write_journal(root, p["node"], machine_id, boot, extra, base)
    runtime_files(root, p["kind"])
    revoked = p["kind"] == "broken"
    containers(root, p["i"], p["kind"], pod, BROKEN_CREATED if revoked else FRESH_CREATED, revoked)


def generate(out_dir: Path, n: int, *, seed: int = 7, tar_every: int = 4, work: Path | None = None) -> list[dict]:
    """Collect ``n`` node bundles into ``out_dir`` (every ``tar_every``-th as ``.tar.gz``, the rest as
    directories) with the real collector; each host root is built in ``work`` (a temporary
    directory by default) and removed once collected. Returns :func:`plan` items with ``"path"``
    (the bundle) added. Needs root (device nodes) and systemd-journal-remote."""
    from forensics.ops.pipeline import collect
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = base_entries()
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="fleetgen-")) if own else Path(work)
    items = plan(n, seed)
    try:
        for p in items:
            root = work / p["node"]
            make_root(root, p, base)
            ext = ".tar.gz" if tar_every and p["i"] % tar_every == tar_every - 1 else ""
            path, _, _ = collect(root, out_dir / f"{p['node']}{ext}",
                                 argv=["gpu-forensics", "collect", "--root", str(root)])
            p["path"] = str(path)
            shutil.rmtree(root)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return items


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    made = generate(Path(sys.argv[1]), int(sys.argv[2]))
    (Path(sys.argv[1]) / "expected.json").write_text(json.dumps(
        [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in p.items()} for p in made], indent=1))
    print(f"{len(made)} bundles in {sys.argv[1]}")
