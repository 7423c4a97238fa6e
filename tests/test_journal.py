"""The journal source, read like the incident: real .journal files built by systemd-journal-remote
(samples/journalbuild.py), collected through acquire() into a real bundle, read back with read().

Wordings and fields follow docs/sources.md "Cases" F1 and "systemd: the manager reload message,
by version"; the corpus tests read ../shared/real-inputs files in place.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from journalbuild import build_journal, export_entry
from privdrop import run_as_nobody

from collectors import journal
from collectors.journal import journalctl, reader, selection
from forensics.artifact import Status
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext
from forensics.events import KINDS, NodeFacts

UTC = timezone.utc
MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"
BOOT = "6c7c6013a26343b29e964691ff25d04c"
BOOT2 = "ec25d6795f0645619ddac9afdef453ee"
T0 = datetime(2026, 7, 17, 12, 0, 0, tzinfo=UTC)
SNAPD_CALLER = "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)..."  # 253-255
SNAPD_CALLER_256 = "Reload requested from client PID 48211 ('systemctl') (unit snapd.service)..."
BOOT_NO_RTC = "27acae2fe35a40ac93f9c7732c0b8e59"
BOOTED = {BOOT: T0 - timedelta(days=3), BOOT2: T0 + timedelta(days=1),
          BOOT_NO_RTC: datetime(1970, 1, 1, tzinfo=UTC)}


def usec(at: datetime) -> int:
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def entry(at: datetime, pid: int, ident: str, message: str, boot: str = BOOT, **fields) -> bytes:
    """One export-format entry with the fields journald always writes."""
    d = {"__REALTIME_TIMESTAMP": usec(at), "__MONOTONIC_TIMESTAMP": usec(at) - usec(BOOTED[boot]),
         "_BOOT_ID": boot, "_MACHINE_ID": MACHINE, "_HOSTNAME": "gpu-node-7", "_TRANSPORT": "journal",
         "_PID": pid, "_UID": 0, "_GID": 0, "SYSLOG_FACILITY": 3, "PRIORITY": 6,
         "SYSLOG_IDENTIFIER": ident, "MESSAGE": message}
    d.update(fields)
    return export_entry(d)


def pid1(at, message, func="invoke_main_loop", boot=BOOT, pid=1, **fields) -> bytes:
    """A manager line as PID 1 writes it (CODE_FUNC invoke_main_loop for main.c lines)."""
    code_file = {"invoke_main_loop": "src/core/main.c", "log_caller": "src/core/dbus-manager.c"}.get(
        func, "src/core/unit.c")
    fields = {"_COMM": "systemd", "_EXE": "/usr/lib/systemd/systemd", "_SYSTEMD_UNIT": "init.scope",
              "_SYSTEMD_CGROUP": "/init.scope", "CODE_FILE": code_file, "CODE_LINE": 1961, "CODE_FUNC": func,
              **fields}
    return entry(at, pid, "systemd", message, boot=boot, **fields)


def caller(at, message, **fields) -> bytes:
    return pid1(at, message, func="log_caller", CODE_LINE=1597, **fields)


def service(at, pid, unit, comm, message, ident=None, **fields) -> bytes:
    return entry(at, pid, ident or comm, message, _COMM=comm, _SYSTEMD_UNIT=unit,
                 _SYSTEMD_CGROUP=f"/system.slice/{unit}", **fields)


def host_with(tmp_path: Path, *entries: bytes, name: str = "system.journal") -> Path:
    root = tmp_path / "host"
    build_journal(b"".join(entries), root / "var/log/journal" / MACHINE / name)
    return root


def collect(tmp_path: Path, root: Path, since=None, journal_dirs=()) -> Bundle:
    out = tmp_path / f"bundle{len(list(tmp_path.glob('bundle*')))}"
    writer = BundleWriter(out)
    journal.acquire(CollectContext(root=root, writer=writer,
                                   options={"since": since, "journal_dirs": list(journal_dirs)}))
    writer.finish()
    return Bundle.open(out)


def analyse(bundle: Bundle):
    reading = journal.read(bundle, NodeFacts())
    for ev in reading.events:  # every event keeps to the vocabulary and points at a stored entry
        assert set(ev.attrs) == set(KINDS[ev.kind].attrs), ev
        assert ev.source == "journal" and ev.original == ev.at.isoformat().replace("+00:00", "Z")
        assert ev.evidence["artifact"] == "journal/entries.jsonl" and ev.evidence["line"] >= 1
    return reading


def kinds(reading, kind):
    return [e for e in reading.events if e.kind == kind]


def stored(bundle: Bundle) -> list[dict]:
    return [json.loads(line) for line in bundle.path("journal/entries.jsonl").read_text().splitlines()]


# -- each wording of the manager's reload lines ------------------------------------------------------
S = timedelta(seconds=1)
WORDINGS = [
    # id, lines (offset seconds, message, CODE_FUNC), expected (kind, at offset, pid, comm, unit), version
    ("252-reloading", [(0, "Reloading.", "invoke_main_loop")],
     [("journal.reload", 0, None, None, None)], "<=253.1"),
    ("253.0-caller-then-reloading.",
     [(0, "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)...", "log_caller"),
      (0.02, "Reloading.", "invoke_main_loop")],
     [("journal.reload", 0, 48211, "systemctl", "snapd.service")], "253-255"),
    ("255-caller-dots-finished",
     [(0, "Reloading requested from client PID 18951 ('systemctl') (unit snapd.service)...", "log_caller"),
      (0.001, "Reloading...", "invoke_main_loop"), (0.26, "Reloading finished in 258 ms.", "invoke_main_loop")],
     [("journal.reload", 0, 18951, "systemctl", "snapd.service")], "253-255"),
    ("253.2-dots-alone", [(0, "Reloading...", "invoke_main_loop"),
                          (0.3, "Reloading finished in 301 ms.", "invoke_main_loop")],
     [("journal.reload", 0, None, None, None)], ">=253.2"),
    ("comm-missing",
     [(0, "Reloading requested from client PID 7731 (unit apt-daily-upgrade.service)...", "log_caller"),
      (0.01, "Reloading...", "invoke_main_loop")],
     [("journal.reload", 0, 7731, None, "apt-daily-upgrade.service")], "253-255"),
    ("unit-missing",
     [(0, "Reloading requested from client PID 7731 ('systemctl')...", "log_caller"),
      (0.01, "Reloading...", "invoke_main_loop")],
     [("journal.reload", 0, 7731, "systemctl", None)], "253-255"),
    ("256-reload-requested",
     [(0, "Reload requested from client PID 48211 ('systemctl') (unit snapd.service)...", "log_caller"),
      (0.01, "Reloading...", "invoke_main_loop"), (0.4, "Reloading finished in 390 ms.", "invoke_main_loop")],
     [("journal.reload", 0, 48211, "systemctl", "snapd.service")], ">=256"),
    ("259-both-missing", [(0, "Reload requested from client PID 99...", "manager_log_caller"),
                          (0.01, "Reloading...", "invoke_main_loop")],
     [("journal.reload", 0, 99, None, None)], ">=256"),
    ("reexecuting-alone", [(0, "Reexecuting.", "invoke_main_loop")],
     [("journal.reexec", 0, None, None, None)], None),
    ("255-reexecuting-requested",
     [(0, "Reexecuting requested from client PID 3301 ('systemctl') (unit apt-daily-upgrade.service)...",
       "log_caller"), (0.01, "Reexecuting.", "invoke_main_loop")],
     [("journal.reexec", 0, 3301, "systemctl", "apt-daily-upgrade.service")], "253-255"),
    ("256-reexecution-requested",
     [(0, "Reexecution requested from client PID 3301 ('systemctl') (unit needrestart.service)...", "log_caller"),
      (0.01, "Reexecuting.", "invoke_main_loop")],
     [("journal.reexec", 0, 3301, "systemctl", "needrestart.service")], ">=256"),
]


@pytest.mark.parametrize("lines,expected,version", [w[1:] for w in WORDINGS], ids=[w[0] for w in WORDINGS])
def test_each_wording_gives_one_event_per_reload(tmp_path, lines, expected, version):
    entries = [pid1(T0 + s * S, msg, func=func, PRIORITY=5 if msg.startswith("Reload requested") else 6)
               for s, msg, func in lines]
    reading = analyse(collect(tmp_path, host_with(tmp_path, *entries)))
    got = [(e.kind, (e.at - T0).total_seconds(), e.attrs["requester_pid"], e.attrs["requester_comm"],
            e.attrs["requester_unit"]) for e in reading.events if e.kind in ("journal.reload", "journal.reexec")]
    assert got == expected
    first = [e for e in reading.events if e.kind in ("journal.reload", "journal.reexec")][0]
    assert first.attrs["wording"] == lines[0][1]
    assert reading.facts["systemd_version"] == version


def test_newest_banner_gives_the_version(tmp_path):
    # at boot PID 1 writes its banner through kmsg before journald runs: no _PID, only SYSLOG_PID=1
    boot_banner = export_entry({
        "__REALTIME_TIMESTAMP": usec(T0 - timedelta(days=3)), "__MONOTONIC_TIMESTAMP": 1_047_589,
        "_BOOT_ID": BOOT, "_MACHINE_ID": MACHINE, "_TRANSPORT": "kernel", "PRIORITY": 6, "SYSLOG_FACILITY": 3,
        "SYSLOG_IDENTIFIER": "systemd", "SYSLOG_PID": 1,
        "MESSAGE": "systemd 252.39-1~deb12u2 running in system mode (+PAM +AUDIT +SELINUX +APPARMOR +IMA)"})
    root = host_with(tmp_path, boot_banner,
                     caller(T0, "Reexecuting requested from client PID 3301 ('systemctl') "
                                "(unit apt-daily-upgrade.service)..."),
                     pid1(T0 + S / 10, "Reexecuting."),
                     pid1(T0 + S, "systemd 255.4-1ubuntu8 running in system mode (+PAM +AUDIT +SELINUX +APPARMOR)",
                          func="log_execution_mode"))
    reading = analyse(collect(tmp_path, root))
    assert [(e.at, e.attrs["systemd_version"]) for e in kinds(reading, "journal.banner")] == [
        (T0 - timedelta(days=3), "252.39-1~deb12u2"), (T0 + S, "255.4-1ubuntu8")]
    assert reading.facts["systemd_version"] == "255.4-1ubuntu8"
    assert reading.facts["systemd_version_basis"] == "start-up banner at 2026-07-17T12:00:01Z"
    [reexec] = kinds(reading, "journal.reexec")
    assert (reexec.at, reexec.attrs["requester_unit"]) == (T0, "apt-daily-upgrade.service")


def test_user_manager_lines_are_not_reloads(tmp_path):
    # systemd --user (PID 1234) logs the same words on `systemctl --user daemon-reload`
    root = host_with(tmp_path,
                     pid1(T0, "Reloading.", pid=1234, _SYSTEMD_UNIT="user@1000.service", _UID=1000),
                     pid1(T0 + S, "Reload requested from client PID 5555 ('systemctl') (unit app.service)...",
                          func="log_caller", pid=1234, _SYSTEMD_UNIT="user@1000.service", _UID=1000),
                     pid1(T0 + 2 * S, "Reloading...", pid=1234, _SYSTEMD_UNIT="user@1000.service"),
                     service(T0 + 3 * S, 880, "cron.service", "cron", "pam_unix(cron:session): session closed"))
    bundle = collect(tmp_path, root)
    reading = analyse(bundle)
    assert not [e for e in reading.events if e.kind.startswith("journal.re")]
    assert all("pid1" not in e["_GF_SELECTED_BY"] for e in stored(bundle))
    assert reading.facts["systemd_version"] is None


def test_caller_reloading_and_finished_are_one_reload(tmp_path):
    t = T0 + timedelta(microseconds=123456)
    root = host_with(tmp_path,
                     service(t - 10 * S, 1848, "snapd.service", "snapd", "storehelpers.go:1044: cannot refresh"),
                     caller(t, "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)..."),
                     pid1(t + timedelta(microseconds=900), "Reloading..."),
                     pid1(t + timedelta(milliseconds=258), "Reloading finished in 258 ms."))
    bundle = collect(tmp_path, root)
    reading = analyse(bundle)
    [reload] = kinds(reading, "journal.reload")
    assert reload.at == t
    assert reload.attrs == {"wording": SNAPD_CALLER,
                            "requester_pid": 48211, "requester_comm": "systemctl", "requester_unit": "snapd.service"}
    assert reload.summary == "daemon-reload requested by snapd.service (PID 48211, systemctl)"
    assert reload.original == "2026-07-17T12:00:00.123456Z"
    lines = stored(bundle)
    n = reload.evidence["line"]
    assert lines[n - 1]["__CURSOR"] == reload.evidence["cursor"]
    assert lines[n - 1]["CODE_FUNC"] == "log_caller"
    [done] = kinds(reading, "journal.reload-finished")
    assert done.attrs == {"duration_ms": 258} and done.at == t + timedelta(milliseconds=258)


def test_two_reloading_lines_a_second_apart_are_two_reloads(tmp_path):
    # influxdata/telegraf#12610 (docs/sources.md "Cases" C04): one package upgrade, two `Reloading.`
    root = host_with(tmp_path, pid1(T0, "Reloading."), pid1(T0 + S, "Reloading."),
                     pid1(T0 + 2 * S, "apt-daily-upgrade.service: Succeeded.", func="unit_log_success",
                          UNIT="apt-daily-upgrade.service"))
    reading = analyse(collect(tmp_path, root))
    assert [e.at for e in kinds(reading, "journal.reload")] == [T0, T0 + S]
    [unit] = kinds(reading, "journal.unit")
    assert unit.attrs == {"unit": "apt-daily-upgrade.service", "action": "deactivated",
                          "message": "apt-daily-upgrade.service: Succeeded."}


def test_sighup_is_the_reload_requester(tmp_path):
    root = host_with(tmp_path, pid1(T0, "Received SIGHUP from PID 4242 (kill).", func="manager_dispatch_signal_fd"),
                     pid1(T0 + timedelta(milliseconds=3), "Reloading."))
    reading = analyse(collect(tmp_path, root))
    [hup] = kinds(reading, "journal.sighup")
    assert hup.attrs == {"sender_pid": 4242, "sender_comm": "kill"} and hup.at == T0
    [reload] = kinds(reading, "journal.reload")
    assert (reload.at, reload.attrs["requester_pid"], reload.attrs["requester_comm"],
            reload.attrs["requester_unit"]) == (T0, 4242, "kill", None)
    assert reload.summary == "daemon-reload on SIGHUP from PID 4242, kill"


def test_requester_window_keeps_what_ran_just_before(tmp_path):
    root = host_with(
        tmp_path,
        service(T0 - timedelta(hours=2), 1848, "snapd.service", "snapd", "snapd 2.63 starting"),
        service(T0 - 10 * S, 1848, "snapd.service", "snapd", "Refreshing snap \"core22\""),
        entry(T0 - 20 * S, 5120, "sudo", "  ops : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/usr/bin/systemctl "
              "daemon-reload", _COMM="sudo", _SYSTEMD_UNIT="session-12.scope"),
        entry(T0 - 19 * S, 5121, "sudo", "  ops : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/usr/bin/ls",
              _COMM="sudo", _SYSTEMD_UNIT="session-12.scope"),
        entry(T0 - 1 * S, 48211, "systemctl", "requester's own line", _COMM="systemctl",
              _SYSTEMD_UNIT="snapd.service"),
        service(T0 - 5 * S, 777, "cron.service", "cron", "unrelated"),
        caller(T0, "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)..."),
        pid1(T0 + timedelta(milliseconds=1), "Reloading..."),
        service(T0 + 60 * S, 1848, "snapd.service", "snapd", "after the window"))
    bundle = collect(tmp_path, root)
    reading = analyse(bundle)
    got = [(e.at, e.attrs["pid"], e.attrs["comm"], e.attrs["unit"], e.attrs["identifier"], e.attrs["message"])
           for e in kinds(reading, "journal.requester")]
    assert got == [
        (T0 - 20 * S, 5120, "sudo", "session-12.scope", "sudo",
         "  ops : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/usr/bin/systemctl daemon-reload"),
        (T0 - 10 * S, 1848, "snapd", "snapd.service", "snapd", 'Refreshing snap "core22"'),
        (T0 - 1 * S, 48211, "systemctl", "snapd.service", "systemctl", "requester's own line")]
    by_rule = {e["MESSAGE"]: e["_GF_SELECTED_BY"] for e in stored(bundle)}
    assert by_rule["snapd 2.63 starting"] == ["boot", "coverage"]  # kept only as the journal's first entry
    assert by_rule["after the window"] == ["boot", "coverage"]
    assert "unrelated" not in by_rule
    assert "  ops : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/usr/bin/ls" not in by_rule


def test_boots_and_coverage(tmp_path):
    first, last = T0 - timedelta(days=2, microseconds=-7), T0 + timedelta(days=1, hours=3)
    root = host_with(tmp_path,
                     entry(first, 402, "systemd-journald", "Journal started", _COMM="systemd-journald"),
                     pid1(T0, "Reloading."),
                     entry(T0 + S, 402, "systemd-journald", "Journal stopped", _COMM="systemd-journald"),
                     entry(T0 + timedelta(days=1), 0, "kernel", "Linux version 6.8.0", boot=BOOT2,
                           _TRANSPORT="kernel"),
                     entry(last, 402, "systemd-journald", "last words", boot=BOOT2, _COMM="systemd-journald"))
    bundle = collect(tmp_path, root)
    reading = analyse(bundle)
    boots = [(e.at, e.attrs["boot_id"], e.attrs["first"], e.attrs["last"]) for e in kinds(reading, "journal.boot")]
    assert boots == [(first, BOOT, "2026-07-15T12:00:00.000007Z", "2026-07-17T12:00:01Z"),
                     (T0 + timedelta(days=1), BOOT2, "2026-07-18T12:00:00Z", "2026-07-18T15:00:00Z")]
    assert reading.facts["boots"] == [{"boot_id": BOOT, "first": "2026-07-15T12:00:00.000007Z",
                                       "last": "2026-07-17T12:00:01Z"},
                                      {"boot_id": BOOT2, "first": "2026-07-18T12:00:00Z",
                                       "last": "2026-07-18T15:00:00Z"}]
    [cov] = [c for c in reading.coverage if c.source == "journal"]
    assert (cov.source, cov.start, cov.end) == ("journal", first, last)
    assert "2026-07-15T12:00:00.000007Z to 2026-07-18T15:00:00Z only" in cov.reason
    assert (reading.facts["journal_first"], reading.facts["journal_last"]) == (
        "2026-07-15T12:00:00.000007Z", "2026-07-18T15:00:00Z")
    saved = json.loads(bundle.path("journal/coverage.json").read_text())
    assert (saved["first_usec"], saved["files_found"], saved["files_read"], saved["files_failed"]) == (
        usec(first), 1, 1, 0)
    [rec] = json.loads(bundle.path("journal/files.json").read_text())
    assert rec["source"] == f"/var/log/journal/{MACHINE}/system.journal" and rec["opened"] is True
    assert rec["header"]["incompatible"] == ["KEYED_HASH", "ZSTD", "COMPACT"]  # what systemd 252 writes
    assert rec["header"]["n_entries"] == 5 and rec["size"] == os.path.getsize(
        root / f"var/log/journal/{MACHINE}/system.journal")


def test_stored_entries_keep_every_field_once(tmp_path):
    root = host_with(tmp_path, pid1(T0, "Reloading.", BLOB=b"\xff\xfe\x00raw", TAG=["a", "b"]))
    bundle = collect(tmp_path, root)
    [e] = stored(bundle)  # selected as pid1, boot start/end and journal start/end: one line
    assert e["_GF_SELECTED_BY"] == ["pid1", "boot", "coverage"]
    assert e["__REALTIME_TIMESTAMP"] == usec(T0)
    assert e["__MONOTONIC_TIMESTAMP"] == usec(T0) - usec(BOOTED[BOOT])
    assert e["_BOOT_ID"] == BOOT and e["_PID"] == "1" and e["CODE_FUNC"] == "invoke_main_loop"
    assert base64.b64decode(e["BLOB"]["base64"]) == b"\xff\xfe\x00raw"
    assert e["TAG"] == ["a", "b"]
    assert e["__CURSOR"].startswith("s=") and f"b={BOOT}" in e["__CURSOR"]


def test_times_are_utc_whatever_the_analysing_machines_zone(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        bundle = collect(tmp_path, host_with(tmp_path, pid1(T0, "Reloading.")))
        [reload] = kinds(analyse(bundle), "journal.reload")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert reload.at == T0 and reload.original == "2026-07-17T12:00:00Z"


def test_reload_logged_before_the_clock_was_set(tmp_path):
    # a board without an RTC (like the KDE Raspberry Pi) logs its first minutes near 1970
    early = datetime(1970, 1, 1, 0, 1, 40, tzinfo=UTC)
    root = host_with(tmp_path, service(early - 30 * S, 900, "apt-daily.service", "apt-get", "apt-get update",
                                       boot=BOOT_NO_RTC),
                     pid1(early, "Reloading.", boot=BOOT_NO_RTC))
    reading = analyse(collect(tmp_path, root))
    assert [e.at for e in kinds(reading, "journal.reload")] == [early]
    assert [e.attrs["message"] for e in kinds(reading, "journal.requester")] == ["apt-get update"]


def test_since_limits_the_scan(tmp_path):
    root = host_with(tmp_path, pid1(T0 - timedelta(hours=1), "Reloading."), pid1(T0 + S, "Reloading."))
    reading = analyse(collect(tmp_path, root, since=T0))
    assert [e.at for e in kinds(reading, "journal.reload")] == [T0 + S]
    [cov] = [c for c in reading.coverage if c.source == "journal"]
    assert cov.start == T0 and "collected from 2026-07-17T12:00:00Z on" in cov.reason


def test_units_that_matter_and_nvml_errors(tmp_path):
    kubelet = dict(ident="kubelet")
    root = host_with(
        tmp_path,
        pid1(T0, "Starting apt-daily-upgrade.service - Daily apt upgrade and clean activities...",
             func="unit_status_log_starting",
             UNIT="apt-daily-upgrade.service", MESSAGE_ID="7d4958e842da4a758f6c1cdc7b36dcc5"),
        pid1(T0 + S, "Started cron.service - Regular background program processing daemon.", UNIT="cron.service"),
        pid1(T0 + 2 * S, "nvidia-persistenced.service: Deactivated successfully.",
             UNIT="nvidia-persistenced.service"),
        pid1(T0 + 3 * S, "kubelet.service: Consumed 1h 2min CPU time.", UNIT="kubelet.service"),
        service(T0 + 4 * S, 2210, "kubelet.service", "kubelet",
                'E0717 12:00:04.000000    2210 manager.go:123] "Failed to initialize NVML" err="Unknown Error" '
                'pod="gpu-ops/nvidia-device-plugin-daemonset-x7k2p"', **kubelet),
        service(T0 + 5 * S, 3111, "nvidia-dcgm.service", "nv-hostengine", "dcgm: NVML_ERROR_GPU_IS_LOST on GPU 3"),
        service(T0 + 6 * S, 9000, "myapp.service", "myapp", "cuInit failed: CUDA_ERROR_NO_DEVICE"),
        service(T0 + 7 * S, 2210, "kubelet.service", "kubelet",
                'I0717 12:00:07.000000    2210 kubelet.go:2453] "SyncLoop (probe)" probe="readiness" status="ready" '
                'pod="ml/trainer-0"', **kubelet),
        service(T0 + 8 * S, 2210, "kubelet.service", "kubelet",
                'I0717 12:00:08.000000    2210 kubelet.go:2453] "SyncLoop (probe)" probe="readiness" status="" '
                'pod="ml/trainer-0"', **kubelet))
    reading = analyse(collect(tmp_path, root))
    assert [(e.attrs["unit"], e.attrs["action"]) for e in kinds(reading, "journal.unit")] == [
        ("apt-daily-upgrade.service", "starting"), ("nvidia-persistenced.service", "deactivated")]
    nvml = kinds(reading, "journal.nvml-error")
    assert [(e.at, e.attrs["unit"], e.attrs["identifier"], e.attrs["pod"]) for e in nvml] == [
        (T0 + 4 * S, "kubelet.service", "kubelet", "gpu-ops/nvidia-device-plugin-daemonset-x7k2p")]
    # a GPU that is lost is its own failure (issue 26), not the EPERM family's NVML error
    [lost] = [e for e in kinds(reading, "journal.symptom") if e.attrs["signature"] == "gpu-lost"]
    assert (lost.at, lost.attrs["unit"], lost.attrs["identifier"]) == (T0 + 5 * S, "nvidia-dcgm.service", "nv-hostengine")
    [ok] = kinds(reading, "journal.healthy")
    assert (ok.at, ok.attrs["pod"], ok.attrs["unit"]) == (T0 + 7 * S, "ml/trainer-0", "kubelet.service")


# -- files that cannot be read -------------------------------------------------------------------
def test_truncated_file_next_to_a_good_one(tmp_path):
    root = host_with(tmp_path, caller(T0, SNAPD_CALLER),
                     pid1(T0 + timedelta(milliseconds=2), "Reloading..."))
    other = build_journal(pid1(T0 - timedelta(days=1), "Reloading."), tmp_path / "other.journal")
    cut = root / f"var/log/journal/{MACHINE}/system@00062a1b2c3d4e5f-0123456789abcdef.journal~"
    cut.write_bytes(other.read_bytes()[:100_000])
    bundle = collect(tmp_path, root)
    [bad] = [a for a in bundle.artifacts() if a.status is Status.ERROR]
    assert bad.source == f"/var/log/journal/{MACHINE}/{cut.name}" and bad.method == "journal-reader"
    assert bad.errno == 61 and "truncated: the header describes" in bad.message and "file has 100000" in bad.message
    reading = analyse(bundle)
    [reload] = kinds(reading, "journal.reload")
    assert (reload.at, reload.attrs["requester_pid"]) == (T0, 48211)
    assert "1 of 2 journal files could not be read" in reading.coverage[0].reason
    assert any(cut.name in p["message"] for p in reading.problems)


def test_flags_from_a_newer_systemd_are_named(tmp_path):
    root = host_with(tmp_path, pid1(T0, "Reloading."))
    f = root / f"var/log/journal/{MACHINE}/system.journal"
    b = bytearray(f.read_bytes())
    struct.pack_into("<I", b, 12, struct.unpack_from("<I", b, 12)[0] | 0x20)  # a flag no release defines yet
    f.write_bytes(b)
    bundle = collect(tmp_path, root)
    [bad] = [a for a in bundle.artifacts() if a.status is Status.ERROR and a.source.endswith("system.journal")]
    assert "written by a newer systemd: unknown flag 0x20" in bad.message
    # no file could be opened and this fake host has no journalctl to fall back on
    [why] = [a for a in bundle.artifacts() if a.source == "journal/entries.jsonl"]
    assert why.status is Status.ERROR and "no journalctl on the node" in why.message
    [cov] = [c for c in analyse(bundle).coverage if c.source == "journal"]
    assert cov.start is None and "no journal entries were collected" in cov.reason


def test_unreadable_file_is_unreadable_not_absent():
    # as root chmod 000 is no obstacle, so the collection runs in a child as nobody (65534)
    work = Path(tempfile.mkdtemp(prefix="gf-journal-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)
        root = host_with(work, pid1(T0, "Reloading."))
        (work / "out").mkdir(mode=0o777)
        os.chmod(work / "out", 0o777)
        jdir = root / f"var/log/journal/{MACHINE}"
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        locked = build_journal(pid1(T0 - S, "Reloading."), jdir / "system@locked.journal")
        os.chmod(locked, 0)
        (root / "run/log/journal").mkdir(parents=True)
        os.chmod(root / "run/log/journal", 0)

        def collect_as_nobody():
            writer = BundleWriter(work / "out/bundle")
            journal.acquire(CollectContext(root=root, writer=writer))
            writer.finish()
            return os.geteuid()

        assert run_as_nobody(collect_as_nobody) == 65534
        bundle = Bundle.open(work / "out/bundle")
        [bad] = [a for a in bundle.artifacts() if a.source.endswith("system@locked.journal")]
        assert (bad.status, bad.errno, bad.path) == (Status.UNREADABLE, 13, None)
        [run] = [a for a in bundle.artifacts() if a.source == "/run/log/journal"]
        assert (run.status, run.errno) == (Status.UNREADABLE, 13)
        files = json.loads(bundle.path("journal/files.json").read_text())
        assert [(Path(f["source"]).name, f["opened"], f["errno"]) for f in files] == [
            ("system.journal", True, None), ("system@locked.journal", False, 13)]
        [reload] = kinds(analyse(bundle), "journal.reload")
        assert reload.at == T0
    finally:
        shutil.rmtree(work)


def test_no_journal_at_all_is_absent(tmp_path):
    (tmp_path / "host/var/log").mkdir(parents=True)
    bundle = collect(tmp_path, tmp_path / "host")
    [a] = bundle.artifacts()
    assert (a.source, a.status) == ("/var/log/journal", Status.ABSENT)
    reading = analyse(bundle)
    assert reading.events == [] and reading.coverage[0].start is None
    assert "/var/log/journal: absent" in reading.coverage[0].reason


def test_journal_dir_outside_root_and_a_single_file(tmp_path):
    f = build_journal(pid1(T0, "Reloading."), tmp_path / "copied/system.journal")
    (tmp_path / "host").mkdir()
    for given in (tmp_path / "copied", f):
        bundle = collect(tmp_path, tmp_path / "host", journal_dirs=[given])
        [rec] = json.loads(bundle.path("journal/files.json").read_text())
        assert rec["source"] == str(f) and rec["opened"]
        assert [e.at for e in kinds(analyse(bundle), "journal.reload")] == [T0]


def test_malformed_stored_line_is_skipped_and_reported(tmp_path):
    bundle = collect(tmp_path, host_with(tmp_path, *(pid1(T0 + i * S, "Reloading.") for i in range(3))))
    p = bundle.path("journal/entries.jsonl")
    lines = p.read_text().splitlines()
    lines[1] = lines[1][:40]
    p.write_text("\n".join(lines + ["[1, 2]"]) + "\n")
    reading = analyse(bundle)
    assert [e.at for e in kinds(reading, "journal.reload")] == [T0, T0 + 2 * S]
    assert [p["line"] for p in reading.problems] == [2, 4]


def test_journalctl_source_selects_the_same_entries(tmp_path):
    # the fallback for files this libsystemd cannot open: the node's journalctl, same rules
    f = build_journal(b"".join([
        service(T0 - 10 * S, 1848, "snapd.service", "snapd", "Refreshing"),
        caller(T0, "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)...", BLOB=b"\xff"),
        pid1(T0 + S, "Reloading..."),
        service(T0 + 2 * S, 2210, "kubelet.service", "kubelet", "Failed to initialize NVML: Unknown Error")]),
        tmp_path / "j/system.journal")
    by_reader, by_journalctl = [], []
    with open(f, "rb") as fh:
        for src, out in ((reader._ReaderSource([fh.fileno()]), by_reader),
                         (journalctl._JournalctlSource([shutil.which("journalctl")], [str(f)]), by_journalctl)):
            sel, boots, first, last = selection.select(src, None, [])
            out.append((list(sel.entries()), boots, first["__CURSOR"], last["__CURSOR"]))
    assert by_journalctl == by_reader
    sel = by_reader[0][0]
    assert sorted(r for e in sel for r in e["_GF_SELECTED_BY"]) == [
        "boot", "boot", "coverage", "coverage", "nvml", "pid1", "pid1", "requester"]


def _install_journalctl(root: Path) -> None:
    """Give the fake node this machine's journalctl and the libraries it links, so that chroot runs it."""
    import subprocess
    ldd = subprocess.run(["ldd", "/usr/bin/journalctl"], capture_output=True, text=True, check=True).stdout
    libs = [p for p in ldd.split() if p.startswith("/")]
    for src in ["/usr/bin/journalctl", *libs]:
        dest = root / src.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(src), dest)


