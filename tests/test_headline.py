"""The headline: computed from the causes and the exposure together (issue 14, "evidence beats defaults")."""
from __future__ import annotations

import re
from datetime import datetime, timezone

from forensics.events import Coverage, Event
from forensics.findings.headline import _cause_json, headline, verdict_sentence
from forensics.findings.openers import Incident
from forensics.findings.verdicts import Cause, Evidence, Window
from test_verdicts import judge
from reports import render

UTC = timezone.utc
T = lambda s: datetime.fromisoformat(s).replace(tzinfo=UTC)  # noqa: E731
START, END = T("2026-09-02T04:00:00"), T("2026-09-02T04:10:00")
BROKEN = {"containers": [{"id": "c1", "namespace": "ml", "pod": "train-0", "gpu_injection": "hook",
                          "at_risk": True, "broken": True, "reason": "probe: EPERM on /dev/nvidiactl"}]}


def incident(*causes: Cause) -> Incident:
    return Incident("I1", "Failed to initialize NVML: Unknown Error", START, END, "journal", causes=list(causes))


def excluded_all() -> Incident:
    return incident(Cause("daemon-reload", "excluded", "The journal covers the whole window and PID 1 logged no reload."),
                    Cause("package-transaction", "excluded", "Package history covers the whole window."),
                    Cause("reboot", "excluded", "A single boot spans the window."))


def analysis(inc: Incident, exposure: dict) -> dict:
    """A minimal analysis dict, as forensics.findings.analysis.build shapes it, for rendering."""
    return {"node": "gpu-7", "collected_at": "2026-09-02T05:00:00Z", "timezone": {"name": "UTC", "utc_offset": "+00:00"},
            "node_facts": {}, "headline": headline([inc], exposure),
            "verdicts": [verdict_sentence(inc, inc.causes[0], UTC)],
            "incidents": [{"id": inc.id, "symptom": inc.symptom, "label": None, "origin": inc.origin,
                           "window": {"start": "2026-09-02T04:00:00Z", "end": "2026-09-02T04:10:00Z",
                                      "start_local": "2026-09-02T04:00:00+00:00", "end_local": "2026-09-02T04:10:00+00:00"},
                           "evidence": [], "notes": [], "causes": [_cause_json(c, UTC) for c in inc.causes]}],
            "exposure": {"assessed": True, "verdict": "Broken: 1 container already lost GPU access; recreate it.",
                         "notes": [], "remedies": [], **exposure},
            "metrics": {"collected": False}, "gaps": [], "problems": [], "timeline": [], "timeline_omitted": {},
            "bundle": {"path": "/tmp/b", "manifest_sha256": "ab" * 32, "artifacts": [], "command_line": "collect"}}


def test_broken_and_every_cause_excluded_is_undetermined_never_excluded():
    h = headline([excluded_all()], BROKEN)
    assert h == {"verdict": "undetermined",
                 "text": "undetermined: none of the known causes fits (each one is excluded); 1 container lost GPU access"}


def test_broken_undetermined_headline_renders_in_the_warning_colour_and_nothing_at_the_top_is_green():
    a = analysis(excluded_all(), BROKEN)
    html = render.html(a)
    assert re.search(r'<p id="headline" class="v headline warning">undetermined: none of the known causes fits', html)
    assert ".v.warning{border-color:#c77700" in html  # the warning colour, the inferred one: never the green
    top = html[html.index('<h2 id="verdicts">'):html.index('<h2 id="exposure">')]
    assert "EXCLUDED" in top and 'class="v excluded"' not in top and "class=\"v undetermined\"" in top
    md = render.markdown(a)
    assert "**undetermined: none of the known causes fits (each one is excluded); 1 container lost GPU access**" in md


def test_a_cause_that_fits_leads_the_headline_and_an_undetermined_one_says_so():
    inc = incident(Cause("daemon-reload", "inferred", "journal rotated"), Cause("reboot", "confirmed", "btime"))
    h = headline([inc], {})
    assert (h["verdict"], h["text"], h["cause"], h["incident"]) == (
        "confirmed", "confirmed: a reboot (I1); also fits: a systemd daemon-reload (I1, inferred)", "reboot", "I1")
    inc = incident(Cause("daemon-reload", "excluded", "covered"), Cause("package-transaction", "undetermined", "no log"))
    assert headline([inc], BROKEN)["text"] == ("undetermined: no known cause is confirmed or inferred; a package "
                                               "transaction can be neither shown nor ruled out; 1 container lost GPU access")
    assert headline([], {"containers": []}) == {"verdict": "none", "text": "none: no incident was found"}
    assert headline([], BROKEN)["verdict"] == "undetermined"


def test_reload_against_a_failing_precondition_is_shown_as_a_contradiction_in_the_report():
    reload = Event(T("2026-09-02T04:05:13"), "journal", "journal.reload", "reload",
                   {"wording": "Reloading.", "requester_pid": 1, "requester_comm": "systemctl",
                    "requester_unit": "snapd.service"}, {"artifact": "journal/entries.jsonl", "line": 1})
    conflict = ("the container's own evidence says systemd (runc state.json), but containerd's SystemdCgroup=false "
                "(default (runtime runc); read from /etc/containerd/config.toml) says cgroupfs")
    row = {**BROKEN["containers"][0], "cgroup_driver": "systemd", "cgroup_driver_basis": "evidence",
           "cgroup_driver_conflict": conflict}
    c = judge("daemon-reload", Window(START, END), Evidence(
        [reload], {"journal": Coverage("journal", T("2026-07-16T15:00:05"), T("2026-11-29T23:00:00"), "span")},
        exposure={"assessed": True, "containers": [row]}))
    inc = incident(c, Cause("reboot", "excluded", "A single boot spans the window."))
    a = analysis(inc, BROKEN)
    assert a["headline"]["verdict"] == "inferred" and a["headline"]["text"] == (
        "inferred: a systemd daemon-reload (I1); the sources contradict each other (see the cause); 1 container lost "
        "GPU access")
    assert a["incidents"][0]["causes"][0]["contradictions"][0] == f"ml/train-0: {conflict}"
    html = render.html(a)
    assert '<p id="headline" class="v headline inferred">' in html
    assert re.search(r'<tr class="contradiction"><td colspan="7" data-label=""><b>Sources contradict each other:</b> ml/train-0: the '
                     r"container&#39;s own evidence says systemd", html)
    assert "Sources contradict each other (I1, daemon-reload): ml/train-0: the container's own evidence" in render.markdown(a)
