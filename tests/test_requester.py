"""Who asked for a reload systemd 252 logged without a caller (forensics/findings/requester.py).

The journals are real .journal files (systemd-journal-remote, samples/journalbuild.py) whose PID 1 lines
are those a real systemd 252 wrote in the lab (tests/syslab.py) for ``systemctl daemon-reload`` from a
shell and ``systemd-run --unit=nvidia-driver-upgrade --wait /bin/systemctl daemon-reload``, at the
sub-second offsets it wrote them: the transient unit's ``Started`` line 13 ms before ``Reloading.``, its
``Deactivated successfully.`` 236 ms after it.
"""
from __future__ import annotations

from datetime import timedelta

from test_journal import T0, analyse, collect, host_with, pid1
from test_verdicts import PRE, T, cov, judge, reload

from forensics.events import Event
from forensics.findings.correlator import correlate
from forensics.findings.verdicts import Evidence, Window
from forensics.timeutil import iso_z

US = timedelta(microseconds=1)
UNIT = "nvidia-driver-upgrade.service"
STARTED = f"Started {UNIT} - /bin/systemctl daemon-reload."  # systemd 252, job_emit_done_message
DEACTIVATED = f"{UNIT}: Deactivated successfully."            # unit_log_success


def transient_run(started, reloaded, stopped) -> list[bytes]:
    """PID 1's three lines of a transient service that ran ``systemctl daemon-reload`` (systemd 252)."""
    return [pid1(started, STARTED, func="job_emit_done_message", UNIT=UNIT, JOB_TYPE="start", JOB_RESULT="done",
                 MESSAGE_ID="39f53479d3a045ac8e11786248231fbf"),
            pid1(reloaded, "Reloading."),
            pid1(stopped, DEACTIVATED, func="unit_log_success", UNIT=UNIT,
                 MESSAGE_ID="7ad2d189f7e94e70a38c781354912448")]


def reload_cause(tmp_path, *entries):
    reading = analyse(collect(tmp_path, host_with(tmp_path, *entries)))
    manifest = {"incidents": [{"start": iso_z(T0 - timedelta(seconds=10)), "end": iso_z(T0 + timedelta(seconds=30))}],
                "collection": {"start": iso_z(T0 + timedelta(minutes=5))}}
    (inc,), _ = correlate(manifest, sorted(reading.events, key=lambda e: e.at), reading.coverage, exposure=PRE)
    return next(c for c in inc.causes if c.kind == "daemon-reload")


def test_two_reloads_each_get_their_own_requester_and_the_cause_cites_both(tmp_path):
    """A plain ``systemctl daemon-reload`` from outside any unit at T0, then one from the transient unit
    1.5 s later: the first is reported with no requester (the unit started after it), the second is
    cited with the unit as its requester; no 'deactivated ..., -1 s before the reload'."""
    first = pid1(T0, "Reloading.")
    c = reload_cause(tmp_path, first, *transient_run(T0 + 1_517_282 * US, T0 + 1_530_654 * US, T0 + 1_766_594 * US))
    assert c.verdict == "confirmed" and c.at == T0
    assert c.requested_by["basis"] == "unknown" and c.requested_by["unit"] is None
    reloads = [e for e in c.evidence if e["kind"] == "journal.reload"]
    assert [e["at"] for e in reloads] == [iso_z(T0), iso_z(T0 + 1_530_654 * US)]
    assert reloads[0]["requested_by"]["basis"] == "unknown"
    assert (reloads[1]["requested_by"]["unit"], reloads[1]["requested_by"]["basis"]) == (UNIT, "inferred")
    assert "2 reloads in the window; the first one revokes the device rules, so it is the one reported" in c.reason
    assert f"{iso_z(T0 + 1_530_654 * US)} (line " in c.reason
    assert "requested by nvidia-driver-upgrade.service (inferred: nvidia-driver-upgrade.service started 13 ms " \
           "before the reload and stopped 0.24 s after it)" in c.reason
    assert "-1 s" not in c.reason and "what requested it is unknown" in c.reason.split("reloads in the window")[1]


