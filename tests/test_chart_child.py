"""The timeline picture drawn in a child process (reports/chartproc.py: a fresh interpreter) is the
picture drawn in-process, byte for byte, in report.html; and when there is no child, or it dies or
hangs, the parent draws the same one.
"""
from __future__ import annotations

import json
import errno
import os
import pickle
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from forensics.ops.cli import main
from reports import chartproc, render
from reports.chart import timeline_svg
from reports.chartproc import ChartChild, chart_input

STAMP = re.compile(r"report generated [^<]+")  # the only part that moves between two renderings


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The embedded sample node, collected and analysed by ``demo`` (whose analyze starts the child)."""
    out = tmp_path_factory.mktemp("demo")
    assert main(["-q", "demo", "--out", str(out)]) == 0
    return out, json.loads((out / "analysis.json").read_text(encoding="utf-8"))


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_demo_report_is_the_in_process_one(demo):
    out, a = demo
    html = (out / "report.html").read_text(encoding="utf-8")
    assert STAMP.sub("", html) == STAMP.sub("", render.html(a))
    assert html.count("<svg ") == 2 and '<svg id="timeline-chart" role="img"' in html  # desktop and phone (issue 28)
    assert '<svg id="timeline-chart-phone" role="img"' in html
    assert "<!--chart: drawn in another process-->" not in html


def test_the_input_draws_the_same_picture_from_the_drawn_entries_only(demo):
    _, a = demo
    small = chart_input(a)
    assert timeline_svg(small) == timeline_svg(a)
    drawn = [e for e in a["timeline"] if not e["kind"].startswith("incident.")]
    with_attrs = ("journal.reload", "container.probe")
    once, seen = [], set()  # an entry of the time and kind of one before it draws nothing more
    for e in drawn:
        if e["kind"] in with_attrs or (e["at"], e["kind"]) not in seen:
            once.append(e)
        seen.add((e["at"], e["kind"]))
    assert small["timeline"] == [(e["at"], e["kind"], e["attrs"]) if e["kind"] in with_attrs else (e["at"], e["kind"])
                                 for e in once]


def test_an_entry_of_the_same_time_and_kind_is_sent_once_and_drawn_the_same(demo):
    _, a = demo
    entry = next(e for e in a["timeline"] if e["kind"] == "journal.unit")
    i = a["timeline"].index(entry)
    twice = {**a, "timeline": a["timeline"][:i + 1] + [dict(entry, summary="another line")] + a["timeline"][i + 1:]}
    assert len(chart_input(twice)["timeline"]) == len(chart_input(a)["timeline"])
    assert chart_input(twice) == chart_input(a)
    assert timeline_svg(twice) == timeline_svg(a)


def test_the_child_draws_and_is_reaped(demo, tmp_path):
    _, a = demo
    with ChartChild() as child:
        pid = child.pid
        assert pid and pid != os.getpid()
        written = render.write(a, tmp_path / "r.html", tmp_path / "r.md", tmp_path / "r.json", chart=child)
        assert child.from_child and child.pid is None
    assert [p.name for p in written] == ["r.html", "r.md", "r.json", "gpu-alerts.rules.yml"]
    assert _gone(pid)
    assert STAMP.sub("", (tmp_path / "r.html").read_text(encoding="utf-8")) == STAMP.sub("", render.html(a))
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == render.to_json(a)


def test_a_killed_child_leaves_the_parent_to_draw_the_same_picture(demo, tmp_path):
    _, a = demo
    child = ChartChild().start()
    pid = child.pid
    os.kill(pid, signal.SIGKILL)
    try:
        render.write(a, tmp_path / "r.html", None, None, chart=child)
    finally:
        child.close()
    assert not child.from_child and _gone(pid)
    assert STAMP.sub("", (tmp_path / "r.html").read_text(encoding="utf-8")) == STAMP.sub("", render.html(a))


def test_a_child_starts_while_another_thread_runs_and_a_child_never_sent_to_is_ended(demo, tmp_path):
    _, a = demo
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:  # a fresh interpreter, not a fork: a lock another thread holds is not copied into it
        with ChartChild() as child:
            assert child.pid
            render.write(a, tmp_path / "r.html", None, None, chart=child)
            assert child.from_child
    finally:
        stop.set()
        t.join()
    child = ChartChild().start()  # analyze of a tampered bundle: no report, the child ends with it
    pid = child.pid
    assert pid
    child.close()
    assert child.pid is None and _gone(pid)


def test_the_child_imports_no_collector_and_holds_less_than_a_fork(demo):
    """The child is a fresh interpreter: it imports the chart and what the chart needs, not the
    parent's collectors or redaction (what ``run`` has imported when its analyze starts the child)."""
    _, a = demo
    with ChartChild() as child:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the child has imported matplotlib
            maps = Path(f"/proc/{child.pid}/maps").read_text()
            if "ft2font" in maps:
                break
            time.sleep(0.05)
        maps = Path(f"/proc/{child.pid}/maps").read_text()
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
        assert "ft2font" in maps and "libsystemd" not in maps
        assert cmdline[0] == os.fsencode(sys.executable) and cmdline[1] == b"-I"
        assert bytes(child.svg_utf8(a)).decode("utf-8").count("<svg ") == 2 and child.from_child


