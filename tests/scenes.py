"""Nodes of the failures issue 26 lists, and of kinds it does not, each built as the failure leaves a node:
a generated root of tests/nodegen.py (engine, containers, cgroups, a real journal built by
systemd-journal-remote) plus the scenario's own evidence, each in the form its writer uses:

- kernel lines as journald stores them (``_TRANSPORT=kernel``, ``SYSLOG_IDENTIFIER=kernel``, no ``_PID``),
  in the wordings of NVIDIA's open kernel modules and the kernel (docs/sources.md "NVIDIA kernel and
  driver wordings", "OOM");
  on a RHEL node only in /var/log/messages (rsyslog's RFC 3164 lines, the journal holding none);
- CRI log lines of the pods (/var/log/pods, kubelet's format) with the error as the public reports quote it;
- containerd's and PID 1's own lines (a unit failure, containerd's ``UpdateContainerResources``);
- the driver's state files (/proc/driver/nvidia/version in nv-procfs.c's layout, the libraries' names, sysfs
  PCI functions), dpkg.log in the node's zone, the kubelet's config.

:data:`SCENES` names each with the public report it is drawn from; :func:`build` makes one. The story
happens in the seconds before collection (nodegen's ``story_times``: containers created at ``created``, the
reload at ``t0`` = created + 2.25 s, the failure lines after it).
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import fleetgen as F
import nodegen as N

S = timedelta(seconds=1)
PCI = "0000:3b:00"                   #: the trainer's GPU, as the Xid line prints it
UUID = "GPU-8d0b4e66-1b7a-4b9f-a1c3-0000000b0b0b"  #: nodegen's trainer NVIDIA_VISIBLE_DEVICES
POD_UID = "5f0e9a2c-7b1d-4c3e-9a8f-1b2c3d4e5f60"


def kernel(at: datetime, message: str, priority: int = 3) -> dict:
    """A kernel line as journald stores what it read from /dev/kmsg (systemd-journald(8) "_TRANSPORT=kernel";
    no _PID, _UID or _COMM: the kernel is no process)."""
    return {"__REALTIME_TIMESTAMP": F._us(at), "PRIORITY": priority, "SYSLOG_FACILITY": 0, "SYSLOG_IDENTIFIER": "kernel",
            "_TRANSPORT": "kernel", "MESSAGE": message}


def unit_line(at: datetime, unit: str, message: str) -> dict:
    """PID 1's line about a unit (``UNIT=``), as unit_log_* writes it."""
    return {**F._pid1(at, message, "unit_log_failure_result", 5887), "UNIT": unit}


def containerd(at: datetime, msg: str, level: str = "info") -> dict:
    """containerd's logrus line on its stdout, journald transport ``stdout`` of containerd.service."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return F._unit_line(at, "containerd.service", "containerd", 812, f'time="{stamp}" level={level} msg="{msg}"')


def cri(at: datetime, msg: str, stream: str = "stderr") -> str:
    """One CRI log line (kubelet pkg/kubelet/kuberuntime/logs)."""
    return f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {stream} F {msg}\n"


def write(root: Path, path: str, data: str | bytes) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)


def pod_log(root: Path, ns: str, pod: str, container: str, lines: str) -> None:
    write(root, f"/var/log/pods/{ns}_{pod}_{POD_UID}/{container}/0.log", lines)


def driver(root: Path, module: str, libraries: str | None = None, gpus=(f"{PCI}.0",), nvswitch: bool = False) -> None:
    """The loaded driver ``module`` (/proc/driver/nvidia/version as nv-procfs.c prints it, /sys/module), the
    user-space libraries of ``libraries`` (their file names), and the NVIDIA PCI functions in sysfs (each a
    directory under /sys/devices linked from /sys/bus/pci/devices, as the kernel lays them out)."""
    write(root, "/proc/driver/nvidia/version",
          f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {module}  Release Build  "
          "(dvs-builder@U16-I3-B03-4-3)  Tue Jun  3 00:07:58 UTC 2025\n"
          "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n")
    write(root, "/sys/module/nvidia/version", module + "\n")
    for lib in ("libnvidia-ml.so", "libcuda.so"):
        write(root, f"/usr/lib/x86_64-linux-gnu/{lib}.{libraries or module}", b"\x7fELF")
    functions = [(g, "0x030200", "0x2330") for g in gpus] + ([("0000:05:00.0", "0x068000", "0x22a3")] if nvswitch else [])
    for i, (addr, cls, dev) in enumerate(functions):
        d = f"/sys/devices/pci0000:{i:02x}/0000:{i:02x}:01.0/{addr}"
        for name, value in {"vendor": "0x10de", "device": dev, "class": cls, "numa_node": "0", "enable": "1"}.items():
            write(root, f"{d}/{name}", value + "\n")
        link = root / f"sys/bus/pci/devices/{addr}"
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(d, "/sys/bus/pci/devices"), link)


def dpkg(root: Path, zone: str, lines: list[tuple[datetime, str]]) -> None:
    """/var/log/dpkg.log with ``(UTC time, rest)`` lines written in the node's zone, as dpkg writes them."""
    from zoneinfo import ZoneInfo
    tz = ZoneInfo(zone)
    write(root, "/var/log/dpkg.log", "".join(f"{at.astimezone(tz).strftime('%Y-%m-%d %H:%M:%S')} {rest}\n"
                                             for at, rest in lines))


