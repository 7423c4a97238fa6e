"""collectors.nvidia_host: the host's driver state from files that touch no GPU, acquired from real file trees
in the formats the kernel, the driver, dpkg, rpm and Fabric Manager write, into a real bundle, and read back
into the ``host_gpu`` fact.

Formats and where each text comes from:
- ``/proc/driver/nvidia/version``: ``NVRM version: %s`` / ``GCC version:  %s`` (NVIDIA/open-gpu-kernel-modules
  ``kernel-open/nvidia/nv-procfs.c``); :data:`REAL_VERSION_LINES` are lines published verbatim (cited there),
  the scenario trees use the same layout with the scenario's version.
- ``params``: one ``%s: %u`` line per ``nv_parms`` entry, then six quoted strings (same file); names from nv-reg.h.
- ``/proc/devices``: proc(5); the NVIDIA majors of NVIDIA/nvidia-container-toolkit's ``TestNvidiaDevices``.
- sysfs: Documentation/ABI/testing/sysfs-bus-pci; ``/sys/bus/pci/devices/<addr>`` is a relative link into
  ``/sys/devices``, as on this machine (one test walks its real /sys). IDs of an HGX H100 as ``lspci -nn`` shows
  them in public write-ups: ``3D controller [0302]: ... GH100 [H100 SXM5 80GB] [10de:2330]``, subsystem
  ``[10de:16c1]``; ``Bridge [0680]: ... GH100 [H100 NVSwitch] [10de:22a3]``, subsystem ``[10de:1796]``.
- dpkg: stanzas in dpkg's status layout (deb-control(5) fields plus ``Status:``) with the control fields of
  NVIDIA's Ubuntu packages as ``dpkg-deb --info nvidia-driver-550_550.54.15-0ubuntu1_amd64.deb`` prints them
  (Package, Source ``nvidia-graphics-drivers-550``, Version ``550.54.15-0ubuntu1``, Architecture, Maintainer
  ``Ubuntu Core Developers``).
- rpm: a real ``rpmdb.sqlite`` written by this machine's rpm 4.18 (``rpm --justdb``) from packages rpmbuild builds.
- fabricmanager.log: lines of leptonai/gpud@15b320f7 ``components/accelerator/nvidia/fabric-manager/testdata/
  fabricmanager.log`` (a real log), verbatim.
- ``nvidia-smi -q``: tests/fixtures/nvidia-smi/q-550.127.05-a10.txt (SOURCE.md there).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from collectors import nvidia_host
from collectors.nvidia_host import fabric, procfs, smi
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import CollectContext
from forensics.timeutil import tz_from_tzif

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"

#: verbatim /proc/driver/nvidia/version lines from public texts
REAL_VERSION_LINES = [
    # an open-module install guide (README, "the output is"), with its GCC line
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  545.23.06  Release Build  (dvs-builder@U16-I3-C17-2-2)"
     "  Sun Oct 15 17:35:00 UTC 2023\nGCC version:  gcc version 9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.2) \n",
     ("545.23.06", "open", "gcc version 9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.2)")),
    # a driver-mismatch test's proprietary module line
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 10:11:16 UTC 2025\n",
     ("580.95.05", "proprietary", None)),
    # NVIDIA's Fabric Manager install notes ("major version 450 of the kernel module")
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  450.42.01  Tue Jun 15 21:26:37 UTC 2021\n",
     ("450.42.01", "proprietary", None)),
    # a Jetson (L4T) build that prints no number
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  TempVersion  Release Build  (bugfix_main)  "
     "(buildbrain@x)  Tue Dec 30 15:54:35 PST 2025\nGCC version: 13\n", (None, "open", "13")),
]

#: /proc/devices with the majors of nvidia-container-toolkit's TestNvidiaDevices, and a block "nvidia" to ignore
PROC_DEVICES = ("Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n136 pts\n195 nvidia-frontend\n"
                "234 nvidia-nvlink\n235 nvidia-caps\n510 nvidia-uvm\n511 nvidia-nvswitch\n\nBlock devices:\n"
                "  7 loop\n  8 sd\n259 blkext\n")
PARAMS = ("ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
          "DeviceFileMode: 438\nEnableMSI: 1\nEnableGpuFirmware: 18\nRegistryDwords: \"\"\n"
          "RegistryDwordsPerDevice: \"\"\n"
          "RmMsg: \"\"\nGpuBlacklist: \"\"\nTemporaryFilePath: \"\"\nExcludedGpus: \"\"\n")
FM_LOG = (
    "[Feb 27 2025 14:10:02] [INFO] [tid 1803] Received an inband message:  Message header details: magic Id:adbc "
    "request Id:fd892a54b49d70d9 status:0 type:2 length:56\nMessage payload details:Team setup request: Allocation "
    "Size:60000000 Flags:0 Number of GPUs:8 GPU Handles:6319a3aba7f6e5de 31097ec5a3e76df4 637952d4c378a0cb "
    "38a349b0822bc98e 438f462c275448f1 76ad688ef704327 ee763d5a17b601c6 25a497ff4a934d86\n\n"
    "[Feb 27 2025 14:10:02] [INFO] [tid 1808] multicast group 1 is allocated.\n"
    "[Feb 27 2025 15:10:02] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus "
    "id 00000000:86:00.0 physical id 3 port 61\n\n")


def version_file(version: str, kind: str = "open") -> str:
    """/proc/driver/nvidia/version in nv-procfs.c's layout for a module of ``version``."""
    ident = ("NVIDIA UNIX Open Kernel Module for x86_64" if kind == "open" else "NVIDIA UNIX x86_64 Kernel Module")
    build = "  Release Build  (dvs-builder@U16-I3-B03-4-3)" if kind == "open" else ""
    return (f"NVRM version: {ident}  {version}{build}  Tue Jun  3 00:07:58 UTC 2025\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n")


