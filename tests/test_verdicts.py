"""Verdict rules, read like the incident (docs/design.md "Verdicts")."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from collectors import packages
from forensics.findings.correlator import correlate, incidents_from
from forensics.findings.openers import Signs
from forensics.events import Coverage, Event
from forensics.findings import verdicts
from forensics.findings.causes import RULES
from forensics.findings.verdicts import Evidence, Window

UTC = timezone.utc
T = lambda s: datetime.fromisoformat(s).replace(tzinfo=UTC)  # noqa: E731
#: the node's GPU containers as the exposure shows them: one hook-injected container under the systemd driver
#: (its own runc state says so), so a reload could take its GPU
HOOK_ROW = {"id": "6a1f0c2e9b7d", "namespace": "ml", "pod": "trainer-0", "gpu_injection": "hook",
            "cgroup_driver": "systemd", "cgroup_driver_basis": "evidence",
            "cgroup_driver_source": "runc state.json config.cgroups.Systemd=true", "at_risk": True, "broken": False}
PRE = {"assessed": True, "containers": [HOOK_ROW]}


def judge(kind: str, window: Window, ev: Evidence):
    """The rule of ``kind`` on ``ev`` (the exposure :data:`PRE` when it has none), as the correlator calls it."""
    if not ev.exposure:
        ev.exposure = PRE
    ev.window = window
    return RULES[kind].judge(window, ev)


def reload(at, pid=None, comm=None, unit=None):
    return Event(T(at), "journal", "journal.reload", "reload", {"wording": "Reloading.", "requester_pid": pid,
                 "requester_comm": comm, "requester_unit": unit}, {"artifact": "journal/entries.jsonl", "line": 1})


def cov(**spans):
    return {k: Coverage(k, T(a), T(b), f"{k} span") for k, (a, b) in spans.items()}


def test_reload_inside_window_with_caller_line_is_confirmed_requested_by_snapd():
    ev = [reload("2026-09-02T04:05:13", 48211, "systemctl", "snapd.service")]
    c = judge("daemon-reload", Window(T("2026-09-02T04:04:58"), T("2026-09-02T04:05:27")),
                               Evidence(ev, cov(journal=("2026-07-16T15:00:05", "2026-11-29T23:00:00"))))
    assert c.verdict == "confirmed" and c.at == T("2026-09-02T04:05:13")
    assert c.requested_by == {"unit": "snapd.service", "pid": 48211, "comm": "systemctl", "basis": "caller-line"}
    assert c.evidence[0]["line"] == 1


def test_reload_without_caller_is_confirmed_and_requester_inferred_from_dpkg_just_before():
    dpkg = Event(T("2026-02-03T05:04:41"), "dpkg", "package.dpkg-action", "configure telegraf:amd64 1.25.1-1",
                 {"action": "configure", "package": "telegraf:amd64"}, {"artifact": "packages/dpkg/dpkg.log", "line": 7})
    ev = [dpkg, reload("2026-02-03T05:04:43")]
    c = judge("daemon-reload", Window(T("2026-02-03T05:00:00"), T("2026-02-03T05:10:00")),
                               Evidence(ev, cov(journal=("2026-01-01T00:00:00", "2026-03-01T00:00:00"))))
    assert c.verdict == "confirmed"
    assert c.requested_by["basis"] == "inferred" and c.requested_by["comm"] == "dpkg"
    assert c.requested_by["package"] == "telegraf:amd64"
    assert "2 s before the reload" in c.requested_by["inferred_from"]
    assert {"artifact": "packages/dpkg/dpkg.log", "line": 7}.items() <= c.evidence[-1].items()


def test_rotated_journal_makes_reload_inferred_and_names_the_gap():
    c = judge("daemon-reload", Window(T("2026-07-11T03:34:00"), T("2026-08-01T15:00:00")),
                               Evidence([], cov(journal=("2026-07-16T15:00:05", "2026-11-29T23:00:00"))))
    assert c.verdict == "inferred"
    assert "journal holds data from 2026-07-16T15:00:05Z only" in c.gaps[0]


def test_journal_covering_window_without_reload_excludes_it():
    c = judge("daemon-reload", Window(T("2026-08-10T00:00:00"), T("2026-08-11T00:00:00")),
                               Evidence([], cov(journal=("2026-07-16T15:00:05", "2026-11-29T23:00:00"))))
    assert c.verdict == "excluded"


def test_cgroupfs_driver_excludes_reload_when_the_journal_holds_none():
    row = {**HOOK_ROW, "cgroup_driver": "cgroupfs", "cgroup_driver_basis": "engine config",
           "cgroup_driver_source": "/etc/docker/daemon.json exec-opts native.cgroupdriver=cgroupfs", "at_risk": False}
    c = judge("daemon-reload", Window(T("2026-09-02T04:00:00"), T("2026-09-02T04:10:00")),
              Evidence([], cov(journal=("2026-09-02T04:07:00", "2026-11-29T23:00:00")),
                       exposure={"assessed": True, "containers": [row]}))
    assert c.verdict == "excluded" and "native.cgroupdriver=cgroupfs" in c.reason and c.contradictions == []


def snapd_reload_with(row: dict):
    """The daemon-reload rule on a 04:05:13 reload by snapd inside a journal-covered window, the node's one
    GPU container being ``row``."""
    ev = [reload("2026-09-02T04:05:13", 1, "systemctl", "snapd.service")]
    return judge("daemon-reload", Window(T("2026-09-02T04:00:00"), T("2026-09-02T04:10:00")),
                 Evidence(ev, cov(journal=("2026-07-16T15:00:05", "2026-11-29T23:00:00")),
                          exposure={"assessed": True, "containers": [row]}))


def test_reload_in_the_window_is_never_excluded_by_a_driver_only_assumed_from_a_default():
    # issue 14: a Docker-like host whose containerd config reads SystemdCgroup=false (a default) while PID 1
    # logged the reload inside the window; a default is no evidence, so the reload is confirmed, saying so
    c = snapd_reload_with({**HOOK_ROW, "cgroup_driver": "cgroupfs", "cgroup_driver_basis": "default",
                           "cgroup_driver_source": "assumed: containerd's default", "at_risk": False})
    assert (c.verdict, c.mechanism) == ("confirmed", "fits") and c.at == T("2026-09-02T04:05:13")
    assert "the cgroupfs driver is only assumed (assumed: containerd's default)" in c.reason
    assert c.evidence[0]["line"] == 1 and c.requested_by["unit"] == "snapd.service"


def test_sources_that_disagree_on_the_driver_make_the_reload_inferred_with_the_contradiction():
    c = snapd_reload_with({**HOOK_ROW, "cgroup_driver_conflict": "the container's own evidence says systemd (runc "
                           "state.json), but containerd's SystemdCgroup=false says cgroupfs"})
    assert c.verdict == "inferred" and "sources contradict each other" in c.reason
    assert "containerd's SystemdCgroup=false says cgroupfs" in c.contradictions[0]


def test_unknown_injection_is_named_and_does_not_exclude():
    c = snapd_reload_with({**HOOK_ROW, "gpu_injection": "unknown", "spec_detail": "unreadable: EACCES"})
    assert (c.verdict, c.mechanism) == ("confirmed", "fits") and c.contradictions == []
    assert "its config.json was not read (unreadable: EACCES)" in c.reason


def test_no_journal_at_all_is_undetermined():
    c = judge("daemon-reload", Window(T("2026-09-02T04:00:00"), T("2026-09-02T04:10:00")),
                               Evidence([], {"journal": Coverage("journal", None, None, "absent")}))
    assert c.verdict == "undetermined"


def test_package_history_covering_the_window_excludes_a_transaction():
    c = judge("package-transaction", Window(T("2026-07-11T03:34:00"), T("2026-08-01T15:00:00")),
                                     Evidence([], cov(dpkg=("2025-08-21T01:02:11", "2026-11-30T02:00:00"))))
    assert c.verdict == "excluded" and "dpkg from 2025-08-21T01:02:11Z" in c.reason


def test_package_history_starting_inside_the_window_is_undetermined():
    c = judge("package-transaction", Window(T("2026-07-11T03:34:00"), T("2026-08-01T15:00:00")),
                                     Evidence([], cov(dpkg=("2026-07-20T00:00:00", "2026-11-30T02:00:00"))))
    assert c.verdict == "undetermined" and "dpkg holds data from 2026-07-20T00:00:00Z only" in c.gaps[0]


def test_single_boot_spanning_the_window_excludes_reboot_and_a_boot_inside_confirms_it():
    window = Window(T("2026-07-11T03:34:00"), T("2026-08-01T15:00:00"))
    c = judge("reboot", window, Evidence(coverage=cov(boot=("2025-12-25T00:12:44", "2026-11-30T02:00:00"))))
    assert c.verdict == "excluded" and "single boot spans" in c.reason
    c = judge("reboot", window, Evidence(coverage=cov(boot=("2026-07-20T00:00:00", "2026-11-30T02:00:00"))))
    assert c.verdict == "confirmed" and c.at == T("2026-07-20T00:00:00")


def test_nvml_error_opens_incident_from_last_healthy_marker_and_repeats_do_not():
    healthy = Event(T("2026-09-02T04:04:58"), "journal", "journal.healthy", "ready", {"pod": "ml/trainer-0"})
    errs = [Event(T(f"2026-09-02T04:05:{s}"), "journal", "journal.nvml-error", "NVML",
                  {"pod": "ml/trainer-0", "message": "Failed to initialize NVML: Unknown Error"}) for s in (27, 37)]
    incs = incidents_from(Signs(events=[healthy] + errs))
    assert len(incs) == 1
    assert (incs[0].start, incs[0].end) == (T("2026-09-02T04:04:58"), T("2026-09-02T04:05:27"))


def test_manifest_incident_and_coverage_of_append_only_logs():
    m = {"incidents": [{"start": "2026-07-11T03:34:00Z", "end": "2026-08-01T15:00:00Z", "label": "july"}],
         "collection": {"start": "2026-11-30T02:00:00Z"},
         "artifacts": [{"source": "/var/log/dpkg.log", "status": "collected"}]}
    # dpkg's last line is in June, but the log was still written at collection: it covers the window
    dpkg = packages.still_written(Coverage("dpkg", T("2025-08-21T01:02:11"), T("2026-06-10T21:32:09"), "dpkg.log"), m)
    incs, c = correlate(m, [], [dpkg], exposure=PRE)
    assert incs[0].label == "july"
    assert {x.kind: x.verdict for x in incs[0].causes}["package-transaction"] == "excluded"
    assert c["dpkg"].end == T("2026-11-30T02:00:00")


def test_rotations_alone_do_not_cover_up_to_collection():
    m = {"incidents": [{"start": "2026-07-11T03:34:00Z", "end": "2026-08-01T15:00:00Z"}],
         "collection": {"start": "2026-11-30T02:00:00Z"},
         "artifacts": [{"source": "/var/log/dpkg.log", "status": "unreadable"}]}
    dpkg = packages.still_written(Coverage("dpkg", T("2025-08-21T01:02:11"), T("2026-06-10T21:32:09"), "rotations"), m)
    incs, c = correlate(m, [], [dpkg], exposure=PRE)
    assert c["dpkg"].end == T("2026-06-10T21:32:09")
    assert {x.kind: x.verdict for x in incs[0].causes}["package-transaction"] == "undetermined"


def test_first_surviving_entry_of_a_rotated_journal_is_not_a_reboot():
    """The July trap: the journal's oldest boot 'starts' at its first surviving entry."""
    window = Window(T("2026-07-11T03:34:00"), T("2026-08-01T15:00:00"))
    first = Event(T("2026-07-16T15:00:05"), "journal", "journal.boot", "boot", {"boot_id": "8c2e4f6a1b3d4e5f9a7c6b5d4e3f2a10"})
    c = judge("reboot", window, Evidence(coverage=cov(boot=("2025-12-25T00:12:44", "2026-11-30T02:00:00")),
                                         node={"boot_id": "8c2e4f6a-1b3d-4e5f-9a7c-6b5d4e3f2a10"}, boots=[first]))
    assert c.verdict == "excluded"
    second = Event(T("2026-07-20T00:00:00"), "journal", "journal.boot", "boot", {"boot_id": "aa"})
    c = judge("reboot", window, Evidence(coverage=cov(journal=("2026-07-16T15:00:05", "2026-11-30T02:00:00")),
                                         boots=[first, second]))
    assert c.verdict == "confirmed" and c.at == T("2026-07-20T00:00:00")