@pytest.mark.parametrize("extra", [0, 12000])
def test_a_child_that_does_not_answer_is_killed_and_the_parent_draws(demo, tmp_path, monkeypatch, extra):
    """A stopped child: the picture's input fits in the pipe (the demo's), or does not (12,000 more drawn
    entries, ~400 kB: the parent's write would wait for the child without its deadline)."""
    _, a = demo
    a = {**a, "timeline": a["timeline"] + [
        {"at": f"2026-09-0{1 + i % 9}T{i % 24:02d}:{i % 60:02d}:{i % 59:02d}Z", "kind": "package.dpkg-action",
         "local": "", "source": "dpkg", "summary": f"configure p{i}", "attrs": {}, "flags": [],
         "evidence": {"artifact": "packages/dpkg/dpkg.log", "line": i + 1}} for i in range(extra)]}
    assert (len(pickle.dumps(chartproc.chart_input(a))) > 1 << 18) == bool(extra)
    monkeypatch.setattr(chartproc, "WAIT_S", 1.0)
    child = ChartChild().start()
    pid = child.pid
    os.kill(pid, signal.SIGSTOP)  # alive, holding its pipes, answering nothing
    t0 = time.monotonic()
    try:
        render.write(a, tmp_path / "r.html", None, None, chart=child)
    finally:
        child.close()
    assert time.monotonic() - t0 < 60 and not child.from_child and _gone(pid)
    assert STAMP.sub("", (tmp_path / "r.html").read_text(encoding="utf-8")) == STAMP.sub("", render.html(a))


def test_an_unwritable_report_md_is_the_error_and_the_others_are_whole(demo, tmp_path):
    """report.md's folder is a file: it is the error, and report.html, analysis.json and the rules are written
    all the same (one bad path stopped the reports after it)."""
    _, a = demo
    (tmp_path / "file").write_text("not a directory")
    with ChartChild() as child:
        with pytest.raises(render.WriteFailed) as e:
            render.write(a, tmp_path / "r.html", tmp_path / "file" / "r.md", tmp_path / "r.json", chart=child)
    assert e.value.filename == str(tmp_path / "file")  # the directory report.md needs
    assert isinstance(e.value, OSError) and e.value.errno == errno.EEXIST
    assert e.value.written == [tmp_path / "r.html", tmp_path / "r.json", tmp_path / "gpu-alerts.rules.yml"]
    assert STAMP.sub("", (tmp_path / "r.html").read_text(encoding="utf-8")) == STAMP.sub("", render.html(a))
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == render.to_json(a)


def test_the_input_goes_in_batches_and_comes_back_whole(demo, monkeypatch):
    """The parent pickles the timeline a batch at a time (issue 30); the child puts it together again, and an
    input cut before its last, empty batch is none (nothing drawn)."""
    _, a = demo
    monkeypatch.setattr(chartproc, "BATCH", 7)
    frames = list(chartproc._frames(a))
    n = len(chart_input(a)["timeline"])
    assert len(frames) == 1 + -(-n // 7) + 1 and pickle.loads(frames[-1]) == []
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: [os.write(w, len(f).to_bytes(8, "big") + f) for f in frames])
    writer.start()
    try:
        assert chartproc._read_input(r) == chart_input(a)
    finally:
        writer.join()
        os.close(w)
    r2, w2 = os.pipe()
    os.write(w2, b"".join(len(f).to_bytes(8, "big") + f for f in frames[:2]))
    os.close(w2)
    try:
        assert chartproc._read_input(r2) is None
    finally:
        os.close(r2)
    os.close(r)
