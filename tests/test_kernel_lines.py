"""One printk held by the journal, rsyslog's kern.log and the ring buffer counts once (kernel_lines.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from forensics.events import Event
from forensics.findings.kernel_lines import mark_duplicates

T = datetime(2026, 9, 2, 4, 5, 13, 250000, tzinfo=timezone.utc)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def xid(source: str, at: datetime, text: str) -> Event:
    return Event(at, source, "kernel.xid", text, {"xid": 79, "message": text}, {"artifact": source, "line": 1})


def test_the_same_xid_in_three_sources_is_flagged_twice_and_the_journals_kept():
    events = [xid("kmsg", T + timedelta(seconds=2), "[1400052.110955] " + XID),  # the stamp is no part of the text
              xid("kern.log", T.replace(microsecond=0), "[1400052.110955] " + XID),  # whole seconds
              xid("journal", T, XID)]
    assert mark_duplicates(events) == 2
    assert [(e.source, "same-line" in e.flags) for e in events] == [("kmsg", True), ("kern.log", True),
                                                                   ("journal", False)]


def test_two_xids_a_minute_apart_or_in_one_source_are_two_faults():
    events = [xid("journal", T, XID), xid("journal", T + timedelta(seconds=1), XID),
              xid("kern.log", T + timedelta(minutes=1), XID)]
    assert mark_duplicates(events) == 0 and not any(e.flags for e in events)
