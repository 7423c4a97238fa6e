"""What the journal covers: the span ``journal/coverage.json`` records (:func:`coverage`), clipped by ``--since``
and by the journal files that could not be read (:func:`clipped`, which the kernel lines' span uses too,
:func:`collectors.journal.kernel.kernel_coverage`). Nothing here touches the host; it reads only what the
collector stored.
"""
from __future__ import annotations

from datetime import datetime

from forensics.events import Coverage
from forensics.timeutil import from_usec, iso_z, parse_iso
import collectors.journal.damage as damage


def coverage(cov: dict, refused: list[str], problems: list) -> Coverage:
    """The journal's :class:`Coverage` from coverage.json (``refused``: why nothing was read, when
    nothing was). A bad coverage.json gives an unknown span, reported in ``problems``."""
    try:
        if cov.get("first_usec") is None:
            why = ": " + "; ".join(refused) if refused else ""
            return Coverage("journal", None, None, f"no journal entries were collected{why}")
        start, end = from_usec(cov["first_usec"]), from_usec(cov["last_usec"])
        start, reason = clipped(cov, start, f"journal holds entries from {iso_z(start)} to {iso_z(end)} only "
                                "(older entries rotated away or never written)", "collected", "entries")
        return Coverage("journal", start, end, reason, tuple(damage.holes(cov.get("damaged"), problems)))
    except (KeyError, TypeError, ValueError, OverflowError, OSError) as e:
        problems.append({"artifact": "journal/coverage.json", "message": f"unusable: {e!r}"})
        return Coverage("journal", None, None, "journal coverage unknown: journal/coverage.json is unusable")


def clipped(cov: dict, start: datetime, reason: str, verb: str, what: str) -> tuple[datetime, str]:
    """A span of coverage.json ``cov`` from ``start`` with ``reason``, as ``--since`` and unread files leave it:
    ``start`` moved up to ``since`` when later ("; <verb> from <since> on (--since)"), and the reason naming the
    journal files that could not be read ("their <what> are missing")."""
    if isinstance(cov.get("since"), str) and cov["since"] and parse_iso(cov["since"]) > start:
        start, reason = parse_iso(cov["since"]), reason + f"; {verb} from {cov['since']} on (--since)"
    if cov.get("files_failed"):
        reason += (f"; {cov['files_failed']} of {cov['files_found']} journal files could not be read, "
                   f"their {what} are missing")
    return start, reason