def test_chroot_fallback_runs_the_nodes_journalctl(tmp_path):
    # used when this machine's libsystemd cannot open the node's files: the node's own journalctl
    root = host_with(tmp_path, caller(T0, SNAPD_CALLER_256),
                     pid1(T0 + S, "Reloading..."))
    _install_journalctl(root)
    ctx = CollectContext(root=root, writer=BundleWriter(tmp_path / "unused"))
    files, dirs, _ = journal._find(ctx)
    src = journalctl.fallback(ctx, files, journal.ENTRIES)
    assert src.base[:4] == ["chroot", str(root), "/usr/bin/journalctl",
                            f"--file=/var/log/journal/{MACHINE}/system.journal"]
    assert src.tmpdir == ctx.writer.dir  # journalctl's stderr is kept in the output, not the node's /tmp
    sel, boots, first, last = selection.select(src, None, [])
    sel = list(sel.entries())
    with open(root / f"var/log/journal/{MACHINE}/system.journal", "rb") as fh:
        by_reader, boots_by_reader = selection.select(reader._ReaderSource([fh.fileno()]), None, [])[:2]
        assert (sel, boots) == (list(by_reader.entries()), boots_by_reader)
    assert [e["MESSAGE"] for e in sel if "pid1" in e["_GF_SELECTED_BY"]] == [
        SNAPD_CALLER_256, "Reloading..."]