def _trainer_log(t: dict, failure: str, at: timedelta = 3.5 * S) -> str:
    c = t["created"]
    return cri(c + S, "epoch 1 step 10 loss 0.6931", "stdout") + cri(c + at, failure)


# -- the scenes ---------------------------------------------------------------------------------------
def _base(**over) -> dict:
    """A containerd node on cgroup v1 whose GPUs come through CDI (NVIDIA's device plugin, cdi-cri):
    nodegen's ``cri-v1-nvdp-cdi-debian12``, with no reload unless the scene adds one."""
    return {**N.BY_ID["cri-v1-nvdp-cdi-debian12"], "reload": None, "incident": False, **over}


def xid79(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    return [kernel(c - 120 * S, f"NVRM: GPU at PCI:{PCI}: {UUID}", 6),
            kernel(c - 120 * S, "NVRM: GPU Board Serial Number: 1652223012345", 6),
            kernel(c + 3 * S, f"NVRM: Xid (PCI:{PCI}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
            kernel(c + 3 * S + 1000 * S / 1e6, f"NVRM: GPU {PCI}.0: GPU has fallen off the bus.")]


def xid79_files(root: Path, t: dict, ids: dict) -> None:
    driver(root, "535.183.01")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(
        t, f"Unable to determine the device handle for GPU {PCI.upper()}.0: Unknown Error", 4 * S))
    pod_log(root, "kube-system", "nvidia-device-plugin-daemonset-7xq2k", "nvidia-device-plugin-ctr",
            cri(t["created"] - 60 * S, "Registered device plugin for 'nvidia.com/gpu' with Kubelet")
            + cri(t["created"] + 3.2 * S, f"I0717 12:00:00.000000 1 health.go:151] XidCriticalError: Xid=79 on "
                                            f"Device={UUID}; marking device as unhealthy."))


def mismatch(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    return [kernel(c + 3 * S, "NVRM: API mismatch: the client 'nvidia-smi' (pid 48211)"),
            kernel(c + 3 * S, "NVRM: has the version 535.216.01, but this kernel module has"),
            kernel(c + 3 * S, "NVRM: the version 535.183.01.  Please make sure that this"),
            kernel(c + 3 * S, "NVRM: kernel module and all NVIDIA driver components"),
            kernel(c + 3 * S, "NVRM: have the same version.")]


def mismatch_files(root: Path, t: dict, ids: dict) -> None:
    driver(root, "535.183.01", libraries="535.216.01")
    c = t["created"]
    dpkg(root, "Europe/Berlin", [
        (c + 1.5 * S, "startup archives unpack"),
        (c + 1.6 * S, "upgrade libnvidia-compute-535:amd64 535.183.01-0ubuntu0.22.04.1 535.216.01-0ubuntu0.22.04.1"),
        (c + 1.7 * S, "status installed libnvidia-compute-535:amd64 535.216.01-0ubuntu0.22.04.1")])
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "Failed to initialize NVML: Driver/library version mismatch"))


