"""The journal read in a child while the collectors after it run (forensics.ops.pipeline._run_collectors,
collectors.journal.begin; issue 18): the manifest holds the same records in the same order as a
collection that waits for the journal first, the collectors after it start before its records are
in, and an interruption while they run still keeps the journal's records."""
from __future__ import annotations

import json
import signal

import pytest

import collectors.containers as containers
import collectors.journal as journal
from forensics.ops import pipeline
from forensics.ops.cli import SAMPLE_ROOT


def _records(bundle) -> list[tuple]:
    m = json.loads((bundle / "manifest.json").read_text())
    return [(a["path"], a["source"], a["status"], a["method"], a.get("sha256") if a["path"] != "journal/files.json"
             else None) for a in m["artifacts"]]


def test_the_journal_read_meanwhile_keeps_the_manifest_order_of_one_read_first(tmp_path, monkeypatch):
    seen = {}
    real = containers.acquire

    def watching(ctx):  # the journal's records are not in yet when the containers are collected
        seen["journal records when containers began"] = [a.path for a in ctx.writer.artifacts
                                                        if (a.path or "").startswith("journal/")]
        return real(ctx)
    monkeypatch.setattr(containers, "acquire", watching)
    pipeline.collect(SAMPLE_ROOT, tmp_path / "overlap", time_budget=None)
    overlapped = _records(tmp_path / "overlap")
    assert seen["journal records when containers began"] == []

    first = journal.begin

    def waited(ctx):  # begin, then wait at once: the journal before the next collector
        done = first(ctx)
        if done is not None:
            done()
    monkeypatch.setattr(journal, "begin", waited)
    pipeline.collect(SAMPLE_ROOT, tmp_path / "seq", time_budget=None)
    assert seen["journal records when containers began"] == ["journal/entries.jsonl", "journal/boots.json",
                                                            "journal/coverage.json", "journal/files.json"]
    assert overlapped == _records(tmp_path / "seq")
    paths = [p for p, *_ in overlapped]
    assert paths.index("journal/files.json") < min(i for i, p in enumerate(paths) if (p or "").startswith("packages/"))


def test_an_interruption_while_the_journal_is_read_meanwhile_keeps_its_records(tmp_path, monkeypatch):
    def interrupted(ctx):
        raise pipeline.Interrupted(signal.SIGTERM)
    monkeypatch.setattr(containers, "acquire", interrupted)
    with pytest.raises(pipeline.Interrupted) as e:
        pipeline.collect(SAMPLE_ROOT, tmp_path / "b", time_budget=None)
    kept = e.value.kept
    assert kept == tmp_path / "b.incomplete"
    m = json.loads((kept / "manifest.json").read_text())
    assert m["complete"] is False and m["incomplete_reason"] == "interrupted by SIGTERM while collecting"
    paths = [a["path"] for a in m["artifacts"]]
    assert "journal/entries.jsonl" in paths and "journal/files.json" in paths
    assert not any((p or "").startswith("containers/") for p in paths)


_CTRL_C = """
import os, signal, sys, time
import collectors.containers as containers
import collectors.journal as journal
from forensics.ops import pipeline
from forensics.ops.cli import SAMPLE_ROOT
real = journal._read_files

def still_reading(*a):  # in the journal's child: still reading when the signal comes
    time.sleep(0.5)
    return real(*a)

def ctrl_c(ctx):  # a terminal's Ctrl-C: SIGINT to every process of the foreground group
    os.killpg(0, signal.SIGINT)
    time.sleep(5)
journal._read_files, containers.acquire = still_reading, ctrl_c
with pipeline.interruptible():
    try:
        pipeline.collect(SAMPLE_ROOT, sys.argv[1], time_budget=None)
    except pipeline.Interrupted as e:
        print(e.kept)
"""


def test_a_ctrl_c_to_the_whole_process_group_is_answered_by_the_parent_and_the_journal_child_reads_on(tmp_path):
    """SIGINT to the process group (the journal child gets it too) while the containers are collected:
    the parent waits for the child, which reads the journal to its end; before, the child died of it
    (exit 70) and the bundle said "the journal reader died"."""
    import os
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", _CTRL_C, str(tmp_path / "b")], capture_output=True, text=True,
                       timeout=120, start_new_session=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert p.stdout.strip() == str(tmp_path / "b.incomplete"), p.stderr
    m = json.loads((tmp_path / "b.incomplete" / "manifest.json").read_text())
    assert m["incomplete_reason"] == "interrupted by SIGINT while collecting"
    assert not [a["message"] for a in m["artifacts"] if "died" in (a.get("message") or "")]
    files = json.loads((tmp_path / "b.incomplete" / "journal" / "files.json").read_text())
    assert files and all(f["opened"] for f in files)
    pipeline.collect(SAMPLE_ROOT, tmp_path / "whole", time_budget=None)
    count = lambda b: len((b / "journal" / "entries.jsonl").read_text().splitlines())  # noqa: E731
    assert count(tmp_path / "b.incomplete") == count(tmp_path / "whole") > 0


_HELD = """
import sys, threading
from rich.console import Console
from rich.progress import Progress
import collectors.journal.attempts as attempts
from collectors.journal import isolate
with Progress(console=Console(stderr=True, force_terminal=True), transient=True) as bar:  # as cli.collect's
    held, go = threading.Event(), threading.Event()

    def hold():
        with bar.console._lock:  # as the bar's refresh thread holds it while it draws
            held.set()
            go.wait()
    t = threading.Thread(target=hold)
    t.start()
    held.wait()

    def read():
        raise ValueError("a journal file no one foresaw")
    child = attempts._start(read)
    go.set()
    t.join()
    try:
        isolate.finish(*child)
    except ValueError as e:
        print("raised:", e, file=sys.__stdout__)
"""


def test_the_journal_child_forked_while_the_progress_bar_draws_reports_its_error_and_does_not_hang(tmp_path):
    """The journal's child is forked while the collectors after it run, with rich's progress bar (its
    refresh thread) live in the parent: a child forked while that thread held the console's lock, whose
    reading raised, wrote its traceback to sys.stderr (the bar's proxy) and waited for that lock forever,
    and the parent with it (collectors.journal.isolate.start now gives the child streams of its own)."""
    import os
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", _HELD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)), start_new_session=True)
    try:
        out, err = p.communicate(timeout=30)
    finally:
        try:
            os.killpg(p.pid, 9)  # a child left hanging goes with it
        except ProcessLookupError:
            pass
        p.wait()
    assert p.returncode == 0 and out == "raised: a journal file no one foresaw\n", err
    assert "ValueError: a journal file no one foresaw" in err  # the child's traceback, on stderr
