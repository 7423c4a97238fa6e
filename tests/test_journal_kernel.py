"""The journal's kernel lines (collectors/journal/kernel.py), containerd's UpdateContainerResources lines
and the units' failure and restart lines, collected from real .journal files (systemd-journal-remote,
samples/journalbuild.py) and read back as events.

Kernel entries are written as journald writes what it reads from /dev/kmsg (systemd
src/journal/journald-kmsg.c ``dev_kmsg_record``): ``_TRANSPORT=kernel``, ``SYSLOG_IDENTIFIER=kernel``,
``SYSLOG_FACILITY=0``, ``_SOURCE_MONOTONIC_TIMESTAMP``, no ``_PID``; a printk of several lines is one
entry whose MESSAGE holds the newlines. The wordings are the public ones of tests/test_kmsg.py.
"""
from __future__ import annotations

import json
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
from journalbuild import build_journal, export_entry
from test_journal import BOOT, BOOTED, MACHINE, S, T0, analyse, collect, entry, host_with, kinds, pid1, service, \
    stored, usec
from test_kmsg import HARVESTER_SUMMARY, LOAD_570, MISMATCH_570_FMT, MISMATCH_575_FMT, PROBE_ENTRY, PROBE_FAILED

import syslab as SL
from collectors.journal import reader, selection

XID_13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x504648=0x80000000"
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
LOST_79 = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
UUID = "NVRM: GPU at PCI:0000:3b:00: GPU-8e9d6c3a-51f0-2b8e-3c43-ef5a2a0f4d1b"
AER = "nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)"
CID = "0f32894de86edf3d3832702af794874ef8d400b4969acdea4976b12040756e0d"
VICTIM = ("Memory cgroup out of memory: Killed process 39079 (qemu-system-x86) total-vm:73209856kB, "
          "anon-rss:66852088kB, file-rss:21948kB, shmem-rss:4kB, UID:107 pgtables:66020kB oom_score_adj:986")
# containerd internal/cri/instrument/instrumented_service.go, through logrus' text format
# (https://github.com/containerd/containerd/blob/main/internal/cri/instrument/instrumented_service.go)
UPDATE_REQ = ('time="2026-07-17T12:00:20.104Z" level=info msg="UpdateContainerResources for \\"' + CID + '\\" with Linux: '
              '&LinuxContainerResources{CpuPeriod:100000,CpuQuota:0,CpuShares:2048,MemoryLimitInBytes:0,OomScoreAdj:0,'
              'CpusetCpus:2-3,CpusetMems:,HugepageLimits:[]*HugepageLimit{},Unified:map[string]string{},'
              'MemorySwapLimitInBytes:0,} / Windows: nil"')
UPDATE_OK = 'time="2026-07-17T12:00:20.118Z" level=info msg="UpdateContainerResources for \\"' + CID + '\\" returns successfully"'
UPDATE_ERR = ('time="2026-07-17T12:00:21.499Z" level=error msg="UpdateContainerResources for \\"' + CID + '\\" failed" '
              'error="context canceled"')


def kernel(at, message: str, boot: str = BOOT, **fields) -> bytes:
    """One kernel record as journald stores it from /dev/kmsg (facility LOG_KERN)."""
    d = {"__REALTIME_TIMESTAMP": usec(at), "__MONOTONIC_TIMESTAMP": usec(at) - usec(BOOTED[boot]),
         "_BOOT_ID": boot, "_MACHINE_ID": MACHINE, "_HOSTNAME": "gpu-node-7", "_TRANSPORT": "kernel",
         "_SOURCE_MONOTONIC_TIMESTAMP": usec(at) - usec(BOOTED[boot]) - 40, "PRIORITY": 3, "SYSLOG_FACILITY": 0,
         "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": message}
    d.update(fields)
    return export_entry(d)


def logger(at, message: str, ident: str = "kernel", transport: str = "syslog", **fields) -> bytes:
    """What ``logger -t kernel MESSAGE`` run by user 1000 leaves in the journal (the syslog transport,
    journald's _PID/_UID/_COMM from the socket's peer)."""
    return entry(at, 51234, ident, message, _TRANSPORT=transport, _UID=1000, _GID=1000, _COMM="logger",
                 _EXE="/usr/bin/logger", _SYSTEMD_UNIT="session-4.scope", **fields)