def reexec(t: dict, ids: dict) -> list[dict]:
    at, pid = t["t0"], 61234
    return [F._pid1(at, f"Reexecuting requested from client PID {pid} ('systemctl') (unit apt-daily-upgrade.service)...",
                    "log_caller", 1597),
            F._pid1(at + 3000 * S / 1e6, "Reexecuting.")]


def cpu_manager(t: dict, ids: dict) -> list[dict]:
    c, cid = t["created"], ids["trainer"]
    return [containerd(c + 2.5 * S, f'UpdateContainerResources for \\"{cid}\\" with Linux: &LinuxContainerResources{{'
                                    'CpuPeriod:100000,CpuQuota:0,CpuShares:2,MemoryLimitInBytes:0,OomScoreAdj:0,'
                                    'CpusetCpus:2-3,CpusetMems:,HugepageLimits:[]*HugepageLimit{},Unified:map[string]'
                                    'string{},MemorySwapLimitInBytes:0,} / Windows: nil'),
            containerd(c + 2.6 * S, f'UpdateContainerResources for \\"{cid}\\" returns successfully')]


def cpu_manager_files(root: Path, t: dict, ids: dict) -> None:
    write(root, "/var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
          "cgroupDriver: systemd\ncpuManagerPolicy: static\ncpuManagerReconcilePeriod: 10s\nreservedSystemCPUs: \"0\"\n")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "Failed to initialize NVML: Unknown Error"))


def oom(t: dict, ids: dict) -> list[dict]:
    cid = ids["trainer"]
    memcg = f"/kubepods.slice/kubepods-besteffort.slice/cri-containerd-{cid}.scope"
    return [kernel(t["t0"] + 10 * S / 10, "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
                   "oom_score_adj=1000", 4),
            kernel(t["t0"] + 10 * S / 10, f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset={cid[:12]},"
                   f"mems_allowed=0,oom_memcg={memcg},task_memcg={memcg},task=python3,pid=48211,uid=0", 6),
            kernel(t["t0"] + 10 * S / 10, "Memory cgroup out of memory: Killed process 48211 (python3) total-vm:"
                   "9047620kB, anon-rss:4194304kB, file-rss:102400kB, shmem-rss:0kB, UID:0 pgtables:9400kB "
                   "oom_score_adj:1000")]


def app_xid(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    return [kernel(c - 120 * S, f"NVRM: GPU at PCI:{PCI}: {UUID}", 6),
            kernel(c + 3 * S, f"NVRM: Xid (PCI:{PCI}): 13, pid=48211, name=python3, Graphics SM Warp Exception on "
                   "(GPC 0, TPC 0, SM 0): Out Of Range Address"),
            kernel(c + 3 * S, f"NVRM: Xid (PCI:{PCI}): 13, pid=48211, name=python3, Graphics Exception: ESR 0x504648=0x"
                   "102000e 0x504650=0x0 0x504644=0xd3eff2 0x50464c=0x17f")]


def app_xid_files(root: Path, t: dict, ids: dict) -> None:
    driver(root, "535.183.01")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(
        t, "RuntimeError: CUDA error: an illegal memory access was encountered"))


def ecc(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    return [kernel(c - 120 * S, f"NVRM: GPU at PCI:{PCI}: {UUID}", 6),
            kernel(c + 3 * S, f"NVRM: Xid (PCI:{PCI}): 95, pid=48211, name=python3, Uncontained: FBHUB. RST: Yes, "
                   "D-RST: No")]


def ecc_files(root: Path, t: dict, ids: dict) -> None:
    driver(root, "535.183.01")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "RuntimeError: CUDA error: uncorrectable ECC error "
                                                                "encountered"))


