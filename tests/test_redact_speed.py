"""The redaction's cheap gates (issue 18): a faster test must say exactly what the regex it replaces said."""
from __future__ import annotations

import random

from forensics import redact_shapes as rs


def test_the_marker_gate_agrees_with_the_marker_regex():
    rng = random.Random(7)
    parts = list(rs.MARKERS) + ["a", "k", "i", "s", "-", "_", " ", "x", "\n", "é", "ß"]
    for _ in range(5000):
        low = "".join(rng.choice(parts)[: rng.randint(1, 6)] for _ in range(rng.randint(0, 12))).lower()
        assert rs._any_marker(low) == (rs._MARKER.search(low) is not None), low
    hostile = "a" * 200_000  # six markers start with 'a': the alternation tried them all at each position
    assert not rs._any_marker(hostile) and rs.redact_shapes(hostile, lambda v: "<x>") is hostile
    assert rs._any_marker(hostile + "akia") and rs.has_marker("x" * 1000 + "ToKeN")
