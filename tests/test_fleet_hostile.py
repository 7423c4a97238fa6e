"""Issue 27, fleet's inputs: a hostile analysis.json (an unparseable window end, a list where an id
belongs, any JSON value in place of any field fleet reads) is set aside with one line naming the
value, and the rest is reported; text from the inputs reaches the terminal with its control
characters escaped. The analysis is the demo's own, written by the real CLI."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from forensics.ops import fleet
from forensics.ops.cli import main
from reports import fleet as fleet_report

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
EVIL_UNIT = "snapd\x1b]0;pwned\x07\x1b[2J.service"


@pytest.fixture(scope="module")
def demo_analysis(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--out", str(out)]) == 0
    return json.loads((out / "analysis.json").read_text())


def _reload_index(a: dict) -> int:
    return next(i for i, e in enumerate(a["timeline"]) if e["kind"] == "journal.reload")


def _confirmed(a: dict) -> tuple[int, int]:
    """``(incident, cause)`` indexes of the confirmed daemon-reload (the demo's September incident)."""
    return next((i, j) for i, inc in enumerate(a["incidents"]) for j, c in enumerate(inc["causes"])
                if c["kind"] == "daemon-reload" and c["verdict"] == "confirmed")


def _put(a: dict, path: tuple, value) -> dict:
    a = copy.deepcopy(a)
    here = a
    for k in path[:-1]:
        here = here[k]
    here[path[-1]] = value
    return a


def _write(folder: Path, name: str, a) -> Path:
    p = folder / name
    p.write_text(json.dumps(a))
    return p


def test_bad_files_are_skipped_with_one_line_and_the_rest_reported(demo_analysis, tmp_path, capsys):
    a = demo_analysis
    r = _reload_index(a)
    good = _write(tmp_path, "good.json", _put(a, ("node",), "gpu-7\x1b[31m"))
    evil_label = _put(_put(a, ("timeline", r, "attrs", "requester_unit"), EVIL_UNIT), ("node",), "gpu-8")
    inc, cause = _confirmed(a)
    evil_label = _put(evil_label, ("incidents", inc, "causes", cause, "requested_by"), {"unit": EVIL_UNIT})
    labelled = _write(tmp_path, "label.json", evil_label)
    window = _write(tmp_path, "window.json", _put(a, ("incidents", 0, "window", "end"), "garbage"))
    ident = _write(tmp_path, "id.json", _put(a, ("incidents", 0, "id"), ["I1"]))
    far = _write(tmp_path, "far.json", _put(a, ("incidents", 0, "window", "end"), "0001-01-01T00:00:00Z"))
    rc = fleet.main([str(p) for p in (good, labelled, window, ident, far)] + ["--out", str(tmp_path / "r")])
    out = capsys.readouterr()
    assert rc == 3
    report = json.loads((tmp_path / "r/fleet.json").read_text())
    assert sorted(n["node"] for n in report["nodes"]) == ["gpu-7\x1b[31m", "gpu-8"]
    assert {e["bundle"]: e["error"] for e in report["errors"]} == {
        str(window): "skipped: not a valid analysis: incidents[0].window.end: not an ISO 8601 time with a zone: "
                     "'garbage'",
        str(ident): "skipped: not a valid analysis: incidents[0].id: not a string: ['I1']",
        str(far): "skipped: not a valid analysis: incidents[0].window.end: the year 1 is outside 1971..9000"}
    assert f"  skipped: {window}: not a valid analysis: incidents[0].window.end: not an ISO 8601 time with a zone: " \
           "'garbage'\n" in out.out
    assert "Traceback" not in out.err and not CONTROL.search(out.out + out.err)
    assert "daemon-reload requested by snapd\\x1b]0;pwned\\x07\\x1b[2J.service" in out.out
    page = (tmp_path / "r/fleet.html").read_text()
    assert "window.end: not an ISO 8601 time" in page and not CONTROL.search(page)


def test_out_of_range_options_are_one_line(demo_analysis, tmp_path, capsys):
    good = _write(tmp_path, "good.json", demo_analysis)
    for flags in (["--merge-window", "1e300"], ["--merge-window", "nan"], ["--jobs", "100000"]):
        assert fleet.main([str(good), "--out", str(tmp_path / "r"), *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("gpu-forensics: error: --merge-window must be")


FIELDS = [("node",), ("collected_at",), ("bundle",), ("bundle", "path"), ("bundle", "missing"), ("kube",),
          ("kube", "labels"), ("node_facts",), ("node_facts", "package_versions"), ("exposure",),
          ("exposure", "containers"), ("exposure", "containers", 0), ("exposure", "containers", 0, "pod"),
          ("exposure", "verdict"), ("exposure", "assessed"), ("exposure", "device_list_strategy"),
          ("exposure", "remedies"), ("exposure", "remedies", 0, "what"), ("timeline",), ("timeline", "R"),
          ("timeline", "R", "at"), ("timeline", "R", "attrs"), ("timeline", "R", "evidence"),
          ("timeline", "R", "kind"), ("incidents",), ("incidents", 0), ("incidents", 0, "id"),
          ("incidents", 0, "window"), ("incidents", 0, "window", "end"), ("incidents", 0, "symptom"),
          ("incidents", 0, "causes"), ("incidents", "I", "causes", "C"), ("incidents", "I", "causes", "C", "verdict"),
          ("incidents", "I", "causes", "C", "kind"), ("incidents", "I", "causes", "C", "requested_by"),
          ("incidents", "I", "causes", "C", "at"), ("incidents", "I", "causes", "C", "evidence"),
          ("incidents", "I", "causes", "C", "mechanism"), ("schema",)]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                           max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=JSON_VALUES)
def test_any_json_value_in_any_field_never_raises(demo_analysis, tmp_path, field, value):
    a = demo_analysis
    inc, cause = _confirmed(a)
    path = tuple({"R": _reload_index(a), "C": cause, "I": inc}.get(k, k) for k in field)
    p = _write(tmp_path, "a.json", _put(a, path, value))
    s = fleet.summarize(p)
    report = fleet.build([s, fleet.summarize(_write(tmp_path, "b.json", a))])
    assert len(report["nodes"]) + len(report["errors"]) == 2
    if "error" in s:
        assert "\n" not in s["error"] and s["error"].startswith(("skipped: not a valid analysis: ", "not a gpu-forensics"))
    fleet_report.html(report)
    fleet_report.to_json(report)