def lstat(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    err = ('failed to generate container \\"ee60f6fd6c2a\\" spec: failed to generate spec: lstat '
           '/run/nvidia/driver/dev/nvidiactl: no such file or directory')
    return [containerd(c + 3 * S, 'CreateContainer within sandbox \\"88f2a9a776b8\\" for &ContainerMetadata{Name:'
                       f'trainer,Attempt:0,}} failed\\" error=\\"{err}', "error")]


def lstat_files(root: Path, t: dict, ids: dict) -> None:
    c = t["created"]
    dpkg(root, "Europe/Berlin", [(c + 2 * S, "upgrade vim:amd64 2:9.0.1378-2 2:9.0.1378-2+deb12u1"),
                                 (c + 2.1 * S, "status installed vim:amd64 2:9.0.1378-2+deb12u1")])


def fabric(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    return [unit_line(c + 1.5 * S, "nvidia-fabricmanager.service",
                      "nvidia-fabricmanager.service: Failed with result 'exit-code'.")]


def fabric_files(root: Path, t: dict, ids: dict) -> None:
    driver(root, "535.183.01", gpus=(f"{PCI}.0", "0000:4b:00.0"), nvswitch=True)
    write(root, "/lib/systemd/system/nvidia-fabricmanager.service", "[Unit]\nDescription=NVIDIA fabric manager "
          "service\n[Service]\nExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n")
    write(root, "/var/lib/dpkg/status", (root / "var/lib/dpkg/status").read_text() + "\nPackage: nvidia-fabricmanager-535\n"
          "Status: install ok installed\nArchitecture: amd64\nVersion: 535.161.08-1\nDescription: Fabric Manager\n")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "RuntimeError: CUDA error: system not yet initialized"))


def dead_files(root: Path, t: dict, ids: dict) -> None:
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "Failed to initialize NVML: Unknown Error"))


def messages_only(t: dict, ids: dict) -> list[dict]:
    return []


def messages_files(root: Path, t: dict, ids: dict) -> None:
    """rsyslog's /var/log/messages of a RHEL node (RFC 3164: ``Mmm dd hh:mm:ss host kernel: ...``, node's zone)."""
    from zoneinfo import ZoneInfo
    c = t["created"].astimezone(ZoneInfo("Etc/UTC"))
    stamp = lambda at: f"{at.strftime('%b')} {at.day:2d} {at.strftime('%H:%M:%S')}"  # noqa: E731
    host = "crio-v1-operator-rhel8"
    write(root, "/var/log/messages",
          f"{stamp(c - 3600 * S)} {host} kernel: NVRM: GPU at PCI:{PCI}: {UUID}\n"
          f"{stamp(c + 3 * S)} {host} kernel: NVRM: Xid (PCI:{PCI}): 48, pid='<unknown>', name=<unknown>, An "
          "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n")
    driver(root, "535.183.01")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "RuntimeError: CUDA error: uncorrectable ECC error "
                                                                "encountered"))


def reload_and_app_xid(t: dict, ids: dict) -> list[dict]:
    c = t["created"]
    return [kernel(c + 2.6 * S, f"NVRM: Xid (PCI:{PCI}): 31, pid=48377, name=python3, Ch 00000008, intr 00000000. "
                   "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f2a_3c000000. Fault is of type "
                   "FAULT_PDE ACCESS_TYPE_VIRT_READ")]


def reload_and_app_xid_files(root: Path, t: dict, ids: dict) -> None:
    driver(root, "550.127.05")
    pod_log(root, "ml", "trainer-0", "trainer", _trainer_log(t, "Failed to initialize NVML: Unknown Error", 3 * S))


