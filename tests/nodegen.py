"""Generated node roots, one per GPU stack, for the matrix test (tests/test_matrix.py; issue 14 item 8).

Each root is a host file system as the collectors read it under ``--root``: ``/etc/os-release``,
``/etc/localtime`` (a link to a zone file copied into the root), the boot ID and btime, a real binary
journal built with systemd-journal-remote (:func:`fleetgen.write_journal`) that holds PID 1's start-up
banner and its ``daemon-reload`` lines as that systemd version words them (docs/sources.md
"systemd: the manager reload message, by version"), the engine's configuration, and the containers as
that engine leaves them on disk: the OCI ``config.json`` (hooks and ``linux.devices`` as the stack writes
them), runc's ``state.json``, ``/proc/<pid>/stat`` and the init's ``/dev``, the cgroup (v1
``devices.list``; v2 a bare directory) and systemd's transient scope and drop-ins.

Engines and their layouts (docs/sources.md "GPU stacks" 6 Docker, 7 CRI-O, 8 k3s; "Container engine layouts"):

- ``containerd`` CRI: ``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>``, runc root
  ``/run/containerd/runc/k8s.io``, scope ``cri-containerd-<id>.scope``;
- ``k3s``: state dir ``/run/k3s/containerd``, config ``/var/lib/rancher/k3s/agent/etc/containerd/
  config.toml`` (generated; no ``config.toml.tmpl``);
- ``docker`` under dockerd's own containerd: ``/run/docker/containerd/daemon/io.containerd.runtime.v2.task/
  moby/<id>``, runc root ``/run/docker/runtime-runc/moby`` (options.json ``root``), scope
  ``docker-<id>.scope`` in ``system.slice``; ``docker-system``: the same under the system containerd
  (``/run/containerd/.../moby/<id>``);
- ``crio``: ``/run/containers/storage/overlay-containers/<id>/userdata/config.json``, runc root
  ``/run/runc``, scope ``crio-<id>.scope``, conmon's ``--runtime-arg --root=/run/runc``;
- ``runc``: ``runc --root /run/custom-runc --systemd-cgroup run --bundle /srv/jobs/<name> <id>`` kept in
  the foreground by a unit (its command line is the live evidence of the root), scope ``runc-<id>.scope``.

Each story (container creation, the reload, the incident window) happens in the seconds before the root is
collected (:func:`story_times`). The roots themselves are :data:`ROOTS` (one dict each, with the public report it is drawn from);
:func:`make_root` builds one. The expectations are tests/test_matrix.py's, written by hand.
Needs root (character device nodes) and systemd-journal-remote.
"""
from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import fleetgen as F

#: distro banners and reload wording; ``reload``: "plain" = ``Reloading.`` only (systemd <= 252),
#: "caller" = the 255 caller line + ``Reloading...`` + ``Reloading finished in N ms.``
DISTROS = {
    "ubuntu2204": {"os": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n',
                   "systemd": "249.11-0ubuntu3.12", "reload": "plain", "dpkg": True,
                   "banner": "systemd 249.11-0ubuntu3.12 running in system mode (+PAM +AUDIT +SELINUX +APPARMOR +IMA "
                             "+SMACK +SECCOMP +GCRYPT +GNUTLS +OPENSSL +ACL +BLKID +CURL +ELFUTILS +FIDO2 +IDN2 -IDN "
                             "+IPTC +KMOD +LIBCRYPTSETUP +LIBFDISK +PCRE2 -PWQUALITY -P11KIT -QRENCODE +BZIP2 +LZ4 +XZ "
                             "+ZLIB +ZSTD -XKBCOMMON +UTMP +SYSVINIT default-hierarchy=unified)"},
    "debian12": {"os": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
                       'ID=debian\n', "systemd": "252.30-1~deb12u2", "reload": "plain", "dpkg": True,
                 "banner": "systemd 252.30-1~deb12u2 running in system mode (+PAM +AUDIT +SELINUX +APPARMOR +IMA "
                           "+SMACK +SECCOMP +GCRYPT -GNUTLS +OPENSSL +ACL +BLKID +CURL +ELFUTILS +FIDO2 +IDN2 -IDN "
                           "+IPTC +KMOD +LIBCRYPTSETUP +LIBFDISK +PCRE2 -PWQUALITY +P11KIT +QRENCODE +TPM2 +BZIP2 +LZ4 "
                           "+XZ +ZLIB +ZSTD -BPF_FRAMEWORK -XKBCOMMON +UTMP +SYSVINIT default-hierarchy=unified)"},
    # the banner the issue quotes: the version in parentheses and a period before the flags (v239 era)
    "rhel8": {"os": 'NAME="Red Hat Enterprise Linux"\nVERSION="8.6 (Ootpa)"\nID="rhel"\nID_LIKE="fedora"\n'
                    'VERSION_ID="8.6"\nPRETTY_NAME="Red Hat Enterprise Linux 8.6 (Ootpa)"\n',
              "systemd": "239-58.el8", "reload": "plain", "dpkg": False,
              "banner": "systemd 239 (239-58.el8) running in system mode. (+PAM +AUDIT +SELINUX +IMA -APPARMOR +SMACK "
                        "+SYSVINIT +UTMP +LIBCRYPTSETUP +GCRYPT +GNUTLS +ACL +XZ +LZ4 +SECCOMP +BLKID +ELFUTILS +KMOD "
                        "+IDN2 -IDN +PCRE2 default-hierarchy=legacy)"},
    "ubuntu2404": {"os": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n',
                   "systemd": "255.4-1ubuntu8.6", "reload": "caller", "dpkg": True,
                   "banner": "systemd 255.4-1ubuntu8.6 running in system mode (+PAM +AUDIT +SELINUX +APPARMOR +IMA "
                             "+SMACK +SECCOMP +GCRYPT -GNUTLS +OPENSSL +ACL +BLKID +CURL +ELFUTILS +FIDO2 +IDN2 -IDN "
                             "+IPTC +KMOD +LIBCRYPTSETUP +LIBFDISK +PCRE2 -PWQUALITY +P11KIT +QRENCODE +TPM2 +BZIP2 "
                             "+LZ4 +XZ +ZLIB +ZSTD -BPF_FRAMEWORK -XKBCOMMON +UTMP +SYSVINIT default-hierarchy=unified)"},
    # Bottlerocket logs the plain upstream version (its systemd release is [U] in stacks.md §5)
    "bottlerocket": {"os": 'NAME=Bottlerocket\nID=bottlerocket\nVERSION="1.29.0 (aws-k8s-1.31-nvidia)"\n'
                           'PRETTY_NAME="Bottlerocket OS 1.29.0 (aws-k8s-1.31-nvidia)"\nVARIANT_ID=aws-k8s-1.31-nvidia\n'
                           'VERSION_ID=1.29.0\nBUILD_ID=c5a3d7e1\n',
                     "systemd": "252.22", "reload": "plain", "dpkg": False,
                     "banner": "systemd 252.22 running in system mode (+PAM +AUDIT +SELINUX -APPARMOR -IMA -SMACK "
                               "+SECCOMP -GCRYPT -GNUTLS +OPENSSL +ACL +BLKID -CURL -ELFUTILS -FIDO2 -IDN2 -IDN -IPTC "
                               "+KMOD -LIBCRYPTSETUP +LIBFDISK -PCRE2 -PWQUALITY -P11KIT -QRENCODE -TPM2 -BZIP2 -LZ4 "
                               "-XZ -ZLIB -ZSTD -BPF_FRAMEWORK -XKBCOMMON +UTMP -SYSVINIT default-hierarchy=unified)"},
}