def deb(package: str, version: str, status: str = "install ok installed", multi_arch: str | None = None) -> str:
    """One dpkg status stanza of an Ubuntu NVIDIA package (fields in dpkg's order)."""
    branch = version.split(".")[0]
    lines = [f"Package: {package}", f"Status: {status}", "Priority: optional", "Section: non-free/libs",
             "Installed-Size: 1711", "Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>",
             "Architecture: amd64"] + ([f"Multi-Arch: {multi_arch}"] if multi_arch else []) + [
             f"Source: nvidia-graphics-drivers-{branch}", f"Version: {version}",
             "Description: NVIDIA driver metapackage",
             " This metapackage depends on the NVIDIA binary driver and on all of its libraries,"]
    return "\n".join(lines) + "\n"


def write(root: Path, path: str, data: str | bytes, mode: int | None = None) -> Path:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        os.chmod(p, mode)
    return p


def link(root: Path, path: str, target: str) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, p)


def pci_function(root: Path, addr: str, parent: str, attrs: dict, driver: str | None) -> None:
    """A sysfs PCI function as the kernel lays it out: the device directory under /sys/devices, the relative
    link in /sys/bus/pci/devices, and a relative ``driver`` link into /sys/bus/pci/drivers."""
    dev = f"/sys/devices/{parent}/{addr}"
    for name, value in attrs.items():
        write(root, f"{dev}/{name}", value + "\n")
    link(root, f"/sys/bus/pci/devices/{addr}", os.path.relpath(dev, "/sys/bus/pci/devices"))
    if driver:
        (root / f"sys/bus/pci/drivers/{driver}").mkdir(parents=True, exist_ok=True)
        link(root, f"{dev}/driver", os.path.relpath(f"/sys/bus/pci/drivers/{driver}", dev))


H100 = {"vendor": "0x10de", "device": "0x2330", "class": "0x030200", "subsystem_vendor": "0x10de",
        "subsystem_device": "0x16c1", "numa_node": "0", "enable": "1", "current_link_speed": "32.0 GT/s PCIe",
        "current_link_width": "16", "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16",
        "power/runtime_status": "active"}
NVSWITCH = {**H100, "device": "0x22a3", "class": "0x068000", "subsystem_device": "0x1796",
            "current_link_speed": "16.0 GT/s PCIe", "current_link_width": "2", "max_link_speed": "16.0 GT/s PCIe",
            "max_link_width": "2"}
HOST_BRIDGE = {"vendor": "0x8086", "device": "0x09a2", "class": "0x060000", "subsystem_vendor": "0x8086",
               "subsystem_device": "0x0000", "numa_node": "0", "enable": "1", "power/runtime_status": "active"}


def driver_tree(root: Path, version: str, kind: str = "open", gpus=("0000:1b:00.0",)) -> None:
    """/proc and /sys of a loaded driver ``version`` with the GPUs ``gpus``."""
    write(root, "/proc/stat", "cpu  1 2 3 4\nbtime 1788300000\n")
    write(root, "/proc/driver/nvidia/version", version_file(version, kind))
    write(root, "/proc/driver/nvidia/params", PARAMS)
    write(root, "/proc/driver/nvidia/registry", 'Binary: ""\n')
    for g in gpus:
        write(root, f"/proc/driver/nvidia/gpus/{g}/information", "Model: \t\t NVIDIA H100 80GB HBM3\n")
    write(root, "/proc/devices", PROC_DEVICES)
    for mod in ("nvidia", "nvidia_uvm", "nvidia_modeset"):
        write(root, f"/sys/module/{mod}/version", version + "\n")
        write(root, f"/sys/module/{mod}/taint", ("OE" if kind == "open" else "POE") + "\n")
        write(root, f"/sys/module/{mod}/initstate", "live\n")
        write(root, f"/sys/module/{mod}/refcnt", "0\n")
    write(root, "/sys/module/nvidia/parameters/NVreg_EnableGpuFirmware", "18\n")
    write(root, "/sys/module/nvidia/parameters/NVreg_RegistryDwords", "(null)\n")
    write(root, "/sys/module/nvidia_uvm/parameters/uvm_perf_prefetch_enable", "1\n")
    for i, g in enumerate(gpus):
        pci_function(root, g, f"pci0000:{i:02x}/0000:{i:02x}:01.0", H100, "nvidia")


