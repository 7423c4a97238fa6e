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