def story_times(start: datetime) -> dict:
    """The times of one root's story, from ``start`` (when :func:`make_root` begins), in the order a node
    lives them before it is collected: ``created`` (the GPU containers: 2 s later, so that the device nodes
    the generator makes are not later than runc's ``created``, which runc takes after the prestart hooks
    ran), ``t0`` (the reload, 2 s after that), ``window`` (the --incident window around it) and ``ready``
    (the last journal line is before it; :func:`make_root` returns once it has passed, so the collection
    starts after everything it reads happened)."""
    created = start.replace(microsecond=0) + timedelta(seconds=3)   # whole seconds: --incident takes no fraction
    t0 = created + timedelta(seconds=2, microseconds=250000)
    return {"created": created, "t0": t0, "window": (created + timedelta(seconds=1), created + timedelta(seconds=4)),
            "ready": created + timedelta(seconds=5)}


GPUS = [("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 508, 0)]  #: one GPU by UUID
GPUS_ALL = [(f"/dev/{n}", M, m) for n, M, m in F.HOST_GPU]     #: NVIDIA_VISIBLE_DEVICES=all: every host node
CUSTOM_RUNC_ROOT = "/run/custom-runc"
PLUGIN_ENV = {"nvdp": {"NVIDIA_VISIBLE_DEVICES": "all", "DEVICE_LIST_STRATEGY": "envvar", "PASS_DEVICE_SPECS": "false",
                       "NVIDIA_DRIVER_ROOT": "/", "FAIL_ON_INIT_ERROR": "true", "MIG_STRATEGY": "none"},
              "nvdp-cdi": {"NVIDIA_VISIBLE_DEVICES": "void", "DEVICE_LIST_STRATEGY": "cdi-cri",
                           "PASS_DEVICE_SPECS": "false", "NVIDIA_DRIVER_ROOT": "/", "MIG_STRATEGY": "none"},
              # GPU Operator v23.9 manifest (PASS_DEVICE_SPECS=true, stacks.md §2) with devicePlugin.env's override
              "operator": {"NVIDIA_VISIBLE_DEVICES": "all", "DEVICE_LIST_STRATEGY": "envvar",
                           "PASS_DEVICE_SPECS": "false", "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
                           "CONTAINER_DRIVER_ROOT": "/driver-root", "MIG_STRATEGY": "single"},
              "operator-specs": {"NVIDIA_VISIBLE_DEVICES": "all", "DEVICE_LIST_STRATEGY": "envvar",
                                 "PASS_DEVICE_SPECS": "true", "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
                                 "CONTAINER_DRIVER_ROOT": "/driver-root", "MIG_STRATEGY": "single"},
              "hami": {"NVIDIA_VISIBLE_DEVICES": "all", "DEVICE_LIST_STRATEGY": "envvar", "PASS_DEVICE_SPECS": "false",
                       "NODE_NAME": "gpu-node", "HOOK_PATH": "/usr/local"}}
PLUGIN_POD = {"nvdp": ("kube-system", "nvidia-device-plugin-daemonset-7xq2k", "nvidia-device-plugin-ctr",
                       "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"),
              "operator": ("gpu-operator", "nvidia-device-plugin-daemonset-r8m4t", "nvidia-device-plugin",
                           "nvcr.io/nvidia/k8s-device-plugin:v0.14.5-ubi8"),
              "hami": ("kube-system", "hami-device-plugin-5k8vn", "device-plugin", "docker.io/projecthami/hami:v2.4.1")}

#: the roots. ``engine``: layout above; ``cgroup``: 1|2; ``plugin``: nvdp|operator|hami|bottlerocket|gpus|
#: runc|none; ``distro``: DISTROS key; ``inject``: hook (legacy prestart hook only), spec (linux.devices
#: + resources), hook+spec (both: the operator's toolkit with PASS_DEVICE_SPECS=true); ``hook_from``:
#: runtime (nvidia-container-runtime), hooks.d (CRI-O's OCI hook file), gpus (dockerd --gpus), shimpei;
#: ``driver``: systemd|cgroupfs (the engine's setting); ``revoked``: a reload rebuilt v1 devices.list
#: without the hook's rules; ``reload``: requester story or None; ``incident``: pass --incident WINDOW.
ROOTS = [
    {"id": "cri-v1-nvdp-ubuntu2204", "engine": "containerd", "cgroup": 1, "plugin": "nvdp", "distro": "ubuntu2204",
     "inject": "hook", "hook_from": "runtime", "driver": "systemd", "revoked": True, "reload": "apt-daily-upgrade",
     "incident": True, "zone": "Asia/Shanghai",
     "source": "https://github.com/NVIDIA/nvidia-container-toolkit/issues/1227 (Ubuntu 22.04, systemd 249.11, "
               "containerd + k8s-device-plugin, all GPU containers lose their GPUs on daemon-reload)"},
    {"id": "cri-v2-operator-ubuntu2404", "engine": "containerd", "cgroup": 2, "plugin": "operator",
     "distro": "ubuntu2404", "inject": "hook", "hook_from": "runtime", "driver": "systemd", "revoked": False,
     "reload": "snapd", "incident": True, "zone": "Etc/UTC",
     "source": "https://github.com/NVIDIA/gpu-operator/issues/430 (GPU Operator v22.9, NVML Unknown Error after "
               "1-2 days) and stacks.md §2 (devicePlugin.env PASS_DEVICE_SPECS=false override)"},
    {"id": "k3s-v2-nvdp-debian12", "engine": "k3s", "cgroup": 2, "plugin": "nvdp", "distro": "debian12",
     "inject": "hook", "hook_from": "runtime", "driver": "systemd", "revoked": False, "reload": "sudo",
     "incident": True, "zone": "Europe/Berlin",
     "source": "https://github.com/NVIDIA/gpu-operator/issues/503 (k3s + containerd, envvar strategy: GPUs "
               "outside the spec, lost after a reload)"},
    {"id": "docker-v1-rhel8-gpus", "engine": "docker", "cgroup": 1, "plugin": "gpus", "distro": "rhel8",
     "inject": "hook", "hook_from": "gpus", "driver": "systemd", "revoked": True, "reload": "sudo",
     "incident": True, "zone": "America/New_York",
     "source": "https://github.com/NVIDIA/nvidia-docker/issues/1650 (systemd 239, kernel 5.10: devices.list loses "
               "c 195:* rw after daemon-reload) and https://github.com/NVIDIA/nvidia-docker/issues/1671 "
               "(docker run --gpus, Cgroup Driver: systemd)"},
    {"id": "docker-v2-ubuntu2404-system-containerd", "engine": "docker-system", "cgroup": 2, "plugin": "gpus",
     "distro": "ubuntu2404", "inject": "hook", "hook_from": "gpus", "driver": "systemd", "revoked": False,
     "reload": "snapd", "incident": True, "zone": "Etc/UTC",
     "source": "https://github.com/NVIDIA/nvidia-container-toolkit/issues/1744 (docker-<id>.scope DeviceAllow "
               "drop-ins, cgroup v2) and https://github.com/NVIDIA/nvidia-docker/issues/1671 (Cgroup Version: 2)"},
    {"id": "crio-v1-operator-rhel8", "engine": "crio", "cgroup": 1, "plugin": "operator-specs", "distro": "rhel8",
     "inject": "hook+spec", "hook_from": "hooks.d", "driver": "systemd", "revoked": True, "reload": "sudo",
     "incident": True, "zone": "Etc/UTC", "dev_char": False,
     "source": "https://github.com/NVIDIA/gpu-operator/issues/485 (NOTICE: /dev/char links missing, systemd "
               "driver) and https://github.com/NVIDIA/k8s-device-plugin/issues/418 (CRI-O OCI hook JSON)"},
    {"id": "hami-v1-cri-ubuntu2204", "engine": "containerd", "cgroup": 1, "plugin": "hami", "distro": "ubuntu2204",
     "inject": "hook", "hook_from": "runtime", "driver": "systemd", "revoked": True, "reload": "apt-daily-upgrade",
     "incident": True, "zone": "Asia/Shanghai",
     "source": "https://github.com/Project-HAMi/HAMi/issues/248 (containerd default_runtime_name nvidia, "
               "systemd cgroup, NVML Unknown Error in HAMi pods)"},
    {"id": "bottlerocket-v2-host-plugin", "engine": "containerd", "cgroup": 2, "plugin": "bottlerocket",
     "distro": "bottlerocket", "inject": "hook", "hook_from": "shimpei", "driver": "systemd", "revoked": False,
     "reload": "plain", "incident": True, "zone": "Etc/UTC",
     "source": "https://github.com/bottlerocket-os/bottlerocket/issues/3072 (NVIDIA variants: NVML Unknown Error "
               "after systemctl daemon-reload; fix: pass-device-specs and /dev/char links)"},
    {"id": "runc-v2-custom-root-ubuntu2204", "engine": "runc", "cgroup": 2, "plugin": "runc", "distro": "ubuntu2204",
     "inject": "hook", "hook_from": "runtime", "driver": "systemd", "revoked": False, "reload": "apt-daily-upgrade",
     "incident": True, "zone": "Etc/UTC",
     "source": "https://github.com/opencontainers/runc/issues/3708 (runc's systemd driver and NVIDIA GPUs) and "
               "https://github.com/NVIDIA/nvidia-container-toolkit/issues/48 (the legacy hook under systemd)"},
    {"id": "cri-v1-nvdp-cdi-debian12", "engine": "containerd", "cgroup": 1, "plugin": "nvdp-cdi", "distro": "debian12",
     "inject": "spec", "hook_from": None, "driver": "systemd", "revoked": False, "reload": "sudo",
     "incident": False, "zone": "Europe/Berlin",
     "source": "https://github.com/NVIDIA/k8s-device-plugin/pull/573 (cdi-cri strategy) and "
               "https://github.com/kubernetes-sigs/kubespray/issues/10598 (enable_cdi in containerd)"},
    {"id": "cri-v1-cgroupfs-ubuntu2204", "engine": "containerd", "cgroup": 1, "plugin": "nvdp", "distro": "ubuntu2204",
     "inject": "hook", "hook_from": "runtime", "driver": "cgroupfs", "revoked": False, "reload": "apt-daily-upgrade",
     "incident": False, "zone": "Etc/UTC",
     "source": "https://github.com/NVIDIA/nvidia-container-toolkit/issues/48 (NOTICE: only the systemd cgroup "
               "driver is affected; cgroupfs is a workaround)"},
    {"id": "cri-v1-nvdp-debian12-no-reload", "engine": "containerd", "cgroup": 1, "plugin": "nvdp",
     "distro": "debian12", "inject": "hook", "hook_from": "runtime", "driver": "systemd", "revoked": True,
     "reload": None, "incident": True, "zone": "Etc/UTC",
     "source": "https://github.com/NVIDIA/nvidia-docker/issues/1678 (Debian, GPUs lost 'after a couple of days'; "
               "here the journal of the window holds no reload: broken with no known cause)"},
]
BY_ID = {r["id"]: r for r in ROOTS}


def cid(root_id: str, name: str) -> str:
    """A 64-hex container id, stable per root and container name."""
    import hashlib
    return hashlib.sha256(f"{root_id}/{name}".encode()).hexdigest()


# -- journal ---------------------------------------------------------------------------------------
def _pid1_unit(at: datetime, message: str, unit: str) -> dict:
    return {**F._pid1(at, message, "unit_log_success", 5823), "UNIT": unit}


def journal_entries(r: dict, t: dict) -> list[dict]:
    """PID 1's banner at boot, background lines around the window, and the root's reload story
    (``t``: :func:`story_times`)."""
    T0 = t["t0"]
    d = DISTROS[r["distro"]]
    boot = datetime.fromtimestamp(F.BOOT_US / 1e6, timezone.utc)
    out = [F._pid1(boot + timedelta(seconds=2), d["banner"], "main", 2950)]
    for m in (-1560, -360, -120, -5, 2.3):   # minutes before, then seconds after: the journal covers the window
        at = T0 + (timedelta(minutes=m) if m < 0 else timedelta(seconds=m))
        out.append(F._unit_line(at, "cron.service", "CRON", 4000 + int(abs(m)) % 997,
                                "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)"))
    story = r["reload"]
    if story is None:
        return out
    pid = 61234
    if d["reload"] == "caller":
        unit = {"snapd": "snapd.service", "sudo": "session-7.scope"}.get(story, f"{story}.service")
        out += F.reload_entries(T0, unit, pid, 212)
        if story == "sudo":  # sudo's own line a moment before the systemctl it runs (an admin on ssh)
            out.append(F._unit_line(T0 - timedelta(milliseconds=40), "session-7.scope", "sudo", pid - 2,
                                    "      ops : TTY=pts/0 ; PWD=/home/ops ; USER=root ; COMMAND=/usr/bin/systemctl "
                                    "daemon-reload"))
        if story == "snapd":
            out.append(F._unit_line(T0 - timedelta(seconds=30), "snapd.service", "snapd", 1848,
                                    'storehelpers.go:923: auto-refresh: refreshing "lxd" from revision 29351 to 31333'))
        return out
    out.append(F._pid1(T0, "Reloading."))
    if story == "apt-daily-upgrade":
        u = "apt-daily-upgrade.service"
        out += [_pid1_unit(T0 - timedelta(seconds=41), "Starting Daily apt upgrade and clean activities...", u),
                F._unit_line(T0 - timedelta(seconds=20), u, "unattended-upgrade", pid - 40,
                             "Packages that will be upgraded: libnvidia-container-tools libnvidia-container1"),
                _pid1_unit(T0 + timedelta(seconds=9), f"{u}: Deactivated successfully.", u),
                _pid1_unit(T0 + timedelta(seconds=9), "Finished Daily apt upgrade and clean activities.", u)]
    elif story == "sudo":
        out.append(F._unit_line(T0 - timedelta(seconds=1), "session-7.scope", "sudo", pid - 2,
                                "      ops : TTY=pts/0 ; PWD=/home/ops ; USER=root ; COMMAND=/usr/bin/systemctl "
                                "daemon-reload"))
    return out


# -- engine configuration --------------------------------------------------------------------------
K3S_HEADER = "# File generated by k3s. DO NOT EDIT. Use config.toml.tmpl instead.\n"
DOCKERD_CONTAINERD = ('disabled_plugins = ["io.containerd.grpc.v1.cri"]\nroot = "/var/lib/docker/containerd/daemon"\n'
                      'state = "/var/run/docker/containerd/daemon"\n[grpc]\n  address = '
                      '"/var/run/docker/containerd/containerd.sock"\n')
CONTAINERD_IO = 'disabled_plugins = ["cri"]\n'   #: the containerd.io package's /etc/containerd/config.toml
HOOKS_D = {"version": "1.0.0", "hook": {"path": "/usr/local/nvidia/toolkit/nvidia-container-runtime-hook",
                                        "args": ["nvidia-container-runtime-hook", "prestart"],
                                        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
           "when": {"always": True, "commands": [".*"]}, "stages": ["prestart"]}
CRIO_CONF = ('[crio]\nrunroot = "/run/containers/storage"\n[crio.runtime]\ncgroup_manager = "systemd"\n'
             'conmon_cgroup = "pod"\ndefault_runtime = "runc"\nhooks_dir = ["/usr/share/containers/oci/hooks.d", '
             '"/run/containers/oci/hooks.d"]\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\n'
             'runtime_root = "/run/runc"\n')


def engine_files(root: Path, r: dict) -> None:
    """The engine's and the toolkit's configuration files, and the live processes that name roots."""
    e, sc = r["engine"], "true" if r["driver"] == "systemd" else "false"
    cri = F.CONTAINERD.format(sc=sc, cdi="true" if r["inject"] == "spec" else "false")
    toolkit = F.TOOLKIT.format(mode="legacy")
    if e == "containerd":
        F._w(root / "etc/containerd/config.toml", cri)
    elif e == "k3s":
        F._w(root / "var/lib/rancher/k3s/agent/etc/containerd/config.toml", K3S_HEADER + cri)
        _proc(root, 1201, ["/usr/local/bin/k3s", "agent"])
        _proc(root, 1240, ["containerd", "-c", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml", "-a",
                           "/run/k3s/containerd/containerd.sock", "--state", "/run/k3s/containerd", "--root",
                           "/var/lib/rancher/k3s/agent/containerd"])
    elif e in ("docker", "docker-system"):
        F._w(root / "etc/containerd/config.toml", CONTAINERD_IO)
        daemon = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}
        if r["cgroup"] == 1:    # on v1 dockerd's default is cgroupfs: these hosts set systemd (nvidia-docker#1671)
            daemon["exec-opts"] = ["native.cgroupdriver=systemd"]
        F._w(root / "etc/docker/daemon.json", json.dumps(daemon, indent=2) + "\n")
        if e == "docker":
            F._w(root / "run/docker/containerd/containerd.toml", DOCKERD_CONTAINERD)
            _proc(root, 1101, ["/usr/bin/dockerd", "-H", "fd://"])
            _proc(root, 1130, ["containerd", "--config", "/var/run/docker/containerd/containerd.toml"])
        else:
            _proc(root, 1101, ["/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"])
    elif e == "crio":
        F._w(root / "etc/crio/crio.conf", CRIO_CONF)
        F._w(root / "run/containers/oci/hooks.d/oci-nvidia-hook.json", json.dumps(HOOKS_D, indent=2) + "\n")
        _proc(root, 1150, ["/usr/bin/crio"])
    elif e == "runc":
        _proc(root, 2301, ["runc", "--root", CUSTOM_RUNC_ROOT, "--systemd-cgroup", "run", "--bundle",
                           "/srv/jobs/train", cid(r["id"], "train")])
    if not r.get("gpu", True):
        return  # no NVIDIA toolkit on a node without GPUs
    if r["plugin"].startswith("operator"):
        F._w(root / "usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml", toolkit)
        F._w(root / "run/nvidia/validations/driver-ready", "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n")
        F._w(root / "run/nvidia/driver/usr/bin/.keep", "")
    else:
        F._w(root / "etc/nvidia-container-runtime/config.toml", toolkit)
    if r["plugin"] == "nvdp-cdi":
        F._w(root / "var/run/cdi/nvidia.yaml", F.CDI_SPEC)
    if r["plugin"] == "bottlerocket":
        F._w(root / "etc/containerd/config.toml", cri.replace('"/usr/bin/nvidia-container-runtime"', '"/usr/bin/shimpei"'))
        F._w(root / "etc/shimpei/nvidia-oci-hooks.json", json.dumps(
            {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook",
                                                                                        "prestart"]}]}, indent=2))
        F._w(root / "etc/nvidia-k8s-device-plugin/settings.yaml",
             "version: v1\nflags:\n  migStrategy: none\n  failOnInitError: true\n  plugin:\n    passDeviceSpecs: false\n"
             "    deviceListStrategy: envvar\n    deviceIDStrategy: index\n")
        F._w(root / "etc/systemd/system/nvidia-k8s-device-plugin.service.d/exec-start.conf",
             "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-device-plugin "
             "--config-file=/etc/nvidia-k8s-device-plugin/settings.yaml\n")
        _proc(root, 1320, ["/usr/bin/nvidia-device-plugin", "--config-file=/etc/nvidia-k8s-device-plugin/settings.yaml"])
    if r["plugin"] == "hami":
        F._w(root / "usr/local/vgpu/libvgpu.so", "")
        F._w(root / "usr/local/vgpu/ld.so.preload", "/usr/local/vgpu/libvgpu.so\n")