def _c(kind, at, **attrs):
    return Event(T(at), "containers", kind, kind, attrs, {"artifact": "containers/k8s.io/x/record.json"})


def test_container_log_error_opens_incident_from_its_last_clean_line():
    ev = [_c("container.created", "2026-09-02T04:03:41", id="6a1f", pod="trainer-0", namespace="ml"),
          _c("container.log-healthy", "2026-09-02T04:05:12", pod="trainer-0", namespace="ml"),
          _c("container.log-error", "2026-09-02T04:05:21", pod="trainer-0", namespace="ml",
             message="Failed to initialize NVML: Unknown Error")]
    incs = incidents_from(Signs(events=ev))
    assert [(i.start, i.end, i.origin) for i in incs] == [(T("2026-09-02T04:05:12"), T("2026-09-02T04:05:21"), "containers")]


def test_broken_container_is_absorbed_by_a_tighter_incident_already_open():
    m = [{"start": "2026-07-11T03:34:00Z", "end": "2026-08-01T15:00:00Z", "label": "july"}]
    ev = [_c("container.created", "2026-01-05T00:00:00", id="dp1", pod="nvidia-device-plugin-x", namespace="kube-system")]
    broken = [{"id": "dp1", "pod": "nvidia-device-plugin-x", "namespace": "kube-system", "reason": "cgroup denies 195:*"}]
    incs = incidents_from(Signs(m, ev, broken=broken, collected_at=T("2026-11-30T02:00:00")))
    assert len(incs) == 1 and incs[0].label == "july"
    assert any("nvidia-device-plugin-x" in n for n in incs[0].notes)