# -- real journals written by other people's systems ------------------------------------------------
@pytest.mark.corpus
def test_kde_raspberry_pi_journal(tmp_path, real_inputs):
    (tmp_path / "host").mkdir()
    bundle = collect(tmp_path, tmp_path / "host", journal_dirs=[real_inputs / "journal/kde-kjournald"])
    assert not [a for a in bundle.artifacts() if a.status is not Status.COLLECTED]
    reading = analyse(bundle)
    [reload] = kinds(reading, "journal.reload")
    assert reload.original == "2021-03-13T15:25:48.625245Z" and reload.attrs["wording"] == "Reloading."
    assert reload.attrs["requester_pid"] is None
    assert len(kinds(reading, "journal.boot")) == 3 and len(reading.facts["boots"]) == 3
    assert reading.facts["systemd_version"] == "<=253.1"  # systemd 244.3 logged no caller line
    files = json.loads(bundle.path("journal/files.json").read_text())
    assert len(files) == 11 and all(f["opened"] for f in files)


@pytest.mark.corpus
def test_arch_2013_banner_and_corrupted_copy(tmp_path, real_inputs):
    (tmp_path / "host").mkdir()
    for name in ("test.journal", "test.badmsg.journal"):
        bundle = collect(tmp_path, tmp_path / "host",
                         journal_dirs=[real_inputs / "journal/fluent-plugin-systemd" / name])
        reading = analyse(bundle)
        assert reading.facts["systemd_version"] == "198", name
        [banner] = kinds(reading, "journal.banner")
        assert banner.original == "2013-03-29T01:07:20.229850Z"
        assert [b["boot_id"] for b in reading.facts["boots"]] == ["4737ffc504774b3ba67020bc947f1bc0"]


