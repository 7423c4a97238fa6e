"""Synthetic GPU-node roots for the benchmark (issue 7): a journal made with systemd-journal-remote,
dpkg/apt history with .gz rotations, and containerd bundles with runc state.

Everything is deterministic (seeded), so a cached root is the same root. The journal's export text
is generated in a streaming way: each rotated file gets its own systemd-journal-remote process, fed
through a pipe in ~1 MiB writes, never held whole in memory.

The field mix follows a real kubeadm/containerd GPU node: kubelet and containerd write most of the
journal (stdout transport), PID 1 writes unit start/stop lines (journal transport, with CODE_* and
MESSAGE_ID), the kernel its netdev/veth lines, plus snapd, apt (apt-daily*, unattended-upgrades),
sudo, sshd, cron and logind. Daemon-reloads are scattered over the span: each is preceded by its
requester's lines (apt/dpkg under apt-daily-upgrade.service, snapd, or a sudo'd systemctl) and
followed by PID 1's caller line, ``Reloading...`` and ``Reloading finished in N ms.``; the same apt
runs are written into dpkg.log and history.log.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT / "samples"))
from journalbuild import journal_remote  # noqa: E402  (samples/journalbuild.py)

SAMPLE = PROJECT / "samples" / "node3-gpu"
MACHINE_ID = "5f1c0b9e7d3a4c21a8e6b2f4d9c1e370"
HOSTNAME = "gpu-node-07"
TZ_NAME = "Asia/Seoul"
TZ_OFFSET = timedelta(hours=9)
END = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)  # last journal entry, a little before "now"
KST = timezone(TZ_OFFSET)


@dataclass(frozen=True)
class Size:
    name: str
    entries: int          # journal entries
    files: int            # journal files (rotations + the active one)
    days: int             # journal span
    dpkg_lines: int
    containers: int
    reloads: int


SIZES = {
    "S": Size("S", 100_000, 2, 20, 5_000, 50, 20),
    "M": Size("M", 500_000, 4, 80, 25_000, 250, 80),
    "L": Size("L", 2_000_000, 8, 250, 100_000, 1000, 300),
    # issue 30's "perf root": M's journal with L's package logs, where reading dpkg.log dominates analyze
    "P": Size("P", 500_000, 4, 80, 100_000, 250, 80),
}


# -- journal ---------------------------------------------------------------------------------------
def _hex(rng: random.Random, n: int = 32) -> str:
    return "%0*x" % (n, rng.getrandbits(4 * n))


POD_NAMES = [f"{ns}/{name}-{i}" for ns, name, k in (("ml", "trainer", 24), ("ml", "inference", 16),
                                                      ("kube-system", "nvidia-device-plugin-daemonset", 1),
                                                      ("kube-system", "kube-proxy", 1), ("kube-system", "calico-node", 1),
                                                      ("monitoring", "dcgm-exporter", 1), ("monitoring", "node-exporter", 1),
                                                      ("data", "etl-worker", 12)) for i in range(k)]
#: kubelet logs "SyncLoop (probe)" only when a probe's result changes (a container started or became
#: ready), so these are rare next to the steady chatter below
KUBELET_PROBE_MSGS = (
    '{f}:{l}] "SyncLoop (probe)" probe="readiness" status="ready" pod="{pod}"',
    '{f}:{l}] "SyncLoop (probe)" probe="startup" status="started" pod="{pod}"',
    '{f}:{l}] "SyncLoop (probe)" probe="readiness" status="" pod="{pod}"',
)
KUBELET_PROBE_RATE = 0.005
KUBELET_MSGS = (
    '{f}:{l}] "Pod status updated" pod="{pod}" status="Running"',
    '{f}:{l}] "operationExecutor.VerifyControllerAttachedVolume started for volume \\"kube-api-access-{h5}\\" '
    '(UniqueName: \\"kubernetes.io/projected/{uid}-kube-api-access-{h5}\\") pod \\"{podn}\\" (UID: \\"{uid}\\") " pod="{pod}"',
    '{f}:{l}] "MountVolume.SetUp succeeded for volume \\"kube-api-access-{h5}\\" '
    '(UniqueName: \\"kubernetes.io/projected/{uid}-kube-api-access-{h5}\\") pod \\"{podn}\\" (UID: \\"{uid}\\") " pod="{pod}"',
    '{f}:{l}] "RemoveContainer" containerID="{cid}"',
    '{f}:{l}] "Housekeeping took longer than expected" err="housekeeping took too long" expected="1s" actual="1.{ms}s"',
    '{f}:{l}] "SyncLoop UPDATE" source="api" pods=["{pod}"]',
    '{f}:{l}] "Image garbage collection succeeded"',
    '{f}:{l}] "Eviction manager: attempting to reclaim" resourceName="ephemeral-storage"',
)
KUBELET_FILES = ("kubelet.go", "prober.go", "kubelet_pods.go", "reconciler_common.go", "operation_generator.go",
                 "scope.go", "manager.go", "kuberuntime_manager.go", "pod_workers.go", "eviction_manager.go")
CONTAINERD_MSGS = (
    'level=info msg="StartContainer for \\"{cid}\\" returns successfully"',
    'level=info msg="CreateContainer within sandbox \\"{sid}\\" for container &ContainerMetadata{{Name:worker,Attempt:{ms},}}"',
    'level=info msg="ImageCreate event name:\\"registry.k8s.io/pause:3.9\\" labels:{{key:\\"io.cri-containerd.image\\" value:\\"managed\\"}}"',
    'level=info msg="shim disconnected" id={cid} namespace=k8s.io',
    'level=warning msg="cleaning up after shim disconnected" id={cid} namespace=k8s.io',
    'level=info msg="cleaning up dead shim" namespace=k8s.io',
    'level=info msg="TearDown network for sandbox \\"{sid}\\" successfully"',
    'level=info msg="RemovePodSandbox \\"{sid}\\" returns successfully"',
    'level=info msg="PullImage \\"nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04\\" returns image reference \\"sha256:{sid}\\""',
)
KERNEL_MSGS = (
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{h5}{h5}: link becomes ready",
    "cni0: port {ms}(veth{h5}) entered forwarding state",
    "cni0: port {ms}(veth{h5}) entered disabled state",
    "device veth{h5} left promiscuous mode",
    "eth0: renamed from tmp{h5}",
    "NVRM: GPU at PCI:0000:{ms}:00: GPU-{uid}",
    "nvidia-uvm: Loaded the UVM driver, major device number 236.",
    "overlayfs: upperdir is in-use as upperdir/workdir of another mount, accessing files from both mounts will result in undefined behavior.",
)
SNAPD_MSGS = (
    "storehelpers.go:{ms}: cannot refresh: snap has no updates available: \"core20\", \"lxd\", \"snapd\"",
    "autorefresh.go:{ms}: auto-refresh: all snaps are up-to-date",
    "daemon.go:{ms}: started snapd/2.61.3+22.04 (series 16; classic) ubuntu/22.04 (amd64) linux/5.15.0-105-generic.",
    "stateengine.go:{ms}: state ensure error: cannot refresh snap-declaration for \"core\": Get \"https://api.snapcraft.io/api/v1/snaps/assertions/snap-declaration/16/{h5}?max-format=5\": dial tcp: lookup api.snapcraft.io: Temporary failure in name resolution",
)
OTHER = (  # (identifier, unit, comm, exe, message template)
    ("CRON", "cron.service", "cron", "/usr/sbin/cron", "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)"),
    ("CRON", "cron.service", "cron", "/usr/sbin/cron", "(root) CMD (   test -x /etc/cron.daily/popularity-contest && /etc/cron.daily/popularity-contest --crond)"),
    ("sshd", "ssh.service", "sshd", "/usr/sbin/sshd", "Accepted publickey for admin from 10.20.{ms}.7 port 5{ms} ssh2: ED25519 SHA256:{h5}{h5}"),
    ("sshd", "ssh.service", "sshd", "/usr/sbin/sshd", "pam_unix(sshd:session): session closed for user admin"),
    ("systemd-logind", "systemd-logind.service", "systemd-logind", "/usr/lib/systemd/systemd-logind", "New session {ms} of user admin."),
    ("systemd-logind", "systemd-logind.service", "systemd-logind", "/usr/lib/systemd/systemd-logind", "Session {ms} logged out. Waiting for processes to exit."),
    ("nvidia-persistenced", "nvidia-persistenced.service", "nvidia-persiste", "/usr/bin/nvidia-persistenced", "device 0000:{ms}:00.0 - persistence mode enabled."),
    ("dcgm-exporter", "dcgm-exporter.service", "dcgm-exporter", "/usr/bin/dcgm-exporter", "time=\"{iso}\" level=info msg=\"Collecting DCGM metrics\""),
)
PID1_UNIT_LINES = (  # (unit template, message template, MESSAGE_ID or None)
    ("cri-containerd-{cid}.scope", "Started cri-containerd-{cid}.scope - libcontainer container {cid}.",
     "39f53479d3a045ac8e11786248231fbf"),
    ("cri-containerd-{cid}.scope", "cri-containerd-{cid}.scope: Deactivated successfully.",
     "7ad2d189f7e94e70a38c781354912448"),
    ("run-containerd-io.containerd.runtime.v2.task-k8s.io-{cid}-rootfs.mount",
     "run-containerd-io.containerd.runtime.v2.task-k8s.io-{cid}-rootfs.mount: Deactivated successfully.",
     "7ad2d189f7e94e70a38c781354912448"),
    ("var-lib-kubelet-pods-{uid}-volumes-kubernetes.io\\x7eprojected-kube\\x2dapi\\x2daccess\\x2d{h5}.mount",
     "var-lib-kubelet-pods-{uid}-volumes-kubernetes.io\\x7eprojected-kube\\x2dapi\\x2daccess\\x2d{h5}.mount: Deactivated successfully.",
     "7ad2d189f7e94e70a38c781354912448"),
    ("session-{ms}.scope", "Started session-{ms}.scope - Session {ms} of User admin.", "39f53479d3a045ac8e11786248231fbf"),
    ("sysstat-collect.service", "Starting sysstat-collect.service - system activity accounting tool...",
     "7d4958e842da4a758f6c1cdc7b36dcc5"),
    ("sysstat-collect.service", "Finished sysstat-collect.service - system activity accounting tool.",
     "39f53479d3a045ac8e11786248231fbf"),
    ("logrotate.service", "Starting logrotate.service - Rotate log files...", "7d4958e842da4a758f6c1cdc7b36dcc5"),
    ("containerd.service", "containerd.service: Consumed {ms}min {ms}.{ms}s CPU time.", "ae8f7b866b0347b9af31fe1c80b127c0"),
    ("apt-daily.service", "Starting apt-daily.service - Daily apt download activities...", "7d4958e842da4a758f6c1cdc7b36dcc5"),
    ("apt-daily.service", "Finished apt-daily.service - Daily apt download activities.", "39f53479d3a045ac8e11786248231fbf"),
)
#: how often PID 1 writes each of those: container scopes and mounts come and go all day, sysstat's
#: timer fires every 10 minutes, apt-daily twice a day, logrotate once
PID1_WEIGHTS = (20, 20, 20, 15, 5, 8, 8, 0.3, 0.2, 0.5, 0.5)
# weights of the sources (per cent of ordinary entries)
MIX = (("kubelet", 44), ("containerd", 24), ("pid1", 11), ("kernel", 7), ("snapd", 3), ("other", 9), ("sudo", 1),
       ("apt", 1))


class _Boot:
    def __init__(self, rng: random.Random, start_us: int):
        self.id = _hex(rng)
        self.start_us = start_us
        self.kubelet_pid = rng.randint(1800, 2600)
        self.containerd_pid = rng.randint(900, 1500)
        self.snapd_pid = rng.randint(700, 899)
        self.other_pids = {o[0]: rng.randint(500, 3_000_000) for o in OTHER}
        self.inv = {u: _hex(rng) for u in ("kubelet", "containerd", "snapd", "cron", "ssh", "logind", "nvidia",
                                           "dcgm", "apt")}


def _common(boot: _Boot, t_us: int) -> list[str]:
    return [f"__REALTIME_TIMESTAMP={t_us}", f"__MONOTONIC_TIMESTAMP={t_us - boot.start_us + 4_000_000}",
            f"_BOOT_ID={boot.id}", f"_MACHINE_ID={MACHINE_ID}", f"_HOSTNAME={HOSTNAME}"]


def _fill(tpl: str, rng: random.Random, t_us: int, cids: list[str]) -> str:
    if "{" not in tpl:
        return tpl
    pod = rng.choice(POD_NAMES)
    return tpl.format(f=rng.choice(KUBELET_FILES), l=rng.randint(100, 2999), pod=pod, podn=pod.split("/")[1],
                      uid=cids[rng.randrange(len(cids))][:8] + "-1c2d-4e5f-8a9b-" + cids[0][:12],
                      cid=rng.choice(cids), sid=rng.choice(cids)[::-1], h5=_hex(rng, 5), ms=rng.randint(1, 999),
                      iso=datetime.fromtimestamp(t_us / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _klog(t_us: int, pid: int, level: str = "I") -> str:
    d = datetime.fromtimestamp(t_us / 1e6, timezone.utc)
    return f"{level}{d:%m%d %H:%M:%S}.{t_us % 1_000_000:06d} {pid:7d} "


def _ordinary(kind: str, boot: _Boot, t_us: int, rng: random.Random, cids: list[str]) -> list[str]:
    f = _common(boot, t_us)
    if kind == "kubelet":
        lvl = "E" if rng.random() < 0.03 else "I"
        f += ["PRIORITY=6" if lvl == "I" else "PRIORITY=3", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=kubelet",
              f"_PID={boot.kubelet_pid}", "_UID=0", "_GID=0", "_COMM=kubelet", "_EXE=/usr/bin/kubelet",
              "_CMDLINE=/usr/bin/kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf "
              "--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml "
              "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9",
              "_CAP_EFFECTIVE=1ffffffffff", "_SELINUX_CONTEXT=unconfined\n", "_SYSTEMD_CGROUP=/system.slice/kubelet.service",
              "_SYSTEMD_UNIT=kubelet.service", "_SYSTEMD_SLICE=system.slice", f"_SYSTEMD_INVOCATION_ID={boot.inv['kubelet']}",
              "_TRANSPORT=stdout", f"_STREAM_ID={boot.inv['kubelet'][::-1]}",
              "MESSAGE=" + _klog(t_us, boot.kubelet_pid, lvl) + _fill(
                  rng.choice(KUBELET_PROBE_MSGS if rng.random() < KUBELET_PROBE_RATE else KUBELET_MSGS), rng, t_us, cids)]
    elif kind == "containerd":
        iso = datetime.fromtimestamp(t_us / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t_us % 1_000_000:06d}000Z"
        f += ["PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=containerd", f"_PID={boot.containerd_pid}", "_UID=0",
              "_GID=0", "_COMM=containerd", "_EXE=/usr/bin/containerd", "_CMDLINE=/usr/bin/containerd",
              "_CAP_EFFECTIVE=1ffffffffff", "_SELINUX_CONTEXT=unconfined\n", "_SYSTEMD_CGROUP=/system.slice/containerd.service",
              "_SYSTEMD_UNIT=containerd.service", "_SYSTEMD_SLICE=system.slice",
              f"_SYSTEMD_INVOCATION_ID={boot.inv['containerd']}", "_TRANSPORT=stdout",
              f"_STREAM_ID={boot.inv['containerd'][::-1]}",
              f'MESSAGE=time="{iso}" ' + _fill(rng.choice(CONTAINERD_MSGS), rng, t_us, cids)]
    elif kind == "kernel":
        f += ["_TRANSPORT=kernel", "SYSLOG_FACILITY=0", "SYSLOG_IDENTIFIER=kernel", "PRIORITY=6",
              f"_SOURCE_MONOTONIC_TIMESTAMP={t_us - boot.start_us}",
              "MESSAGE=" + _fill(rng.choice(KERNEL_MSGS), rng, t_us, cids)]
    elif kind == "pid1":
        unit_t, msg_t, mid = rng.choices(PID1_UNIT_LINES, PID1_WEIGHTS)[0]
        cid, h5, ms, uid = rng.choice(cids), _hex(rng, 5), rng.randint(1, 9999), rng.choice(cids)[:32]
        unit = unit_t.format(cid=cid, h5=h5, ms=ms, uid=uid)
        inv = hashlib.md5(unit.encode()).hexdigest()  # one invocation per unit: its start and stop lines share it
        f += _pid1_fields(t_us, msg_t.format(cid=cid, h5=h5, ms=ms, uid=uid), unit=unit, mid=mid, inv=inv)
    elif kind == "snapd":
        f += ["PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=snapd", f"_PID={boot.snapd_pid}", "_UID=0", "_GID=0",
              "_COMM=snapd", "_EXE=/snap/snapd/21759/usr/lib/snapd/snapd", "_CMDLINE=/usr/lib/snapd/snapd",
              "_CAP_EFFECTIVE=1ffffffffff", "_SYSTEMD_CGROUP=/system.slice/snapd.service", "_SYSTEMD_UNIT=snapd.service",
              "_SYSTEMD_SLICE=system.slice", f"_SYSTEMD_INVOCATION_ID={boot.inv['snapd']}", "_TRANSPORT=stdout",
              "MESSAGE=" + _fill(rng.choice(SNAPD_MSGS), rng, t_us, cids)]
    elif kind == "sudo":
        f += _sudo_fields(t_us, rng.randint(3000, 4_000_000), rng.choice(
            ("/usr/bin/journalctl -u kubelet --since today", "/usr/bin/nvidia-smi", "/usr/bin/crictl ps -a",
             "/usr/bin/systemctl status containerd")))
    elif kind == "apt":
        pid = rng.randint(3000, 4_000_000)
        f += ["PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=apt.systemd.daily", f"_PID={pid}", "_UID=0", "_GID=0",
              "_COMM=apt.systemd.dai", "_EXE=/usr/bin/dash", "_CMDLINE=/bin/sh /usr/lib/apt/apt.systemd.daily update",
              "_SYSTEMD_CGROUP=/system.slice/apt-daily.service", "_SYSTEMD_UNIT=apt-daily.service",
              "_SYSTEMD_SLICE=system.slice", f"_SYSTEMD_INVOCATION_ID={boot.inv['apt']}", "_TRANSPORT=stdout",
              "MESSAGE=" + rng.choice(("/usr/lib/apt/apt.systemd.daily:66: DeprecationWarning: apt_pkg.GetLock()",
                                       "Hit:1 http://archive.ubuntu.com/ubuntu jammy InRelease",
                                       "Reading package lists..."))]
    else:
        ident, unit, comm, exe, tpl = rng.choice(OTHER)
        pid = boot.other_pids[ident] + rng.randrange(40)  # a daemon and its short-lived children
        f += ["PRIORITY=6", "SYSLOG_FACILITY=3", f"SYSLOG_IDENTIFIER={ident}", f"SYSLOG_PID={pid}", f"_PID={pid}",
              "_UID=0", "_GID=0", f"_COMM={comm}", f"_EXE={exe}", f"_CMDLINE={exe}", "_CAP_EFFECTIVE=1ffffffffff",
              f"_SYSTEMD_CGROUP=/system.slice/{unit}", f"_SYSTEMD_UNIT={unit}", "_SYSTEMD_SLICE=system.slice",
              "_TRANSPORT=syslog", f"_SOURCE_REALTIME_TIMESTAMP={t_us - 37}",
              "MESSAGE=" + _fill(tpl, rng, t_us, cids)]
    return f


def _pid1_fields(t_us: int, msg: str, unit: str | None = None, mid: str | None = None, inv: str | None = None,
                 code=("src/core/unit.c", "5644", "unit_log_success")) -> list[str]:
    f = ["PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=systemd", "_PID=1", "_UID=0", "_GID=0", "_COMM=systemd",
         "_EXE=/usr/lib/systemd/systemd", "_CMDLINE=/sbin/init", "_CAP_EFFECTIVE=1ffffffffff",
         "_SELINUX_CONTEXT=unconfined\n", "_SYSTEMD_CGROUP=/init.scope", "_SYSTEMD_UNIT=init.scope",
         "_SYSTEMD_SLICE=-.slice", "_TRANSPORT=journal", f"CODE_FILE={code[0]}", f"CODE_LINE={code[1]}",
         f"CODE_FUNC={code[2]}", f"_SOURCE_REALTIME_TIMESTAMP={t_us - 41}", f"MESSAGE={msg}"]
    if unit:
        f += [f"UNIT={unit}"]
    if mid:
        f += [f"MESSAGE_ID={mid}"]
    if inv:
        f += [f"INVOCATION_ID={inv}"]
    return f


def _sudo_fields(t_us: int, pid: int, command: str) -> list[str]:
    return ["PRIORITY=5", "SYSLOG_FACILITY=10", "SYSLOG_IDENTIFIER=sudo", f"_PID={pid}", "_UID=1000", "_GID=1000",
            "_COMM=sudo", "_EXE=/usr/bin/sudo", f"_CMDLINE=sudo {command}", "_CAP_EFFECTIVE=1ffffffffff",
            "_AUDIT_SESSION=12", "_AUDIT_LOGINUID=1000", "_SYSTEMD_CGROUP=/user.slice/user-1000.slice/session-12.scope",
            "_SYSTEMD_SESSION=12", "_SYSTEMD_OWNER_UID=1000", "_SYSTEMD_UNIT=session-12.scope",
            "_SYSTEMD_SLICE=user-1000.slice", "_SYSTEMD_USER_SLICE=-.slice", "_TRANSPORT=syslog",
            f"_SOURCE_REALTIME_TIMESTAMP={t_us - 29}",
            f"MESSAGE=   admin : TTY=pts/0 ; PWD=/home/admin ; USER=root ; COMMAND={command}"]


def _reload_group(kind: str, boot: _Boot, t_us: int, rng: random.Random, pkgs: list[str]) -> list[list[str]]:
    """The requester's lines and PID 1's lines of one daemon-reload at ``t_us``."""
    out, pid = [], rng.randint(5000, 4_000_000)
    if kind == "apt":
        unit, comm, who = "apt-daily-upgrade.service", "systemctl", "unattended-upgr"
        for i, p in enumerate(pkgs[:4]):
            t = t_us - 60_000_000 + i * 5_000_000
            out.append(_common(boot, t) + [
                "PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=unattended-upgrade", f"_PID={pid - 7}", "_UID=0",
                "_GID=0", f"_COMM={who}", "_EXE=/usr/bin/python3.10",
                "_CMDLINE=/usr/bin/python3 /usr/bin/unattended-upgrade", f"_SYSTEMD_CGROUP=/system.slice/{unit}",
                f"_SYSTEMD_UNIT={unit}", "_SYSTEMD_SLICE=system.slice", "_TRANSPORT=stdout",
                f"MESSAGE=Preparing to unpack .../{p}_{rng.randint(1, 9)}.{rng.randint(0, 99)}-1_amd64.deb ..."])
        caller = f"Reloading requested from client PID {pid} ('systemctl') (unit {unit})..."
    elif kind == "snapd":
        out.append(_common(boot, t_us - 2_000_000) + [
            "PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=snapd", f"_PID={boot.snapd_pid}", "_UID=0", "_GID=0",
            "_COMM=snapd", "_SYSTEMD_UNIT=snapd.service", "_TRANSPORT=stdout",
            "MESSAGE=services.go:1176: RemoveSnapServices - disabling snap.lxd.daemon.service"])
        caller = f"Reloading requested from client PID {boot.snapd_pid} ('snapd') (unit snapd.service)..."
    else:  # a human
        out.append(_common(boot, t_us - 1_500_000) + _sudo_fields(t_us - 1_500_000, pid, "/usr/bin/systemctl daemon-reload"))
        caller = f"Reloading requested from client PID {pid + 1} ('systemctl') (unit session-12.scope)..."
    out.append(_common(boot, t_us) + _pid1_fields(t_us, caller, code=("src/core/dbus-manager.c", "1571", "log_caller")))
    out.append(_common(boot, t_us + 900) + _pid1_fields(t_us + 900, "Reloading...", code=("src/core/main.c", "3043", "invoke_main_loop")))
    out.append(_common(boot, t_us + 412_000) + _pid1_fields(
        t_us + 412_000, f"Reloading finished in {rng.randint(150, 700)} ms.", code=("src/core/manager.c", "3556", "manager_reload")))
    return out


def _boot_group(boot: _Boot, version: str) -> list[list[str]]:
    t = boot.start_us
    out = [_common(boot, t) + ["_TRANSPORT=kernel", "SYSLOG_FACILITY=0", "SYSLOG_IDENTIFIER=kernel", "PRIORITY=5",
                                "MESSAGE=Linux version 5.15.0-105-generic (buildd@lcy02-amd64-007) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #115-Ubuntu SMP"]]
    out.append(_common(boot, t + 2_100_000) + _pid1_fields(
        t + 2_100_000, f"systemd {version} running in system mode (+PAM +AUDIT +SELINUX +APPARMOR +IMA +SMACK +SECCOMP "
                       "+GCRYPT +GNUTLS +OPENSSL +ACL +BLKID +CURL +ELFUTILS +FIDO2 +IDN2 -IDN +IPTC +KMOD +LIBCRYPTSETUP "
                       "+LIBFDISK +PCRE2 -PWQUALITY +P11KIT +QRENCODE +TPM2 +BZIP2 +LZ4 +XZ +ZLIB +ZSTD -BPF_FRAMEWORK "
                       "-XKBCOMMON +UTMP +SYSVINIT default-hierarchy=unified)", code=("src/core/main.c", "2890", "log_execution_mode")))
    for i, u in enumerate(("containerd.service", "kubelet.service", "snapd.service")):
        tt = t + 3_000_000 + i * 400_000
        out.append(_common(boot, tt) + _pid1_fields(tt, f"Started {u}.", unit=u, mid="39f53479d3a045ac8e11786248231fbf"))
    return out


def _nvml_group(boot: _Boot, t_us: int, rng: random.Random) -> list[list[str]]:
    pod = rng.choice(POD_NAMES[:40])
    out = []
    for i in range(30):  # a failing readiness probe is logged every period (10 s) until someone acts
        t = t_us + i * 10_000_000
        out.append(_common(boot, t) + [
            "PRIORITY=6", "SYSLOG_FACILITY=3", "SYSLOG_IDENTIFIER=kubelet", f"_PID={boot.kubelet_pid}", "_COMM=kubelet",
            "_SYSTEMD_UNIT=kubelet.service", "_TRANSPORT=stdout",
            "MESSAGE=" + _klog(t, boot.kubelet_pid) + f'prober.go:107] "Probe failed" probeType="Readiness" pod="{pod}" '
            f'podUID="{_hex(rng, 8)}-5b7e-4c8d-9e0f-1a2b3c4d5e6f" containerName="worker" probeResult="failure" '
            'output="Failed to initialize NVML: Unknown Error\\n"'])
    return out


def journal_plan(size: Size, seed: int = 7):
    """``(start_us, end_us, boots [(start_us, version)], reloads [(t_us, kind)], nvml [t_us], apt_runs [t_us])``."""
    rng = random.Random(seed)
    end = int(END.timestamp() * 1_000_000)
    start = end - size.days * 86_400_000_000
    span = end - start
    boots = [(start - 3_600_000_000, "252.39-1~deb12u2")]
    if size.days > 30:
        boots.append((start + int(span * 0.37), "252.39-1~deb12u2"))
    boots.append((start + int(span * 0.81), "255.4-1ubuntu8"))
    reloads = sorted((start + rng.randrange(span), rng.choice(("apt", "apt", "snapd", "sudo")))
                     for _ in range(size.reloads))
    nvml = sorted(end - rng.randrange(span // 10) for _ in range(4))
    return start, end, boots, reloads, nvml


def write_journal(size: Size, out_dir: Path, seed: int = 7, log=print) -> dict:
    """Write ``size.files`` journal files into ``out_dir`` (``system@...journal`` rotations and
    ``system.journal``), each converted by its own systemd-journal-remote from streamed export text."""
    start, end, boots, reloads, nvml = journal_plan(size, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_file = size.entries // size.files
    jobs = []
    for i in range(size.files):
        lo = start + (end - start) * i // size.files
        hi = start + (end - start) * (i + 1) // size.files
        jobs.append((i, lo, hi, per_file, boots, [r for r in reloads if lo <= r[0] < hi],
                     [n for n in nvml if lo <= n < hi], seed))
    from concurrent.futures import ProcessPoolExecutor
    results = []
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as ex:
        for res in ex.map(_write_one, [(out_dir, size.files, *j) for j in jobs]):
            log(f"  journal {res['name']}: {res['entries']} entries in "
                + ", ".join(f"{f['name']} ({f['bytes'] / 1e6:.0f} MB)" for f in res["files"]))
            results.append(res)
    files = [f for r in results for f in r["files"]]
    return {"files": files, "entries": sum(r["entries"] for r in results),
            "bytes": sum(f["bytes"] for f in files), "reloads": len(reloads), "nvml_groups": len(nvml),
            "boots": [b[0] for b in boots]}


def _write_one(args) -> dict:
    out_dir, n_files, i, lo, hi, n, boots, reloads, nvml, seed = args
    rng = random.Random(seed * 1000 + i)
    cids = [_hex(rng, 64) for _ in range(400)]
    pkgs = ["libssl3", "openssl", "containerd.io", "nvidia-container-toolkit", "snapd", "systemd", "libsystemd0",
            "tzdata", "curl", "libcurl4", "linux-libc-dev", "python3.10"]
    for old in out_dir.glob(f".part-{i}*.journal"):
        old.unlink()
    tmp = out_dir / f".part-{i}.journal"
    env = dict(os.environ)
    proc = subprocess.Popen([journal_remote(), f"--output={tmp}", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    kinds, weights = zip(*MIX)
    cum = []
    acc = 0
    for w_ in weights:
        acc += w_
        cum.append(acc)
    buf, count, written = [], 0, 0
    boot_list = sorted(boots)
    extra = []  # (t, fields) of special groups, merged in time order
    for b_start, version in boot_list:
        if lo <= b_start < hi:
            extra += [(int(f[0].split("=")[1]), f) for f in _boot_group(_Boot(random.Random(b_start), b_start), version)]
    for t, kind in reloads:
        b = _boot_at(boot_list, t)
        extra += [(int(f[0].split("=")[1]), f) for f in _reload_group(kind, b, t, rng, rng.sample(pkgs, 4))]
    for t in nvml:
        extra += [(int(f[0].split("=")[1]), f) for f in _nvml_group(_boot_at(boot_list, t), t, rng)]
    extra.sort(key=lambda x: x[0])
    xi = 0
    boot, next_boot_i = None, 0
    import bisect
    n_ord = max(1, n - len(extra))
    step = (hi - lo) / n_ord
    try:
        for k in range(n_ord):
            t = int(lo + k * step) + rng.randrange(max(1, int(step)))
            while xi < len(extra) and extra[xi][0] <= t:
                buf.append(_export(extra[xi][1]))
                xi += 1
                count += 1
            boot = _boot_at(boot_list, t)
            kind = kinds[bisect.bisect_right(cum, rng.randrange(acc))]
            buf.append(_export(_ordinary(kind, boot, t, rng, cids)))
            count += 1
            if len(buf) >= 2000:
                data = "".join(buf).encode()
                proc.stdin.write(data)
                written += len(data)
                buf = []
        while xi < len(extra):
            buf.append(_export(extra[xi][1]))
            xi += 1
            count += 1
        data = "".join(buf).encode()
        proc.stdin.write(data)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    err = proc.stderr.read().decode(errors="replace")
    if proc.wait() != 0:
        raise RuntimeError(f"systemd-journal-remote failed: {err[-2000:]}")
    return {"name": f"chunk {i}", "entries": count, "files": _finalize_names(out_dir, i, i == n_files - 1)}


def _finalize_names(out_dir: Path, i: int, last: bool) -> list[dict]:
    """journal-remote rotates by itself (at its size limit) into ``.part-N@<seqnum id>-<seq>-<time>.journal``
    and leaves ``.part-N.journal`` active: name them as journald does (``system@...journal`` for
    archived files, ``system.journal`` for the one active file of the newest chunk)."""
    import struct
    out = []
    for f in sorted(out_dir.glob(f".part-{i}*.journal")):
        if "@" in f.name:
            name = "system@" + f.name.split("@", 1)[1]
        elif last:
            name = "system.journal"
        else:
            with open(f, "rb") as fh:
                h = fh.read(208)
            seqnum_id = h[72:88].hex()
            head_seq, = struct.unpack_from("<Q", h, 168)
            head_rt, = struct.unpack_from("<Q", h, 184)
            name = f"system@{seqnum_id}-{head_seq:016x}-{head_rt:016x}.journal"
        os.replace(f, out_dir / name)
        out.append({"name": name, "bytes": (out_dir / name).stat().st_size})
    return out


_BOOTS: dict = {}


def _boot_at(boot_list, t: int) -> _Boot:
    cur = boot_list[0]
    for b in boot_list:
        if b[0] <= t:
            cur = b
    if cur[0] not in _BOOTS:
        _BOOTS[cur[0]] = _Boot(random.Random(cur[0]), cur[0])
    return _BOOTS[cur[0]]


def _export(fields: list[str]) -> str:
    out = []
    for f in fields:
        if "\n" in f:
            name, _, value = f.partition("=")
            b = value.encode()
            # binary form: NAME\n<le64 length><data>\n ; only used for _SELINUX_CONTEXT ("unconfined\n")
            out.append(name + "\n" + len(b).to_bytes(8, "little").decode("latin-1") + value + "\n")
        else:
            out.append(f + "\n")
    return "".join(out) + "\n"


# -- package logs ----------------------------------------------------------------------------------
PKGS = ["libssl3", "openssl", "containerd", "nvidia-container-toolkit", "nvidia-container-toolkit-base",
        "libnvidia-container1", "libnvidia-container-tools", "snapd", "systemd", "libsystemd0", "udev", "tzdata",
        "curl", "libcurl4", "linux-libc-dev", "python3.10", "libpython3.10", "vim", "vim-common", "git", "git-man",
        "openssh-server", "openssh-client", "libc6", "libc-bin", "locales", "kubelet", "kubectl", "kubeadm",
        "cri-tools", "kubernetes-cni", "runc", "libseccomp2", "apparmor", "libapparmor1", "sudo", "rsyslog",
        "logrotate", "cron", "ca-certificates", "libgnutls30", "libnss3", "libxml2", "libexpat1", "zlib1g",
        "libzstd1", "liblz4-1", "xz-utils", "liblzma5", "bash", "coreutils", "dpkg", "apt", "libapt-pkg6.0",
        "ubuntu-advantage-tools", "update-notifier-common", "cloud-init", "netplan.io", "iproute2", "iptables",
        "libip4tc2", "libnftables1", "nftables", "conntrack", "ethtool", "dcgm-exporter", "datacenter-gpu-manager",
        "nvidia-driver-550-server", "nvidia-utils-550-server", "libnvidia-compute-550-server"]
#: packages whose maintainer scripts carry a dh_installsystemd snippet (reload PID 1)
UNIT_PKGS = {"containerd", "snapd", "systemd", "udev", "openssh-server", "kubelet", "cron", "rsyslog", "apparmor",
             "cloud-init", "datacenter-gpu-manager", "dcgm-exporter", "nvidia-container-toolkit", "logrotate",
             "ubuntu-advantage-tools", "nftables", "iptables"}


def _local(t: datetime) -> datetime:
    return t.astimezone(KST)


def write_packages(size: Size, root: Path, seed: int = 7) -> dict:
    """dpkg.log (+ .1, .N.gz) with ``size.dpkg_lines`` lines, history.log (+ .N.gz) with one stanza
    per apt run, and a short unattended-upgrades.log. The apt runs include one just before each
    apt-requested reload of the journal."""
    rng = random.Random(seed + 1)
    start, end, _, reloads, _ = journal_plan(size, seed)
    apt_reload_times = [datetime.fromtimestamp((t - 60_000_000) / 1e6, timezone.utc) for t, k in reloads if k == "apt"]
    versions = {p: [rng.randint(1, 9), rng.randint(0, 30), 0] for p in PKGS}
    # ~33 lines per run on average
    n_runs = max(len(apt_reload_times) + 1, size.dpkg_lines // 33)
    first = END - timedelta(days=390)
    fill = sorted(first + timedelta(seconds=rng.randrange(390 * 86400)) for _ in range(n_runs - len(apt_reload_times)))
    runs = sorted(fill + apt_reload_times)
    dpkg_lines: list[tuple[datetime, str]] = []
    stanzas: list[tuple[datetime, str]] = []
    uu: list[tuple[datetime, str]] = []
    for t in runs:
        chosen = rng.sample(PKGS, rng.randint(1, 6))
        lt = _local(t)
        cur = lt
        ups = []

        def line(msg):
            dpkg_lines.append((cur, f"{cur:%Y-%m-%d %H:%M:%S} {msg}"))

        line("startup archives unpack")
        for p in chosen:
            old = "%d.%d-%d" % tuple(versions[p])
            versions[p][2] += 1
            new = "%d.%d-%d" % tuple(versions[p])
            ups.append((p, old, new))
            cur += timedelta(seconds=rng.randint(0, 2))
            line(f"upgrade {p}:amd64 {old} {new}")
            line(f"status half-configured {p}:amd64 {old}")
            line(f"status unpacked {p}:amd64 {old}")
            line(f"status half-installed {p}:amd64 {old}")
            line(f"status unpacked {p}:amd64 {new}")
        line("startup packages configure")
        for p, old, new in ups:
            cur += timedelta(seconds=rng.randint(0, 3))
            line(f"configure {p}:amd64 {new} <none>")
            line(f"status unpacked {p}:amd64 {new}")
            line(f"status half-configured {p}:amd64 {new}")
            if rng.random() < 0.05:
                line(f"conffile /etc/{p}/{p}.conf keep")
            line(f"status installed {p}:amd64 {new}")
        line("trigproc man-db:amd64 2.10.2-1 <none>")
        line("status half-configured man-db:amd64 2.10.2-1")
        line("status installed man-db:amd64 2.10.2-1")
        line("trigproc libc-bin:amd64 2.35-0ubuntu3.8 <none>")
        line("status half-configured libc-bin:amd64 2.35-0ubuntu3.8")
        line("status installed libc-bin:amd64 2.35-0ubuntu3.8")
        unattended = rng.random() < 0.8
        cmd = "/usr/bin/unattended-upgrade" if unattended else "apt-get -y install --only-upgrade " + " ".join(chosen)
        stanza = [f"Start-Date: {lt:%Y-%m-%d  %H:%M:%S}", f"Commandline: {cmd}"]
        if not unattended:
            stanza.append("Requested-By: admin (1000)")
        stanza.append("Upgrade: " + ", ".join(f"{p}:amd64 ({o}, {n})" for p, o, n in ups))
        stanza.append(f"End-Date: {cur:%Y-%m-%d  %H:%M:%S}")
        stanzas.append((lt, "\n".join(stanza) + "\n\n"))
        if unattended and t > END - timedelta(days=60):
            uu += [(lt, f"{lt:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} INFO Starting unattended upgrades script"),
                   (lt, f"{lt:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} INFO Allowed origins are: o=Ubuntu,a=jammy-security"),
                   (lt, f"{lt:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} INFO Packages that will be upgraded: " + " ".join(chosen)),
                   (cur, f"{cur:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} INFO All upgrades installed")]
    # logrotate keeps the newest: drop the oldest runs beyond size.dpkg_lines (and their stanzas)
    cut = max(0, len(dpkg_lines) - size.dpkg_lines)
    if cut:
        oldest_kept = dpkg_lines[cut][0]
        dpkg_lines = dpkg_lines[cut:]
        stanzas = [s_ for s_ in stanzas if s_[0] >= oldest_kept]
    log_dir, apt_dir, uu_dir = root / "var/log", root / "var/log/apt", root / "var/log/unattended-upgrades"
    for d in (log_dir, apt_dir, uu_dir):
        d.mkdir(parents=True, exist_ok=True)
    _rotate(dpkg_lines, log_dir, "dpkg.log", delaycompress=True, sep="\n")
    _rotate(stanzas, apt_dir, "history.log", delaycompress=False, sep="")
    _rotate(uu, uu_dir, "unattended-upgrades.log", delaycompress=False, sep="\n")
    return {"dpkg_lines": len(dpkg_lines), "apt_stanzas": len(stanzas)}


def _rotate(items, d: Path, base: str, delaycompress: bool, sep: str) -> None:
    """Monthly rotations (logrotate ``monthly``, ``rotate 12``): month 0 is ``base``, month N is
    ``base.N`` (plain for N == 1 with ``delaycompress``) or ``base.N.gz``."""
    by_month: dict[int, list[str]] = {}
    last = _local(END)
    for t, text in items:
        age = (last.year - t.year) * 12 + last.month - t.month
        by_month.setdefault(age, []).append(text)
    for age, texts in by_month.items():
        data = (sep.join(texts) + (sep if sep else "")).encode()
        if age == 0:
            (d / base).write_bytes(data)
        elif age == 1 and delaycompress:
            (d / f"{base}.1").write_bytes(data)
        else:
            with gzip.open(d / f"{base}.{age}.gz", "wb", compresslevel=6) as f:
                f.write(data)


def write_dpkg_info(root: Path, seed: int = 7) -> None:
    """/var/lib/dpkg/info with postinst/postrm (and the other control files) of ~700 packages, and
    /var/lib/dpkg/status with their stanzas after the sample's."""
    rng = random.Random(seed + 2)
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True, exist_ok=True)
    names = list(PKGS) + [f"lib{_hex(rng, 6)}{rng.randint(0, 9)}" for _ in range(700 - len(PKGS))]
    snippet = (SAMPLE / "var/lib/dpkg/info/containerd.postinst").read_text()
    stanzas = [(SAMPLE / "var/lib/dpkg/status").read_text().rstrip("\n") + "\n"]
    for p in names:
        body = "#!/bin/sh\nset -e\n" + "".join(f"# step {i}: {_hex(rng, 40)}\n" for i in range(rng.randint(5, 60)))
        if p in UNIT_PKGS:
            (info / f"{p}.postinst").write_text(body + snippet.replace("containerd.service", f"{p}.service"))
            (info / f"{p}.postrm").write_text("#!/bin/sh\nset -e\n# Automatically added by dh_installsystemd/13.6ubuntu1\n"
                                              "if [ -d /run/systemd/system ] && [ \"$1\" = remove ]; then\n"
                                              "\tsystemctl --system daemon-reload >/dev/null || true\nfi\n")
        elif rng.random() < 0.6:
            (info / f"{p}.postinst").write_text(body + "ldconfig\n")
            if rng.random() < 0.5:
                (info / f"{p}.postrm").write_text(body)
        (info / f"{p}.list").write_text("".join(f"/usr/lib/x86_64-linux-gnu/{p}/{i}.so\n" for i in range(rng.randint(3, 40))))
        (info / f"{p}.md5sums").write_text("".join(f"{_hex(rng)}  usr/lib/{p}/{i}\n" for i in range(5)))
        stanzas.append(f"Package: {p}\nStatus: install ok installed\nPriority: optional\nSection: libs\n"
                       f"Installed-Size: {rng.randint(10, 90000)}\nMaintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>\n"
                       f"Architecture: amd64\nVersion: {rng.randint(0, 9)}.{rng.randint(0, 40)}-{rng.randint(1, 9)}\n"
                       f"Depends: libc6 (>= 2.34), zlib1g (>= 1:1.2.0)\nDescription: synthetic package {p}\n"
                       + "".join(f" {_hex(rng, 60)}\n" for _ in range(rng.randint(2, 8))))
    (root / "var/lib/dpkg/status").write_text("\n".join(stanzas))


