"""Forged PID 1 and kubelet lines (issue 14 item 5 "Trust"): any local user can write a journal entry
with ``SYSLOG_IDENTIFIER=systemd`` and ``SYSLOG_PID=1`` (``logger -t systemd``) or
``SYSLOG_IDENTIFIER=kubelet``; journald still records who wrote it in its trusted fields (``_PID`` from
the socket's peer credentials, ``_COMM``, ``_UID``, ``_TRANSPORT=syslog``). Such a line is kept in the
bundle, read as a ``journal.forged`` event, shown as a red flag and never counted as evidence.

The journals are real .journal files built by systemd-journal-remote (samples/journalbuild.py).
"""
from __future__ import annotations

from datetime import timedelta

import pytest

from journalbuild import build_journal
from test_hostile_inputs import MACHINE, node_root, run
from test_journal import T0, analyse, caller, collect, entry, host_with, kinds, pid1, service, stored

from reports import render

#: matplotlib's date locator warned on this span, drawn in-process: it reached the engineer's terminal
pytestmark = pytest.mark.filterwarnings("error::UserWarning")

S = timedelta(seconds=1)
FORGED_CALLER = "Reloading requested from client PID 4242 ('systemctl') (unit evil.service)..."
#: what journald records for ``logger -t systemd --id=1`` run by uid 1000 as PID 31337
LOGGER = {"_TRANSPORT": "syslog", "_UID": 1000, "_GID": 1000, "_COMM": "logger", "SYSLOG_PID": 1,
          "_SYSTEMD_UNIT": "session-3.scope"}
INCIDENT = [{"start": (T0 - 10 * S).isoformat(), "end": (T0 + 30 * S).isoformat()}]


def forged_caller(at=T0):
    return entry(at, 31337, "systemd", FORGED_CALLER, **LOGGER)


def _node(tmp_path, name, *entries):
    root = node_root(tmp_path / name)
    build_journal(b"".join(entries), root / "var/log/journal" / MACHINE / "system.journal")
    return root


def _reload_cause(a):
    [inc] = a["incidents"]
    return next(c for c in inc["causes"] if c["kind"] == "daemon-reload")


def test_a_forged_pid1_reload_line_is_kept_flagged_and_never_evidence(tmp_path):
    genuine = [pid1(T0 - 60 * S, "Started kubelet.service.", UNIT="kubelet.service"),
               pid1(T0 + 60 * S, "Stopping kubelet.service...", UNIT="kubelet.service")]
    _b, without = run(tmp_path, _node(tmp_path, "a", *genuine), incidents=INCIDENT)
    html_line = entry(T0 + S, 31337, "systemd", "Started <img src=x onerror=alert(1)>.", **LOGGER)
    bundle, a = run(tmp_path, _node(tmp_path, "b", genuine[0], forged_caller(), html_line, genuine[1]),
                    incidents=INCIDENT)
    # kept in the bundle, selected as forged only
    kept = [e for e in stored(bundle) if e.get("_PID") == "31337"]
    assert [e["_GF_SELECTED_BY"] for e in kept] == [["forged"], ["forged"]]
    # no reload from it: the verdict is what it is without the line, never confirmed
    assert not [e for e in a["timeline"] if e["kind"] in ("journal.reload", "journal.unit") and
                "31337" in str(e)]
    cause = _reload_cause(a)
    assert cause["verdict"] != "confirmed" and cause["verdict"] == _reload_cause(without)["verdict"]
    assert "evil.service" not in str(cause) and "evil.service" not in " ".join(a["verdicts"])
    # shown as a red flag with who really wrote it
    flags = a["red_flags"]
    assert [(f["claim"], f["claimed_identifier"], f["claimed_pid"], f["pid"], f["comm"], f["uid"], f["transport"])
            for f in flags] == [("PID 1", "systemd", "1", 31337, "logger", 1000, "syslog")] * 2
    assert flags[0]["message"] == FORGED_CALLER and flags[0]["at"] == "2026-07-17T12:00:00Z"
    assert [e["flags"] for e in a["timeline"] if e["kind"] == "journal.forged"] == [["forged"], ["forged"]]
    assert "red_flags" not in without
    md, html = render.markdown(a), render.html(a)
    assert md.index("Red flags") < md.index("### Verdicts") and "_PID=31337 _COMM=logger _UID=1000" in md
    assert html.index("Red flags") < html.index('id="verdicts"')
    assert ('<td data-label="Real _PID">31337</td><td data-label="_COMM">logger</td><td data-label="_UID">1000</td>'
            '<td data-label="_TRANSPORT">syslog</td>') in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "\\<img src=x" in md