def no_gpu_files(root: Path, t: dict, ids: dict) -> None:
    """An admin's ``apt install`` in the window, in apt's history.log (the node's zone, apt's two-space
    layout), while dpkg.log is empty (logrotate has just emptied it)."""
    from zoneinfo import ZoneInfo
    local = lambda at: at.astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d  %H:%M:%S")  # noqa: E731
    c = t["created"]
    write(root, "/var/log/apt/history.log",
          f"\nStart-Date: {local(c - 3600 * S)}\nCommandline: apt-get install -y jq\nInstall: jq:amd64 (1.7.1-3build1)\n"
          f"End-Date: {local(c - 3599 * S)}\n\nStart-Date: {local(c + 1.5 * S)}\nCommandline: apt install htop\n"
          f"Requested-By: ops (1000)\nInstall: htop:amd64 (3.3.0-4build1)\nEnd-Date: {local(c + 1.8 * S)}\n")
    write(root, "/var/log/dpkg.log", "")
    for i, (addr, vendor, cls) in enumerate((("0000:00:00.0", "0x8086", "0x060000"), ("0000:00:03.0", "0x1af4", "0x020000"))):
        d = f"/sys/devices/pci0000:00/{addr}"  # a host bridge and a virtio NIC: no NVIDIA function
        for name, value in {"vendor": vendor, "device": f"0x{0x1237 + i:04x}", "class": cls}.items():
            write(root, f"{d}/{name}", value + "\n")
        link = root / f"sys/bus/pci/devices/{addr}"
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(d, "/sys/bus/pci/devices"), link)


SCENES: dict[str, dict] = {
    # NVIDIA/open-gpu-kernel-modules#387 and NVIDIA/gpu-operator#1065: a GPU falls off the bus under load;
    # nvidia-smi in the pod cannot get the device handle; the device plugin marks the GPU unhealthy
    "xid79": _base(id="xid79-cdi-debian12", entries=xid79, files=xid79_files),
    # NVIDIA/k8s-device-plugin#1431, nvidia-docker#584: an unattended upgrade moves the libraries while the old
    # module stays loaded, and the upgrade's maintainer scripts run a daemon-reload
    "mismatch": _base(id="mismatch-cdi-debian12", reload="apt-daily-upgrade", entries=mismatch, files=mismatch_files),
    # docs/sources.md "systemd: the manager reload message, by version": systemd's own postinst re-executes PID 1 (255: the caller line), which revokes a
    # hook-injected GPU exactly as a reload does (measured in the lab, tests/test_syslab_reexec.py)
    "reexec": {**N.BY_ID["cri-v1-nvdp-ubuntu2204"], "id": "reexec-hook-ubuntu2404", "distro": "ubuntu2404",
               "reload": None, "entries": reexec},
    # kubernetes/kubernetes#77073, NVIDIA/nvidia-docker#966: the static CPU manager's UpdateContainerResources
    # makes runc rebuild the device cgroup of a hook-injected container, no reload at all
    "cpu-manager": {**N.BY_ID["cri-v1-nvdp-ubuntu2204"], "id": "cpumgr-hook-ubuntu2204", "reload": None,
                    "incident": False, "entries": cpu_manager, "files": cpu_manager_files},
    # issue 26: a pod OOM-killed a second after a harmless reload on a CDI node
    "oom": _base(id="oom-cdi-debian12", reload="sudo", entries=oom, files=lambda r, t, i: driver(r, "535.183.01")),
    # NVIDIA/nvidia-container-toolkit#48: Docker with native.cgroupdriver=cgroupfs, NVIDIA's documented workaround
    "docker-cgroupfs": {**N.BY_ID["docker-v1-rhel8-gpus"], "id": "docker-cgroupfs-rhel8", "driver": "cgroupfs",
                        "revoked": False},
    # issue 26: a harmless manual reload in a window where an application's kernel faulted (Xid 13)
    "app-xid": _base(id="appxid-cdi-debian12", reload="sudo", entries=app_xid, files=app_xid_files),
    # NVIDIA/gpu-operator#377: the containerised driver not up when the pod is created; an unrelated
    # package upgrade in the same minutes
    "lstat": _base(id="lstat-cdi-debian12", entries=lstat, files=lstat_files),
    # issue 26: uncorrectable ECC (Xid 95, uncontained: the GPU must be reset)
    "ecc": _base(id="ecc-cdi-debian12", entries=ecc, files=ecc_files),
    # pytorch/pytorch#35710, gpu-operator#610: an NVSwitch node whose fabric manager failed (its package older
    # than the driver); CUDA says 802; an admin's reload in the same window
    "fabric": _base(id="fabric-cdi-debian12", reload="sudo", entries=fabric, files=fabric_files),
    # issue 26: the disk of a dead node (no /run, no /proc): the pod's log and the journal remain
    "dead": {**N.BY_ID["cri-v1-nvdp-ubuntu2204"], "id": "dead-hook-ubuntu2204", "files": dead_files, "dead": True},
    # a kind no issue lists: k3s on cgroup v2 with the envvar strategy (gpu-operator#503), where a reload took
    # the hook-injected pod's GPU while the kernel logged an application's page fault (Xid 31) at the same time
    "k3s-two-at-once": {**N.BY_ID["k3s-v2-nvdp-debian12"], "id": "k3s-two-at-once", "incident": False,
                        "entries": reload_and_app_xid, "files": reload_and_app_xid_files},
    # a kind no issue lists: a RHEL 8 CRI-O node whose journal holds no kernel lines (journald ReadKMsg=no);
    # an Xid 48 (double-bit ECC) only in rsyslog's /var/log/messages
    # issue 28: a node with no GPU at all, where an admin ran `apt install` and `sudo systemctl daemon-reload`
    # (systemd 255: the caller line names the ssh session's scope) in the reported window; dpkg.log is empty
    "no-gpu": {**N.BY_ID["cri-v2-operator-ubuntu2404"], "id": "nogpu-ubuntu2404", "plugin": "none", "gpu": False,
               "reload": "sudo", "incident": True, "zone": "Europe/Berlin", "files": no_gpu_files},
    "rhel-messages": {**N.BY_ID["crio-v1-operator-rhel8"], "id": "crio-v1-operator-rhel8", "reload": None,
                      "incident": False, "revoked": False, "entries": messages_only, "files": messages_files},
}


