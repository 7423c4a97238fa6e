"""One kernel line read from several sources counts once: the journal's ``_TRANSPORT=kernel`` entries,
rsyslog's kern.log/messages and the live ring buffer (/dev/kmsg) often hold the same printk (collectors
journal and kernlog cannot see each other's). The copies stay on the timeline, flagged ``same-line``,
and the cause rules count only the first source's (journal, then kern.log, then kmsg).
"""
from __future__ import annotations

import re
from datetime import timedelta

from ..events import Event

#: how far apart two sources may date one line (kern.log's whole seconds, kmsg's stamps that skip suspend)
SLACK = timedelta(seconds=3)
#: sources in the order their copy is kept
ORDER = ("journal", "kern.log", "kmsg")
_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def mark_duplicates(events: list[Event]) -> int:
    """Flag ``same-line`` (in place) every kernel.* event that repeats one of an earlier source of
    :data:`ORDER`: the same kind and text (the ``[  123.456]`` stamp aside) within :data:`SLACK`. Returns
    how many were flagged. ``events`` in time order."""
    kept: dict[tuple[str, str], list[Event]] = {}
    flagged = 0
    for e in sorted((e for e in events if e.kind.startswith("kernel.") and e.source in ORDER),
                    key=lambda e: (ORDER.index(e.source), e.at)):
        key = (e.kind, _STAMP.sub("", str(e.attrs.get("message") or "")).strip())
        same = [k for k in kept.get(key, ()) if k.source != e.source and abs(k.at - e.at) <= SLACK]
        if same:
            if "same-line" not in e.flags:
                e.flags = e.flags + ("same-line",)
            flagged += 1
        else:
            kept.setdefault(key, []).append(e)
    return flagged