def libraries(root: Path, version: str, d: str = "/usr/lib/x86_64-linux-gnu") -> None:
    for name in (f"libnvidia-ml.so.{version}", f"libcuda.so.{version}", "libnvidia-ml.so.1", "libcuda.so.1",
                 f"libnvidia-ptxjitcompiler.so.{version}", "libc.so.6"):
        write(root, f"{d}/{name}", b"\x7fELF")


def zone(name: str):
    return tz_from_tzif(Path("/usr/share/zoneinfo", name).read_bytes(), name)


def collect(root: Path, out: Path, options: dict | None = None, deadline: float | None = None) -> Bundle:
    w = BundleWriter(out)
    nvidia_host.acquire(CollectContext(root=root, writer=w, options=options or {}, deadline=deadline))
    w.finish()
    return Bundle.open(out)


def fact(bundle: Bundle, node: NodeFacts | None = None) -> dict:
    r = nvidia_host.read(bundle, node or NodeFacts())
    assert r.problems == []
    return r.facts["host_gpu"]


def record(bundle: Bundle, source: str):
    return [a for a in bundle.artifacts() if a.source == source][-1]


# -- parsers on the real texts ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, want", REAL_VERSION_LINES)
def test_version_lines_as_published(text, want):
    got = procfs.parse_version(text)
    assert (got["version"], got["kind"], got["gcc"]) == want
    assert got["line"] == text.splitlines()[0].strip()


def test_proc_devices_params_and_fabric_log_parse():
    assert procfs.parse_proc_devices(PROC_DEVICES) == {"nvidia-frontend": 195, "nvidia-nvlink": 234, "nvidia-caps": 235,
                                                        "nvidia-uvm": 510, "nvidia-nvswitch": 511}
    p = procfs.parse_params(PARAMS)
    assert (p["ResmanDebugLevel"], p["DeviceFileMode"], p["EnableGpuFirmware"], p["ExcludedGpus"]) == \
        (4294967295, 438, 18, "")
    entries, worse, orphans = fabric.log_entries(FM_LOG, NodeFacts(tz_name="Asia/Seoul", tz=zone("Asia/Seoul")))
    assert (worse, orphans) == (1, 0)
    assert entries == [{"at": "2025-02-27T06:10:02Z", "original": "Feb 27 2025 15:10:02", "level": "ERROR",
                        "message": "detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id "
                                   "00000000:86:00.0 physical id 3 port 61", "flags": []}]
    # zone unknown: read as UTC and flagged
    entries, _, _ = fabric.log_entries(FM_LOG, NodeFacts(tz_unknown=True))
    assert (entries[0]["at"], entries[0]["flags"]) == ("2025-02-27T15:10:02Z", ["tz-unknown"])


def test_nvidia_smi_q_fields_read_back():
    got = smi.parse((FIXTURES / "q-550.127.05-a10.txt").read_text())
    assert (got["driver_version"], got["cuda_version"]) == ("550.127.05", "12.4")
    assert len(got["gpus"]) == 1
    g = got["gpus"][0]
    assert (g["bus_id"], g["serial"], g["uuid"]) == ("00000000:06:00.0", "1324722021038",
                                                     "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d")
    assert g["retired_pages"] == {"Single Bit ECC": "N/A", "Double Bit ECC": "N/A", "Pending Page Blacklist": "N/A"}
    assert g["remapped_rows"] == {"Correctable Error": "0", "Uncorrectable Error": "0", "Pending": "No",
                                  "Remapping Failure Occurred": "No"}
    assert g["ecc_uncorrectable"] == {
        "volatile": {"SRAM Uncorrectable Parity": "0", "SRAM Uncorrectable SEC-DED": "0", "DRAM Uncorrectable": "0"},
        "aggregate": {"SRAM Uncorrectable Parity": "0", "SRAM Uncorrectable SEC-DED": "0", "DRAM Uncorrectable": "0"}}
    assert g["fabric"] == {"State": "N/A", "Status": "N/A", "CliqueId": "N/A", "ClusterUUID": "N/A"}
    failed = smi.parse("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.195\n")
    assert (failed["first_line"], failed["gpus"], failed["driver_version"]) == \
        ("Failed to initialize NVML: Driver/library version mismatch", [], None)


