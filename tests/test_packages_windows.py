"""The package logs read for the incident windows (issue 30, forensics/source.py ``WINDOWED``): a dpkg.log
line whose text time lies farther than WINDOW_REACH from every window makes no event; it is counted,
and its time, its package change and its place in the coverage stay. The analysis is the one a full
read gives. The node is a real root (Asia/Seoul zone file, a dpkg.log of months) collected into a real
bundle by the pipeline, with the incident given as ``--incident`` would store it.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from test_hostile_inputs import node_root

from collectors import packages
from collectors.packages.events import near_windows
from forensics.bundle import Bundle
from forensics.findings.analysis import build
from forensics.ops.pipeline import analyze, collect, read_all
from forensics.timeutil import WINDOW_REACH

UTC = timezone.utc
#: the incident, 2026-09-02 04:00-04:10 UTC = 13:00-13:10 in Seoul
INCIDENT = [{"start": "2026-09-02T04:00:00Z", "end": "2026-09-02T04:10:00Z", "label": "nvml"}]
FAR = """\
2026-06-01 09:00:00 startup archives unpack
2026-06-01 09:00:01 install nvidia-driver-535:amd64 <none> 535.183.01-0ubuntu1
2026-06-01 09:00:02 status half-installed nvidia-driver-535:amd64 535.183.01-0ubuntu1
2026-06-01 09:00:03 status installed nvidia-driver-535:amd64 535.183.01-0ubuntu1
2026-02-30 09:00:04 status installed nonsense:amd64 1.0
2026-06-01 09:00:05 a line dpkg never wrote
2026-08-30 12:00:00 upgrade containerd:amd64 1.7.12-1 1.7.13-1
"""
NEAR = """\
2026-08-31 13:10:01 upgrade libnvidia-compute-535:amd64 535.183.01-0ubuntu1 535.216.01-0ubuntu1
2026-09-02 12:58:00 startup packages configure
2026-09-02 12:58:01 configure snapd:amd64 2.63 <none>
2026-09-02 12:58:02 status installed snapd:amd64 2.63
"""
LATER = "2026-09-20 08:00:00 remove cowsay:all 3.03+dfsg2-8 <none>\n"


def _bundle(tmp_path) -> Bundle:
    root = node_root(tmp_path, {"/var/log/dpkg.log": FAR + NEAR + LATER})
    path, _digest, _arts = collect(root, tmp_path / "bundle", incidents=INCIDENT, argv=["gpu-forensics", "collect"])
    return Bundle.open(path)


def test_lines_far_from_every_window_are_counted_not_made_events(tmp_path):
    bundle = _bundle(tmp_path)
    deferred = read_all(bundle, defer=True)
    assert not [e for e in deferred.events if e.source == "dpkg"]  # nothing read before the windows are known
    windows = [(datetime(2026, 9, 2, 4, 0, tzinfo=UTC), datetime(2026, 9, 2, 4, 10, tzinfo=UTC))]
    deferred.later(windows)
    full = read_all(bundle)
    kept = [e for e in deferred.events if e.source == "dpkg"]
    # near: the line of 2026-08-31 13:10:01 in Seoul (its text is within 48 h of the window's start as UTC
    # text) and the three of the incident's morning; far: June's five dated lines, 2026-08-30 and 2026-09-20
    # (the line dated 2026-02-30 has no valid time: read fully, it is a problem either way)
    assert [e.attrs["action"] for e in kept] == ["upgrade", "startup", "configure", "status"]
    assert deferred.facts["package_lines_outside_windows"] == {"dpkg": 7}
    assert deferred.facts["package_event_counts"]["dpkg"] == full.facts["package_event_counts"]["dpkg"] == 11
    # the far lines' changes and the coverage are those of the full read
    assert deferred.facts["packages_last_change"] == full.facts["packages_last_change"]
    assert deferred.facts["packages_last_change"]["nvidia-driver-535"] == "2026-06-01T00:00:01Z"
    assert deferred.facts["packages_last_change"]["cowsay"] == "2026-09-19T23:00:00Z"
    cov = {c.source: c for c in deferred.coverage}["dpkg"]
    fcov = {c.source: c for c in full.coverage}["dpkg"]
    assert (cov.start, cov.end, cov.reason) == (fcov.start, fcov.end, fcov.reason)
    assert cov.start == datetime(2026, 6, 1, 0, 0, 0, tzinfo=UTC)
    # the bad date is reported, read fully or not
    assert [p for p in deferred.problems if "2026-02-30" in p["message"]] == \
        [p for p in full.problems if "2026-02-30" in p["message"]] != []


def test_the_analysis_is_the_one_a_full_read_gives(tmp_path):
    bundle = _bundle(tmp_path)
    windowed = analyze(bundle)
    whole = build(read_all(bundle), bundle)
    assert windowed == whole
    assert windowed["timeline_omitted"]["package.dpkg-action"] == 7 + 1  # and 2026-08-31's, more than 1 h away
    # and with every context event asked for, every line is read
    full = analyze(bundle, full_timeline=True)
    assert len([e for e in full["timeline"] if e["kind"] == "package.dpkg-action"]) == 11


def test_near_is_a_comparison_of_the_text_with_the_windows_widened():
    start, end = datetime(2026, 9, 2, 4, 0, tzinfo=UTC), datetime(2026, 9, 2, 4, 10, tzinfo=UTC)
    near = near_windows([(start, end), (start + timedelta(days=1), end + timedelta(days=1))], WINDOW_REACH)
    assert near("2026-08-31 04:00:00") and not near("2026-08-31 03:59:59")
    assert near("2026-09-05 04:10:00") and not near("2026-09-05 04:10:01")
    assert not near_windows([], WINDOW_REACH)("2026-09-02 04:00:00")
    # a window near year 1 cannot be written as text that sorts: every line is near
    assert near_windows([(datetime(1, 1, 2, tzinfo=UTC), datetime(1, 1, 3, tzinfo=UTC))], WINDOW_REACH)("2026-01-01 00:00:00")
    assert packages.WINDOWED