@pytest.fixture(scope="module")
def gpu_node(tmp_path_factory):
    """One node's journal: a boot's driver load, an application Xid, a GPU falling off the bus, an OOM
    kill, an AER line, an API mismatch in both wordings (the old one as four consecutive records), the
    probe form as one record, and forgeries of the same lines."""
    tmp = tmp_path_factory.mktemp("kernel")
    mismatch_570 = (MISMATCH_570_FMT % ("570.195.03", "570.158.01")).split("\n")
    root = host_with(
        tmp,
        service(T0 - 60 * S, 2210, "kubelet.service", "kubelet", 'I0717 "SyncLoop (probe)" probe="readiness" '
                'status="ready" pod="ml/trainer-0"', ident="kubelet"),
        kernel(T0 - 50 * S, "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45-Ubuntu SMP", PRIORITY=5),
        kernel(T0 - 40 * S, LOAD_570, PRIORITY=4),
        kernel(T0 - 39 * S, "nvidia-uvm: Loaded the UVM driver, major device number 236."),
        kernel(T0, UUID, PRIORITY=4),
        kernel(T0 + timedelta(microseconds=20), XID_13, PRIORITY=4),
        kernel(T0 + 10 * S, "virt-launcher invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=986"),
        kernel(T0 + 10 * S + timedelta(milliseconds=2), HARVESTER_SUMMARY, PRIORITY=6),
        kernel(T0 + 10 * S + timedelta(milliseconds=3), VICTIM),
        kernel(T0 + 20 * S, AER, _KERNEL_DEVICE="+pci:0000:3b:00.0", _KERNEL_SUBSYSTEM="pci"),
        *[kernel(T0 + 30 * S + timedelta(microseconds=2 * i), line) for i, line in enumerate(mismatch_570)],
        kernel(T0 + 40 * S, MISMATCH_575_FMT % ("nvidia-smi", 48211, "580.95.05", "575.51.02")),
        kernel(T0 + 50 * S, XID_79),
        kernel(T0 + 50 * S + timedelta(microseconds=30), LOST_79),
        kernel(T0 + 60 * S, PROBE_ENTRY),
        kernel(T0 + 60 * S + timedelta(milliseconds=131), PROBE_FAILED),
        # forgeries: the same texts by a user's logger (syslog transport), a service's stdout, and root's
        # write into /dev/kmsg (the kernel transport, facility LOG_USER)
        logger(T0 + 70 * S, XID_79),
        logger(T0 + 71 * S, XID_13, ident="myjob", transport="stdout"),
        kernel(T0 + 72 * S, XID_79, SYSLOG_FACILITY=1),
        kernel(T0 + 73 * S, XID_13, SYSLOG_FACILITY=1, SYSLOG_IDENTIFIER="gpu-burn", SYSLOG_PID=777),
        kernel(T0 + 80 * S, "eth0: renamed from tmp5a1b2"))
    bundle = collect(tmp, root)
    return bundle, analyse(bundle)


def test_each_kernel_wording_becomes_its_event(gpu_node):
    bundle, reading = gpu_node
    xids = kinds(reading, "kernel.xid")
    assert [(e.at, e.attrs["xid"], e.attrs["pci"], e.attrs["pid"], e.attrs["process"]) for e in xids] == [
        (T0 + timedelta(microseconds=20), 13, "0000:3b:00", 4242, "python3"),
        (T0 + 50 * S, 79, "0000:3b:00", None, None)]
    assert xids[0].attrs["detail"] == "Graphics Exception: ESR 0x504648=0x80000000" and xids[0].source == "journal"
    lost = kinds(reading, "kernel.gpu-lost")
    assert [(e.at, e.attrs["pci"], e.attrs["stage"]) for e in lost] == [
        (T0 + 50 * S + timedelta(microseconds=30), "0000:3b:00.0", "runtime"), (T0 + 60 * S, "0000:b3:00.0", "probe")]
    assert lost[1].attrs["message"] == PROBE_ENTRY  # one record, its three lines
    nvrm = kinds(reading, "kernel.nvrm")
    assert [(e.attrs["what"], e.attrs["pci"], e.attrs["uuid"], e.attrs["version"]) for e in nvrm] == [
        ("module-load", None, None, "570.158.01"), ("gpu-uuid", "0000:3b:00", "GPU-8e9d6c3a-51f0-2b8e-3c43-ef5a2a0f4d1b", None),
        ("init-failed", None, None, None)]
    [aer] = kinds(reading, "kernel.pcie-error")
    assert (aer.attrs["pci"], aer.attrs["severity"], aer.at) == ("0000:3b:00.0", "Uncorrected (Fatal)", T0 + 20 * S)