# -- whole hosts -----------------------------------------------------------------------------------------
def test_hgx_h100_node(tmp_path):
    root = tmp_path / "root"
    driver_tree(root, "570.158.01", "open", gpus=("0000:1b:00.0", "0000:43:00.0"))
    pci_function(root, "0000:05:00.0", "pci0000:00/0000:00:03.0", NVSWITCH, "nvidia-nvswitch")
    pci_function(root, "0000:00:00.0", "pci0000:00", HOST_BRIDGE, None)
    libraries(root, "570.158.01")
    write(root, "/var/lib/dpkg/status", "\n".join([
        deb("adduser", "3.118ubuntu5"), deb("nvidia-driver-570-server-open", "570.158.01-0ubuntu0.22.04.1"),
        deb("libnvidia-compute-570-server", "570.158.01-0ubuntu0.22.04.1", multi_arch="same"),
        deb("nvidia-fabricmanager-570", "570.158.01-1"), deb("zlib1g", "1:1.2.11.dfsg-2ubuntu9.2")]))
    write(root, "/lib/systemd/system/nvidia-fabricmanager.service",
          "[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\nType=forking\n"
          "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n\n"
          "[Install]\nWantedBy=multi-user.target\n")
    link(root, "/etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service",
         "/lib/systemd/system/nvidia-fabricmanager.service")
    write(root, "/usr/share/nvidia/nvswitch/fabricmanager.cfg",
          "# Fabric Manager logging levels\nLOG_LEVEL=4\n# Filename for Fabric Manager logs\n"
          "LOG_FILE_NAME=/var/log/fabricmanager.log\nLOG_APPEND_TO_LOG=1\nLOG_USE_SYSLOG=0\nDAEMONIZE=1\n")
    write(root, "/var/log/fabricmanager.log", FM_LOG)
    b = collect(root, tmp_path / "b")
    f = fact(b, NodeFacts(tz_name="Asia/Seoul", tz=zone("Asia/Seoul")))
    assert f["module"] == {"loaded": True, "version": "570.158.01", "kind": "open",
                           "gcc": "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)",
                           "line": version_file("570.158.01").splitlines()[0], "source": "/proc/driver/nvidia/version",
                           "reason": None}
    assert f["sys_module"]["nvidia"] == {"loaded": True, "source": "/sys/module/nvidia", "version": "570.158.01",
                                         "taint": "OE", "initstate": "live", "refcnt": "0"}
    assert f["sys_module"]["nvidia_peermem"]["loaded"] is False
    assert f["params"]["values"]["DeviceFileMode"] == 438
    assert f["module_parameters"] == {"nvidia": {"NVreg_EnableGpuFirmware": "18", "NVreg_RegistryDwords": "(null)"},
                                      "nvidia_uvm": {"uvm_perf_prefetch_enable": "1"}}
    assert f["userspace"]["versions"] == ["570.158.01"]
    assert f["userspace"]["libraries"] == ["/usr/lib/x86_64-linux-gnu/libcuda.so.570.158.01",
                                           "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.158.01"]
    assert f["packages"] == {"nvidia-driver-570-server-open": "570.158.01-0ubuntu0.22.04.1",
                             "libnvidia-compute-570-server": "570.158.01-0ubuntu0.22.04.1",
                             "nvidia-fabricmanager-570": "570.158.01-1"}
    assert f["gpus_dir"] == ["0000:1b:00.0", "0000:43:00.0"]
    assert [(p["address"], p["device"], p["class"], p["subsystem"], p["driver"]) for p in f["pci"]] == [
        ("0000:05:00.0", "0x22a3", "0x068000", "10de:1796", "nvidia-nvswitch"),
        ("0000:1b:00.0", "0x2330", "0x030200", "10de:16c1", "nvidia"),
        ("0000:43:00.0", "0x2330", "0x030200", "10de:16c1", "nvidia")]
    gpu = f["pci"][1]
    assert (gpu["numa_node"], gpu["runtime_status"], gpu["enable"], gpu["unread"]) == (0, "active", True, {})
    assert gpu["link"] == {"current_speed": "32.0 GT/s PCIe", "current_width": 16, "max_speed": "32.0 GT/s PCIe",
                           "max_width": 16}
    assert gpu["sysfs"] == "/sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0"
    assert f["pci_source"] == {"status": "listed", "seen": 4, "refused": [], "cut": None}
    assert f["proc_devices"]["nvidia-frontend"] == 195
    assert (f["nvswitch"], f["nvswitch_basis"]) == (True, "NVIDIA PCI functions of class 0x0680: 0000:05:00.0")
    fm = f["fabric_manager"]
    assert {k: fm[k] for k in ("unit", "masked", "enabled", "enabled_by", "config", "log_file", "log_to_syslog",
                               "version", "version_source")} == {
        "unit": "/lib/systemd/system/nvidia-fabricmanager.service", "masked": False, "enabled": True,
        "enabled_by": ["/etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"],
        "config": "/usr/share/nvidia/nvswitch/fabricmanager.cfg", "log_file": "/var/log/fabricmanager.log",
        "log_to_syslog": False, "version": "570.158.01-1", "version_source": "package nvidia-fabricmanager-570"}
    assert fm["log"]["warnings_or_worse"] == 1 and fm["log"]["entries"][0]["at"] == "2025-02-27T06:10:02Z"
    assert f["nvidia_smi"]["ran"] is False and f["nvidia_smi"]["status"] == "not-run"
    # the files whose handlers call into the driver were never copied
    assert not [a for a in b.artifacts() if "information" in a.source or "warnings" in a.source]
    assert (b.path("nvidia_host/proc/driver/nvidia/params").read_text(), record(b, "/proc/devices").path) == \
        (PARAMS, "nvidia_host/proc/devices")


