"""The kinds table is the one home of each event kind: its attrs, what its time means, whether it is
context, and (in reports/) how the chart draws it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from forensics.events import KINDS, Event, Kind, is_context
from forensics.findings.analysis import _timeline
from reports import render, styles

T = datetime(2026, 9, 2, 4, 5, 13, tzinfo=timezone.utc)


def one_of_each(at: datetime) -> list[Event]:
    return [Event(at, "test", kind, kind, {a: None for a in k.attrs}) for kind, k in KINDS.items()]


def test_every_kind_has_a_timestamp_desc_in_timesketch_words():
    for kind, k in KINDS.items():
        assert isinstance(k, Kind) and k.attrs, kind
        assert k.timestamp_desc and k.timestamp_desc != kind and "." not in k.timestamp_desc, kind
        assert k.timestamp_desc.endswith(("Time", "Good", "Bad", "Boot")), kind
    assert KINDS["journal.reload"].timestamp_desc == "Reload Requested Time"
    assert KINDS["incident.start"].timestamp_desc == "Last Known Good"
    assert KINDS["incident.end"].timestamp_desc == "First Known Bad"


def test_every_kind_has_a_chart_style_and_a_lane():
    assert set(styles.STYLES) == set(KINDS)
    lanes = set(styles.LANES) | set(styles.OPTIONAL_LANES)
    for kind, st in styles.STYLES.items():
        if kind.startswith("incident."):
            assert st is None  # drawn as the shaded window
            continue
        lane, look = st
        assert lane in lanes and look in styles.LOOKS, kind
    assert {styles.STYLES[k][0] for k in KINDS if k.startswith("kube.")} == {"Kubernetes"}
    assert styles.style({"kind": "container.probe", "attrs": {"result": "EPERM"}})[1] is styles.PROBE_FAILED
    assert styles.style({"kind": "container.probe", "attrs": {"result": "ok"}})[1] is styles.PROBE_OK


def test_an_event_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown event kind 'journal.daemon-reload'"):
        Event(T, "journal", "journal.daemon-reload", "renamed kind")
    with pytest.raises(ValueError, match="timezone-aware"):
        Event(T.replace(tzinfo=None), "journal", "journal.reload", "naive time")
    assert Event(T, "journal", "journal.reload", "ok").kind == "journal.reload"


def test_context_kinds_are_what_analysis_and_the_html_report_leave_out_far_from_an_incident():
    context = {kind for kind, k in KINDS.items() if k.context}
    # analysis.json's timeline_omitted has always counted exactly these
    assert context == {"package.dpkg-action", "journal.requester", "journal.reload-finished"}
    assert {kind for kind in KINDS if is_context(kind)} == context and not is_context("no.such-kind")
    far = [SimpleNamespace(start=T + timedelta(days=3), end=T + timedelta(days=3, hours=1))]
    near = [SimpleNamespace(start=T - timedelta(minutes=30), end=T + timedelta(minutes=5))]
    kept, omitted = _timeline(one_of_each(T), far, timezone.utc, full=False)
    assert set(omitted) == context and all(n == 1 for n in omitted.values())
    assert {e["kind"] for e in kept} == set(KINDS) - context
    kept, omitted = _timeline(one_of_each(T), near, timezone.utc, full=False)
    assert omitted == {} and len(kept) == len(KINDS)
    kept, omitted = _timeline(one_of_each(T), far, timezone.utc, full=True)
    assert omitted == {} and len(kept) == len(KINDS)
    full, _ = _timeline(one_of_each(T), far, timezone.utc, full=True)
    a = {"timeline": full, "incidents": [{"window": {"start": "2026-09-05T04:05:13Z", "end": "2026-09-05T05:05:13Z"}}]}
    shown, hidden = render._shown_timeline(a)
    assert hidden == len(context) and {e["kind"] for e in shown} == set(KINDS) - context