@pytest.mark.corpus
def test_velociraptor_truncated_files_are_errors(tmp_path, real_inputs):
    (tmp_path / "host").mkdir()
    bundle = collect(tmp_path, tmp_path / "host", journal_dirs=[real_inputs / "journal/velociraptor"])
    bad = {Path(a.source).name: a for a in bundle.artifacts() if a.status is Status.ERROR}
    assert set(bad) == {"compact.journal", "system.journal", "entries.jsonl"}
    assert "the header describes 8388608 bytes but the file has 4096000" in bad["compact.journal"].message
    assert "the header describes 5099520 bytes but the file has 153600" in bad["system.journal"].message
    files = {Path(f["source"]).name: f for f in json.loads(bundle.path("journal/files.json").read_text())}
    assert files["compact.journal"]["header"]["incompatible_flags"] == 0x1c
    assert files["system.journal"]["header"]["state"] == "archived"
    reading = analyse(bundle)
    assert reading.events == [] and reading.coverage[0].start is None


# -- memory on big journals (issue 7): selected entries on disk, mapped pages let go ----------------
def test_spool_keeps_selected_entries_on_disk_not_in_memory(tmp_path):
    import tracemalloc
    spool = selection.Spool(dir=tmp_path)
    big = "x" * 5000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(3000):  # kept newest first: entries() must give them back in time order
        spool.keep("nvml", f"s=1;i={i:x}", {"__CURSOR": f"s=1;i={i:x}", "__REALTIME_TIMESTAMP": 10_000 - i,
                                              "MESSAGE": big})
    spool.keep("healthy", "s=1;i=0", lambda: 1 / 0)  # kept already: the entry is not read again
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert spool.end > 3000 * 5000 and grown < 3000 * 200  # 15 MB written, ~0.4 MB held
    assert os.listdir(tmp_path) == []  # an unlinked file: nothing is left in the output
    back = list(spool.entries())
    assert len(back) == 3000 and [e["__REALTIME_TIMESTAMP"] for e in back[:2]] == [7001, 7002]
    assert back[-1]["_GF_SELECTED_BY"] == ["nvml", "healthy"] and back[-1]["MESSAGE"] == big
    spool.close()