def test_reload_found_in_a_window_the_journal_only_partly_covers_says_it_may_not_be_the_first():
    ev = [reload("2026-09-02T04:05:13", 48211, "systemctl", "snapd.service")]
    c = judge("daemon-reload", Window(T("2026-01-05T00:00:00"), T("2026-11-30T02:00:00")),
                               Evidence(ev, cov(journal=("2026-07-16T15:00:05", "2026-11-29T23:00:00"))))
    assert c.verdict == "confirmed" and "may not be the first" in c.reason


def test_correlate_weighs_only_the_window_and_the_requester_lookback_but_finds_the_same():
    """correlate() hands each rule the events from REQUESTER_LOOKBACK before the window to just after it:
    a requester 290 s before a reload at the window's start is still found, and package lines outside
    the window (one a day for a year) change nothing, in time order or not."""
    m = {"incidents": [{"start": "2026-09-02T04:05:00Z", "end": "2026-09-02T04:10:00Z"}],
         "collection": {"start": "2026-11-30T00:00:00Z"}}
    sudo = Event(T("2026-09-02T04:00:11"), "journal", "journal.requester", "sudo: systemctl daemon-reload",
                 {"identifier": "sudo", "comm": "sudo", "unit": "session-3.scope", "pid": 4711, "message": "COMMAND=/bin/systemctl daemon-reload"},
                 {"artifact": "journal/entries.jsonl", "line": 3})
    daily = [Event(T("2026-01-01T03:00:00") + timedelta(days=d), "dpkg", "package.dpkg-action", "upgrade x 1 2",
                   {"action": "upgrade", "package": "x"}, {"artifact": "packages/dpkg/dpkg.log", "line": d})
             for d in range(365) if d != 244]
    ev = sorted(daily + [sudo, reload("2026-09-02T04:05:01")], key=lambda e: e.at)
    coverage = [Coverage("journal", T("2026-01-01T00:00:00"), T("2026-11-30T00:00:00"), "journal span"),
                Coverage("dpkg", T("2026-01-01T00:00:00"), T("2026-11-30T00:00:00"), "dpkg span")]
    (inc,), _ = correlate(m, ev, coverage, exposure=PRE)
    by = {c.kind: c for c in inc.causes}
    reload_cause, packages, reboot = by["daemon-reload"], by["package-transaction"], by["reboot"]
    assert reload_cause.verdict == "confirmed" and reload_cause.requested_by["unit"] == "session-3.scope"
    assert "290 s before the reload" in reload_cause.requested_by["inferred_from"]
    assert packages.verdict == "excluded" and reboot.verdict == "excluded"
    (shuffled,), _ = correlate(m, ev[::-1], coverage, exposure=PRE)
    assert [(c.kind, c.verdict) for c in shuffled.causes] == [(c.kind, c.verdict) for c in inc.causes]
