"""forensics/xid.py and its data file forensics/xid_catalog.csv: the catalog as docs/sources.md "NVIDIA Xid catalog" summarises
NVIDIA's Xid-Catalog.xlsx, each code's scope by the written rule, the tools' disagreements, and an unknown
Xid never guessed."""
from __future__ import annotations

import csv
from pathlib import Path

from forensics import xid

CSV = Path(xid.__file__).with_name(xid.CATALOG)


def test_the_catalog_names_its_source_and_version():
    assert "Xid-Catalog.xlsx" in xid.source() and "7f70ce96" in xid.source()
    assert "version: Xid-Catalog.xlsx SHA-256 7f70ce96" in xid.source()


def test_every_entry_is_whole_and_its_scope_one_of_four():
    c = xid.catalog()
    assert len(c) == 26
    for n, e in c.items():
        assert e.xid == n and e.scope in xid.SCOPES and e.scope_reason, e
        assert e.scope == "unknown" or (e.mnemonic and e.description and e.immediate), e
    rows = [r for r in csv.reader(line for line in CSV.read_text().splitlines() if not line.startswith("#"))]
    assert rows[0] == ["xid", "mnemonic", "description", "immediate", "investigatory", "trigger", "xid154", "scope",
                       "scope_reason", "disagreements"]
    assert all(len(r) == len(rows[0]) for r in rows)


def test_scopes_as_the_issue_and_the_catalog_read_them():
    scope = {n: e.scope for n, e in xid.catalog().items()}
    assert {n for n, s in scope.items() if s == "node"} == {32, 48, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143}
    assert {n for n, s in scope.items() if s == "application"} == {8, 13, 31, 43, 68, 69, 94}
    assert {n for n, s in scope.items() if s == "informational"} == {38, 45, 63, 92, 121, 154}
    assert scope[61] == "unknown"  # marked unused on A100..GB200, the tools disagree: not guessed


def test_entries_carry_the_catalogs_words():
    e = xid.lookup(79)
    assert (e.mnemonic, e.description, e.immediate, e.investigatory, e.xid154) == (
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", "CONTACT_SUPPORT", "R565")
    assert "PCI Express" in e.trigger
    assert xid.lookup(94).immediate == "RESTART_APP" and "contained to one application" in xid.lookup(94).trigger
    assert "PCI" in xid.lookup(32).scope_reason  # node by its trigger text, whatever its RESTART_APP bucket
    assert xid.lookup(109).xid154 == "R570" and xid.lookup(143).xid154 == "R575"


def test_where_the_tools_disagree_it_says_so():
    d = {n: e.disagreements for n, e in xid.catalog().items()}
    assert "EDPP Power Brake" in d[61] and "Thermal Violation" in d[62] and "PCIe Bus Error" in d[38]
    assert "RebootSystem" in d[63] and "DCGM" in d[63] and "escalates" in d[63]
    assert "v0.18.0" in d[109] and "Video processor exception" in d[68]
    assert "not in AWS's escalation list" in d[32]


def test_an_unknown_xid_is_never_guessed():
    e = xid.lookup(46)
    assert (e.scope, e.mnemonic, e.immediate) == ("unknown", None, None)
    assert "not in the catalog" in e.scope_reason


def test_the_scope_rule_is_written_down():
    for word in ("RESET_GPU", "RESTART_BM", "RESTART_APP", "IGNORE", "154", "45", "never guessed"):
        assert word in xid.SCOPE_RULE