def _busy_node(tmp_path, n=6000):
    """A node whose kubelet wrote ``n`` lines (three of them NVML errors) around a snapd reload."""
    lines = [service(T0 + timedelta(seconds=i), 2210, "kubelet.service", "kubelet",
                     ("Failed to initialize NVML: Unknown Error" if i in (5, 2500, n - 3) else
                      f'I0717 probe result {i} "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/t-{i}"'
                      if i % 1000 == 7 else f"I0717 routine line {i} " + "y" * 400))
             for i in range(n)]
    lines.insert(3000, caller(T0 + timedelta(seconds=2999, microseconds=500), SNAPD_CALLER))
    lines.insert(2990, service(T0 + timedelta(seconds=2990, microseconds=1), 48211, "snapd.service", "snapd",
                               "Refreshing snap nvidia"))
    return host_with(tmp_path, *lines)


def test_mapped_pages_are_let_go_during_a_long_pass_and_selection_is_unchanged(tmp_path, monkeypatch):
    root = _busy_node(tmp_path)
    path = next((root / "var/log/journal" / MACHINE).iterdir())
    results = {}
    for drop in (False, True):
        monkeypatch.setattr(reader._Pages, "LIMIT", 64 << 10)
        monkeypatch.setattr(reader._ReaderSource, "CHECK_EVERY", 16)
        with open(path, "rb") as fh:
            src = reader._ReaderSource([fh.fileno()])
            if not drop:
                src.pages.madvise = None  # as where madvise cannot be called: nothing is dropped
            sel, boots, first, last = selection.select(src, None, [])
            results[drop] = ([(e["__CURSOR"], e["_GF_SELECTED_BY"]) for e in sel.entries()], boots,
                             src.pages.dropped)
            if drop:  # after a drop, only what was touched since is resident: far less than the file
                src.pages.check(force=True)
                assert src.pages._resident() - src.pages.base == 0
            src.close()
    kept, boots, dropped = results[True]
    assert dropped > 10 and results[False][2] == 0
    assert (kept, boots) == results[False][:2]
    assert sorted(r for _, rules in kept for r in rules).count("nvml") == 3
    assert sorted(r for _, rules in kept for r in rules).count("healthy") == 6
    assert sum("requester" in rules for _, rules in kept) == 1


