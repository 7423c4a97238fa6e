"""forensics/kmsg.py on the kernel's and the NVIDIA driver's own wordings: lines quoted from public
reports (each with its URL), and lines printed with the upstream format strings themselves (the file
and tag named), so that a wording the driver changes is a test that fails, not a line read as nothing.
"""
from __future__ import annotations

import timeit
from datetime import datetime, timedelta, timezone

import pytest

from forensics import kmsg
from forensics.events import KINDS, Event

OGKM = "https://github.com/NVIDIA/open-gpu-kernel-modules/blob/{tag}/{path}"
KERNEL_RC = OGKM.format(tag="595.45.04", path="src/nvidia/src/kernel/gpu/rc/kernel_rc.c")
OSAPI_595 = OGKM.format(tag="595.45.04", path="src/nvidia/arch/nvalloc/unix/src/osapi.c")
OSAPI_570 = OGKM.format(tag="570.158.01", path="src/nvidia/arch/nvalloc/unix/src/osapi.c")
OSINIT = OGKM.format(tag="595.45.04", path="src/nvidia/arch/nvalloc/unix/src/osinit.c")
NV_C = OGKM.format(tag="595.45.04", path="kernel-open/nvidia/nv.c")
GPUD_KMSG = "https://github.com/leptonai/gpud/blob/main/components/accelerator/nvidia/xid/kmsg_test.go"
A100_MEM = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
NVSENTINEL_155 = "https://github.com/NVIDIA/NVSentinel/issues/155"
HARVESTER = "https://github.com/harvester/harvesterhci.io/blob/main/kb/2025-12-10/how_harvester_eliminate_vm_oom.md"
KIND_UWSGI = "https://github.com/RedRoserade/kind-uwsgi-error-example/blob/main/README.md"
OOM_KILL_C = "https://github.com/torvalds/linux/blob/v6.8/mm/oom_kill.c"
POP_751 = "https://github.com/pop-os/pop/issues/751"
POP_3363 = "https://github.com/pop-os/pop/issues/3363"
RPI_64 = "https://github.com/geerlingguy/raspberry-pi-pcie-devices/issues/64"

# kernel_rc.c krcReportXid_IMPL, the three format strings (595.45.04)
XID_FMT = "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s"
XID_GI_FMT = "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u): %d, pid=%s, name=%s, %s"
XID_GI_CI_FMT = "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, pid=%s, name=%s, %s"


def read(line: str):
    got = kmsg.classify(line)
    assert got is not None, line
    kind, attrs = got
    assert set(attrs) == set(KINDS[kind].attrs), (kind, attrs)
    return kind, attrs


def test_every_text_a_line_can_be_read_by_holds_one_of_the_prefilter_texts():
    for line in [l for case in XIDS for l in [case[1]]] + [c[1] for c in OTHERS]:
        assert kmsg.might_matter(line), line
        assert any(t in line for t in kmsg.TEXTS), line