def test_a_single_reload_words_the_transient_units_run_in_its_real_order(tmp_path):
    c = reload_cause(tmp_path, *transient_run(T0 - 13_372 * US, T0, T0 + 235_940 * US))
    assert c.at == T0
    rb = c.requested_by
    assert (rb["unit"], rb["pid"], rb["comm"], rb["basis"]) == (UNIT, None, None, "inferred")
    assert rb["inferred_from"] == f"{UNIT} started 13 ms before the reload and stopped 0.24 s after it"
    assert "0 s before the reload" not in c.reason and "deactivated at" not in c.reason
    (cand,) = rb["candidates"]
    assert cand["unit"] == UNIT and [e["summary"] for e in cand["evidence"]] == [
        f"{UNIT}: started", f"{UNIT}: deactivated"]
    assert [e["summary"] for e in c.evidence[1:]] == [f"{UNIT}: started", f"{UNIT}: deactivated"]


def unit(at, name, action):
    return Event(at, "journal", "journal.unit", f"{name}: {action}", {"unit": name, "action": action, "message": ""},
                 {"artifact": "journal/entries.jsonl", "line": 1})


def test_units_whose_run_brackets_the_reload_are_ranked_candidates_and_no_other_unit_is():
    r = T("2026-09-02T04:05:13")
    s = timedelta(seconds=1)
    ev = sorted([
        unit(r - 120 * s, "session-3.scope", "started"),                                   # ssh session, still open
        unit(r - 40 * s, "apt-daily.service", "starting"), unit(r - 30 * s, "apt-daily.service", "finished"),  # ended before
        unit(r - 0.2 * s, "run-u42.service", "started"), unit(r + 0.4 * s, "run-u42.service", "deactivated"),
        unit(r - 1.2 * s, "nvidia-dcgm.service", "started"), unit(r + 3 * s, "nvidia-dcgm.service", "stopped"),
        unit(r + 0.1 * s, "kubelet.service", "started"),                                    # began after it
        unit(r - 2 * s, "kubepods-besteffort-pod0d3f.slice", "started"),                    # runs nothing itself
        unit(r - 0.9 * s, "containerd.service", "started"),                                 # a daemon that runs on
        unit(r - 1 * s, "cri-containerd-5414425b6832c90b.scope", "started"),                # a pod's container
        reload("2026-09-02T04:05:13")], key=lambda e: e.at)
    c = judge("daemon-reload", Window(r - 10 * s, r + 20 * s), Evidence(ev, cov(journal=("2026-09-01T00:00:00", "2026-09-03T00:00:00"))))
    rb = c.requested_by
    assert [x["unit"] for x in rb["candidates"]] == ["run-u42.service", "nvidia-dcgm.service", "session-3.scope",
                                                     "containerd.service"]
    assert rb["unit"] == "run-u42.service" and rb["basis"] == "inferred"
    assert [x["why"] for x in rb["candidates"]] == [
        "run-u42.service started 0.2 s before the reload and stopped 0.4 s after it",
        "nvidia-dcgm.service started 1.2 s before the reload and stopped 3 s after it",
        "session-3.scope started 120 s before the reload and logged no stop in the window",
        "containerd.service started 0.9 s before the reload and logged no stop in the window"]
    assert all(x["basis"] == "inferred" and x["evidence"] for x in rb["candidates"])
    assert "other candidates: nvidia-dcgm.service started 1.2 s before" in c.reason