def test_a_mismatch_split_into_records_is_joined_and_one_record_is_read_whole(gpu_node):
    bundle, reading = gpu_node
    old, new = kinds(reading, "kernel.api-mismatch")
    assert (old.at, old.attrs["client"], old.attrs["client_version"], old.attrs["kernel_version"]) == (
        T0 + 30 * S, None, "570.195.03", "570.158.01")
    assert old.attrs["message"] == MISMATCH_570_FMT % ("570.195.03", "570.158.01")
    assert (new.attrs["client"], new.attrs["client_pid"], new.attrs["client_version"], new.attrs["kernel_version"]) == (
        "nvidia-smi", 48211, "580.95.05", "575.51.02")
    # the four records are kept, the event cites the first
    first = stored(bundle)[old.evidence["line"] - 1]
    assert first["__CURSOR"] == old.evidence["cursor"] and first["MESSAGE"].startswith("NVRM: API mismatch")


def test_one_oom_kill_is_one_event_with_the_container(gpu_node):
    _, reading = gpu_node
    [oom] = kinds(reading, "kernel.oom-kill")
    assert (oom.at, oom.attrs["pid"], oom.attrs["process"], oom.attrs["constraint"], oom.attrs["container_id"]) == (
        T0 + 10 * S + timedelta(milliseconds=3), 39079, "qemu-system-x86", "CONSTRAINT_MEMCG", CID)
    assert oom.attrs["task_memcg"].endswith(f"cri-containerd-{CID}.scope")
    assert oom.attrs["message"].split("\n")[1:] == [HARVESTER_SUMMARY, VICTIM]


def test_only_the_kernels_own_records_count_and_a_claim_is_a_red_flag(gpu_node):
    bundle, reading = gpu_node
    forged = kinds(reading, "journal.forged")
    assert [(e.at, e.attrs["claim"], e.attrs["transport"], e.attrs["comm"], e.attrs["uid"]) for e in forged] == [
        (T0 + 70 * S, "kernel", "syslog", "logger", 1000), (T0 + 72 * S, "kernel", "kernel", None, None)]
    assert all(e.flags == ("forged",) for e in forged)
    # none of the four forgeries is a kernel event; the stdout line and root's kmsg line under its own
    # name claim nothing and are not even kept
    assert not [e for e in reading.events if e.kind.startswith("kernel.") and e.at >= T0 + 70 * S]
    kept = [(e["__REALTIME_TIMESTAMP"], e["_GF_SELECTED_BY"]) for e in stored(bundle)
            if e["__REALTIME_TIMESTAMP"] >= usec(T0 + 70 * S)]
    assert kept == [(usec(T0 + 70 * S), ["forged"]), (usec(T0 + 72 * S), ["forged"]),
                    (usec(T0 + 80 * S), ["boot", "coverage"])]


def test_the_kernel_lines_are_kept_by_the_kernel_rule_and_the_others_are_not(gpu_node):
    bundle, _ = gpu_node
    by_rule = [(e["MESSAGE"].split("\n")[0][:30], e["_GF_SELECTED_BY"]) for e in stored(bundle)
               if "kernel" in e["_GF_SELECTED_BY"]]
    assert len(by_rule) == 16  # load, UUID, Xid 13, 3 OOM, AER, 4 + 1 mismatch, Xid 79, lost, probe, probe failed
    assert not [m for m, _ in by_rule if m.startswith(("Linux version", "nvidia-uvm", "eth0"))]
    notes = json.loads(bundle.path("manifest.json").read_text())
    assert any("kernel lines (_TRANSPORT=kernel)" in n for a in notes["artifacts"] if a["path"] == "journal/entries.jsonl"
               for n in a.get("notes", []))


def test_kernel_coverage_is_the_span_of_the_kernel_records(gpu_node):
    bundle, reading = gpu_node
    cov = {c.source: c for c in reading.coverage}
    assert (cov["journal"].start, cov["journal"].end) == (T0 - 60 * S, T0 + 80 * S)
    assert (cov["kernel"].start, cov["kernel"].end) == (T0 - 50 * S, T0 + 80 * S)
    assert "kernel lines (_TRANSPORT=kernel) from 2026-07-17T11:59:10Z to 2026-07-17T12:01:20Z" in cov["kernel"].reason
    raw = json.loads(bundle.path("journal/coverage.json").read_text())
    assert raw["kernel_first_usec"] == usec(T0 - 50 * S) and raw["kernel_last"] == "2026-07-17T12:01:20Z"