# -- Xid, every form ---------------------------------------------------------------------------------
XIDS = [
    # (source, line, xid, pci, gpu_instance, pid, process, detail)
    (GPUD_KMSG, "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     79, "0000:05:00", None, None, None, "GPU has fallen off the bus."),
    (GPUD_KMSG, "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
     79, "0000:01:00", None, None, None, "GPU has fallen off the bus."),
    (GPUD_KMSG, "NVRM: Xid (0000:03:00): 14, Channel 00000001", 14, "0000:03:00", None, None, None, "Channel 00000001"),
    (GPUD_KMSG, "[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to "
                "0x4 (Drain and Reset)",
     154, "0009:01:00", None, None, None, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"),
    (GPUD_KMSG, "[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 "
                "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
     149, "0009:01:00", None, None, None,
     "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
    (A100_MEM, "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
     94, "0000:01:00", "GPU-I:05", 7194, None, "Contained: CE User Channel (0x9). RST: No, D-RST: No"),
    (A100_MEM, "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No",
     95, "0000:01:00", None, 7062, None, "Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"),
    (KERNEL_RC, XID_FMT % (0, 0x3b, 0, 13, "4242", "python3", "Graphics Exception: ESR 0x504648=0x80000000"),
     13, "0000:3b:00", None, 4242, "python3", "Graphics Exception: ESR 0x504648=0x80000000"),
    (KERNEL_RC, XID_FMT % (0, 0x3b, 0, 31, "'<unknown>'", "<unknown>", "MMU Fault: ENGINE GRAPHICS"),
     31, "0000:3b:00", None, None, None, "MMU Fault: ENGINE GRAPHICS"),
    (KERNEL_RC, XID_GI_FMT % (0, 0x3b, 0, 1, 31, "77", "pt_main_thread", "Ch 00000008, intr 00000000"),
     31, "0000:3b:00", "GPU-I:01", 77, "pt_main_thread", "Ch 00000008, intr 00000000"),
    (KERNEL_RC, XID_GI_CI_FMT % (0, 0x3b, 0, 1, 2, 43, "9", "a", ""),
     43, "0000:3b:00", "GPU-I:01 GPU-CI:02", 9, "a", None),
]


@pytest.mark.parametrize("source,line,xid,pci,gi,pid,process,detail", XIDS)
def test_xid_lines_in_every_form(source, line, xid, pci, gi, pid, process, detail):
    kind, a = read(line)
    assert kind == "kernel.xid"
    assert (a["xid"], a["pci"], a["gpu_instance"], a["pid"], a["process"], a["detail"]) == \
        (xid, pci, gi, pid, process, detail), source
    assert a["message"] == line.strip()  # the trailing space of an empty detail: journald keeps none either


def test_xid_154_names_the_recovery_action():
    _, a = read(XIDS[3][1])
    assert kmsg.recovery_action(a["detail"]) == "Drain and Reset"
    assert kmsg.recovery_action("GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 "
                                "(GPU Reset Required)") == "GPU Reset Required"  # gpud kmsg_test.go
    assert kmsg.recovery_action("Graphics Exception") is None


# -- the GPU fallen off the bus, at run time and at probe -----------------------------------------------
def test_fallen_off_the_bus_at_run_time():
    # osinit.c osHandleGpuLost: NV_DEV_PRINTF(NV_DBG_ERRORS, nv, "GPU has fallen off the bus.\n"), as gpud quotes it
    kind, a = read("NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.")  # GPUD_KMSG
    assert (kind, a["pci"], a["stage"]) == ("kernel.gpu-lost", "0000:29:00.0", "runtime")
    kind, a = read("NVRM: GPU 0000:29:00.0: GPU serial number is 1652922012345.")  # OSINIT, the line after it
    assert (kind, a["what"], a["pci"]) == ("kernel.nvrm", "other", "0000:29:00.0")


# NVSENTINEL_155: dmesg shows one record of three lines (its continuation lines indented), then two more
PROBE_ENTRY = ("NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
               "NVRM: fallen off the bus and is not responding to commands.")
PROBE_FAILED = "NVRM: The NVIDIA probe routine failed for 1 device(s)."
LOAD_570 = ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
            "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025")


def test_fallen_off_the_bus_at_probe_as_one_entry_and_as_three_lines():
    kind, a = read(PROBE_ENTRY)
    assert (kind, a["pci"], a["stage"], a["message"]) == ("kernel.gpu-lost", "0000:b3:00.0", "probe", PROBE_ENTRY)
    lines = PROBE_ENTRY.split("\n")
    assert all(kmsg.is_part(line) and kmsg.classify(line) is None for line in lines[:2])
    joined = list(kmsg.join_continuations(lines + [PROBE_FAILED, LOAD_570]))
    assert [(items, text) for items, text in joined] == [(lines, PROBE_ENTRY), ([PROBE_FAILED], PROBE_FAILED),
                                                         ([LOAD_570], LOAD_570)]
    kind, a = read(PROBE_FAILED)
    assert (kind, a["what"], a["pci"]) == ("kernel.nvrm", "init-failed", None)
    kind, a = read(LOAD_570)
    assert (kind, a["what"], a["version"]) == ("kernel.nvrm", "module-load", "570.158.01")


def test_a_probe_message_whose_last_line_never_came_is_no_event():
    lines = PROBE_ENTRY.split("\n")[:2] + ["eth0: link up"]
    assert [(len(i), kmsg.classify(t)) for i, t in kmsg.join_continuations(lines)] == [(2, None), (1, None)]


# -- API mismatch, both wordings ------------------------------------------------------------------------
# osapi.c RmPerformVersionCheck's format, up to 570.x (570.158.01) and from 575.51.02 (595.45.04)
MISMATCH_570_FMT = ("NVRM: API mismatch: the client has the version %s, but\nNVRM: this kernel module has the version "
                    "%s.  Please\nNVRM: make sure that this kernel module and all NVIDIA driver\nNVRM: components have "
                    "the same version.")
MISMATCH_575_FMT = ("NVRM: API mismatch: the client '%s' (pid %u)\nNVRM: has the version %s, but this kernel module "
                    "has\nNVRM: the version %s.  Please make sure that this\nNVRM: kernel module and all NVIDIA driver "
                    "components\nNVRM: have the same version.")


@pytest.mark.parametrize("text,client,pid,cv,kv", [
    (MISMATCH_570_FMT % ("570.195.03", "570.158.01"), None, None, "570.195.03", "570.158.01"),
    (MISMATCH_575_FMT % ("nvidia-smi", 48211, "580.95.05", "575.51.02"), "nvidia-smi", 48211, "580.95.05", "575.51.02"),
    # the closed drivers' version magic, the same wording (docs/sources.md "NVIDIA kernel and driver wordings": kern.log of 2006-2007)
    (MISMATCH_570_FMT % ("1.0-9631", "1.0-8776"), None, None, "1.0-9631", "1.0-8776"),
])
def test_api_mismatch_as_one_entry_and_split_into_lines(text, client, pid, cv, kv):
    kind, a = read(text)
    assert (kind, a["client"], a["client_pid"], a["client_version"], a["kernel_version"]) == ("kernel.api-mismatch",
                                                                                             client, pid, cv, kv)
    lines = text.split("\n")
    assert all(kmsg.is_part(line) for line in lines)
    [(items, joined)] = list(kmsg.join_continuations(lines))
    assert items == lines and joined == text
    # the first line alone (its continuation lost) still says who and which client version
    kind, a = read(lines[0])
    assert (kind, a["client"], a["client_version"] if client is None else a["client_pid"]) == \
        ("kernel.api-mismatch", client, cv if client is None else pid)


def test_lines_of_two_messages_are_not_joined_when_the_source_says_they_are_far_apart():
    lines = (MISMATCH_570_FMT % ("1", "2")).split("\n")
    at = {line: i * 5 for i, line in enumerate(lines)}  # five seconds between lines
    got = list(kmsg.join_continuations(lines, close=lambda a, b: at[b] - at[a] <= 1))
    assert [len(items) for items, _ in got] == [1, 1, 1, 1]


# -- NVRM lines ---------------------------------------------------------------------------------------
OTHERS = [
    # (source, line, kind, attrs that matter)
    (NV_C, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.158.01  Mon Jun  2 13:13:04 UTC 2025",
     "kernel.nvrm", {"what": "module-load", "version": "570.158.01"}),
    (NV_C, "NVRM: None of the NVIDIA devices were initialized.", "kernel.nvrm", {"what": "init-failed"}),
    (NV_C, "NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0", "kernel.nvrm",
     {"what": "init-failed", "pci": "0000:3b:00.0"}),
    (OSINIT, "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x55:2477)", "kernel.nvrm",
     {"what": "init-failed", "pci": "0000:3b:00.0"}),
    (KERNEL_RC, "NVRM: GPU at PCI:0000:3b:00: GPU-8e9d6c3a-51f0-2b8e-3c43-ef5a2a0f4d1b", "kernel.nvrm",
     {"what": "gpu-uuid", "pci": "0000:3b:00", "uuid": "GPU-8e9d6c3a-51f0-2b8e-3c43-ef5a2a0f4d1b"}),
    (KERNEL_RC, "NVRM: GPU Board Serial Number: 1652922012345", "kernel.nvrm", {"what": "other", "pci": None}),
    # mm/oom_kill.c: the victim, the summary with the global_oom token, the caller
    (HARVESTER, "Memory cgroup out of memory: Killed process 70870 (qemu-system-x86) total-vm:73209856kB, "
                "anon-rss:66852088kB, file-rss:21948kB, shmem-rss:4kB", "kernel.oom-kill",
     {"pid": 70870, "process": "qemu-system-x86", "constraint": None}),
    (HARVESTER, "virt-launcher invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=986",
     "kernel.oom-kill", {"pid": None, "process": None}),
    # drivers/pci/pcie/aer.c through dev_printk, v4.19+ ("AER: ")
    (POP_751, "pcieport 0000:00:1d.0: AER: Multiple Corrected error received: 0000:03:00.0", "kernel.pcie-error",
     {"pci": "0000:03:00.0", "severity": "Corrected"}),
    (POP_751, "nvme 0000:03:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
     "kernel.pcie-error", {"pci": "0000:03:00.0", "severity": "Corrected"}),
    (POP_751, "nvme 0000:03:00.0: AER: [ 0] RxErr", "kernel.pcie-error", {"pci": "0000:03:00.0", "severity": None}),
    (POP_3363, "pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0",
     "kernel.pcie-error", {"pci": "0000:00:00.0", "severity": "Correctable"}),
    # before v4.19: no "AER: " before the Bus Error line, the source as id=
    (RPI_64, "pcieport 0000:00:1d.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e8(Receiver ID)",
     "kernel.pcie-error", {"pci": "0000:00:1d.0", "severity": "Corrected"}),
    # as dmesg prints it, the printk time first; the source as id= names no BDF: the port's is kept
    (RPI_64, "[    3.499148] pcieport 0000:00:1d.0: AER: Multiple Corrected error received: id=00e8",
     "kernel.pcie-error", {"pci": "0000:00:1d.0", "severity": "Corrected"}),
]


@pytest.mark.parametrize("source,line,kind,want", OTHERS)
def test_nvrm_oom_and_aer_lines(source, line, kind, want):
    got_kind, a = read(line)
    assert got_kind == kind and {k: a[k] for k in want} == want, source


def test_uncorrected_aer_severities_as_printed():
    # aer.c aer_error_severity_string, through the format "PCIe Bus Error: severity=%s, type=%s, (%s)"
    for sev in ("Uncorrected (Non-Fatal)", "Uncorrected (Fatal)"):
        _, a = read(f"nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity={sev}, type=Transaction Layer, (Requester ID)")
        assert (a["pci"], a["severity"]) == ("0000:3b:00.0", sev)


@pytest.mark.parametrize("line", [
    "pcieport 0000:00:01.0: AER: enabled with IRQ 26",   # aer.c at boot: nothing went wrong
    "NVRM: Persistence mode is deprecated and will be removed in a future release.",
    "nvidia-uvm: Loaded the UVM driver, major device number 236.",
    "Initializing cgroup subsys cpu",
    "oom_reaper: reaped process 70870 (qemu-system-x86), now anon-rss:0kB, file-rss:132kB, shmem-rss:4kB",
    "NVRM: Xid error: xyz, invalid data",  # gpud kmsg_test.go: no number
])
def test_lines_that_say_nothing_of_these_are_none(line):
    assert kmsg.classify(line) is None


# -- OOM: the container of every engine's cgroup shape, one event per kill ----------------------------------
HARVESTER_SUMMARY = (
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-0f32894de86edf3d3832702af794874ef8d400b"
    "4969acdea4976b12040756e0d.scope,mems_allowed=0-1,oom_memcg=/kubepods.slice/kubepods-burstable.slice/kubepods-burs"
    "table-pod968a06fb_9ab9_4819_8caf_0392ddff3d9b.slice,task_memcg=/kubepods.slice/kubepods-burstable.slice/kubepods-"
    "burstable-pod968a06fb_9ab9_4819_8caf_0392ddff3d9b.slice/cri-containerd-0f32894de86edf3d3832702af794874ef8d400b49"
    "69acdea4976b12040756e0d.scope,task=qemu-system-x86,pid=39079,uid=107")
KIND_SUMMARY = (
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a07d3c191742700df28b349710c93b2014b255b22364decb09b53c"
    "a123fa8272,mems_allowed=0,oom_memcg=/docker/428406e4f18a1cb65e9691d40b63f3d92c95c1b0d15b5c427bed470b6832cd6e/kube"
    "let/kubepods/pod1788d98a-0700-426a-8701-2312e4cc2163,task_memcg=/docker/428406e4f18a1cb65e9691d40b63f3d92c95c1b0d"
    "15b5c427bed470b6832cd6e/kubelet/kubepods/pod1788d98a-0700-426a-8701-2312e4cc2163/a07d3c191742700df28b349710c93b2"
    "014b255b22364decb09b53ca123fa8272,task=uwsgi,pid=11638,uid=0")
CID = "3e5e5eab87df615f4777e6f7f261a7fb62f4a7ee5bc3e25e3a5b5223ccd368fe"


def _summary(task_memcg: str, oom_memcg: str | None = None, constraint: str = "CONSTRAINT_MEMCG",
             task: str = "python3", pid: int = 4242) -> str:
    """A summary line printed as mm/oom_kill.c dump_oom_victim + mm/memcontrol.c
    mem_cgroup_print_oom_context print it (v6.8): nodemask and mems_allowed hold commas."""
    memcg = f",oom_memcg={oom_memcg}" if oom_memcg else ",global_oom"
    return (f"oom-kill:constraint={constraint},nodemask=0-1,3,cpuset=/,mems_allowed=0-1,3{memcg},"
            f"task_memcg={task_memcg},task={task},pid={pid},uid=0")


@pytest.mark.parametrize("line,container,task_memcg,oom_memcg,process,pid", [
    (HARVESTER_SUMMARY, "0f32894de86edf3d3832702af794874ef8d400b4969acdea4976b12040756e0d",
     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod968a06fb_9ab9_4819_8caf_0392ddff3d9b.slice/"
     "cri-containerd-0f32894de86edf3d3832702af794874ef8d400b4969acdea4976b12040756e0d.scope",
     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod968a06fb_9ab9_4819_8caf_0392ddff3d9b.slice",
     "qemu-system-x86", 39079),
    # kind: the node is a docker container, the pod's container the deepest id (cgroupfs inside it)
    (KIND_SUMMARY, "a07d3c191742700df28b349710c93b2014b255b22364decb09b53ca123fa8272",
     "/docker/428406e4f18a1cb65e9691d40b63f3d92c95c1b0d15b5c427bed470b6832cd6e/kubelet/kubepods/"
     "pod1788d98a-0700-426a-8701-2312e4cc2163/a07d3c191742700df28b349710c93b2014b255b22364decb09b53ca123fa8272",
     "/docker/428406e4f18a1cb65e9691d40b63f3d92c95c1b0d15b5c427bed470b6832cd6e/kubelet/kubepods/"
     "pod1788d98a-0700-426a-8701-2312e4cc2163", "uwsgi", 11638),
    # OOM_KILL_C's format with the cgroup paths each engine makes (Docker's and CRI-O's systemd driver,
    # cgroupfs for kubelet and for plain Docker, Podman), a comm holding a comma
    (_summary(f"/system.slice/docker-{CID}.scope", f"/system.slice/docker-{CID}.scope"), CID,
     f"/system.slice/docker-{CID}.scope", f"/system.slice/docker-{CID}.scope", "python3", 4242),
    (_summary(f"/kubepods.slice/kubepods-pod1.slice/crio-{CID}.scope", "/kubepods.slice/kubepods-pod1.slice"), CID,
     f"/kubepods.slice/kubepods-pod1.slice/crio-{CID}.scope", "/kubepods.slice/kubepods-pod1.slice", "python3", 4242),
    (_summary(f"/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba/{CID}",
              "/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba", task="java, x", pid=50624), CID,
     f"/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba/{CID}",
     "/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba", "java, x", 50624),
    (_summary(f"/docker/{CID}", constraint="CONSTRAINT_NONE"), CID, f"/docker/{CID}", None, "python3", 4242),
    (_summary(f"/machine.slice/libpod-{CID}.scope/container", f"/machine.slice/libpod-{CID}.scope/container"), CID,
     f"/machine.slice/libpod-{CID}.scope/container", f"/machine.slice/libpod-{CID}.scope/container", "python3", 4242),
    # not a container: a service's cgroup, CRI-O's conmon
    (_summary("/system.slice/kubelet.service", constraint="CONSTRAINT_NONE"), None, "/system.slice/kubelet.service",
     None, "python3", 4242),
    (_summary(f"/kubepods.slice/crio-conmon-{CID}.scope", constraint="CONSTRAINT_NONE"), None,
     f"/kubepods.slice/crio-conmon-{CID}.scope", None, "python3", 4242),
])
def test_oom_summary_gives_the_container_of_every_engine(line, container, task_memcg, oom_memcg, process, pid):
    kind, a = read(line)
    assert kind == "kernel.oom-kill"
    assert (a["container_id"], a["task_memcg"], a["oom_memcg"], a["process"], a["pid"]) == \
        (container, task_memcg, oom_memcg, process, pid)
    assert a["constraint"] in ("CONSTRAINT_MEMCG", "CONSTRAINT_NONE")


def test_pre_4_19_task_in_line():
    # mm/memcontrol.c mem_cgroup_print_oom_info before v4.19 (google/cadvisor utils/oomparser)
    line = (f"Task in /kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba/{CID} killed as a result of limit "
            "of /kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba")
    _, a = read(line)
    assert (a["container_id"], a["oom_memcg"], a["constraint"], a["pid"]) == (
        CID, "/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba", None, None)


def _ev(at, line):
    kind, attrs = read(line)
    return Event(at=at, source="kern.log", kind=kind, summary=line[:40], attrs=attrs, evidence={"line": 1})


def test_one_event_per_kill_the_victims_pid_and_the_summarys_cgroups():
    t = datetime(2024, 5, 9, 14, 52, 38, tzinfo=timezone.utc)
    victim = ("Memory cgroup out of memory: Killed process 39079 (qemu-system-x86) total-vm:73209856kB, "
              "anon-rss:66852088kB, file-rss:21948kB, shmem-rss:4kB")
    invoked = "virt-launcher invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=986"
    later = "Out of memory: Killed process 1234 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
    events = [_ev(t, invoked), _ev(t + timedelta(milliseconds=3), HARVESTER_SUMMARY),
              _ev(t + timedelta(milliseconds=4), victim), _ev(t + timedelta(seconds=30), later)]
    merged = kmsg.merge_oom(events)
    assert len(merged) == 2
    one, two = merged
    assert one.at == t + timedelta(milliseconds=4)  # the victim line's time and evidence
    assert (one.attrs["pid"], one.attrs["process"], one.attrs["constraint"], one.attrs["container_id"]) == (
        39079, "qemu-system-x86", "CONSTRAINT_MEMCG", "0f32894de86edf3d3832702af794874ef8d400b4969acdea4976b12040756e0d")
    assert one.attrs["message"] == "\n".join([invoked, HARVESTER_SUMMARY, victim])
    assert (two.attrs["pid"], two.attrs["container_id"]) == (1234, None)


def test_two_kills_within_a_second_stay_two():
    t = datetime(2024, 5, 9, 14, 52, 38, tzinfo=timezone.utc)
    a = "Memory cgroup out of memory: Killed process 1 (a) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
    b = "Memory cgroup out of memory: Killed process 2 (b) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
    assert [e.attrs["pid"] for e in kmsg.merge_oom([_ev(t, a), _ev(t + timedelta(milliseconds=100), b)])] == [1, 2]


# -- the prefilter's cost (the journal's pass tests it on every kernel MESSAGE of bench L, ~140k) ----------
def test_the_prefilter_passes_over_a_line_in_about_a_microsecond():
    lines = ["IPv6: ADDRCONF(NETDEV_CHANGE): cali1a2b31a2b3: link becomes ready",
             "cni0: port 7(veth1a2b3) entered forwarding state", "device veth1a2b3 left promiscuous mode",
             'I0717 12:00:07.000000    2210 kubelet.go:2453] "SyncLoop (probe)" probe="readiness" status="ready"']
    n = 20_000
    per_line = min(timeit.repeat(lambda: [kmsg.might_matter(x) for x in lines], number=n // 4, repeat=3)) / n
    assert per_line < 5e-6, per_line  # measured 0.2-0.4 µs here; classify() only runs on what it passes
    assert not any(kmsg.might_matter(x) for x in lines)
