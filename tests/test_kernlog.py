"""collectors.kernlog: the kernel's lines of /var/log/kern.log*, messages*, syslog* and /dev/kmsg, acquired from
real files in a temporary root (and this machine's own ring buffer) into a real bundle and read back.

The file texts are written in the formats the distributions write:

- Ubuntu 22.04 / Debian 11 kern.log: rsyslog's ``RSYSLOG_TraditionalFileFormat`` (selected by
  ``$ActionFileDefaultTemplate RSYSLOG_TraditionalFileFormat`` in their /etc/rsyslog.conf;
  https://www.rsyslog.com/doc/reference/templates/templates-reserved-names.html), the kernel's lines by imklog with
  the kernel's own ``[ seconds.micro]`` stamp left in the message (``ParseKernelTimestamp`` default off,
  https://www.rsyslog.com/doc/reference/parameters/imklog-parsekerneltimestamp.html); rotated by
  /etc/logrotate.d/rsyslog (``weekly``, ``rotate 4``, ``compress``, ``delaycompress``: kern.log.1, kern.log.2.gz).
- Debian 12 kern.log: ``RSYSLOG_FileFormat``, RFC 3339 with microseconds and offset (Debian 12 release notes
  §5.1.8: rsyslog uses high precision timestamps).
- RHEL 9 /var/log/messages: ``RSYSLOG_TraditionalFileFormat`` (``module(load="builtin:omfile"
  Template="RSYSLOG_TraditionalFileFormat")``), the kernel's lines by imjournal (no ``[ ]`` stamp), logrotate
  ``dateext`` (messages-YYYYMMDD). A journal entry with embedded newlines is written with ``#012``
  (``$EscapeControlCharactersOnReceive``, default on).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from collectors import kernlog, node
from collectors.kernlog import files as kfiles, ring, syslog
from forensics.artifact import Status
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import CollectContext
from forensics.timeutil import tz_from_tzif

ZONEINFO = Path("/usr/share/zoneinfo")
HOST = "gpu-node-3"


def zone(name: str):
    return tz_from_tzif((ZONEINFO / name).read_bytes(), name)


def nodefacts(name: str = "UTC", **kw) -> NodeFacts:
    return NodeFacts(tz_name=name, tz=zone(name), **kw)


def write(root: Path, path: str, data: str | bytes, mtime: str | None = None) -> Path:
    """``data`` at ``path`` under ``root`` (``.gz``: compressed), its mtime ``mtime`` (ISO with offset)."""
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    p.write_bytes(gzip.compress(raw) if p.name.endswith(".gz") else raw)
    if mtime:
        t = datetime.fromisoformat(mtime).timestamp()
        os.utime(p, (t, t))
    return p


def collect(root: Path, out: Path, **kw) -> Bundle:
    w = BundleWriter(out)
    kernlog.acquire(CollectContext(root=root, writer=w, **kw))
    w.finish()
    return Bundle.open(out)


def record(b: Bundle, source: str):
    [a] = [a for a in b.artifacts() if a.source == source]
    return a


def cover(reading, name: str):
    [c] = [c for c in reading.coverage if c.source == name]
    return c


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


# Ubuntu 22.04 kern.log lines (RSYSLOG_TraditionalFileFormat, imklog keeps the kernel's stamp)
UBUNTU_WEEK1 = f"""\
Aug 17 06:25:01 {HOST} kernel: [    0.000000] Linux version 5.15.0-119-generic (buildd@lcy02-amd64-054) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #129-Ubuntu SMP Fri Aug 2 19:25:20 UTC 2024 (Ubuntu 5.15.0-119.129-generic 5.15.160)
Aug 17 06:25:01 {HOST} kernel: [    4.812004] nvidia: loading out-of-tree module taints kernel.
Aug 17 06:25:01 {HOST} kernel: [    4.930227] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.158.01  Tue May 27 15:25:31 UTC 2025
Aug 23 23:59:58 {HOST} kernel: [604737.120000] nvidia-modeset: Unloading
"""
UBUNTU_WEEK2 = f"""\
Aug 24 00:00:03 {HOST} kernel: [604742.000000] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  570.158.01
Aug 30 23:00:00 {HOST} kernel: [1206000.000000] EXT4-fs (nvme0n1p1): resizing filesystem
"""
UBUNTU_CURRENT = f"""\
Sep  2 04:05:13 {HOST} kernel: [1400052.110943] NVRM: GPU at PCI:0000:3b:00: GPU-0f8e4d2c-6a3b-4f3e-9c1a-2b7d5e8f9a10
Sep  2 04:05:13 {HOST} kernel: [1400052.110951] NVRM: GPU Board Serial Number: 1321020024811
Sep  2 04:05:13 {HOST} kernel: [1400052.110955] NVRM: Xid (PCI:0000:3b:00): 79, pid=2731466, name=python3, GPU has fallen off the bus.
Sep  2 04:05:13 {HOST} kernel: [1400052.110990] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
Sep  2 04:05:14 {HOST} systemd[1]: Started session-42.scope - Session 42 of User ubuntu.
Sep  2 04:07:00 {HOST} kubelet[1422]: E0902 04:07:00.123456    1422 kuberuntime_manager.go:1256] "Unhandled Error"
"""


def test_ubuntu_kern_log_and_its_rotations_keep_only_kernel_lines_with_their_line_numbers(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/kern.log.4.gz", UBUNTU_WEEK1, "2026-08-23T23:59:59+00:00")
    write(root, "/var/log/kern.log.2.gz", UBUNTU_WEEK2, "2026-08-30T23:00:01+00:00")
    write(root, "/var/log/kern.log.1", "", "2026-08-31T00:00:00+00:00")
    write(root, "/var/log/kern.log", UBUNTU_CURRENT, "2026-09-02T04:07:00+00:00")
    write(root, "/var/log/syslog", UBUNTU_CURRENT)  # Ubuntu writes the kernel's lines there too: not read
    write(root, "/var/log/kern.log.bak", UBUNTU_CURRENT)  # not a rotation name
    b = collect(root, tmp_path / "b")
    stored = b.path("kernlog/kern.log.kernel").read_text()
    assert stored.splitlines()[2] == ("3\t" + UBUNTU_CURRENT.splitlines()[2])
    assert [ln.split("\t")[0] for ln in stored.splitlines()] == ["1", "2", "3", "4"]
    assert "systemd" not in stored and "kubelet" not in stored
    rec = record(b, "/var/log/kern.log")
    assert rec.status is Status.COLLECTED and rec.notes[0].startswith("kernel lines only: 4 of 6 lines read")
    assert "file mtime 2026-09-02T04:07:00Z" in rec.notes[1]
    assert record(b, "/var/log/kern.log.4.gz").path == "kernlog/kern.log.4.gz.kernel"
    assert "decompressed from the .gz rotation" in record(b, "/var/log/kern.log.4.gz").notes
    assert not [a for a in b.artifacts() if a.source in ("/var/log/syslog", "/var/log/kern.log.bak")]
    assert record(b, "/var/log/messages").status is Status.ABSENT
    meta = json.loads(b.path("kernlog/files.json").read_text())
    assert [e["source"] for e in meta["files"]] == ["/var/log/kern.log", "/var/log/kern.log.1", "/var/log/kern.log.2.gz",
                                                    "/var/log/kern.log.4.gz", "/var/log/messages"]
    assert meta["files"][0]["first"] == "Sep  2 04:05:13" and meta["files"][0]["last"] == "Sep  2 04:07:00"
    assert meta["kmsg"] is None

    r = kernlog.read(b, nodefacts())
    c = cover(r, "kern.log")
    # from the first line of the oldest file to the last line (of any program) of the current one
    assert (c.start, c.end) == (utc(2026, 8, 17, 6, 25, 1), utc(2026, 9, 2, 4, 7))
    [hole] = c.holes
    assert (hole.start, hole.end) == (utc(2026, 8, 23, 23, 59, 58), utc(2026, 8, 24, 0, 0, 3))
    assert "kern.log.3 missing" in hole.reason and c.uncertain is None
    assert c.reason.startswith("kern.log: 4 files read (kern.log.4.gz, kern.log.2.gz, kern.log.1, kern.log), "
                               "10 kernel lines")
    assert "/var/log/messages absent" in c.reason and "not looked for: /var/log/syslog" in c.reason
    assert cover(r, "kmsg").start is None and "--root /" in cover(r, "kmsg").reason
    [xid] = [e for e in r.events if e.kind == "kernel.xid"]
    assert (xid.at, xid.source, xid.original, xid.evidence) == (
        utc(2026, 9, 2, 4, 5, 13), "kern.log", "Sep  2 04:05:13", {"artifact": "kernlog/kern.log.kernel", "line": 3})
    assert xid.attrs == {"xid": 79, "pci": "0000:3b:00", "gpu_instance": None, "pid": 2731466, "process": "python3",
                         "detail": "GPU has fallen off the bus.",
                         "message": "[1400052.110955] NVRM: Xid (PCI:0000:3b:00): 79, pid=2731466, name=python3, GPU "
                                    "has fallen off the bus."}
    assert [(e.kind, e.attrs.get("what") or e.attrs.get("stage"), e.evidence["artifact"].split("/")[1]) for e in r.events] \
        == [("kernel.nvrm", "module-load", "kern.log.4.gz.kernel"), ("kernel.nvrm", "gpu-uuid", "kern.log.kernel"),
            ("kernel.nvrm", "other", "kern.log.kernel"), ("kernel.xid", None, "kern.log.kernel"),
            ("kernel.gpu-lost", "runtime", "kern.log.kernel")]


def test_debian12_rfc3339_times_are_exact_and_kept_as_written(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/kern.log", (
        f"2026-09-02T06:05:13.123456+02:00 {HOST} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
        f"2026-09-02T06:05:14.000001+02:00 {HOST} containerd[811]: time=\"2026-09-02T06:05:14\" level=info\n"
        f"2026-09-02T04:05:15.5Z {HOST} kernel: pcieport 0000:3a:00.0: AER: Uncorrected (Non-Fatal) error received: "
        "0000:3b:00.0\n"), "2026-09-02T04:05:15+00:00")
    b = collect(root, tmp_path / "b")
    lines = syslog.parse_stored(b.path("kernlog/kern.log.kernel").read_bytes())
    syslog.read_times(lines, None, zone("Asia/Tokyo"), False)  # an exact stamp needs neither zone nor mtime
    assert [(ln.n, ln.source_line, ln.at, ln.flags) for ln in lines] == [
        (1, 1, utc(2026, 9, 2, 4, 5, 13, 123456), ()), (2, 3, utc(2026, 9, 2, 4, 5, 15, 500000), ())]
    assert lines[0].when == "2026-09-02T06:05:13.123456+02:00"
    assert lines[0].text.startswith("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>'")
    c = cover(kernlog.read(b, nodefacts(tz_unknown=True)), "kern.log")
    assert (c.start, c.end, c.uncertain) == (utc(2026, 9, 2, 4, 5, 13, 123456), utc(2026, 9, 2, 4, 5, 15, 500000), None)


# RHEL 9 /var/log/messages: imjournal, no kernel stamp, dateext rotations
RHEL_OLD = f"""\
Aug 23 03:11:02 {HOST} kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 511
Aug 23 03:11:02 {HOST} kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue May 27 15:25:29 UTC 2025
Aug 30 03:40:01 {HOST} rsyslogd[1204]: [origin software="rsyslogd" swVersion="8.2310.0-4.el9" x-pid="1204" x-info="https://www.rsyslog.com"] rsyslogd was HUPed
"""
RHEL_CURRENT = f"""\
Aug 30 03:40:02 {HOST} systemd[1]: Started logrotate.service - Rotate log files.
Sep  1 10:00:00 {HOST} kernel: NVRM: The NVIDIA GPU 0000:3b:00.0#012NVRM: (PCI ID: 10de:20b5) installed in this system has#012NVRM: fallen off the bus and is not responding to commands.
Sep  1 10:00:01 {HOST} kernel: nvidia: probe of 0000:3b:00.0 failed with error -1
"""


def test_rhel_messages_with_dateext_rotations_and_an_escaped_multiline_entry(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/messages-20260830", RHEL_OLD, "2026-08-30T03:40:01+00:00")
    write(root, "/var/log/messages", RHEL_CURRENT, "2026-09-01T10:00:01+00:00")
    b = collect(root, tmp_path / "b")
    assert record(b, "/var/log/kern.log").status is Status.ABSENT
    assert record(b, "/var/log/syslog").status is Status.ABSENT  # no kern.log read: syslog is looked for
    lines = syslog.parse_stored(b.path("kernlog/messages.kernel").read_bytes())
    assert [ln.source_line for ln in lines] == [2, 3]
    # rsyslog's #012 is the journal entry's newline again
    assert lines[0].text.split("\n") == ["NVRM: The NVIDIA GPU 0000:3b:00.0",
                                         "NVRM: (PCI ID: 10de:20b5) installed in this system has",
                                         "NVRM: fallen off the bus and is not responding to commands."]
    r = kernlog.read(b, nodefacts("America/New_York"))
    c = cover(r, "kern.log")
    assert (c.start, c.end) == (utc(2026, 8, 23, 7, 11, 2), utc(2026, 9, 1, 14, 0, 1))  # EDT, UTC-4
    lost = [e for e in r.events if e.kind == "kernel.gpu-lost"]
    assert [(e.attrs["pci"], e.attrs["stage"], e.evidence["line"]) for e in lost] == [("0000:3b:00.0", "probe", 1)]
    assert lost[0].attrs["message"] == "\n".join(lines[0].text.split("\n"))
    assert [e.attrs["version"] for e in r.events if e.kind == "kernel.nvrm"] == ["570.158.01"]
    assert c.holes == () and c.reason.startswith("/var/log/kern.log absent; messages: 2 files read "
                                                 "(messages-20260830, messages), 4 kernel lines")


def test_a_year_boundary_is_read_backwards_from_the_files_mtime(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/kern.log.1", (
        f"Dec 30 22:00:00 {HOST} kernel: [  10.000000] usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"
        f"Dec 31 23:59:59 {HOST} kernel: [  11.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=77, name=train, "
        "Graphics Exception: ESR 0x404600=0x80000002\n"
        f"Jan  1 00:00:01 {HOST} kernel: [  12.000000] NVRM: Xid (PCI:0000:3b:00): 43, pid=77, name=train, Ch 00000008\n"),
        "2027-01-03T00:00:00+09:00")
    write(root, "/var/log/kern.log", f"Jan  3 09:00:00 {HOST} kernel: [  99.000000] nvidia-uvm: Loaded the UVM driver\n",
          "2027-01-03T09:00:00+09:00")
    b = collect(root, tmp_path / "b")
    tokyo = zone("Asia/Tokyo")
    lines = syslog.parse_stored(b.path("kernlog/kern.log.1.kernel").read_bytes())
    syslog.read_times(lines, datetime.fromisoformat("2027-01-03T00:00:00+09:00"), tokyo, False)
    assert [ln.at.astimezone(tokyo).year for ln in lines] == [2026, 2026, 2027]
    assert lines[1].at == utc(2026, 12, 31, 14, 59, 59) and lines[2].at == utc(2026, 12, 31, 15, 0, 1)
    c = cover(kernlog.read(b, nodefacts("Asia/Tokyo")), "kern.log")
    assert (c.start, c.end) == (utc(2026, 12, 30, 13), utc(2027, 1, 3, 0))
    # a last line dated after the mtime belongs to the year before (a file last written on 2 January)
    assert syslog.bsd_years(["Dec 31 23:00:00"], datetime(2027, 1, 2, 8)) == [2026]
    assert syslog.bsd_years(["Mar  1 00:00:00", "Feb  1 00:00:00", "Jan  1 00:00:00"], datetime(2027, 1, 2)) == \
        [2025, 2026, 2027]


def test_dst_fold_takes_the_occurrence_that_keeps_the_file_in_order(tmp_path):
    # Europe/Berlin leaves CEST on 2026-10-25: 03:00 CEST becomes 02:00 CET, 02:00..02:59 happens twice
    root = tmp_path / "root"
    write(root, "/var/log/kern.log", (
        f"Oct 25 02:10:00 {HOST} kernel: [ 100.000000] first pass through the folded hour\n"
        f"Oct 25 02:50:00 {HOST} kernel: [2500.000000] still CEST\n"
        f"Oct 25 02:05:00 {HOST} kernel: [4000.000000] second pass: CET\n"
        f"Mar 28 02:30:00 {HOST} kernel: [5000.000000] a wall time that never happened (spring forward, 2027)\n"),
        "2027-03-29T12:00:00+02:00")
    b = collect(root, tmp_path / "b")
    lines = syslog.parse_stored(b.path("kernlog/kern.log.kernel").read_bytes())
    syslog.read_times(lines, datetime.fromisoformat("2027-03-29T12:00:00+02:00"), zone("Europe/Berlin"), False)
    assert [(ln.at, ln.flags) for ln in lines] == [
        (utc(2026, 10, 25, 0, 10), ("dst-fold",)), (utc(2026, 10, 25, 0, 50), ("dst-fold",)),
        (utc(2026, 10, 25, 1, 5), ("dst-fold",)), (utc(2027, 3, 28, 1, 30), ("dst-gap",))]


def test_zone_less_times_on_a_node_of_unknown_zone_are_flagged_and_the_coverage_uncertain(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/kern.log", f"Sep  2 04:05:13 {HOST} kernel: [  5.000000] NVRM: loading NVIDIA UNIX x86_64 "
                                     "Kernel Module  570.158.01  Tue May 27 15:25:31 UTC 2025\n", "2026-09-02T05:00:00+00:00")
    b = collect(root, tmp_path / "b")
    nf = NodeFacts(tz_name="UTC (node zone unknown)", tz_unknown=True)
    lines = syslog.parse_stored(b.path("kernlog/kern.log.kernel").read_bytes())
    syslog.read_times(lines, datetime(2026, 9, 2, 5, tzinfo=timezone.utc), nf.tz, True)
    assert (lines[0].at, lines[0].flags) == (utc(2026, 9, 2, 4, 5, 13), ("tz-unknown",))
    c = cover(kernlog.read(b, nf), "kern.log")
    assert c.uncertain == "node time zone unknown: kern.log times without a zone (Mmm dd hh:mm:ss) uncertain by ±14 h"
    assert c.reason.endswith(c.uncertain)


def test_a_symlinked_kern_log_is_refused_and_nothing_is_read_through_it(tmp_path):
    root = tmp_path / "root"
    write(root, "/etc/shadow", "root:$6$secret:19000:0:99999:7:::\n")
    write(root, "/var/log/kern.log.1", f"Sep  1 00:00:00 {HOST} kernel: [ 1.0] ok\n", "2026-09-01T00:00:00+00:00")
    (root / "var/log/kern.log").symlink_to("/etc/shadow")
    b = collect(root, tmp_path / "b")
    rec = record(b, "/var/log/kern.log")
    assert (rec.status, rec.path) == (Status.ERROR, None)
    assert rec.message == "symlink refused: /var/log/kern.log is a link, and links are not followed"
    assert record(b, "/var/log/kern.log.1").status is Status.COLLECTED
    assert "secret" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "b").rglob("*") if p.is_file())
    c = cover(kernlog.read(b, nodefacts()), "kern.log")
    assert "/var/log/kern.log error: symlink refused" in c.reason and c.end == utc(2026, 9, 1)


def test_an_unreadable_kern_log_is_recorded_as_unreadable_never_absent():
    # root ignores file modes, so the collection runs in a child as nobody (65534)
    from privdrop import run_as_nobody
    work = Path(tempfile.mkdtemp(prefix="gf-kernlog-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)
        root = work / "root"
        write(root, "/var/log/kern.log", f"Sep  2 04:05:13 {HOST} kernel: [ 9.0] NVRM: Xid (PCI:0000:3b:00): 79, "
                                         "pid=1, name=x, GPU has fallen off the bus.\n", "2026-09-02T05:00:00+00:00")
        write(root, "/var/log/kern.log.1", f"Aug 30 10:00:00 {HOST} kernel: [ 1.0] Linux version 6.1.0\n",
              "2026-08-30T10:00:00+00:00")
        for p in [root, *root.rglob("*"), work / "out"]:
            p.mkdir(exist_ok=True) if not p.exists() else None
            p.chmod(0o777 if p.name == "out" else 0o755 if p.is_dir() else 0o644)
        (root / "var/log/kern.log").chmod(0o600)  # as Ubuntu's 640 syslog:adm is to anyone else
        run_as_nobody(collect, root, work / "out/b")  # in a child as uid 65534
        b = Bundle.open(work / "out/b")
        rec = record(b, "/var/log/kern.log")
        assert (rec.status, rec.errno, rec.path) == (Status.UNREADABLE, 13, None)
        assert record(b, "/var/log/kern.log.1").status is Status.COLLECTED
        c = cover(kernlog.read(b, nodefacts()), "kern.log")
        assert "/var/log/kern.log unreadable (EACCES: Permission denied)" in c.reason
        assert (c.start, c.end) == (utc(2026, 8, 30, 10), utc(2026, 8, 30, 10))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_bounds_keep_the_newest_text_of_a_plain_file_and_the_start_of_a_gz(tmp_path, monkeypatch):
    monkeypatch.setattr(kfiles, "FILE_LIMIT", 16384)
    monkeypatch.setattr(kfiles, "LINE_LIMIT", 300)
    root = tmp_path / "root"
    body = "".join(f"Sep  1 10:{i // 60:02d}:{i % 60:02d} {HOST} kernel: [{i:6d}.000000] line {i:04d}\n"
                   for i in range(200))
    write(root, "/var/log/kern.log", body + f"Sep  1 11:00:00 {HOST} kernel: " + "x" * 10_000 + "\n"
          + f"Sep  1 11:00:01 {HOST} kernel: [ 9999.000000] after the long line\n", "2026-09-01T11:00:01+00:00")
    write(root, "/var/log/kern.log.2.gz", body * 2, "2026-08-31T00:00:00+00:00")
    b = collect(root, tmp_path / "b")
    cur = record(b, "/var/log/kern.log")
    assert cur.status is Status.TRUNCATED
    assert any(n.startswith("head not copied: the first ") and n.endswith("line numbers count from there")
               for n in cur.notes)
    assert "1 lines longer than 300 bytes were cut to their first 300 bytes" in cur.notes
    kept = b.path("kernlog/kern.log.kernel").read_text().splitlines()
    assert kept[-1].endswith("after the long line") and len(kept[-2].split("\t", 1)[1]) == 300
    gz = record(b, "/var/log/kern.log.2.gz")
    assert gz.status is Status.TRUNCATED and "truncated: only the first 16384 bytes (decompressed) were read" in gz.notes
    assert b.path("kernlog/kern.log.2.gz.kernel").read_text().splitlines()[0].split("\t")[0] == "1"
    c = cover(kernlog.read(b, nodefacts()), "kern.log")
    [hole] = c.holes
    assert "the end of kern.log.2.gz was not read" in hole.reason and "kern.log.1 missing" in hole.reason
    assert "bytes of kern.log were not read" in hole.reason


def test_bad_gzip_files_and_a_spent_budget_are_recorded(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/kern.log.3.gz").write_bytes(b"this is not gzip\n")
    (root / "var/log/kern.log.2.gz").write_bytes(gzip.compress(f"Sep  1 00:00:00 {HOST} kernel: [1.0] a\n".encode())[:-8])
    (root / "var/log/kern.log.4.gz").write_bytes(gzip.compress(b"") * 3000)  # empty members
    monkeypatch.setattr(kfiles, "GZ_COMPRESSED_LIMIT", 1000)
    b = collect(root, tmp_path / "b")
    bad = record(b, "/var/log/kern.log.3.gz")
    assert bad.status is Status.ERROR and bad.message.startswith("not a gzip stream after 0 decompressed bytes")
    cut = record(b, "/var/log/kern.log.2.gz")
    assert cut.status is Status.TRUNCATED and any("the gzip stream ends early" in n for n in cut.notes)
    assert b.path("kernlog/kern.log.2.gz.kernel").read_text() == f"1\tSep  1 00:00:00 {HOST} kernel: [1.0] a\n"
    empty = record(b, "/var/log/kern.log.4.gz")
    assert empty.status is Status.ERROR and empty.message == "stopped after reading 1000 compressed bytes"
    spent = collect(root, tmp_path / "b2", deadline=time.monotonic() - 1)
    assert record(spent, "/var/log/kern.log.2.gz").message == "not read: the time budget (--time-budget) was spent"


def test_credentials_in_kernel_lines_are_redacted_unless_no_redact(tmp_path):
    root = tmp_path / "root"
    line = f"Sep  2 04:05:13 {HOST} kernel: [  7.0] audit: type=1400 msg=test token=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
    write(root, "/var/log/kern.log", line, "2026-09-02T05:00:00+00:00")
    b = collect(root, tmp_path / "b")
    text = b.path("kernlog/kern.log.kernel").read_text()
    assert "ghp_abc" not in text and "token=<redacted hmac:" in text
    assert any(n.startswith("credentials redacted in 1 lines") for n in record(b, "/var/log/kern.log").notes)
    raw = collect(root, tmp_path / "b2", redact=False)
    assert raw.path("kernlog/kern.log.kernel").read_text() == "1\t" + line


def test_hostile_bytes_and_a_hand_edited_files_json_read_without_a_traceback(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/kern.log", b"\xff\xfe\x00garbage\n" + f"Sep  2 04:05:13 {HOST} kernel: ".encode()
          + b"\x1b[31m\xc3\x28 NVRM: bad utf-8\n" + b"Feb 30 10:00:00 h kernel: no such day\n", "2026-09-02T05:00:00+00:00")
    b = collect(root, tmp_path / "b")
    lines = syslog.parse_stored(b.path("kernlog/kern.log.kernel").read_bytes())
    assert [ln.source_line for ln in lines] == [2, 3] and "\ufffd" in lines[0].text
    r = kernlog.read(b, nodefacts())
    assert cover(r, "kern.log").start == utc(2026, 9, 2, 4, 5, 13)  # the day that does not exist has no time
    w = BundleWriter(tmp_path / "forged")
    w.write_json("kernlog/files.json", {"files": [{"family": "kern.log", "source": 7, "path": ["x"]},
                                                  {"family": "kern.log", "source": "/var/log/kern.log", "path": "../x"},
                                                  "text", None], "kmsg": {"path": 3, "suspended_s": "x"}},
                 source="test", method="test")
    w.write_bytes("kernlog/kmsg", b"6,1,2,-;\\xzz\n  =\nnot a record\n", source="test", method="test")
    w.finish()
    r = kernlog.read(Bundle.open(tmp_path / "forged"), nodefacts())
    assert r.events == [] and cover(r, "kern.log").start is None and cover(r, "kmsg").start is None


# the driver's multi-line messages as imklog writes them: one line per printk line, each with the record's stamp
PROBE = [f"Sep  3 08:00:05 {HOST} kernel: [    5.021731] NVRM: The NVIDIA GPU 0000:3b:00.0",
         f"Sep  3 08:00:05 {HOST} kernel: [    5.021731] NVRM: (PCI ID: 10de:2330) installed in this system has",
         f"Sep  3 08:00:05 {HOST} kernel: [    5.021731] NVRM: fallen off the bus and is not responding to commands.",
         f"Sep  3 08:00:05 {HOST} kernel: [    5.021902] nvidia: probe of 0000:3b:00.0 failed with error -1",
         f"Sep  3 08:00:05 {HOST} kernel: [    5.021930] NVRM: The NVIDIA probe routine failed for 1 device(s).",
         f"Sep  3 08:00:05 {HOST} kernel: [    5.021932] NVRM: None of the NVIDIA devices were initialized."]
MISMATCH_575 = [f"Sep  3 09:12:44 {HOST} kernel: [ 4331.558120] NVRM: API mismatch: the client 'nvidia-smi' (pid 90211)",
                f"Sep  3 09:12:44 {HOST} kernel: [ 4331.558120] NVRM: has the version 575.57.08, but this kernel module has",
                f"Sep  3 09:12:44 {HOST} kernel: [ 4331.558120] NVRM: the version 570.158.01.  Please make sure that this",
                f"Sep  3 09:12:44 {HOST} kernel: [ 4331.558120] NVRM: kernel module and all NVIDIA driver components",
                f"Sep  3 09:12:44 {HOST} kernel: [ 4331.558120] NVRM: have the same version."]
MISMATCH_570 = [f"Sep  3 09:20:01 {HOST} kernel: [ 4768.001002] NVRM: API mismatch: the client has the version 570.172.08, but",
                f"Sep  3 09:20:01 {HOST} kernel: [ 4768.001002] NVRM: this kernel module has the version 570.158.01.  Please",
                f"Sep  3 09:20:01 {HOST} kernel: [ 4768.001002] NVRM: make sure that this kernel module and all NVIDIA driver",
                f"Sep  3 09:20:01 {HOST} kernel: [ 4768.001002] NVRM: components have the same version."]
# mm/oom_kill.c's lines of one memcg OOM kill of a container (the shape this machine's own kernel printed)
CID = "4f9c2a7e1b3d5f6a8c0e2b4d6f8a0c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a"
OOM = [f"Sep  3 10:01:17 {HOST} kernel: [ 5444.911203] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
       "oom_score_adj=999",
       f"Sep  3 10:01:17 {HOST} kernel: [ 5444.911388] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-"
       f"containerd-{CID}.scope,mems_allowed=0-1,oom_memcg=/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
       "pod7d1c.slice,task_memcg=/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7d1c.slice/cri-"
       f"containerd-{CID}.scope,task=python3,pid=31337,uid=1000",
       f"Sep  3 10:01:17 {HOST} kernel: [ 5444.911420] Memory cgroup out of memory: Killed process 31337 (python3) "
       "total-vm:27612004kB, anon-rss:15990340kB, file-rss:70112kB, shmem-rss:0kB, UID:1000 pgtables:32212kB "
       "oom_score_adj:999"]
AER = f"Sep  3 11:00:00 {HOST} kernel: [ 8000.100000] pcieport 0000:3a:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:3b:00.0"


def test_multiline_driver_messages_are_joined_and_oom_lines_make_one_kill(tmp_path):
    root = tmp_path / "root"
    write(root, "/var/log/kern.log", "\n".join(PROBE + MISMATCH_575 + MISMATCH_570 + OOM + [AER]) + "\n",
          "2026-09-03T11:00:00+00:00")
    r = kernlog.read(collect(root, tmp_path / "b"), nodefacts())
    got = [(e.kind, e.evidence["line"]) for e in r.events]
    assert got == [("kernel.gpu-lost", 1), ("kernel.nvrm", 5), ("kernel.nvrm", 6), ("kernel.api-mismatch", 7),
                   ("kernel.api-mismatch", 12), ("kernel.oom-kill", 18), ("kernel.pcie-error", 19)]
    lost, failed, none, new, old, oom, aer = r.events
    assert lost.attrs == {"pci": "0000:3b:00.0", "stage": "probe",
                          "message": "\n".join(ln.split("kernel: ", 1)[1] for ln in PROBE[:3])}
    assert (failed.attrs["what"], none.attrs["what"]) == ("init-failed", "init-failed")
    assert new.attrs == {"client": "nvidia-smi", "client_pid": 90211, "client_version": "575.57.08",
                         "kernel_version": "570.158.01", "message": "\n".join(ln.split("kernel: ", 1)[1] for ln in MISMATCH_575)}
    assert (old.attrs["client"], old.attrs["client_version"], old.attrs["kernel_version"]) == \
        (None, "570.172.08", "570.158.01")
    assert (oom.attrs["pid"], oom.attrs["process"], oom.attrs["constraint"], oom.attrs["container_id"]) == \
        (31337, "python3", "CONSTRAINT_MEMCG", CID)
    assert oom.attrs["message"].count("\n") == 2 and oom.at == utc(2026, 9, 3, 10, 1, 17)
    assert (aer.attrs["pci"], aer.attrs["severity"]) == ("0000:3b:00.0", "Uncorrected (Non-Fatal)")


def _ring_bundle(tmp_path: Path, kern: str, kmsg: bytes) -> Bundle:
    """A bundle as a live collection writes it: kern.log's kernel lines and the ring buffer's records."""
    root = tmp_path / "root"
    write(root, "/var/log/kern.log", kern, "2026-09-02T04:10:00+00:00")
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=root, writer=w)
    entries = kfiles.acquire(ctx)
    w.write_bytes(ring.STORED, kmsg, ring.KMSG, "read")
    entry = {"source": ring.KMSG, "path": ring.STORED, "records": 6, "kernel_records": 5, "user_records": 1, "bytes": len(kmsg),
             "overwritten": 0, "read_at": "2026-09-02T04:10:00Z", "boot_time": "2026-09-02T04:03:33Z", "boot_id": None,
             "suspended_s": 0.0}
    w.write_json(kernlog.META, {"files": entries, "kmsg": entry}, source="test", method="test")
    w.meta["node_facts"] = {"boot_time": "2026-09-02T04:03:33Z"}
    w.finish()
    return Bundle.open(tmp_path / "b")


def test_kmsg_records_the_kernel_wrote_become_events_once_and_user_written_ones_never(tmp_path):
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731466, name=python3, GPU has fallen off the bus."
    kmsg = (f"4,1180,100000000,-;{xid}\n"  # also in kern.log: read from there
            "6,1181,110000000,-;NVRM: The NVIDIA GPU 0000:3b:00.0\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"
            "6,1182,110000000,+;NVRM: (PCI ID: 10de:2330) installed in this system has\n"
            "6,1183,110000000,+;NVRM: fallen off the bus and is not responding to commands.\n"
            f"12,1184,120000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=forged, DBE (0x1,0x0).\n"  # user space
            "3,1185,130000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=7, name=train, An uncorrectable double bit error"
            " (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0.\n").encode()
    probe = "\n".join(f"Sep  2 04:03:38 {HOST} kernel: [    5.000000] {ln.split('kernel: [    5.021731] ')[1]}"
                      for ln in PROBE[:3])  # the boot's probe message: in kern.log and, one record, in kmsg
    kmsg = ("6,0,5000000,-;" + "\\x0a".join(ln.split("] ", 1)[1] for ln in PROBE[:3]) + "\n").encode() + kmsg
    b = _ring_bundle(tmp_path, f"{probe}\nSep  2 04:05:13 {HOST} kernel: [  100.000000] {xid}\n", kmsg)
    r = kernlog.read(b, node.facts(b))
    assert [(e.source, e.kind, e.at, e.evidence["line"]) for e in r.events] == [
        ("kern.log", "kernel.gpu-lost", utc(2026, 9, 2, 4, 3, 38), 1),
        ("kern.log", "kernel.xid", utc(2026, 9, 2, 4, 5, 13), 4),
        ("kmsg", "kernel.gpu-lost", utc(2026, 9, 2, 4, 5, 23), 3),
        ("kmsg", "kernel.xid", utc(2026, 9, 2, 4, 5, 43), 9)]
    lost, dbe = r.events[2:]
    assert (lost.attrs["stage"], lost.attrs["pci"], lost.original) == ("probe", "0000:3b:00.0", "6,1181,110000000,-")
    assert (dbe.attrs["xid"], dbe.attrs["process"], dbe.evidence["artifact"]) == (48, "train", "kernlog/kmsg")
    c = cover(r, "kmsg")
    assert (c.start, c.end) == (utc(2026, 9, 2, 4, 3, 38), utc(2026, 9, 2, 4, 10))
    assert "the boot's first record (sequence 0: none overwritten)" in c.reason and c.uncertain is None


def test_rotation_names_sort_oldest_first():
    names = ["messages", "messages-20260830", "messages-20260823.gz", "messages.1", "messages.bak", "messages.gz"]
    assert sorted((n for n in names if kfiles.rotation_key(n, "messages")), key=lambda n: kfiles.rotation_key(n, "messages")) \
        == ["messages-20260823.gz", "messages-20260830", "messages.1", "messages"]


# -- the live ring buffer --------------------------------------------------------------------------
def test_the_real_ring_buffer_of_this_machine_is_read_with_sane_times_and_sequence_numbers(tmp_path):
    marker = f"gpu-forensics-test {os.getpid()}-{time.time_ns()}"
    with open("/dev/kmsg", "w") as f:  # as root: written with facility LOG_USER, level 6
        f.write(f"<6>{marker}\n")
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=Path("/"), writer=w)
    node.acquire(ctx)  # the boot time (/proc/stat btime) the record times count from
    kernlog.acquire(ctx)
    w.meta["node_facts"] = ctx.node.manifest()  # as forensics.ops.pipeline.collect records them
    w.finish()
    b = Bundle.open(tmp_path / "b")
    rec = record(b, "/dev/kmsg")
    assert rec.status is Status.COLLECTED and rec.path == "kernlog/kmsg"
    meta = json.loads(b.path("kernlog/files.json").read_text())["kmsg"]
    records = ring.parse(b.path("kernlog/kmsg").read_bytes())
    assert len(records) == meta["records"] > 10 and meta["kernel_records"] + meta["user_records"] == meta["records"]
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [r.usec for r in records] == sorted(r.usec for r in records)
    [mine] = [r for r in records if r.text == marker]
    assert (mine.facility, mine.level, mine.seq) == (1, 6, seqs[-1] if records[-1].text == marker else mine.seq)
    nf = node.facts(b)
    read_at = datetime.fromisoformat(meta["read_at"].replace("Z", "+00:00"))
    assert nf.boot_time <= mine.at(nf.boot_time) <= read_at
    # the kernel's first records of this boot: "Linux version ..." at 0 s, unless the ring wrapped
    if records[0].seq == 0:
        assert records[0].facility == 0 and records[0].text.startswith("Linux version ")
    c = cover(kernlog.read(b, nf), "kmsg")
    assert c.start == records[0].at(nf.boot_time) and c.end == read_at
    assert f"sequence {records[0].seq}" in c.reason


def _oom_kill_in_a_container_cgroup(cid: str) -> subprocess.Popen:
    """Run a process that outgrows a 32 MiB limit in a fresh memory cgroup of this machine named as containerd's
    systemd driver names a container's (``.../cri-containerd-<id>.scope``); return it once the kernel killed it."""
    v1 = Path("/sys/fs/cgroup/memory")
    parent = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / f"gf-kernlog-{os.getpid()}"
    scope = parent / f"cri-containerd-{cid}.scope"
    parent.mkdir()
    try:
        if not v1.is_dir():  # cgroup v2: the memory controller for the children of the new cgroup
            (parent / "cgroup.subtree_control").write_text("+memory")
        scope.mkdir()
        try:
            limits = (("memory.limit_in_bytes", "memory.memsw.limit_in_bytes") if v1.is_dir()
                      else ("memory.max", "memory.swap.max"))
            (scope / limits[0]).write_text(str(32 << 20))
            if (scope / limits[1]).exists():  # no escape into swap
                (scope / limits[1]).write_text(str(32 << 20) if v1.is_dir() else "0")
            child = subprocess.Popen(["/usr/bin/python3", "-c", "x = b'x' * (256 << 20)"],
                                     preexec_fn=lambda: (scope / "cgroup.procs").write_text(str(os.getpid())))
            child.wait(timeout=60)
            return child
        finally:
            scope.rmdir()
    finally:
        parent.rmdir()


def test_a_real_oom_kill_on_this_machine_is_read_from_its_ring_buffer(tmp_path):
    cid = os.urandom(32).hex()
    child = _oom_kill_in_a_container_cgroup(cid)
    assert child.returncode == -9  # SIGKILL from the OOM killer
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=Path("/"), writer=w)
    node.acquire(ctx)
    kernlog.acquire(ctx)
    w.meta["node_facts"] = ctx.node.manifest()
    w.finish()
    b = Bundle.open(tmp_path / "b")
    [oom] = [e for e in kernlog.read(b, node.facts(b)).events if e.kind == "kernel.oom-kill"
             and e.attrs["container_id"] == cid]
    cgroup = f"/gf-kernlog-{os.getpid()}/cri-containerd-{cid}.scope"
    assert (oom.source, oom.attrs["pid"], oom.attrs["process"], oom.attrs["constraint"], oom.attrs["task_memcg"],
            oom.attrs["oom_memcg"]) == ("kmsg", child.pid, "python3", "CONSTRAINT_MEMCG", cgroup, cgroup)
    assert f"Killed process {child.pid} (python3)" in oom.attrs["message"]
    assert abs(oom.at - datetime.now(timezone.utc)).total_seconds() < 120  # btime + stamp: approximate, not wrong
