"""A journal file damaged mid-way (issue 27 A): real files written by systemd-journal-remote, holding
1,000 NVML lines among 3,000 kubelet lines a second apart, with bytes of entry objects in the middle
overwritten (a torn write, a bad sector); collected through acquire() into a real bundle and read back.

libsystemd's walk by journal matches stops at the first damaged entry and drops the file silently
(it kept 39 of the 1,000 before); the collection reads on by walking every entry, keeps every NVML
line that is still readable, and says in the bundle and in the report's coverage what could not be read.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from journalbuild import build_journal
from test_journal import MACHINE, S, T0, analyse, collect, service, stored, usec

from collectors.journal import damage, fileset, journalctl, selection
from forensics.timeutil import iso_z

NV = "Failed to initialize NVML: Unknown Error"


def _kubelet_journal(path: Path, distinct: int = 3000) -> Path:
    """3,000 kubelet lines a second apart from T0, every third an NVML error (``distinct`` MESSAGE values
    of them: ``NV i % distinct``)."""
    return build_journal(b"".join(service(T0 + i * S, 2210, "kubelet.service", "kubelet",
                                          f"{NV} {i % distinct}" if i % 3 == 0 else f"I0717 routine sync {i}")
                                  for i in range(3000)), path)


def _entry_objects(path: Path) -> dict[int, int]:
    """{seqnum: offset} of the ENTRY objects (type 3) of a journal file, walking its objects in order
    (journal-def.h: ObjectHeader type u8, flags u8, 6 reserved, size le64; objects 8-byte aligned)."""
    b = path.read_bytes()
    hsize, arena = struct.unpack_from("<QQ", b, 88)
    off, out = hsize, {}
    while off < hsize + arena:
        kind, size = b[off], struct.unpack_from("<Q", b, off + 8)[0]
        if not size:
            break
        if kind == 3:
            out[struct.unpack_from("<Q", b, off + 16)[0]] = off
        off += (size + 7) // 8 * 8
    return out


def _damage_entries(path: Path, first: int, last: int) -> None:
    """Overwrite the object header and fields of the entries numbered ``first``..``last`` (seqnums)."""
    at = _entry_objects(path)
    with open(path, "r+b") as f:
        for seq in range(first, last + 1):
            f.seek(at[seq])
            f.write(b"\xee" * 64)


def test_a_file_damaged_mid_way_is_read_past_the_damage_and_the_loss_is_noted_and_a_gap(tmp_path):
    root = tmp_path / "host"
    path = _kubelet_journal(root / "var/log/journal" / MACHINE / "system.journal")
    _damage_entries(path, 1401, 1451)  # the lines of seconds 1400 to 1450
    bundle = collect(tmp_path, root)
    nvml = [e["MESSAGE"] for e in stored(bundle) if "nvml" in e["_GF_SELECTED_BY"]]
    readable = [f"{NV} {i}" for i in range(0, 3000, 3) if not 1400 <= i <= 1450]
    assert nvml == readable and len(readable) == 983  # before: the 467 up to the damage
    cov = json.loads(bundle.path("journal/coverage.json").read_text())
    before, after = usec(T0 + 1399 * S), usec(T0 + 1451 * S)
    assert cov["damaged"] == [{
        "source": f"/var/log/journal/{MACHINE}/system.journal",
        "why": "libsystemd stopped a walk by journal matches at an object it could not read",
        "entries": 3000, "read": 2949, "lost": 51, "holes": [{"from_usec": before, "to_usec": after, "lost": 51}]}]
    said = (f"/var/log/journal/{MACHINE}/system.journal: damaged (libsystemd stopped a walk by journal "
            "matches at an object it could not read); read past the damage by walking every entry: 51 of 3000 "
            f"entries could not be read ({iso_z(T0 + 1399 * S)} to {iso_z(T0 + 1451 * S)}: 51 entries)")
    assert said in cov["problems"]
    assert said in bundle.find("journal/entries.jsonl")[0].notes
    reading = analyse(bundle)
    journal_cov = next(c for c in reading.coverage if c.source == "journal")
    assert [(h.start, h.end) for h in journal_cov.holes] == [(T0 + 1399 * S, T0 + 1451 * S)]
    assert "51 entries from 2026-07-17T12:23:19Z to 2026-07-17T12:24:11Z could not be read" in journal_cov.holes[0].reason
    assert len([e for e in reading.events if e.kind == "journal.nvml-error"]) == 983


def test_a_damaged_index_loses_no_entry_and_says_so(tmp_path):
    # 4 KiB overwritten at 45 % of the file (8 MiB, journal-remote's first allocation): an entry array of
    # the kubelet unit's DATA object, not an entry; the walk by matches kept 39 NVML lines before
    root = tmp_path / "host"
    path = _kubelet_journal(root / "var/log/journal" / MACHINE / "system.journal", 7)
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size * 45 // 100 // 8 * 8)
        f.write(b"\xff" * 4096)
    bundle = collect(tmp_path, root)
    assert len([e for e in stored(bundle) if "nvml" in e["_GF_SELECTED_BY"]]) == 1000
    cov = json.loads(bundle.path("journal/coverage.json").read_text())
    assert [(d["read"], d["lost"], d["holes"]) for d in cov["damaged"]] == [(3000, 0, [])]
    assert any(n.endswith("read past the damage by walking every entry: all 3000 entries read")
               for n in bundle.find("journal/entries.jsonl")[0].notes)
    assert next(c for c in analyse(bundle).coverage if c.source == "journal").holes == ()


def _main_entry_array_chain(path: Path) -> list[int]:
    """The offsets of the ENTRY_ARRAY objects of the file's own entry array chain, in order (the header's
    ``entry_array_offset`` at byte 176, then each array's ``next_entry_array_offset`` after its object header)."""
    b = path.read_bytes()
    off, out = struct.unpack_from("<Q", b, 176)[0], []
    while off:
        out.append(off)
        off = struct.unpack_from("<Q", b, off + 16)[0]
    return out


