"""Bounds (issue 6 item 5): a spent time budget truncates, never hangs, and is recorded."""
from __future__ import annotations

import json
import time
from pathlib import Path

from journalbuild import build_journal, export_entry

from collectors import journal
from forensics.artifact import Status
from forensics.bundle import Bundle, BundleWriter, verify
from forensics.source import CollectContext
from forensics.ops.pipeline import collect

BOOT = "0f5e1c2a9b8d4e7f8a6b5c4d3e2f1a0b"
MID = "11112222333344445555666677778888"


def _pid1_journal(path: Path, n: int) -> None:
    t0 = 1_788_000_000_000_000
    data = b"".join(export_entry({
        "__REALTIME_TIMESTAMP": t0 + i * 1_000_000, "__MONOTONIC_TIMESTAMP": 5_000_000 + i * 1_000_000,
        "_BOOT_ID": BOOT, "_MACHINE_ID": MID, "_PID": 1, "SYSLOG_IDENTIFIER": "systemd",
        "CODE_FUNC": "invoke_main_loop", "MESSAGE": "Reloading." if i % 1000 == 999 else f"Started unit-{i}.service."})
        for i in range(n))
    build_journal(data, path / MID / "system.journal")


def test_spent_budget_marks_the_journal_scan_truncated(tmp_path):
    _pid1_journal(tmp_path / "j", 9000)
    w = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=tmp_path / "emptyroot", writer=w, options={"journal_dirs": [tmp_path / "j"]},
                         deadline=time.monotonic() - 1)
    (tmp_path / "emptyroot").mkdir()
    journal.acquire(ctx)
    w.finish()
    # issue 15 item 14: a budget spent before the journal is reached reads no file, and says so per file
    # (it used to probe and open every file anyway, then cut the scan)
    arts = Bundle.open(tmp_path / "b").artifacts()
    [rec] = [a for a in arts if a.source.endswith("system.journal")]
    assert rec.status is Status.TRUNCATED and rec.message == "not read: the time budget (--time-budget) was spent"
    [f] = json.loads((tmp_path / "b/journal/files.json").read_text())
    assert (f["opened"], f["error"]) == (False, "not read: time budget")
    assert not any(a.path == "journal/entries.jsonl" for a in arts)


def test_a_budget_spent_during_the_scan_marks_it_truncated(tmp_path, monkeypatch):
    _pid1_journal(tmp_path / "j", 9000)
    w = BundleWriter(tmp_path / "b")
    (tmp_path / "emptyroot").mkdir()
    ctx = CollectContext(root=tmp_path / "emptyroot", writer=w, options={"journal_dirs": [tmp_path / "j"]},
                         deadline=time.monotonic() + 0.3)
    from collectors.journal import files as jfiles
    probe = jfiles._probe

    def slow_probe(f):  # the budget runs out after the file was opened, while its entries are scanned
        out = probe(f)
        time.sleep(0.4)
        return out
    monkeypatch.setattr(journal, "_probe", slow_probe)
    journal.acquire(ctx)
    w.finish()
    rec = {a.path: a for a in Bundle.open(tmp_path / "b").artifacts()}["journal/entries.jsonl"]
    assert rec.status is Status.TRUNCATED and any("time budget" in n for n in rec.notes)
    cov = json.loads((tmp_path / "b/journal/coverage.json").read_text())
    assert any("time budget" in p for p in cov["problems"])


def test_a_run_whose_budget_is_spent_still_writes_a_valid_bundle(tmp_path):
    (tmp_path / "root").mkdir()
    path, _digest, arts = collect(tmp_path / "root", tmp_path / "b2", time_budget=1e-9, argv=["test"])
    skipped = [a for a in arts if a.source.startswith("collector:")]
    assert skipped and all(a.status is Status.TRUNCATED and "time budget" in a.message for a in skipped)
    assert verify(path) == []
