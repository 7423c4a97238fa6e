"""localize() memoised by the wall-clock hour gives exactly what the unmemoised conversion gives, across
the real folds and gaps of real zones (tzdata's own TZif bytes, read as a node's /etc/localtime is, and
the same zone by name), second by second around each transition."""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from forensics import timeutil
from forensics.timeutil import _localize, localize, tz_by_name, tz_from_tzif

#: (zone, the wall times of its 2026 transitions: spring gap, autumn fold; tzdata 2025b)
TRANSITIONS = [
    ("Europe/Berlin", ("2026-03-29T02:00", "2026-10-25T02:00")),        # +1 <-> +2, one hour
    ("America/New_York", ("2026-03-08T02:00", "2026-11-01T01:00")),     # -5 <-> -4
    ("Australia/Lord_Howe", ("2026-10-04T02:00", "2026-04-05T01:30")),  # +10:30 <-> +11: half an hour
]


def _zones(name):
    return [tz_from_tzif(Path(f"/usr/share/zoneinfo/{name}").read_bytes(), name), tz_by_name(name)]


@pytest.mark.parametrize("name,walls", TRANSITIONS, ids=[t[0] for t in TRANSITIONS])
def test_hourly_memo_is_exact_across_folds_and_gaps(name, walls):
    width = 1800 if name == "Australia/Lord_Howe" else 3600  # how long the gap and the fold last
    # every 17 s from 3 h before a transition to 3 h after, and every second within 5 min of either edge
    # of its gap or fold (a fraction of a second now and then)
    offsets = sorted({*range(-3 * 3600, 3 * 3600, 17), *range(-300, 300), *range(width - 300, width + 300)})
    for zone in _zones(name):
        timeutil._LOCALIZED.clear()
        timeutil._HOURS.clear()
        flags: set[str] = set()
        for wall in walls:
            t0 = datetime.fromisoformat(wall)
            for s in offsets:
                naive = t0 + timedelta(seconds=s, microseconds=250_000 if s % 7 == 0 else 0)
                got, want = localize(naive, zone), _localize(naive, zone)
                assert got == want and got[0].tzinfo is want[0].tzinfo, (name, zone, naive)
                flags.update(got[1])
        assert flags == {"dst-gap", "dst-fold"}  # both transitions were crossed
        # most hours are steady, answered from the hourly memo; the hours at a transition are not
        steady = sorted(h for (_, h), (_, start) in timeutil._HOURS.items() if start is not None)
        unsteady = sorted(h for (_, h), (_, start) in timeutil._HOURS.items() if start is None)
        assert len(steady) >= 8 and 2 <= len(unsteady) <= 6, (steady, unsteady)