def test_past_a_damaged_entry_array_of_the_file_the_matches_and_a_seek_by_time_reach_the_rest(tmp_path):
    # the entries of seconds 1400 to 1450 damaged, and the header of the file's second-to-last entry array:
    # the walk over every entry ends there without a word (libsystemd takes the bad array for the chain's
    # end); a seek by time over every entry cannot cross it either, one by the matches' arrays can, and the
    # walk back from the entry it reaches picks up those the seek's bisection skipped
    path = _kubelet_journal(tmp_path / "j/system.journal")
    _damage_entries(path, 1401, 1451)
    with open(path, "r+b") as f:
        f.seek(_main_entry_array_chain(path)[-2])
        f.write(b"\xee" * 16)
    with open(path, "rb") as fh:
        fs = fileset._FileSet([fh.fileno()], None, tmp_path, ["system.journal"])
        problems = []
        sel, *_ = selection.select(fs, None, problems)
        nvml = [e["MESSAGE"] for e in sel.entries() if "nvml" in e["_GF_SELECTED_BY"]]
    assert nvml == [f"{NV} {i}" for i in range(0, 3000, 3) if not 1400 <= i <= 1450] and problems == []
    assert damage.per_file(fs.damage) == [{
        "source": "system.journal", "why": "libsystemd stopped a walk by journal matches at an object it could not read",
        "entries": 3000, "read": 2949, "lost": 51,
        "holes": [{"from_usec": usec(T0 + 1399 * S), "to_usec": usec(T0 + 1451 * S), "lost": 51}]}]


def test_the_nodes_journalctl_reads_past_the_damage_too(tmp_path):
    path = _kubelet_journal(tmp_path / "j/system.journal")
    _damage_entries(path, 1401, 1451)
    src = journalctl._JournalctlSource([shutil.which("journalctl")], [str(path)], tmp_path, [str(path)])
    problems = []
    sel, *_ = selection.select(src, None, problems)
    nvml = [e["MESSAGE"] for e in sel.entries() if "nvml" in e["_GF_SELECTED_BY"]]
    assert nvml == [f"{NV} {i}" for i in range(0, 3000, 3) if not 1400 <= i <= 1450]
    assert problems == []
    assert {(d["source"], d["read"], d["lost"], json.dumps(d["holes"])) for d in src.damage} == {
        (str(path), 2949, 51, json.dumps([{"from_usec": usec(T0 + 1399 * S), "to_usec": usec(T0 + 1451 * S),
                                          "lost": 51}]))}


def test_a_walk_that_no_seek_gets_past_is_a_hole_to_the_files_end():
    # the file's last entries unreachable: from the last entry read to the header's last entry
    head = bytearray(208)
    head[:8] = b"LPKSHHRH"
    struct.pack_into("<QQQ", head, 152, 10, 110, 101)  # n_entries, tail seqnum, head seqnum
    struct.pack_into("<QQ", head, 184, 1_000_000, 10_000_000)
    w = damage.Walked(bytes(head))
    for i in range(101, 105):
        w.saw(i, i * 10_000)
    assert w.record("f", bytes(head), "why") == {
        "source": "f", "why": "why", "entries": 10, "read": 4, "lost": 6,
        "holes": [{"from_usec": 1_040_000, "to_usec": 10_000_000, "lost": 6}]}
    w = damage.Walked(bytes(head))  # numbers that skip just what the header lost: a hole at each skip
    for i in (101, 103, 104, 105, 106, 107, 108, 110):
        w.saw(i, i * 10_000)
    assert w.record("f", bytes(head), "why")["holes"] == [{"from_usec": 1_010_000, "to_usec": 1_030_000, "lost": 1},
                                                          {"from_usec": 1_080_000, "to_usec": 1_100_000, "lost": 1}]
    struct.pack_into("<Q", head, 152, 9)  # they skip more than the header lost (journald numbers the user
    # journals' entries from the same count): one hole over all the skips
    assert w.record("f", bytes(head), "why")["holes"] == [{"from_usec": 1_010_000, "to_usec": 1_100_000, "lost": 1}]
