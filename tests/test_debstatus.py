"""forensics.debstatus.stanzas: the same stanzas as reading dpkg's status file line by line (the reference
below, deb-control(5): paragraphs separated by blank lines, a line of only whitespace being blank), from
chunks split with one regular expression, so that a 64 MiB file (the bound) takes seconds, not minutes; and
a deadline that stops it (issue 27: bounded in bytes and in the time budget)."""
from __future__ import annotations

import io
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import debstatus


@pytest.fixture
def monkeypatch_chunk(monkeypatch):
    """Sets :data:`forensics.debstatus.CHUNK` (small pieces put separators across piece boundaries)."""
    return lambda n: monkeypatch.setattr(debstatus, "CHUNK", n)


def reference(data: bytes, limit: int) -> tuple[list[bytes], bool]:
    """Line by line: a stanza is its non-blank lines; the line that crosses ``limit`` ends the reading, and
    the stanza it was in is not kept."""
    kept, lines, read = [], [], 0
    for line in io.BytesIO(data):
        read += len(line)
        if read > limit:
            return kept, True
        if line.strip():
            lines.append(line)
        elif lines:
            kept.append(b"".join(lines))
            lines = []
    if lines:
        kept.append(b"".join(lines))
    return kept, False


LINES = st.lists(st.sampled_from([b"Package: nvidia-utils-570\n", b"Status: install ok installed\n", b" continued\n",
                                  b"\n", b"  \n", b"\t\n", b"\r\n", b"Version: 570.1", b"x", b" " * 70 + b"\n", b" "]),
                 max_size=60)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(LINES, st.integers(1, 600), st.sampled_from([1, 7, 64, 1 << 20]))
def test_stanzas_are_those_of_a_line_by_line_reading(monkeypatch_chunk, lines, limit, chunk):
    data = b"".join(lines)
    monkeypatch_chunk(chunk)
    kept, cut = debstatus.stanzas(io.BytesIO(data), limit, lambda s: True)
    want, want_cut = reference(data, limit)
    assert kept == want and (cut is not None) == want_cut
    assert cut is None or cut == f"only the first {limit} bytes of the file were read"


def test_a_64_mib_status_file_is_read_in_seconds_and_filtered():
    stanza = b"Package: nvidia-driver-570\nStatus: install ok installed\nVersion: 570.158.01-0ubuntu1\n"
    other = b"Package: zlib1g\nStatus: install ok installed\nVersion: 1:1.2.13\n"
    data = (stanza + b"\n" + other + b"\n") * ((64 << 20) // (len(stanza) + len(other) + 2))
    t0 = time.monotonic()
    kept, cut = debstatus.stanzas(io.BytesIO(data), 64 << 20, lambda s: s.startswith(b"Package: nvidia"))
    assert time.monotonic() - t0 < 15
    assert cut is None and len(kept) == data.count(b"Package: nvidia") and set(kept) == {stanza}


def test_a_deadline_stops_the_reading_and_says_so():
    data = b"Package: a\nStatus: install ok installed\n\n" * 100000
    kept, cut = debstatus.stanzas(io.BytesIO(data), 64 << 20, lambda s: True, deadline=time.monotonic() - 1)
    assert kept == [] and cut == "the time budget (--time-budget) was spent after 0 bytes of the file"