def build(root: Path, name: str) -> tuple[dict, dict]:
    """Build scene ``name`` at ``root``; returns ``(containers {name: id}, story_times)``. A dead node's root
    loses its running state (/run, /proc) once built; a Docker node under cgroupfs gets dockerd's setting and
    its containers' cgroupfs paths."""
    import shutil
    r = SCENES[name]
    ids, t = N.make_root(root, r)
    if r.get("dead"):
        for part in ("run", "proc"):
            shutil.rmtree(root / part)
        (root / "var/run").unlink()
    if r["engine"].startswith("docker") and r["driver"] == "cgroupfs":
        _docker_cgroupfs(root, ids)
    return ids, t


def _docker_cgroupfs(root: Path, ids: dict) -> None:
    """dockerd with ``exec-opts: ["native.cgroupdriver=cgroupfs"]`` (moby daemon/daemon_unix.go), its containers
    in ``/docker/<id>`` cgroups (runc's cgroupfs paths), no systemd scope."""
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    daemon["exec-opts"] = ["native.cgroupdriver=cgroupfs"]
    write(root, "/etc/docker/daemon.json", json.dumps(daemon, indent=2) + "\n")
    for cid in ids.values():
        state = root / f"run/docker/runtime-runc/moby/{cid}/state.json"
        st = json.loads(state.read_text())
        st["cgroup_paths"] = {k: f"/sys/fs/cgroup/{k or ''}/docker/{cid}".replace("//", "/") for k in st["cgroup_paths"]}
        state.write_text(json.dumps(st))
        for cfg in root.glob(f"run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{cid}/config.json"):
            spec = json.loads(cfg.read_text())
            spec["linux"]["cgroupsPath"] = f"/docker/{cid}"
            cfg.write_text(json.dumps(spec, indent=1))
        for old in root.glob(f"sys/fs/cgroup/devices/system.slice/docker-{cid}.scope/devices.list"):
            new = root / f"sys/fs/cgroup/devices/docker/{cid}/devices.list"
            new.parent.mkdir(parents=True, exist_ok=True)
            new.write_bytes(old.read_bytes())
        shutil_rm(root / f"run/systemd/transient/docker-{cid}.scope")
        shutil_rm(root / f"run/systemd/transient/docker-{cid}.scope.d")


def shutil_rm(p: Path) -> None:
    import shutil
    if p.is_dir():
        shutil.rmtree(p)
    elif p.exists():
        p.unlink()