def test_a_forged_kubelet_nvml_line_opens_no_incident_and_is_flagged(tmp_path):
    forged = entry(T0, 31338, "kubelet", "Failed to initialize NVML: Unknown Error", **{**LOGGER, "SYSLOG_PID": 31338})
    _b, a = run(tmp_path, _node(tmp_path, "n", pid1(T0 - 60 * S, "Started kubelet.service.", UNIT="kubelet.service"),
                                forged))
    assert a["incidents"] == [] and not [e for e in a["timeline"] if e["kind"] == "journal.nvml-error"]
    [f] = a["red_flags"]
    assert (f["claim"], f["claimed_identifier"], f["pid"], f["comm"], f["uid"]) == (
        "kubelet", "kubelet", 31338, "logger", 1000)


def test_genuine_lines_are_trusted_and_a_forged_one_among_them_is_not(tmp_path):
    # PID 1's own lines (_PID=1 on the native protocol), a kubelet line from kubelet.service, kubelet's
    # line from outside any unit but by its _COMM as root, and the forged caller between them
    root = host_with(tmp_path,
                     caller(T0, "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)..."),
                     pid1(T0 + S / 10, "Reloading..."),
                     forged_caller(T0 + 2 * S),
                     service(T0 + 3 * S, 2210, "kubelet.service", "kubelet", "Failed to initialize NVML: Unknown Error"),
                     entry(T0 + 4 * S, 2211, "kubelet", "Failed to initialize NVML: Unknown Error", _COMM="kubelet",
                           _SYSTEMD_UNIT="cri-containerd-1.scope", _TRANSPORT="stdout"),
                     entry(T0 + 5 * S, 2212, "kubelet", "Failed to initialize NVML: Unknown Error",
                           **{**LOGGER, "_COMM": "kubelet", "SYSLOG_PID": 2212}))  # uid 1000 renamed itself
    reading = analyse(collect(tmp_path, root))
    assert [e.attrs["requester_unit"] for e in kinds(reading, "journal.reload")] == ["snapd.service"]
    assert [e.at for e in kinds(reading, "journal.nvml-error")] == [T0 + 3 * S, T0 + 4 * S]
    assert [(e.at, e.attrs["claim"]) for e in kinds(reading, "journal.forged")] == [
        (T0 + 2 * S, "PID 1"), (T0 + 5 * S, "kubelet")]


def test_a_bundle_collected_before_the_forged_rule_is_judged_the_same(tmp_path):
    # an older collector kept the forged caller line as PID 1's ("pid1"): read() still sees through it
    bundle = collect(tmp_path, host_with(tmp_path, forged_caller(), pid1(T0 + S / 10, "Reloading...")))
    p = bundle.path("journal/entries.jsonl")
    p.write_text(p.read_text().replace('"_GF_SELECTED_BY": ["forged"', '"_GF_SELECTED_BY": ["pid1"'))
    assert '"forged"' not in p.read_text()
    reading = analyse(bundle)
    [reload] = kinds(reading, "journal.reload")
    assert (reload.at, reload.attrs["requester_pid"]) == (T0 + S / 10, None)  # PID 1's own line, no caller
    assert [(e.at, e.attrs["pid"], e.attrs["comm"]) for e in kinds(reading, "journal.forged")] == [
        (T0, 31337, "logger")]