def test_a_journal_without_kernel_lines_says_so(tmp_path):
    root = host_with(tmp_path, pid1(T0, "Started kubelet.service - kubelet.", UNIT="kubelet.service"),
                     logger(T0 + S, XID_79))  # a forged line is no kernel line either
    reading = analyse(collect(tmp_path, root))
    [cov] = [c for c in reading.coverage if c.source == "kernel"]
    assert (cov.start, cov.end) == (None, None)
    assert "the journal holds no kernel lines (_TRANSPORT=kernel)" in cov.reason and "ReadKMsg=no" in cov.reason
    assert [e.attrs["claim"] for e in kinds(reading, "journal.forged")] == ["kernel"]


def test_no_journal_at_all_gives_no_kernel_span(tmp_path):
    (tmp_path / "host").mkdir()
    [cov] = [c for c in analyse(collect(tmp_path, tmp_path / "host")).coverage if c.source == "kernel"]
    assert cov.start is None and "no journal entries were collected" in cov.reason


def test_a_bundle_from_before_the_kernel_pass_says_it_holds_no_kernel_span(gpu_node, tmp_path):
    bundle, _ = gpu_node
    copy = tmp_path / "old"
    shutil.copytree(bundle.root, copy)
    cov = json.loads((copy / "journal/coverage.json").read_text())
    (copy / "journal/coverage.json").write_text(json.dumps({k: v for k, v in cov.items() if not k.startswith("kernel_")}))
    from forensics.bundle import Bundle
    from collectors import journal
    from forensics.events import NodeFacts
    reading = journal.read(Bundle.open(copy), NodeFacts())  # the reader does not check the hashes
    [kc] = [c for c in reading.coverage if c.source == "kernel"]
    assert kc.start is None and "collected without its kernel lines" in kc.reason


def test_since_cuts_the_kernel_span_where_the_scan_began(tmp_path):
    root = host_with(tmp_path, kernel(T0, XID_13), kernel(T0 + 10 * S, XID_79))
    reading = analyse(collect(tmp_path, root, since=T0 + 5 * S))
    [cov] = [c for c in reading.coverage if c.source == "kernel"]
    assert cov.start == T0 + 5 * S and "(--since)" in cov.reason
    assert [e.attrs["xid"] for e in kinds(reading, "kernel.xid")] == [79]


# -- containerd's UpdateContainerResources ----------------------------------------------------------
def test_update_container_resources_lines_of_the_runtime_and_a_forged_one(tmp_path):
    root = host_with(
        tmp_path,
        service(T0, 880, "containerd.service", "containerd", UPDATE_REQ),
        service(T0 + timedelta(milliseconds=14), 880, "containerd.service", "containerd", UPDATE_OK),
        service(T0 + S, 901, "k3s.service", "k3s-server", UPDATE_ERR, ident="k3s"),
        entry(T0 + 2 * S, 7001, "containerd", UPDATE_OK, _COMM="bash", _UID=1000, _SYSTEMD_UNIT="session-2.scope"),
        service(T0 + 3 * S, 880, "containerd.service", "containerd",
                'time="2026-07-17T12:00:23Z" level=info msg="StartContainer for \\"' + CID + '\\" returns successfully"'))
    reading = analyse(collect(tmp_path, root))
    got = kinds(reading, "runtime.update-resources")
    assert [(e.at, e.attrs["id"], e.attrs["result"], e.attrs["unit"]) for e in got] == [
        (T0, CID, "requested", "containerd.service"), (T0 + timedelta(milliseconds=14), CID, "ok", "containerd.service"),
        (T0 + S, CID, "error", "k3s.service")]
    assert "CpusetCpus:2-3" in got[0].attrs["message"]
    [forged] = kinds(reading, "journal.forged")
    assert (forged.attrs["claim"], forged.attrs["comm"], forged.at) == ("containerd", "bash", T0 + 2 * S)