def test_mismatch_node_shows_both_versions_with_their_sources(tmp_path):
    """An unattended upgrade installed 550 user space while the 535 module stays loaded (docs/sources.md "NVIDIA kernel and driver wordings")."""
    root = tmp_path / "root"
    driver_tree(root, "535.183.01", "proprietary")
    libraries(root, "550.54.15")
    write(root, "/var/lib/dpkg/status", "\n".join([
        deb("nvidia-driver-550", "550.54.15-0ubuntu1"),
        deb("libnvidia-compute-550", "550.54.15-0ubuntu1", multi_arch="same"),
        deb("nvidia-utils-550", "550.54.15-0ubuntu1"),
        deb("nvidia-kernel-common-550", "550.54.15-0ubuntu1", status="install ok half-configured"),
        deb("nvidia-driver-535", "535.183.01-0ubuntu0.22.04.1", status="deinstall ok config-files")]))
    f = fact(collect(root, tmp_path / "b"))
    assert (f["module"]["version"], f["module"]["kind"], f["sys_module"]["nvidia"]["taint"]) == \
        ("535.183.01", "proprietary", "POE")
    assert f["userspace"]["versions"] == ["550.54.15"]
    assert f["packages"] == {"nvidia-driver-550": "550.54.15-0ubuntu1", "libnvidia-compute-550": "550.54.15-0ubuntu1",
                             "nvidia-utils-550": "550.54.15-0ubuntu1"}
    assert f["packages_other"] == {
        "nvidia-kernel-common-550": {"version": "550.54.15-0ubuntu1", "status": "install ok half-configured"},
        "nvidia-driver-535": {"version": "535.183.01-0ubuntu0.22.04.1", "status": "deinstall ok config-files"}}
    assert f["packages_source"] == ["/var/lib/dpkg/status"]
    # /proc/devices lists nvidia-nvswitch on any host with the module loaded: not a switch
    assert (f["nvswitch"], f["fabric_manager"]["unit"], f["fabric_manager"]["enabled"]) == (False, None, None)


def test_host_without_a_driver(tmp_path):
    root = tmp_path / "root"
    write(root, "/proc/stat", "cpu  1 2 3 4\nbtime 1788300000\n")
    write(root, "/proc/devices", "Character devices:\n  1 mem\n136 pts\n\nBlock devices:\n  8 sd\n")
    (root / "sys/module/ext4").mkdir(parents=True)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    write(root, "/var/lib/dpkg/status", deb("adduser", "3.118ubuntu5"))
    b = collect(root, tmp_path / "b")
    f = fact(b)
    assert (f["module"]["loaded"], f["module"]["version"], f["module"]["reason"]) == (
        False, None, "/proc/driver/nvidia/version is absent while /proc is mounted (/proc/stat is there)")
    assert {m: s["loaded"] for m, s in f["sys_module"].items()} == dict.fromkeys(procfs.MODULES, False)
    assert (f["packages"], f["userspace"]["versions"], f["proc_devices"], f["gpus_dir"], f["pci"]) == \
        ({}, [], {}, None, [])
    assert f["sources"]["/proc/driver/nvidia/version"] == "absent"
    assert record(b, "/proc/driver/nvidia/version").status.value == "absent"
    assert (f["nvswitch"], f["fabric_manager"]["log"]["status"]) == (False, "absent")


def test_disk_image_without_proc_or_sys(tmp_path):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)  # a mount point with nothing mounted
    write(root, "/var/lib/dpkg/status", deb("nvidia-driver-550", "550.54.15-0ubuntu1"))
    libraries(root, "550.54.15")
    f = fact(collect(root, tmp_path / "b"))
    assert (f["module"]["loaded"], f["module"]["reason"]) == (
        None, "/proc is not mounted under --root (no /proc/stat): a disk image or a stopped node")
    assert {m: s["loaded"] for m, s in f["sys_module"].items()} == dict.fromkeys(procfs.MODULES, False)
    assert (f["pci"], f["pci_source"]["status"], f["nvswitch"], f["proc_devices"]) == ([], "absent", None, None)
    assert (f["userspace"]["versions"], f["packages"]) == (["550.54.15"], {"nvidia-driver-550": "550.54.15-0ubuntu1"})


def test_sources_that_disagree_leave_loaded_unknown(tmp_path):
    """/proc/devices and /sys/module say the module is loaded, /proc/driver/nvidia is missing: a partial copy."""
    root = tmp_path / "root"
    driver_tree(root, "550.54.15")
    shutil.rmtree(root / "proc/driver")
    m = fact(collect(root, tmp_path / "b"))["module"]
    assert (m["loaded"], m["reason"]) == (None, "/proc/driver/nvidia/version is absent, yet /proc/devices lists "
                                                "nvidia-frontend 195 and /sys/module/nvidia is there: the sources "
                                                "disagree (a partial copy of /proc?)")