def test_a_window_is_read_only_in_the_files_that_can_hold_it(tmp_path):
    # an archived (rotated) file from July and the active file from two days later: the July
    # reload's requester window must not open the active file, and both windows find their lines
    old, new = T0, T0 + timedelta(days=2)
    jdir = tmp_path / "host/var/log/journal" / MACHINE
    build_journal(service(old - 10 * S, 48211, "snapd.service", "snapd", "Refreshing") +
                  caller(old, SNAPD_CALLER) + pid1(old + S, "Reloading..."),
                  jdir / "system@4f3b8f7e1c2d4a5b9e6f7a8b9c0d1e2f-0000000000000001-0006123456789abc.journal")
    build_journal(entry(new - 20 * S, 7001, "sudo", "admin : TTY=pts/0 ; PWD=/ ; USER=root ; "
                        "COMMAND=/usr/bin/systemctl daemon-reload", _COMM="sudo") +
                  pid1(new, "Reloading..."), jdir / "system.journal")
    bundle = collect(tmp_path, tmp_path / "host")
    kept = {e["MESSAGE"]: e["_GF_SELECTED_BY"] for e in stored(bundle)}
    assert kept["Refreshing"][0] == "requester" and "requester" in kept[
        "admin : TTY=pts/0 ; PWD=/ ; USER=root ; COMMAND=/usr/bin/systemctl daemon-reload"]
    files = json.loads(bundle.path("journal/files.json").read_text())
    spans = {Path(f["source"]).name: (f["first_usec"], f["last_usec"]) for f in files}
    import hashlib  # hashed on a thread of its own while the entries were selected: still the file's
    assert {Path(f["source"]).name: (f["size"], f["sha256"]) for f in files} == {
        p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) for p in jdir.iterdir()}
    assert spans["system.journal"] == (usec(new - 20 * S), usec(new))
    names = sorted(spans)
    fds = [os.open(jdir / n, os.O_RDONLY) for n in names]
    src = reader._ReaderSource(fds, [(*spans[n], n != "system.journal") for n in names])
    by_name = dict(zip(names, fds))
    rotated = next(n for n in names if n != "system.journal")
    try:
        assert src._holding(usec(old) - 300_000_000, usec(old) + 5_000_000) == [by_name[rotated]]
        assert src._holding(usec(new) - 300_000_000, usec(new) + 5_000_000) == [by_name["system.journal"]]
        # after the active file's last entry it is still read: it may have been written to since
        assert src._holding(usec(new) + 10**9, usec(new) + 2 * 10**9) == [by_name["system.journal"]]
    finally:
        src.close()
        for fd in fds:
            os.close(fd)