# -- the units' failure and restart lines, from a real systemd -------------------------------------------
@pytest.fixture(scope="module")
def unit_journal(tmp_path_factory):
    """A real systemd 252 (tests/syslab.py) runs failing services under the names of the runtimes, kubelet
    and the fabric manager with ``Restart=on-failure``; its journal is copied out when they gave up."""
    folder = tmp_path_factory.getbasetemp() / f"syslab-units-{time.monotonic_ns()}"
    lab = SL.SysLab(folder, "v2", persistent_journal=True)
    try:
        lab.up(containers=())
        units = ("kubelet.service", "k3s.service", "crio.service", "nvidia-fabricmanager.service", "myapp.service")
        for u in units:
            lab.sh("systemd-run", f"--unit={u}", "-p", "Restart=on-failure", "-p", "RestartSec=1", "-p",
                   "StartLimitBurst=2", "-p", "StartLimitIntervalSec=60", "/bin/sh", "-c", "sleep 0.3; exit 3")
        deadline = time.monotonic() + 30
        # every unit, not the first one: they were started one after another and give up one after another
        while time.monotonic() < deadline and lab.sh("systemctl", "is-failed", *units,
                                                     check=False).stdout.split() != ["failed"] * len(units):
            time.sleep(0.5)
        # and PID 1's last line for each ("Failed to start ...") is in the journal before it is copied out
        while time.monotonic() < deadline and lab.sh("journalctl", "-q", "-o", "cat", "--grep", "^Failed to start",
                                                     check=False).stdout.count("Failed to start") < len(units):
            time.sleep(0.5)
        lab.sh("journalctl", "--flush", check=False)
        out = tmp_path_factory.mktemp("unitjournal") / "journal"
        shutil.copytree(f"/proc/{lab.pid1()}/root/var/log/journal", out)
    finally:
        assert lab.down() == []
    return out


def test_failed_and_restarted_units_are_kept_with_their_own_lines(unit_journal, tmp_path):
    (tmp_path / "host").mkdir()
    reading = analyse(collect(tmp_path, tmp_path / "host", journal_dirs=[unit_journal]))
    seen = {}
    for e in kinds(reading, "journal.unit"):
        seen.setdefault(e.attrs["unit"], []).append(e.attrs["action"])
    for u in ("kubelet.service", "k3s.service", "crio.service", "nvidia-fabricmanager.service"):
        # Started, Main process exited, Failed with result, Scheduled restart job, Stopped, ... Failed to start
        assert seen[u].count("restart-scheduled") == 2 and seen[u].count("exited") == 2, (u, seen[u])
        assert seen[u].count("failed") == 4 and seen[u].count("started") == 2 and seen[u].count("stopped") == 2, u
    assert "myapp.service" not in seen  # a unit that does not matter
    restart = [e for e in kinds(reading, "journal.unit") if e.attrs["action"] == "restart-scheduled"][0]
    assert restart.attrs["message"].endswith(": Scheduled restart job, restart counter is at 1.")


# -- the pass itself ---------------------------------------------------------------------------------
def test_the_kernel_lines_come_through_the_message_values_as_through_every_entry(gpu_node, monkeypatch):
    """The NVML pass with the kernel's texts finds the same entries by the file's MESSAGE values as a walk
    over every entry with the regular expressions alone."""
    bundle, _ = gpu_node
    path = next(Path(bundle.root).parent.glob("host/var/log/journal/*/system.journal"))
    with open(path, "rb") as fh:
        sel, *_ = selection.select(reader._ReaderSource([fh.fileno()]), None, [])
        fast = [(e["__CURSOR"], e["_GF_SELECTED_BY"]) for e in sel.entries()]
        monkeypatch.setattr(selection, "_NVML_TEXTS", None)
        sel, *_ = selection.select(reader._ReaderSource([fh.fileno()]), None, [])
        walk = [(e["__CURSOR"], e["_GF_SELECTED_BY"]) for e in sel.entries()]
    assert fast == walk and sum("kernel" in r for _, r in fast) == 16


# -- a real journal with real kernel lines -------------------------------------------------------------
@pytest.mark.corpus
def test_arch_2013_kernel_lines_give_the_span_and_no_gpu_event(tmp_path, real_inputs):
    (tmp_path / "host").mkdir()
    bundle = collect(tmp_path, tmp_path / "host", journal_dirs=[real_inputs / "journal/fluent-plugin-systemd/test.journal"])
    reading = analyse(bundle)
    [cov] = [c for c in reading.coverage if c.source == "kernel"]
    # the first record journald read from the ring buffer ("Initializing cgroup subsys cpuset") to the
    # journal's last entry: journald read the kernel's log as long as it wrote, so no kernel line after the
    # last one (systemd-udevd's early-boot line through /dev/kmsg, 01:07:21.002305) means none came
    [journal] = [c for c in reading.coverage if c.source == "journal"]
    assert (cov.start.isoformat(), cov.end) == ("2013-03-29T01:07:20.181852+00:00", journal.end)
    assert journal.end.isoformat() == "2013-03-29T01:07:23.569810+00:00"
    assert "journald kept reading the kernel's log up to its last entry" in cov.reason
    assert not [e for e in reading.events if e.kind.startswith("kernel.") or e.kind == "journal.forged"]
    assert not [e for e in stored(bundle) if "kernel" in e["_GF_SELECTED_BY"] or "forged" in e["_GF_SELECTED_BY"]]