def test_a_daemon_started_just_before_and_running_on_is_listed_but_not_named_the_requester():
    """A plain ``systemctl daemon-reload`` from a shell outside any unit, a second after containerd
    (re)started: containerd ran across the reload but is no requester; the cause says unknown and lists it."""
    r = T("2026-09-02T04:05:13")
    ev = [unit(r - timedelta(seconds=0.88), "containerd.service", "started"), reload("2026-09-02T04:05:13")]
    c = judge("daemon-reload", Window(r - timedelta(seconds=10), r + timedelta(seconds=20)),
                      Evidence(ev, cov(journal=("2026-09-01T00:00:00", "2026-09-03T00:00:00"))))
    rb = c.requested_by
    assert (rb["unit"], rb["basis"]) == (None, "unknown")
    assert [x["unit"] for x in rb["candidates"]] == ["containerd.service"]
    assert ("what requested it is unknown (systemd logged no caller, no unit ran just for it and no line that asked "
            "for it can be verified); around it: containerd.service started 0.88 s before the reload and logged no "
            "stop in the window") in c.reason


def test_a_sudo_line_is_credited_to_the_reload_after_it_not_to_a_later_one():
    sudo = Event(T("2026-09-02T04:05:12"), "journal", "journal.requester", "sudo: systemctl daemon-reload",
                 {"identifier": "sudo", "comm": "sudo", "unit": "session-3.scope", "pid": 4711,
                  "message": "ops : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/bin/systemctl daemon-reload"},
                 {"artifact": "journal/entries.jsonl", "line": 3})
    ev = [sudo, reload("2026-09-02T04:05:13"), reload("2026-09-02T04:05:14")]
    c = judge("daemon-reload", Window(T("2026-09-02T04:05:00"), T("2026-09-02T04:05:30")),
                      Evidence(ev, cov(journal=("2026-09-01T00:00:00", "2026-09-03T00:00:00"))))
    assert c.requested_by["unit"] == "session-3.scope" and c.requested_by["comm"] == "sudo"
    assert "1 s before the reload" in c.requested_by["inferred_from"]
    second = [e for e in c.evidence if e["kind"] == "journal.reload"][1]
    assert second["requested_by"]["basis"] == "unknown"


def test_on_252_a_timers_service_and_an_ssh_session_around_the_reload_are_kept_and_ranked(tmp_path):
    """systemd 252's lines for an ssh session scope opened a minute before (still open) and a timer's
    oneshot service running across the reload (names no selection rule knows): both are collected and
    ranked, the short run first; a unit that stopped before the reload is no candidate."""
    done = "39f53479d3a045ac8e11786248231fbf"
    c = reload_cause(
        tmp_path,
        pid1(T0 - timedelta(seconds=61), "Started session-3.scope - Session 3 of User ops.",
             func="job_emit_done_message", UNIT="session-3.scope", JOB_TYPE="start", JOB_RESULT="done", MESSAGE_ID=done),
        pid1(T0 - timedelta(seconds=20), "Stopped backup-old.service - Old backup.", func="job_emit_done_message",
             UNIT="backup-old.service", JOB_TYPE="stop", JOB_RESULT="done", MESSAGE_ID="9d1aaa27d60140bd96365438aad20286"),
        pid1(T0 - 2_104_000 * US, "Starting fleet-sync.service - Sync fleet units...", func="job_emit_start_message",
             UNIT="fleet-sync.service", JOB_TYPE="start", MESSAGE_ID="7d4958e842da4a758f6c1cdc7b36dcc5"),
        pid1(T0, "Reloading."),
        pid1(T0 + 410_000 * US, "fleet-sync.service: Deactivated successfully.", func="unit_log_success",
             UNIT="fleet-sync.service", MESSAGE_ID="7ad2d189f7e94e70a38c781354912448"),
        pid1(T0 + 412_000 * US, "Finished fleet-sync.service - Sync fleet units.", func="job_emit_done_message",
             UNIT="fleet-sync.service", JOB_TYPE="start", JOB_RESULT="done", MESSAGE_ID=done))
    rb = c.requested_by
    assert (rb["unit"], rb["basis"]) == ("fleet-sync.service", "inferred")
    assert [(x["unit"], x["why"]) for x in rb["candidates"]] == [
        ("fleet-sync.service", "fleet-sync.service started 2.1 s before the reload and stopped 0.41 s after it"),
        ("session-3.scope", "session-3.scope started 61 s before the reload and logged no stop in the window")]
    assert "other candidates: session-3.scope started 61 s before the reload" in c.reason