def test_permission_denied_reads_as_unreadable_never_absent(tmp_path):
    from privdrop import outbox, run_as_nobody, share
    work = Path(tempfile.mkdtemp(prefix="gf-nvhost-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)
        root = work / "root"
        driver_tree(root, "550.54.15")
        write(root, "/var/lib/dpkg/status", deb("nvidia-driver-550", "550.54.15-0ubuntu1"))
        write(root, "/var/log/fabricmanager.log", FM_LOG)
        share(root)
        denied = ("/proc/driver/nvidia/version", "/var/lib/dpkg/status", "/var/log/fabricmanager.log",
                  "/sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0/current_link_speed",
                  "/sys/module/nvidia/parameters/NVreg_EnableGpuFirmware", "/proc/driver/nvidia/gpus")
        for path in denied:
            os.chmod(root / path.lstrip("/"), 0o700 if path.endswith("gpus") else 0o600)
        bundle = outbox(work) / "b"
        run_as_nobody(lambda: collect(root, bundle) and None)
        b = Bundle.open(bundle)
        for src in ("/proc/driver/nvidia/version", "/var/lib/dpkg/status", "/var/log/fabricmanager.log",
                    "/proc/driver/nvidia/gpus", "/sys/bus/pci/devices/0000:1b:00.0/current_link_speed",
                    "/sys/module/nvidia/parameters/NVreg_EnableGpuFirmware"):
            assert (record(b, src).status.value, record(b, src).errno) == ("unreadable", 13), src
        f = fact(b)
        assert (f["module"]["loaded"], f["module"]["reason"]) == (
            None, "/proc/driver/nvidia/version: unreadable EACCES (Permission denied)")
        assert (f["packages"], f["packages_source"], f["gpus_dir"]) == (None, [], None)
        assert f["pci"][0]["unread"] == {"current_link_speed": "EACCES"}
        assert f["pci"][0]["link"]["current_speed"] is None
        assert f["module_parameters"]["nvidia"] == {"NVreg_RegistryDwords": "(null)"}
        facts = json.loads(b.path("nvidia_host/facts.json").read_text())
        assert facts["module_parameters"]["nvidia"]["failed"] == {"NVreg_EnableGpuFirmware": "EACCES"}
        assert facts["gpus_dir"] == {"status": "unreadable", "names": None, "errno": 13}
        assert f["fabric_manager"]["log"]["status"] == "unreadable"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_sysfs_links_that_leave_sys_devices_are_refused(tmp_path):
    root = tmp_path / "root"
    driver_tree(root, "550.54.15")
    outside = tmp_path / "outside/0000:99:00.0"
    for name, value in H100.items():
        write(outside.parent, f"/0000:99:00.0/{name}", value + "\n")
    before = {p: p.stat().st_mtime_ns for p in outside.rglob("*")}
    link(root, "/sys/bus/pci/devices/0000:99:00.0", str(outside))            # absolute: restarts at the root
    link(root, "/sys/bus/pci/devices/0000:98:00.0", "../../../../../../../../etc")  # climbs: stops at the root
    (root / "etc").mkdir(exist_ok=True)
    write(root, "/etc/vendor", "0x10de\n")
    b = collect(root, tmp_path / "b")
    f = fact(b)
    assert [p["address"] for p in f["pci"]] == ["0000:1b:00.0"]
    assert f["pci_source"]["refused"] == [
        {"address": "0000:98:00.0", "target": "../../../../../../../../etc",
         "why": "it resolves to /etc, not a device directory under /sys/devices"},
        {"address": "0000:99:00.0", "target": str(outside),
         "why": f"it resolves to {outside}, not a device directory under /sys/devices"}]
    assert record(b, "/sys/bus/pci/devices/0000:99:00.0").message.startswith("refused: ")
    assert {p: p.stat().st_mtime_ns for p in outside.rglob("*")} == before


def test_this_machines_real_sysfs_resolves_into_sys_devices(tmp_path):
    """The walk over the real /sys of the machine the tests run on: every /sys/bus/pci/devices link resolves
    into /sys/devices (none refused) and each function's vendor is read as the kernel gives it."""
    b = collect(Path("/"), tmp_path / "b")
    f = fact(b)
    names = [n for n in os.listdir("/sys/bus/pci/devices")]
    assert f["pci_source"]["seen"] == len(names) and f["pci_source"]["refused"] == []
    vendors = {n: Path("/sys/bus/pci/devices", n, "vendor").read_text().strip() for n in names}
    assert [p["address"] for p in f["pci"]] == sorted(n for n, v in vendors.items() if v == "0x10de")


def test_fabric_manager_masked_and_driver_container(tmp_path):
    root = tmp_path / "root"
    write(root, "/proc/stat", "btime 1\n")
    write(root, "/lib/systemd/system/nvidia-fabricmanager.service", "[Service]\nType=forking\n")
    link(root, "/etc/systemd/system/nvidia-fabricmanager.service", "/dev/null")
    # the GPU Operator's driver container: its config and log under the driver root
    write(root, "/run/nvidia/driver/usr/share/nvidia/nvswitch/fabricmanager.cfg",
          "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\n")
    write(root, "/run/nvidia/driver/var/log/fabricmanager.log",
          FM_LOG + "[Feb 27 2025 15:11:00] [WARNING] [tid 12727] retrying with password=hunter2\n")
    b = collect(root, tmp_path / "b")
    fm = fact(b)["fabric_manager"]
    assert (fm["unit"], fm["masked"], fm["enabled"], fm["config"]) == (
        "/etc/systemd/system/nvidia-fabricmanager.service", True, False,
        "/run/nvidia/driver/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert fm["log"]["source"] == "/run/nvidia/driver/var/log/fabricmanager.log"
    assert [e["level"] for e in fm["log"]["entries"]] == ["ERROR", "WARNING"]
    warning = fm["log"]["entries"][1]["message"]
    assert "hunter2" not in warning and warning.startswith("retrying with password=<redacted hmac:")
    stored = record(b, "/run/nvidia/driver/var/log/fabricmanager.log")
    assert "hunter2" not in b.path(stored.path).read_text() and any("redacted" in n for n in stored.notes)


# -- rpm ---------------------------------------------------------------------------------------------------
def rpm_package(top: Path, name: str, version: str, release: str, epoch: int | None = None) -> Path:
    top.mkdir(exist_ok=True)
    spec = top / f"{name}.spec"
    spec.write_text(f"Name: {name}\n" + (f"Epoch: {epoch}\n" if epoch is not None else "") +
                    f"Version: {version}\nRelease: {release}\nSummary: s\nLicense: MIT\nBuildArch: x86_64\n"
                    "%description\nd\n%files\n")
    subprocess.run(["rpmbuild", "--define", f"_topdir {top}", "-bb", str(spec)], check=True, capture_output=True)
    return next(top.glob(f"RPMS/*/{name}-{version}-*.rpm"))


def rpm_db(root: Path, build: Path, packages: list[tuple]) -> Path:
    """RHEL 9's ``/var/lib/rpm`` under ``root``: a real rpmdb.sqlite holding ``packages`` (``(name, version,
    release[, epoch])``, each built by rpmbuild and entered with ``rpm --justdb``); returns its folder."""
    db = root / "var/lib/rpm"
    db.mkdir(parents=True)
    rpms = [rpm_package(build, *p) for p in packages]
    rpm = ["rpm", "--dbpath", str(db), "--define", "_db_backend sqlite"]
    subprocess.run(rpm + ["--initdb"], check=True)
    subprocess.run(rpm + ["-i", "--justdb", "--nodeps", "--noscripts", "--ignorearch", *map(str, rpms)],
                   check=True, capture_output=True)
    return db


def test_rpm_sqlite_database_read_read_only(tmp_path):
    """A real rpmdb.sqlite written by rpm 4.18 (RHEL 9's layout under /var/lib/rpm), read immutable: the
    NVIDIA headers come out, the others do not, and not one byte of the database files changes."""
    from test_readonly import snapshot
    root = tmp_path / "root"
    db = rpm_db(root, tmp_path / "rpmbuild", [("nvidia-driver-cuda-libs", "550.54.15", "1.el9", 3),
                                              ("kmod-nvidia-open-dkms", "550.54.15", "1.el9"),
                                              ("bash", "5.1.8", "9.el9")])
    before = snapshot(db)
    b = collect(root, tmp_path / "b")
    assert snapshot(db) == before
    f = fact(b)
    assert f["packages"] == {"nvidia-driver-cuda-libs": "3:550.54.15-1.el9", "kmod-nvidia-open-dkms": "550.54.15-1.el9"}
    assert f["packages_source"] == ["/var/lib/rpm/rpmdb.sqlite"]
    assert record(b, "/var/lib/rpm/rpmdb.sqlite").method == "sqlite-immutable"


def test_old_and_corrupt_rpm_databases_are_records_not_crashes(tmp_path):
    old = tmp_path / "old"
    write(old, "/var/lib/rpm/Packages", b"\x00\x06\x15\x61" + os.urandom(4096))  # Berkeley DB hash magic
    b = collect(old, tmp_path / "b1")
    assert record(b, "/var/lib/rpm/Packages").message.startswith("unsupported: a Berkeley DB")
    assert fact(b)["packages"] is None
    bad = tmp_path / "bad"
    write(bad, "/var/lib/rpm/rpmdb.sqlite", b"SQLite format 3\x00" + os.urandom(8192))
    b = collect(bad, tmp_path / "b2")
    a = record(b, "/var/lib/rpm/rpmdb.sqlite")
    assert a.status.value == "error" and a.message.startswith("DatabaseError: ")


# -- hostile and bounded -----------------------------------------------------------------------------------
def test_hostile_files_give_records_and_partial_facts(tmp_path):
    root = tmp_path / "root"
    driver_tree(root, "550.54.15")
    write(root, "/proc/driver/nvidia/version", b"\xff\xfeNVRM version: \x00garbage\n" * 3)
    write(root, "/proc/driver/nvidia/params", "A" * (3 << 20))  # no newline, over the copy bound
    (root / "var/log").mkdir(parents=True)
    os.mkfifo(root / "var/log/fabricmanager.log")  # a FIFO named like the log must not block the collection
    write(root, "/var/lib/dpkg/status", b"Package: nvidia-utils-550\nVersion: \xff\xfe\nStatus: install ok installed\n")
    started = time.monotonic()
    b = collect(root, tmp_path / "b")
    assert time.monotonic() - started < 10
    f = fact(b)
    assert (f["module"]["loaded"], f["module"]["version"], f["module"]["kind"]) == (True, None, None)
    assert record(b, "/proc/driver/nvidia/params").status.value == "truncated"
    assert record(b, "/var/log/fabricmanager.log").status.value == "error"  # a FIFO is never opened for reading
    assert f["packages"] == {"nvidia-utils-550": "\ufffd\ufffd"}


def test_a_spent_budget_stops_the_pci_walk_and_nvidia_smi(tmp_path):
    root = tmp_path / "root"
    driver_tree(root, "550.54.15")
    b = collect(root, tmp_path / "b", deadline=time.monotonic() - 1)
    f = fact(b)
    assert f["pci"] == [] and f["pci_source"]["cut"] == "the time budget was spent after 0 of 1 functions"
    assert record(b, "/sys/bus/pci/devices").status.value == "truncated"
    assert f["nvswitch"] is None


# -- --nvidia-smi --------------------------------------------------------------------------------------------
def fake_smi(tmp_path: Path, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return bindir


def live(tmp_path, monkeypatch, body: str, timeout: float = 20.0) -> tuple[Bundle, dict, float]:
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, body)}:{os.environ['PATH']}")
    started = time.monotonic()
    b = collect(Path("/"), tmp_path / "b", {"nvidia_smi": True, "nvidia_smi_timeout": timeout})
    return b, fact(b)["nvidia_smi"], time.monotonic() - started


def test_nvidia_smi_output_is_stored_and_read(tmp_path, monkeypatch):
    b, s, _ = live(tmp_path, monkeypatch, f"cat {FIXTURES / 'q-550.127.05-a10.txt'}\n")
    assert (s["ran"], s["status"], s["exit"], s["error"]) == (True, "collected", 0, None)
    assert (s["driver_version"], s["cuda_version"], s["gpus"][0]["uuid"]) == (
        "550.127.05", "12.4", "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d")
    assert b.path("nvidia_host/nvidia-smi-q.txt").read_text() == (FIXTURES / "q-550.127.05-a10.txt").read_text()


def test_nvidia_smi_ignoring_sigterm_is_killed_at_its_bound(tmp_path, monkeypatch):
    b, s, took = live(tmp_path, monkeypatch, "trap '' TERM\necho '==============NVSMI LOG=============='\n"
                                             "while :; do sleep 1; done\n", timeout=2)
    assert took < 2 + smi.REAP_S + 1.5
    assert (s["status"], s["error"], s["exit"]) == ("error", "timed out after 2 s; killed (SIGKILL)", None)
    a = record(b, "nvidia-smi -q")
    assert (a.status.value, a.message) == ("error", "timed out after 2 s; killed (SIGKILL)")
    assert b.path(a.path).read_text() == "==============NVSMI LOG==============\n"


FREEZER = Path("/sys/fs/cgroup/freezer")


def test_nvidia_smi_stuck_in_d_state_is_left_running_and_the_collection_returns(tmp_path, monkeypatch):
    """A child that freezes itself in a frozen cgroup v1 freezer is in state D, where SIGKILL waits: the real
    shape of nvidia-smi stuck in the driver. The collection returns at its bound and says so."""
    assert (FREEZER / "cgroup.procs").exists(), "this test needs the cgroup v1 freezer (a real D state)"
    group = FREEZER / f"gf-nvsmi-{os.getpid()}"
    group.mkdir()
    (group / "freezer.state").write_text("FROZEN")
    pid = None
    try:
        b, s, took = live(tmp_path, monkeypatch, "echo partial\n"
                                                 f"echo $$ > {group}/cgroup.procs\nexec sleep 600\n", timeout=2)
        pid = s["pid"]
        assert took < 2 + smi.REAP_S + 1.5
        assert s["error"] == f"timed out after 2 s; left running as PID {pid} (state D: uninterruptible sleep)"
        assert s["state"] == "D: uninterruptible sleep"
        assert record(b, "nvidia-smi -q").message == s["error"]
    finally:
        (group / "freezer.state").write_text("THAWED")  # the pending SIGKILL then ends it
        if pid:
            for _ in range(50):
                try:
                    os.waitpid(pid, os.WNOHANG)
                    os.kill(pid, 0)
                except (ChildProcessError, ProcessLookupError):
                    break
                time.sleep(0.1)
        group.rmdir()


def test_nvidia_smi_never_runs_on_a_root_that_is_not_the_live_node(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, 'touch ' + str(tmp_path / 'ran'))}:{os.environ['PATH']}")
    root = tmp_path / "root"
    root.mkdir()
    b = collect(root, tmp_path / "b", {"nvidia_smi": True})
    s = fact(b)["nvidia_smi"]
    assert (s["ran"], s["reason"]) == (False, "not run: --nvidia-smi runs nvidia-smi only on the live node (--root /)")
    assert record(b, "nvidia-smi -q").status.value == "absent" and not (tmp_path / "ran").exists()


def test_read_of_a_bundle_without_the_collector_gives_no_fact(tmp_path):
    w = BundleWriter(tmp_path / "b")
    w.finish()
    r = nvidia_host.read(Bundle.open(tmp_path / "b"), NodeFacts())
    assert (r.facts, r.problems) == ({}, [])
    assert stat.S_ISDIR(os.stat(tmp_path / "b").st_mode)