def _first_cursor(path: Path) -> str:
    with open(path, "rb") as fh:
        src = reader._ReaderSource([fh.fileno()])
        try:
            return src.edge()["__CURSOR"]
        finally:
            src.close()


def test_an_entry_held_by_two_files_is_kept_once(tmp_path):
    # the node's journal and a copy of it journal-remote wrote (given with --journal-dir): the same
    # entries (boot ID, times, data) under the copy's own sequence numbers. Read file by file, they
    # must still be one reload and one line each, as a reader over both files shows them
    lines = (service(T0 - 10 * S, 48211, "snapd.service", "snapd", "Refreshing") + caller(T0, SNAPD_CALLER) +
             pid1(T0 + S / 50, "Reloading..."))
    root = host_with(tmp_path, lines)
    copy = build_journal(lines, tmp_path / "copy/remote-gpu-node-7.journal")
    here = next((root / "var/log/journal" / MACHINE).iterdir())
    assert _first_cursor(here).split(";")[0] != _first_cursor(copy).split(";")[0]  # s=: each file numbers its own
    bundle = collect(tmp_path, root, journal_dirs=[tmp_path / "copy"])
    kept = stored(bundle)
    assert [(e["MESSAGE"], e["_GF_SELECTED_BY"]) for e in kept] == [
        ("Refreshing", ["requester", "boot", "coverage"]), (SNAPD_CALLER, ["pid1"]),
        ("Reloading...", ["pid1", "boot", "coverage"])]
    reading = analyse(bundle)
    [reload] = kinds(reading, "journal.reload")
    assert (reload.at, reload.attrs["requester_pid"]) == (T0, 48211)
    [boot] = kinds(reading, "journal.boot")  # boots.json names the copy entries.jsonl holds
    assert boot.evidence["line"] == 1 and boot.evidence["cursor"] == kept[0]["__CURSOR"]
    cov = json.loads(bundle.path("journal/coverage.json").read_text())
    assert (cov["first_cursor"], cov["last_cursor"]) == (kept[0]["__CURSOR"], kept[2]["__CURSOR"])