# -- containers ------------------------------------------------------------------------------------
SECCOMP_SYSCALLS = ["accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset", "chdir",
                    "chmod", "chown", "chown32", "clock_adjtime", "clock_getres", "clock_gettime", "clock_nanosleep",
                    "close", "close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
                    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_wait", "eventfd", "eventfd2",
                    "execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64", "fallocate",
                    "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown", "fchownat", "fcntl", "fdatasync",
                    "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstatfs",
                    "fsync", "ftruncate", "futex", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "geteuid",
                    "getgid", "getgroups", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
                    "getpriority", "getrandom", "getresgid", "getresuid", "getrlimit", "get_robust_list", "getrusage",
                    "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday", "getuid",
                    "getxattr", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel",
                    "ioctl", "io_destroy", "io_getevents", "io_setup", "io_submit", "kill", "lchown", "lgetxattr",
                    "link", "linkat", "listen", "listxattr", "llistxattr", "lseek", "lstat", "madvise", "memfd_create",
                    "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mmap", "mprotect", "mremap", "msync",
                    "munlock", "munmap", "nanosleep", "newfstatat", "open", "openat", "openat2", "pause", "pipe",
                    "pipe2", "poll", "ppoll", "prctl", "pread64", "preadv", "prlimit64", "pselect6", "pwrite64",
                    "pwritev", "read", "readahead", "readlink", "readlinkat", "readv", "recvfrom", "recvmmsg",
                    "recvmsg", "rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction",
                    "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
                    "rt_sigtimedwait", "sched_getaffinity", "sched_getparam", "sched_yield", "select", "sendfile",
                    "sendmmsg", "sendmsg", "sendto", "setfsgid", "setgid", "setgroups", "setitimer", "setpgid",
                    "setpriority", "setregid", "setresuid", "setsid", "setsockopt", "set_tid_address", "setuid",
                    "shutdown", "sigaltstack", "socket", "socketpair", "splice", "stat", "statfs", "statx", "symlink",
                    "sync", "sysinfo", "tee", "tgkill", "time", "timer_create", "timerfd_create", "times", "tkill",
                    "truncate", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat", "vfork", "wait4",
                    "waitid", "write", "writev"]
CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
        "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]
DEFAULT_DEVICES = [{"allow": False, "access": "rwm"}] + [
    {"allow": True, "type": "c", "major": ma, "minor": mi, "access": "rwm"}
    for ma, mi in ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2), (136, None), (10, 200))]
GPU_DEVS = [("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 236, 0), ("/dev/nvidia-uvm-tools", 236, 1),
            ("/dev/nvidia0", 195, 0)]


def write_containers(size: Size, root: Path, seed: int = 7) -> dict:
    """``size.containers`` containerd tasks under run/containerd/io.containerd.runtime.v2.task/k8s.io/,
    their runc state under run/containerd/runc/k8s.io/, a /proc/<pid> with stat and root/dev for each
    (GPU containers see /dev/nvidia* char devices), and systemd's transient scope with drop-ins."""
    rng = random.Random(seed + 3)
    task = root / "run/containerd/io.containerd.runtime.v2.task/k8s.io"
    runc = root / "run/containerd/runc/k8s.io"
    transient = root / "run/systemd/transient"
    for d in (task, runc, transient):
        d.mkdir(parents=True, exist_ok=True)
    can_mknod = True
    n_gpu = 0
    for i in range(size.containers):
        cid = _hex(rng, 64)
        pod_uid = f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"
        pod = rng.choice(POD_NAMES)
        pns, pname = pod.split("/")
        sandbox = i % 5 < 2
        gpu_mode = None if sandbox or rng.random() > 0.3 else rng.choice(("hook", "spec", "cdi"))
        n_gpu += gpu_mode is not None
        scope = f"cri-containerd-{cid}.scope"
        slice_ = f"kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice"
        pid = 10_000 + i * 7
        start_ticks = 900_000 + i * 13
        env = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               f"HOSTNAME={pname}", "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443",
               "KUBERNETES_PORT=tcp://10.96.0.1:443", f"AWS_SECRET_ACCESS_KEY={_hex(rng, 40)}",
               f"DB_PASSWORD={_hex(rng, 16)}", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1"]
        env += [f"SVC_{k}_PORT=tcp://10.96.{k}.{rng.randint(1, 254)}:80" for k in range(rng.randint(5, 40))]
        hooks = {}
        devices = []
        if gpu_mode:
            env += ["NVIDIA_VISIBLE_DEVICES=GPU-" + _hex(rng, 8), "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                    "CUDA_VERSION=12.4.1"]
            if gpu_mode == "hook":
                hooks = {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                       "args": ["nvidia-container-runtime-hook", "prestart"]}]}
            else:
                devices = [{"path": p, "type": "c", "major": ma, "minor": mi, "fileMode": 8630, "uid": 0, "gid": 0}
                           for p, ma, mi in GPU_DEVS]
        res_devices = list(DEFAULT_DEVICES) + [{"allow": True, "type": "c", "major": ma, "minor": mi, "access": "rw"}
                                               for _, ma, mi in (GPU_DEVS if gpu_mode in ("spec", "cdi") else [])]
        ann = {"io.kubernetes.cri.container-type": "sandbox" if sandbox else "container",
               "io.kubernetes.cri.sandbox-id": cid if sandbox else _hex(rng, 64),
               "io.kubernetes.cri.sandbox-name": pname, "io.kubernetes.cri.sandbox-namespace": pns,
               "io.kubernetes.cri.sandbox-uid": pod_uid,
               "io.kubernetes.cri.sandbox-log-directory": f"/var/log/pods/{pns}_{pname}_{pod_uid}"}
        if not sandbox:
            ann.update({"io.kubernetes.cri.container-name": "worker",
                        "io.kubernetes.cri.image-name": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"})
        if gpu_mode == "cdi":
            ann["cdi.k8s.io/nvidia-device-plugin_" + pod_uid] = "nvidia.com/gpu=GPU-" + _hex(rng, 8)
        spec = {
            "ociVersion": "1.1.0",
            "process": {"user": {"uid": 0, "gid": 0, "additionalGids": [0, 1, 2, 3, 4, 6, 10, 11, 20, 26, 27]},
                        "args": ["/pause"] if sandbox else ["python3", "-m", "trainer", "--epochs", "100"],
                        "env": env, "cwd": "/", "capabilities": {k: CAPS for k in ("bounding", "effective", "permitted")},
                        "noNewPrivileges": True, "apparmorProfile": "cri-containerd.apparmor.d", "oomScoreAdj": 969},
            "root": {"path": "rootfs", "readonly": sandbox},
            "hostname": pname if sandbox else None,
            "mounts": [{"destination": d, "type": t, "source": s, "options": o} for d, t, s, o in (
                ("/proc", "proc", "proc", ["nosuid", "noexec", "nodev"]),
                ("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
                ("/dev/pts", "devpts", "devpts", ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]),
                ("/dev/mqueue", "mqueue", "mqueue", ["nosuid", "noexec", "nodev"]),
                ("/sys", "sysfs", "sysfs", ["nosuid", "noexec", "nodev", "ro"]),
                ("/sys/fs/cgroup", "cgroup", "cgroup", ["nosuid", "noexec", "nodev", "relatime", "ro"]),
                ("/etc/hosts", "bind", f"/var/lib/kubelet/pods/{pod_uid}/etc-hosts", ["rbind", "rprivate", "rw"]),
                ("/dev/termination-log", "bind", f"/var/lib/kubelet/pods/{pod_uid}/containers/worker/{_hex(rng, 8)}", ["rbind", "rprivate", "rw"]),
                ("/etc/hostname", "bind", f"/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{_hex(rng, 64)}/hostname", ["rbind", "rprivate", "rw"]),
                ("/etc/resolv.conf", "bind", f"/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{_hex(rng, 64)}/resolv.conf", ["rbind", "rprivate", "rw"]),
                ("/dev/shm", "bind", f"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/{_hex(rng, 64)}/shm", ["rbind", "rprivate", "rw"]),
                ("/var/run/secrets/kubernetes.io/serviceaccount", "bind",
                 f"/var/lib/kubelet/pods/{pod_uid}/volumes/kubernetes.io~projected/kube-api-access-{_hex(rng, 5)}", ["rbind", "rprivate", "ro"]),
                # the device plugin's hostPath of the kubelet's socket directory, as a real plugin has
                *([("/var/lib/kubelet/device-plugins", "bind", "/var/lib/kubelet/device-plugins", ["rbind", "rprivate", "rw"])]
                  if pname.startswith("nvidia-device-plugin") and not sandbox else []))],
            "hooks": hooks or None,
            "annotations": ann,
            "linux": {"resources": {"devices": res_devices, "memory": {"limit": 34359738368, "swap": 34359738368},
                                    "cpu": {"shares": 4096, "quota": 400000, "period": 100000}, "pids": {"limit": 0},
                                    "hugepageLimits": [{"pageSize": "2MB", "limit": 0}, {"pageSize": "1GB", "limit": 0}]},
                      "cgroupsPath": f"{slice_}:cri-containerd:{cid}",
                      "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")],
                      "devices": devices or None,
                      "maskedPaths": ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                                      "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                                      "/sys/firmware", "/sys/devices/virtual/powercap"],
                      "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
                      "seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                                  "syscalls": [{"names": SECCOMP_SYSCALLS, "action": "SCMP_ACT_ALLOW"}]}},
        }
        spec = {k: v for k, v in spec.items() if v is not None}
        spec["linux"] = {k: v for k, v in spec["linux"].items() if v is not None}
        b = task / cid
        (b / "rootfs").mkdir(parents=True, exist_ok=True)
        (b / "config.json").write_text(json.dumps(spec))
        (b / "init.pid").write_text(str(pid))
        (b / "address").write_text(f"unix:///run/containerd/s/{_hex(rng, 64)}")
        (b / "options.json").write_text(json.dumps({"binary_name": "/usr/bin/nvidia-container-runtime" if gpu_mode else "",
                                                    "systemd_cgroup": True}))
        created = END - timedelta(seconds=rng.randrange(200 * 86400))
        cg = f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{slice_}/{scope}"
        state = {"id": cid, "init_process_pid": pid, "init_process_start": start_ticks,
                 "created": created.strftime("%Y-%m-%dT%H:%M:%S.") + f"{rng.randrange(10**9):09d}Z",
                 "config": {"no_pivot_root": False, "rootfs": f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/rootfs",
                            "readonlyfs": sandbox, "mounts": spec["mounts"], "devices": [dict(d, type=99, permissions="rwm",
                                                                                               allow=True) for d in devices],
                            "cgroups": {"path": "", "scope_prefix": "cri-containerd", "name": cid, "parent": slice_,
                                        "Systemd": True, "SystemdUser": False,
                                        "devices": [{"type": 99 if d.get("type") == "c" else 97, "major": d.get("major", -1)
                                                     if d.get("major") is not None else -1,
                                                     "minor": d.get("minor", -1) if d.get("minor") is not None else -1,
                                                     "permissions": d["access"], "allow": d["allow"]} for d in res_devices],
                                        "memory": 34359738368, "cpu_shares": 4096},
                            "oom_score_adj": 969, "labels": [f"bundle=/run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}"]},
                 "rootless": False, "cgroup_paths": {"": cg}, "namespace_paths": {t: f"/proc/{pid}/ns/{t}" for t in ("net", "ipc", "uts", "mnt", "pid", "user", "cgroup")},
                 "external_descriptors": ["/dev/null", f"pipe:[{rng.randint(10**6, 10**8)}]", f"pipe:[{rng.randint(10**6, 10**8)}]"],
                 "intel_rdt_path": ""}
        (runc / cid).mkdir(parents=True, exist_ok=True)
        (runc / cid / "state.json").write_text(json.dumps(state))
        proc = root / "proc" / str(pid)
        dev = proc / "root/dev"
        dev.mkdir(parents=True, exist_ok=True)
        comm = "pause" if sandbox else "python3"
        (proc / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 1500 0 0 0 12 3 0 0 20 0 1 0 "
                                   f"{start_ticks} 1064960 1 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n")
        (proc / "cgroup").write_text(f"0::{cg[len('/sys/fs/cgroup'):]}\n")
        for name in ("null", "zero", "random", "urandom", "tty", "full"):
            (dev / name).touch()
        if gpu_mode:
            for p, ma, mi in GPU_DEVS:
                node = dev / p.rsplit("/", 1)[1]
                if can_mknod:
                    try:
                        os.mknod(node, 0o20666, os.makedev(ma, mi))
                        continue
                    except OSError:
                        can_mknod = False
                node.touch()
        t = transient / scope
        t.write_text(f"# This is a transient unit file, created programmatically via the systemd API. Do not edit.\n"
                     f"[Unit]\nDescription=libcontainer container {cid}\n\n[Scope]\nSlice={slice_}\nDelegate=yes\n")
        dd = transient / f"{scope}.d"
        dd.mkdir(exist_ok=True)
        (dd / "50-DevicePolicy.conf").write_text("# This is a drop-in unit file extension, created via \"systemctl set-property\"\n"
                                                 "# or an equivalent operation. Do not edit.\n[Scope]\nDevicePolicy=strict\n")
        allow = ["/dev/null rwm", "/dev/zero rwm", "/dev/full rwm", "/dev/random rwm", "/dev/urandom rwm",
                 "/dev/tty rwm", "/dev/ptmx rwm", "char-pts rwm"] + \
            ([f"/dev/char/{ma}:{mi} rw" for _, ma, mi in GPU_DEVS] if gpu_mode in ("spec", "cdi") else [])
        (dd / "50-DeviceAllow.conf").write_text("# This is a drop-in unit file extension, created via \"systemctl set-property\"\n"
                                                "# or an equivalent operation. Do not edit.\n[Scope]\nDeviceAllow=\n"
                                                + "".join(f"DeviceAllow={a}\n" for a in allow))
    return {"containers": size.containers, "gpu": n_gpu, "mknod": can_mknod}


# -- the node's own files ----------------------------------------------------------------------------
CONTAINERD_TOML = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "nvidia"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""
TOOLKIT_TOML = """[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
"""


def write_node_files(root: Path, journal_info: dict | None) -> None:
    for rel in ("etc/hostname", "etc/timezone", "etc/machine-id", "usr/lib/os-release", "proc/version",
                "proc/sys/kernel/osrelease", "usr/share/zoneinfo/Asia/Seoul"):
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE / rel, dst)
    (root / "etc/hostname").write_text(HOSTNAME + "\n")
    (root / "etc/machine-id").write_text(MACHINE_ID + "\n")
    for link, target in (("etc/localtime", "/usr/share/zoneinfo/Asia/Seoul"), ("etc/os-release", "../usr/lib/os-release")):
        p = root / link
        if p.is_symlink() or p.exists():
            p.unlink()
        p.symlink_to(target)
    boot_us = max(journal_info["boots"]) if journal_info else int(END.timestamp() * 1e6) - 86_400_000_000
    (root / "proc/stat").write_text(f"cpu  90318221 1120 23123812 3316612343 211233 0 901233 0 0 0\nintr 0\n"
                                    f"ctxt 9812312312\nbtime {boot_us // 1_000_000}\nprocesses 48211200\n")
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(_Boot(random.Random(boot_us), boot_us).id + "\n")
    (root / "proc/devices").write_text("Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n"
                                       "  5 /dev/console\n 10 misc\n136 pts\n195 nvidia-frontend\n236 nvidia-uvm\n"
                                       "237 nvidia-caps\n\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n")
    for rel, text in (("etc/containerd/config.toml", CONTAINERD_TOML),
                      ("etc/nvidia-container-runtime/config.toml", TOOLKIT_TOML)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def build_root(size: Size, root: Path, seed: int = 7, log=print) -> dict:
    """Build a whole node root for ``size`` at ``root`` (which must not exist yet)."""
    import time
    info: dict = {"size": size.name}
    t0 = time.monotonic()
    jdir = root / "var/log/journal" / MACHINE_ID
    info["journal"] = write_journal(size, jdir, seed, log)
    info["journal_build_s"] = round(time.monotonic() - t0, 1)
    t1 = time.monotonic()
    info["packages"] = write_packages(size, root, seed)
    write_dpkg_info(root, seed)
    info["containers"] = write_containers(size, root, seed)
    write_node_files(root, info["journal"])
    info["rest_build_s"] = round(time.monotonic() - t1, 1)
    return info


def incident(size: Size, seed: int = 7) -> str:
    """An incident window around the last NVML errors, as ``--incident`` text."""
    _, end, _, _, nvml = journal_plan(size, seed)
    last = datetime.fromtimestamp(max(nvml) / 1e6, timezone.utc)
    start = last - timedelta(days=3)
    return f"{start:%Y-%m-%dT%H:%M:%SZ}..{last + timedelta(minutes=1):%Y-%m-%dT%H:%M:%SZ}=bench"