def _proc(root: Path, pid: int, argv: list[str], cwd: str | None = None) -> None:
    F._w(root / f"proc/{pid}/cmdline", "\0".join(argv) + "\0")
    F._w(root / f"proc/{pid}/stat", f"{pid} ({argv[0].rsplit('/', 1)[-1][:15]}) S " + " ".join(["0"] * 18) + " 900 0 0\n")
    F._w(root / f"proc/{pid}/status", f"Name:\t{argv[0].rsplit('/', 1)[-1][:15]}\nUid:\t0\t0\t0\t0\n")  # root's
    (root / f"proc/{pid}/exe").symlink_to(argv[0])  # the daemon's own binary
    if cwd:
        (root / f"proc/{pid}/cwd").symlink_to(cwd)


# -- containers ------------------------------------------------------------------------------------
def layout(r: dict, c: str, uid: str) -> dict:
    """Where container ``c`` of root ``r`` lives: ``{"ns", "bundle", "state", "cgroups_path", "cgroup_rel",
    "scope", "options", "proc"}`` (``proc``: the engine's per-container process: shim or conmon)."""
    e = r["engine"]
    systemd = r["driver"] == "systemd"
    kube = f"kubepods-besteffort-pod{uid}.slice"
    kube_rel = f"kubepods.slice/kubepods-besteffort.slice/{kube}"
    if e in ("containerd", "k3s"):
        state_dir = "/run/k3s/containerd" if e == "k3s" else "/run/containerd"
        bundle = f"{state_dir}/io.containerd.runtime.v2.task/k8s.io/{c}"
        if systemd:
            out = {"cgroups_path": f"{kube}:cri-containerd:{c}", "cgroup_rel": f"{kube_rel}/cri-containerd-{c}.scope",
                   "scope": f"cri-containerd-{c}.scope"}
        else:
            out = {"cgroups_path": f"/kubepods/besteffort/pod{uid}/{c}", "cgroup_rel": f"kubepods/besteffort/pod{uid}/{c}",
                   "scope": None}
        binary = "/usr/bin/shimpei" if r["plugin"] == "bottlerocket" else "/usr/bin/nvidia-container-runtime"
        return {**out, "ns": "k8s.io", "bundle": bundle, "state": f"/run/containerd/runc/k8s.io/{c}/state.json",
                "options": {"binary_name": binary, "systemd_cgroup": systemd},
                "proc": ["/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", c, "-address",
                         f"{state_dir}/containerd.sock"]}
    if e in ("docker", "docker-system"):
        state_dir = "/run/docker/containerd/daemon" if e == "docker" else "/run/containerd"
        sock = "/var/run/docker/containerd/containerd.sock" if e == "docker" else "/run/containerd/containerd.sock"
        return {"ns": "moby", "bundle": f"{state_dir}/io.containerd.runtime.v2.task/moby/{c}",
                "state": f"/run/docker/runtime-runc/moby/{c}/state.json", "cgroups_path": f"system.slice:docker:{c}",
                "cgroup_rel": f"system.slice/docker-{c}.scope", "scope": f"docker-{c}.scope",
                "options": {"binary_name": "runc", "root": "/var/run/docker/runtime-runc", "systemd_cgroup": systemd},
                "proc": ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", c, "-address", sock]}
    if e == "crio":
        bundle = f"/run/containers/storage/overlay-containers/{c}/userdata"
        return {"ns": None, "bundle": bundle, "state": f"/run/runc/{c}/state.json",
                "cgroups_path": f"{kube}:crio:{c}", "cgroup_rel": f"{kube_rel}/crio-{c}.scope", "scope": f"crio-{c}.scope",
                "options": None, "proc": ["/usr/bin/conmon", "-b", bundle, "-c", c, "--runtime-arg", "--root=/run/runc",
                                          "-r", "/usr/bin/runc", "--log-level", "info"]}
    if e == "runc":
        return {"ns": None, "bundle": "/srv/jobs/train", "state": f"{CUSTOM_RUNC_ROOT}/{c}/state.json",
                "cgroups_path": f"system.slice:runc:{c}", "cgroup_rel": f"system.slice/runc-{c}.scope",
                "scope": f"runc-{c}.scope", "options": None, "proc": None}
    raise ValueError(e)


def container(root: Path, r: dict, t: dict, name: str, *, pod: str | None, pod_ns: str | None, image: str, env: dict,
              gpu: list, pid: int, mounts: list | None = None) -> str:
    """One container's on-disk state (``gpu``: the GPU nodes inside it; injected as ``r["inject"]`` says).
    Returns its id."""
    c = cid(r["id"], name)
    uid = c[:8] + "_" + c[8:12] + "_" + c[12:16] + "_" + c[16:20] + "_" + c[20:32]
    lay = layout(r, c, uid.replace("_", "") if r["engine"] == "crio" else uid)
    systemd = r["driver"] == "systemd"
    hooked = bool(gpu) and "hook" in r["inject"]
    spec_gpu = gpu if "spec" in r["inject"] else []
    hook = dict(F.LEGACY_HOOK)
    if r["hook_from"] == "hooks.d":
        hook = {"path": HOOKS_D["hook"]["path"], "args": HOOKS_D["hook"]["args"], "env": HOOKS_D["hook"]["env"]}
    annotations = {}
    if pod and r["engine"] == "crio":
        annotations = {"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": pod_ns,
                       "io.kubernetes.container.name": name, "io.kubernetes.cri-o.ContainerType": "container",
                       "io.kubernetes.cri-o.ImageName": image}
    elif pod:
        annotations = {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-name": pod,
                       "io.kubernetes.cri.sandbox-namespace": pod_ns, "io.kubernetes.cri.container-name": name,
                       "io.kubernetes.cri.image-name": image}
    if spec_gpu and r["plugin"] == "nvdp-cdi":
        annotations["cdi.k8s.io/nvidia-device-plugin_" + c[:8]] = "nvidia.com/gpu=0"
    spec = {
        "ociVersion": "1.1.0",
        "process": {"args": ["/bin/sh", "-c", "sleep infinity"], "cwd": "/",
                    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"HOSTNAME={c[:12]}",
                            *(f"{k}={v}" for k, v in env.items())]},
        "root": {"path": "rootfs"}, "hostname": c[:12], "mounts": mounts or [],
        "hooks": {"prestart": [hook] if hooked else [],
                  "createContainer": [F.CDI_HOOK] if spec_gpu and r["plugin"] == "nvdp-cdi" else []},
        "annotations": annotations,
        "linux": {"cgroupsPath": lay["cgroups_path"],
                  "devices": [{"path": p, "type": "c", "major": M, "minor": m, "fileMode": 438, "uid": 0, "gid": 0}
                              for p, M, m in spec_gpu],
                  "resources": {"devices": [{"allow": False, "access": "rwm"}]
                                + [{"allow": True, "type": "c", "major": M, "minor": m, "access": "rw"}
                                   for _, M, m in spec_gpu]}},
    }
    bundle = root / lay["bundle"].lstrip("/")
    F._w(bundle / "config.json", json.dumps(spec, indent=1))
    if lay["options"] is not None:
        F._w(bundle / "options.json", json.dumps(lay["options"]))
        F._w(bundle / "init.pid", str(pid))
    start = 200000 + pid
    cg_dir = f"/sys/fs/cgroup/devices/{lay['cgroup_rel']}" if r["cgroup"] == 1 else f"/sys/fs/cgroup/{lay['cgroup_rel']}"
    paths = {"devices": cg_dir, "memory": cg_dir.replace("/devices/", "/memory/")} if r["cgroup"] == 1 else {"": cg_dir}
    state = {"id": c, "init_process_pid": pid, "init_process_start": start,
             "created": t["created"].strftime("%Y-%m-%dT%H:%M:%S.123456789Z"),
             "config": {"cgroups": {"Systemd": systemd, "devices": F._rules(spec_gpu)},
                        "labels": [f"bundle={lay['bundle']}"]},
             "cgroup_paths": paths}
    F._w(root / lay["state"].lstrip("/"), json.dumps(state))
    F._w(root / f"proc/{pid}/stat", f"{pid} (sleep) S " + " ".join(["0"] * 18) + f" {start} 0 0\n")
    F._w(root / f"proc/{pid}/cgroup", (f"11:devices:/{lay['cgroup_rel']}\n" if r["cgroup"] == 1 else "")
         + f"0::/{lay['cgroup_rel'] if r['cgroup'] == 2 else ''}\n")
    (root / f"proc/{pid}/root/dev").mkdir(parents=True, exist_ok=True)
    for p, M, m in gpu:
        F._chr(root / f"proc/{pid}/root{p}", M, m)
    if lay["proc"]:
        _proc(root, pid - 1, lay["proc"], cwd=lay["bundle"] if "containerd-shim" in lay["proc"][0] else None)
    if r["cgroup"] == 1:
        base = ["a *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", "c 5:0 rwm",
                "c 5:1 rwm", "c 5:2 rwm", "c 10:200 rwm", "c 136:* rwm"]
        keep = [] if (r["revoked"] or not gpu) else [f"c {M}:{m} rw" for _, M, m in gpu]
        F._w(root / cg_dir.lstrip("/") / "devices.list", "\n".join(base + keep) + "\n")
    else:
        F._w(root / cg_dir.lstrip("/") / "cgroup.procs", f"{pid}\n")
    if lay["scope"]:
        scope = f"run/systemd/transient/{lay['scope']}"
        slice_ = lay["cgroup_rel"].rsplit("/", 2)[-2]
        F._w(root / scope, "# This is a transient unit file, created programmatically via the systemd API. Do not "
                           f"edit.\n[Unit]\nDescription=libcontainer container {c}\n\n[Scope]\nSlice={slice_}\n"
                           "Delegate=yes\n")
        allow = F.BASE_DROPIN + [f"/dev/char/{M}:{m} rw" for _, M, m in spec_gpu]
        F._w(root / f"{scope}.d/50-DeviceAllow.conf", "# This is a drop-in unit file extension, created via "
             '"systemctl set-property"\n# or an equivalent operation. Do not edit.\n[Scope]\nDeviceAllow=\n'
             + "".join(f"DeviceAllow={a}\n" for a in allow))
        F._w(root / f"{scope}.d/50-DevicePolicy.conf", "[Scope]\nDevicePolicy=strict\n")
    return c


