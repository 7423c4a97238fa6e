"""The project's one libsystemd binding (collectors/journal/sdjournal.py, ctypes) against the node's own
``journalctl -o export`` (journal-export-formats(7)) on the same files: every field of every entry
(text and binary, repeated fields), the cursor, the realtime and monotonic clocks, a match on a
trusted field, a field's distinct values and the data threshold. The files are the sample node's
journal (systemd-journal-remote), one built here with binary and repeated fields and a long value, and
under the ``corpus`` marker the real journals of ../shared/real-inputs, read in place.
"""
from __future__ import annotations

import os
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from journalbuild import build_journal, export_entry

from collectors.journal import sdjournal

PROJECT = Path(__file__).resolve().parents[1]
SAMPLE = next((PROJECT / "samples/node3-gpu/var/log/journal").glob("*/system.journal"))


def _export(path: Path, *match: str) -> list[dict]:
    """journalctl's export of ``path`` (journal-export-formats(7)): each entry a dict of field -> list of
    bytes values (binary fields as the length-prefixed form gives them)."""
    raw = subprocess.run(["journalctl", "--file", str(path), "-o", "export", "--no-pager", *match],
                         capture_output=True, check=True, timeout=120).stdout
    out, e, i = [], {}, 0
    while i < len(raw):
        nl = raw.index(b"\n", i)
        line = raw[i:nl]
        if not line:
            out.append(e)
            e, i = {}, nl + 1
            continue
        if b"=" in line:
            k, _, v = line.partition(b"=")
            i = nl + 1
        else:  # binary: FIELD\n, le64 size, data, \n
            k = line
            (n,) = struct.unpack("<Q", raw[nl + 1:nl + 9])
            v, i = raw[nl + 9:nl + 9 + n], nl + 9 + n + 1
        e.setdefault(k.decode(), []).append(v)
    if e:
        out.append(e)
    return out


def _read(path: Path, *match: str) -> list[dict]:
    """The same entries through the binding, in journalctl's shape."""
    fd = os.open(path, os.O_RDONLY)
    r = sdjournal.Reader(files=[fd])
    try:
        r.data_threshold = 1 << 30
        for m in match:
            r.add_match(m)
        r.seek_head()
        out = []
        while r._next():
            e = {k: [x.encode() if isinstance(x, str) else x for x in (v if isinstance(v, list) else [v])]
                 for k, v in r._get_all().items()}
            mono, boot = r._get_monotonic()
            e["__CURSOR"] = [r._get_cursor().encode()]
            e["__REALTIME_TIMESTAMP"] = [str(r._get_realtime()).encode()]
            e["__MONOTONIC_TIMESTAMP"] = [str(mono).encode()]
            assert boot.hex() == e["_BOOT_ID"][0].decode()
            out.append(e)
        return out
    finally:
        r.close()


def _comparable(entries: list[dict]) -> list[dict]:
    # fields journalctl adds that are not in the file (systemd 254+: __SEQNUM, __SEQNUM_ID); repeated
    # values compared as multisets (journalctl and enumerate_data give them in the same order anyway)
    return [{k: Counter(v) for k, v in e.items() if k not in ("__SEQNUM", "__SEQNUM_ID")} for e in entries]


def _same(path: Path, *match: str) -> int:
    got, want = _read(path, *match), _export(path, *match)
    assert _comparable(got) == _comparable(want)
    return len(got)


def test_every_field_of_the_sample_journal_as_journalctl_exports_it():
    n = _same(SAMPLE)
    assert n == len(_export(SAMPLE)) and n > 20
    pid1 = _read(SAMPLE, "_PID=1")
    assert pid1 and all(e["_PID"] == [b"1"] for e in pid1)
    assert len(pid1) == _same(SAMPLE, "_PID=1")


def test_binary_repeated_and_long_values_and_the_getters(tmp_path):
    long = "x" * 70_000  # past libsystemd's default data threshold (64 KiB), compressed by journal-remote
    boot = "6c7c6013a26343b29e964691ff25d04c"
    clock = (lambda t: {"__REALTIME_TIMESTAMP": t, "__MONOTONIC_TIMESTAMP": t - 1_699_999_000_000_000,
                        "_BOOT_ID": boot})
    f = build_journal(b"".join([
        export_entry({**clock(1_700_000_000_000_000), "MESSAGE": "first", "_PID": "1", "_TRANSPORT": "journal",
                      "BLOB": b"\xff\x00\x01", "TAG": ["a", "b"]}),
        export_entry({**clock(1_700_000_001_000_000), "MESSAGE": long, "_PID": "42", "_TRANSPORT": "syslog"})]),
        tmp_path / "j/system.journal")
    assert _same(f) == 2
    fd = os.open(f, os.O_RDONLY)
    r = sdjournal.Reader(files=[fd])
    try:
        r.seek_head()
        assert r._next() and r._get("MESSAGE") == b"first" and r._get("BLOB") == b"\xff\x00\x01"
        assert r._get_realtime() == 1_700_000_000_000_000
        with pytest.raises(KeyError):
            r._get("NO_SUCH_FIELD")
        cursor = r._get_cursor()
        r.data_threshold = 1 << 20
        assert r._next()
        assert r._get("MESSAGE") == long.encode() and r.data_threshold == 1 << 20
        assert not r._next()
        r.seek_cursor(cursor)
        assert r._next() and r.test_cursor(cursor) and r._get("MESSAGE") == b"first"
        assert r.query_unique("_PID") == {b"1", b"42"}
    finally:
        r.close()


@pytest.mark.corpus
def test_the_real_journals_as_journalctl_exports_them(real_inputs):
    files = sorted(f for f in (real_inputs / "journal").rglob("*.journal*") if not f.name.endswith(".zst"))
    assert len(files) >= 5
    total, refused = 0, []
    for f in files:
        p = subprocess.run(["journalctl", "--file", str(f), "-n", "1", "--no-pager"], capture_output=True)
        if p.returncode and b"Failed to open files" in p.stderr:  # the truncated ones (SOURCES.md): refused alike
            fd = os.open(f, os.O_RDONLY)
            with pytest.raises(OSError) as e:
                sdjournal.Reader(files=[fd])
            os.close(fd)
            assert os.strerror(e.value.errno).encode() in p.stderr
            refused.append(f.name)
            continue
        total += _same(f)
    assert total > 500 and sorted(refused) == ["compact.journal", "system.journal"]
