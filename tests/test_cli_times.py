"""Times on the command line (issue 16 item 5): relative times and zone-less times read in the NODE's
zone, each reading said in one line. "Now" is fixed by ``$GPU_FORENSICS_NOW`` (or ``NodeClock(now=)``),
never the wall clock. The sample node is in Asia/Seoul (UTC+09:00, no DST); the Berlin roots have
only ``/etc/timezone``, so the rules come by name and the line says so."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from forensics.ops.cli import main
from forensics.ops.when import NodeClock, join_negative_times, resolve_incident

UTC = timezone.utc
NOW = datetime(2026, 12, 1, 16, 0, 0, tzinfo=UTC)  # = 2026-12-02 01:00 in Seoul
SEOUL_SAID = "/etc/localtime (TZif bytes, link -> /usr/share/zoneinfo/Asia/Seoul)"


@pytest.fixture(scope="module")
def sample():
    from forensics.ops.cli import SAMPLE_ROOT
    return SAMPLE_ROOT


def _berlin(tmp_path):
    root = tmp_path / "berlin"
    (root / "etc").mkdir(parents=True)
    (root / "etc/timezone").write_text("Europe/Berlin\n")
    return root


@pytest.mark.parametrize("text, start, end, notes", [
    ("-2h..now", "2026-12-01T14:00:00Z", "2026-12-01T16:00:00Z",
     ["read -2h as 2026-12-01 14:00:00 UTC (2h before now, 2026-12-01 16:00:00 UTC)",
      "read now as 2026-12-01 16:00:00 UTC"]),
    ("2026-11-30T14:00..+30m", "2026-11-30T05:00:00Z", "2026-11-30T05:30:00Z",
     [f"read 2026-11-30 14:00 as Asia/Seoul (from {SEOUL_SAID}), = 2026-11-30 05:00:00 UTC",
      "read +30m as 2026-11-30 05:30:00 UTC (30m after START)"]),
    ("yesterday..today", "2026-11-30T15:00:00Z", "2026-12-01T15:00:00Z",
     [f"read yesterday (2026-12-01 00:00) as Asia/Seoul (from {SEOUL_SAID}), = 2026-11-30 15:00:00 UTC",
      f"read today (2026-12-02 00:00) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 15:00:00 UTC"]),
    ("2 days ago..90m ago", "2026-11-29T16:00:00Z", "2026-12-01T14:30:00Z",
     ["read 2 days ago as 2026-11-29 16:00:00 UTC (2 days before now, 2026-12-01 16:00:00 UTC)",
      "read 90m ago as 2026-12-01 14:30:00 UTC (90m before now, 2026-12-01 16:00:00 UTC)"]),
    # clock times as people type them (issue 28): in the node's zone, today's unless still to come
    ("00:10..00:50", "2026-12-01T15:10:00Z", "2026-12-01T15:50:00Z",
     [f"read 00:10 (2026-12-02 00:10) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 15:10:00 UTC",
      f"read 00:50 (2026-12-02 00:50) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 15:50:00 UTC"]),
    ("14:00..15:00", "2026-12-01T05:00:00Z", "2026-12-01T06:00:00Z",
     [f"read 14:00 (2026-12-01 14:00) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 05:00:00 UTC; that clock "
      "time is still to come today, so yesterday's is taken",
      f"read 15:00 (2026-12-01 15:00) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 06:00:00 UTC"]),
    ("yesterday 23:00..00:30:15", "2026-12-01T14:00:00Z", "2026-12-01T15:30:15Z",
     [f"read yesterday 23:00 (2026-12-01 23:00) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 14:00:00 UTC",
      f"read 00:30:15 (2026-12-02 00:30:15) as Asia/Seoul (from {SEOUL_SAID}), = 2026-12-01 15:30:15 UTC; that "
      "clock time comes before START, so the next day's is taken"]),
    # an ISO time with an offset means what it says, and is not said back
    ("2026-07-11T12:34+09:00..2026-08-02T00:00+09:00", "2026-07-11T03:34:00Z", "2026-08-01T15:00:00Z", []),
])
def test_incident_forms_against_the_node_clock(sample, text, start, end, notes):
    inc, said = resolve_incident(text + "=x", NodeClock(sample, now=NOW))
    assert (inc["start"], inc["end"], inc["label"], inc["text"]) == (start, end, "x", text + "=x")
    assert said == notes


def test_a_zone_less_time_is_read_in_the_node_zone_from_etc_timezone(tmp_path):
    clock = NodeClock(_berlin(tmp_path), now=NOW)
    utc, note = clock.read("2026-11-30 14:00")
    assert utc == datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
    assert note == ("read 2026-11-30 14:00 as Europe/Berlin (from /etc/timezone; no TZif for Europe/Berlin "
                    "inside --root), = 2026-11-30 13:00:00 UTC")
    # summer time there: +02:00
    assert clock.read("2026-07-01")[0] == datetime(2026, 6, 30, 22, 0, tzinfo=UTC)
    # 02:30 on 2026-03-29 never happened in Berlin (clocks went 02:00 -> 03:00)
    utc, note = clock.read("2026-03-29T02:30")
    assert utc == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert note.endswith("= 2026-03-29 01:30:00 UTC; that wall time did not occur there (a DST gap): moved forward")


def test_a_zone_less_time_on_a_node_without_a_zone_is_refused_not_guessed(tmp_path):
    clock = NodeClock(tmp_path, now=NOW)  # an empty root: the node does not say its zone
    with pytest.raises(ValueError, match=r"^time '2026-11-30T14:00' is read in the node's zone, and the node's "
                                         r"time zone is unknown"):
        clock.read("2026-11-30T14:00")
    with pytest.raises(ValueError, match="node's time zone is unknown"):
        clock.read("yesterday")
    assert clock.read("-2h")[0] == datetime(2026, 12, 1, 14, 0, tzinfo=UTC)  # needs no zone


@pytest.mark.parametrize("text, message", [
    ("soon..now", "--incident 'soon..now': time 'soon': expected ISO 8601 with an offset"),
    ("+30m..now", "--incident '+30m..now': time '+30m': +DURATION counts from START, so it is for END only"),
    ("now..-2h", "--incident 'now..-2h': END (2026-12-01T14:00:00Z) is before START (2026-12-01T16:00:00Z)"),
])
def test_bad_times_are_one_usage_line(tmp_path, capsys, monkeypatch, text, message):
    monkeypatch.setenv("GPU_FORENSICS_NOW", "2026-12-01T16:00:00Z")
    assert main(["collect", "--root", str(tmp_path), "--out", str(tmp_path / "b"), "--incident", text]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpu-forensics: error: {message}")
    assert not (tmp_path / "b").exists()


def test_negative_values_stay_with_their_flag():
    assert join_negative_times(["collect", "--incident", "-2h..now", "--since", "-3d", "--out", "x"]) == \
        ["collect", "--incident=-2h..now", "--since=-3d", "--out", "x"]
    assert join_negative_times(["collect", "--since", "--out", "x"]) == ["collect", "--since", "--out", "x"]


def test_collect_records_relative_and_local_times_in_utc(tmp_path, capsys, monkeypatch):
    """Through the real CLI: ``--incident -2h..now`` (space form), ``--incident=...``, ``--since``, each in
    the manifest in UTC, and one line each on stderr saying how it was read."""
    monkeypatch.setenv("GPU_FORENSICS_NOW", "2026-12-01T16:00:00Z")
    root, out = _berlin(tmp_path), tmp_path / "b"
    rc = main(["collect", "--root", str(root), "--out", str(out), "--incident", "-2h..now=last",
               "--incident=2026-11-30T14:00..+30m", "--since", "2026-11-29"])
    assert rc == 0
    m = json.loads((out / "manifest.json").read_text())
    assert [(i["start"], i["end"], i["label"]) for i in m["incidents"]] == [
        ("2026-12-01T14:00:00Z", "2026-12-01T16:00:00Z", "last"),
        ("2026-11-30T13:00:00Z", "2026-11-30T13:30:00Z", None)]
    assert m["options"]["since"] == "2026-11-28T23:00:00Z"
    assert m["command_line"].endswith("--incident -2h..now=last --incident=2026-11-30T14:00..+30m --since 2026-11-29")
    said = [x for x in capsys.readouterr().err.splitlines() if x.startswith("gpu-forensics: read ")]
    berlin = "Europe/Berlin (from /etc/timezone; no TZif for Europe/Berlin inside --root)"
    assert said == [
        "gpu-forensics: read -2h as 2026-12-01 14:00:00 UTC (2h before now, 2026-12-01 16:00:00 UTC)",
        "gpu-forensics: read now as 2026-12-01 16:00:00 UTC",
        f"gpu-forensics: read 2026-11-30 14:00 as {berlin}, = 2026-11-30 13:00:00 UTC",
        "gpu-forensics: read +30m as 2026-11-30 13:30:00 UTC (30m after START)",
        f"gpu-forensics: read 2026-11-29 00:00 as {berlin}, = 2026-11-28 23:00:00 UTC"]


@pytest.mark.parametrize("since, utc", [("2d", "2026-11-29T16:00:00Z"), ("yesterday", "2026-11-29T23:00:00Z"),
                                        ("2026-01-01", "2025-12-31T23:00:00Z"),
                                        ("2026-01-01T00:00+05:00", "2025-12-31T19:00:00Z")])
def test_since_forms(tmp_path, capsys, monkeypatch, since, utc):
    monkeypatch.setenv("GPU_FORENSICS_NOW", "2026-12-01T16:00:00Z")
    out = tmp_path / "b"
    assert main(["collect", "--root", str(_berlin(tmp_path)), "--out", str(out), "--since", since]) == 0
    assert json.loads((out / "manifest.json").read_text())["options"]["since"] == utc