def containers(root: Path, r: dict, t: dict) -> dict[str, str]:
    """The root's containers: ``{name: id}`` (names: ``plugin``, ``trainer``, ``sidecar``, ``train``)."""
    kind = r["plugin"]
    out = {}
    if r["engine"] == "runc":
        out["train"] = container(root, r, t, "train", pod=None, pod_ns=None, image="", pid=5301, gpu=GPUS_ALL,
                                 env={"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})
        return out
    if r["engine"].startswith("docker"):
        out["trainer"] = container(root, r, t, "trainer", pod=None, pod_ns=None, image="nvcr.io/nvidia/pytorch:24.08-py3",
                                   pid=5201, gpu=GPUS,
                                   env={"NVIDIA_VISIBLE_DEVICES": "GPU-8d0b4e66-1b7a-4b9f-a1c3-0000000a11ce",
                                        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})
        out["sidecar"] = container(root, r, t, "sidecar", pod=None, pod_ns=None, image="docker.io/library/redis:7",
                                   pid=6301, gpu=[], env={})
        return out
    plugin = PLUGIN_POD.get(kind.split("-")[0])
    if plugin:
        ns, pod, name, image = plugin
        out["plugin"] = container(root, r, t, name, pod=pod, pod_ns=ns, image=image, pid=4101, gpu=GPUS_ALL,
                                  mounts=[F.PLUGIN_MOUNT], env=PLUGIN_ENV[kind])
    trainer_env = {"NVIDIA_VISIBLE_DEVICES": "GPU-8d0b4e66-1b7a-4b9f-a1c3-0000000b0b0b",
                   "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    if kind == "hami":
        trainer_env.update({"CUDA_DEVICE_MEMORY_LIMIT_0": "10240m", "CUDA_DEVICE_SM_LIMIT": "50"})
    gpu = r.get("gpu", True)
    out["trainer"] = container(root, r, t, "trainer", pod="trainer-0", pod_ns="ml", image="nvcr.io/nvidia/pytorch:24.08-py3",
                               pid=5201, gpu=GPUS if gpu else [], env=trainer_env if gpu else {})
    out["sidecar"] = container(root, r, t, "log-shipper", pod="trainer-0", pod_ns="ml",
                               image="docker.io/fluent/fluent-bit:3.1", pid=6301, gpu=[], env={})
    return out


# -- one node --------------------------------------------------------------------------------------
#: /proc/devices of a node without the NVIDIA driver (no nvidia, nvidia-uvm or nvidia-caps majors)
NO_GPU_DEVICES = ("Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n 10 misc\n136 pts\n226 drm\n\n"
                  "Block devices:\n  8 sd\n259 blkext\n")


def make_root(root: Path, r: dict) -> tuple[dict[str, str], dict]:
    """Build the host root of matrix root ``r`` (an item of :data:`ROOTS`) at ``root`` (``r["gpu"]`` False:
    a node without GPUs, whose containers hold none); returns its
    containers ``{name: id}`` and its :func:`story_times`, once the story's last moment has passed (about
    6 s after the call)."""
    import hashlib
    t = story_times(datetime.now(timezone.utc))
    d = DISTROS[r["distro"]]
    root.mkdir(parents=True, exist_ok=True)
    (root / "run").mkdir(exist_ok=True)
    (root / "var").mkdir(exist_ok=True)
    (root / "var/run").symlink_to("../run")
    for part in ("proc/stat", "proc/version"):
        F._w(root / part, (F.SAMPLE / part).read_text())
    h = hashlib.sha256(r["id"].encode()).hexdigest()
    machine_id, boot = h[:32], h[32:]
    host = r["id"][:40]
    F._w(root / "etc/hostname", host + "\n")
    F._w(root / "etc/machine-id", machine_id + "\n")
    F._w(root / "proc/sys/kernel/random/boot_id", f"{boot[:8]}-{boot[8:12]}-{boot[12:16]}-{boot[16:20]}-{boot[20:]}\n")
    kernel = {"rhel8": "4.18.0-372.9.1.el8.x86_64", "bottlerocket": "6.1.119"}.get(r["distro"], "5.15.0-125-generic")
    F._w(root / "proc/sys/kernel/osrelease", kernel + "\n")
    F._w(root / "etc/os-release", d["os"])
    zone = root / "usr/share/zoneinfo" / r["zone"]
    zone.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path("/usr/share/zoneinfo") / r["zone"], zone)
    (root / "etc/localtime").symlink_to(f"/usr/share/zoneinfo/{r['zone']}")
    if d["dpkg"]:
        F._w(root / "etc/timezone", r["zone"] + "\n")
        F._w(root / "var/lib/dpkg/status", f"Package: systemd\nStatus: install ok installed\nPriority: important\n"
             f"Section: admin\nArchitecture: amd64\nVersion: {d['systemd']}\nDescription: system and service manager\n\n")
    gpu = r.get("gpu", True)  # False: a node with no NVIDIA GPU, driver or toolkit (nor GPU containers)
    F._w(root / "proc/devices", F.PROC_DEVICES if gpu else NO_GPU_DEVICES)
    (root / "dev/char").mkdir(parents=True, exist_ok=True)
    for name, major, minor in F.HOST_GPU if gpu else ():
        F._chr(root / "dev" / name, major, minor)
        if r.get("dev_char", True):
            (root / f"dev/char/{major}:{minor}").symlink_to(f"../{name}")
    if r["cgroup"] == 2:
        F._w(root / "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    else:
        F._w(root / "sys/fs/cgroup/devices/devices.list", "a *:* rwm\n")
    engine_files(root, r)
    names = containers(root, r, t)
    # a scenario's own lines and files (tests/scenes.py): ``entries(t, names)`` adds journal entries,
    # ``files(root, t, names)`` writes what else its story leaves on the node
    extra = r["entries"](t, names) if r.get("entries") else []
    if r.get("files"):
        r["files"](root, t, names)
    F.write_journal(root, host, machine_id, f"{boot}", journal_entries(r, t) + extra, [])
    wait = (t["ready"] - datetime.now(timezone.utc)).total_seconds()
    if wait > 0:
        time.sleep(wait)
    return names, t


def incident_arg(t: dict) -> str:
    """The ``--incident`` value (``t``: :func:`story_times`) of every root whose table entry says ``incident``."""
    w = t["window"]
    return f"{w[0].strftime('%Y-%m-%dT%H:%M:%SZ')}..{w[1].strftime('%Y-%m-%dT%H:%M:%SZ')}=gpu-lost"


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] not in BY_ID:
        print(__doc__ + "\nUsage: python3 tests/nodegen.py ROOT_ID OUT_DIR\n  " + "\n  ".join(BY_ID))
        sys.exit(2)
    names, t = make_root(Path(sys.argv[2]), BY_ID[sys.argv[1]])
    print(json.dumps({"containers": names, "incident": incident_arg(t)}, indent=1))