def test_a_rotated_file_whose_clock_went_back_is_read_for_its_windows(tmp_path):
    # older journald releases (and journal-remote) append a new boot to the same file even when that
    # boot's clock starts behind (no RTC: 1970): the file's last entry is older than its first, so the
    # two say nothing about which times it holds, and the July reload's window must still be read in it
    early = datetime(1970, 1, 1, 0, 1, 40, tzinfo=UTC)
    root = host_with(tmp_path, service(T0 - 10 * S, 48211, "snapd.service", "snapd", "Refreshing"),
                     caller(T0, SNAPD_CALLER), pid1(T0 + S / 50, "Reloading..."),
                     pid1(early, "Reloading.", boot=BOOT_NO_RTC),
                     name="system@4f3b8f7e1c2d4a5b9e6f7a8b9c0d1e2f-0000000000000001-0006123456789abc.journal")
    bundle = collect(tmp_path, root)
    [rec] = json.loads(bundle.path("journal/files.json").read_text())
    assert (rec["first_usec"], rec["last_usec"]) == (usec(T0 - 10 * S), usec(early))
    assert {e["MESSAGE"]: e["_GF_SELECTED_BY"] for e in stored(bundle)}["Refreshing"] == [
        "requester", "boot", "coverage"]
    [requester] = kinds(analyse(bundle), "journal.requester")
    assert (requester.at, requester.attrs["pid"]) == (T0 - 10 * S, 48211)


def test_files_json_is_written_when_selection_fails(tmp_path, monkeypatch):
    # the journal files' hashes are taken while the entries are selected: a selection that dies (a
    # MemoryError on a small pod, a bug) must not cost the record of which files were there
    root = host_with(tmp_path, pid1(T0, "Reloading."))
    path = next((root / "var/log/journal" / MACHINE).iterdir())

    def dies(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(selection, "select", dies)
    writer = BundleWriter(tmp_path / "bundle")
    with pytest.raises(MemoryError):
        journal.acquire(CollectContext(root=root, writer=writer, options={"since": None, "journal_dirs": []}))
    import hashlib
    [rec] = json.loads((writer.dir / "journal/files.json").read_text())
    assert (rec["source"], rec["opened"], rec["size"], rec["sha256"]) == (
        f"/var/log/journal/{MACHINE}/system.journal", True, path.stat().st_size,
        hashlib.sha256(path.read_bytes()).hexdigest())


def test_a_file_journald_deletes_during_collection_is_still_read(tmp_path, monkeypatch):
    # journald vacuums (unlinks) its oldest archived files when it rotates, any time during a
    # collection; libsystemd refuses to open a file that has no name any more (EIDRM), so every file
    # must be open for reading before selection starts, as it was when it was probed
    jdir = tmp_path / "host/var/log/journal" / MACHINE
    archived = build_journal(
        pid1(T0 - timedelta(hours=1), "Reloading.") +
        service(T0 - timedelta(minutes=50), 2210, "kubelet.service", "kubelet",
                "Failed to initialize NVML: Unknown Error"),
        jdir / "system@4f3b8f7e1c2d4a5b9e6f7a8b9c0d1e2f-0000000000000001-0006123456789abc.journal")
    build_journal(service(T0 - 10 * S, 48211, "snapd.service", "snapd", "Refreshing") + caller(T0, SNAPD_CALLER) +
                  pid1(T0 + S / 50, "Reloading..."), jdir / "system.journal")
    store = journal._store

    def vacuumed_meanwhile(*args):
        archived.unlink()
        return store(*args)

    monkeypatch.setattr(journal, "_store", vacuumed_meanwhile)
    bundle = collect(tmp_path, tmp_path / "host")
    assert json.loads(bundle.path("journal/coverage.json").read_text())["problems"] == []
    # read from copies of what the still-open descriptor holds (libsystemd refuses an unlinked file),
    # made in the bundle and removed once read
    assert not list(tmp_path.glob("bundle*/.journal-copy-*"))
    assert [(e["MESSAGE"], e["_GF_SELECTED_BY"]) for e in stored(bundle)] == [
        ("Reloading.", ["pid1", "boot", "coverage"]), ("Failed to initialize NVML: Unknown Error", ["nvml"]),
        ("Refreshing", ["requester"]), (SNAPD_CALLER, ["pid1"]), ("Reloading...", ["pid1", "boot", "coverage"])]
