"""``timeline[]`` of the analysis as a view over the events (issue 30): each entry is made when it is read,
never held, and reads, compares, copies and writes as the list analysis.json holds."""
from __future__ import annotations

import copy
import json

import pytest

from forensics.bundle import Bundle
from forensics.findings.entries import Timeline
from forensics.ops.pipeline import analyze
from reports import render

@pytest.fixture(scope="module")
def a(sample_bundle):
    b = Bundle.open(sample_bundle)
    try:
        return analyze(b)
    finally:
        b.close()


def test_the_timeline_is_made_when_read_and_reads_as_analysis_json(a):
    t = a["timeline"]
    assert isinstance(t, Timeline) and repr(t) == f"<Timeline of {len(t)} entries>"
    reload = next(e for e in t if e["kind"] == "journal.reload")
    assert (reload["at"], reload["local"], reload["source"]) == ("2026-09-02T04:05:13.211000Z",
                                                                 "2026-09-02T13:05:13.211000+09:00", "journal")
    first = t[0]
    assert first is not t[0] and first == t[0]  # made anew at each read, the same entry
    first["summary"] = "changed by a reader"
    first["flags"].append("by a reader")
    assert t[0]["summary"] != "changed by a reader" and "by a reader" not in t[0]["flags"]
    back = json.loads(render.to_json(a))["timeline"]
    assert isinstance(back, list) and back == t and t == back and len(back) == len(t)
    assert t[1:3] == back[1:3] and isinstance(t[1:3], list)
    assert t.index(reload) == back.index(reload)
    assert t != back[:-1] and t != "not a timeline"
    with pytest.raises(TypeError):
        hash(t)


def test_a_deep_copy_is_a_plain_list_a_reader_may_change(a):
    two = copy.deepcopy(a)
    assert type(two["timeline"]) is list and two["timeline"] == a["timeline"]
    two["timeline"][0]["attrs"]["added"] = 1
    assert "added" not in a["timeline"][0]["attrs"]


def test_a_short_timeline_is_written_as_a_list_too(a):
    """A view of at most :data:`reports.render.JSON_BATCH` entries went to ``json.dumps(default=str)`` whole,
    which would have written its repr as a string."""
    assert len(a["timeline"]) <= render.JSON_BATCH
    text = "".join(render._json_value(a["timeline"]))
    assert json.loads(text) == a["timeline"] and text.startswith("[{")
