"""Times on the command line (``--incident``, ``--since``), read against the node's clock and zone.

A time with an offset means what it says. A relative one (``now``, ``-2h``, ``2d``, ``START..+30m``)
counts from this run's "now": the wall clock, or ``$GPU_FORENSICS_NOW`` (ISO 8601 with an offset; for
tests and for replaying a ticket). A date or time without an offset, ``today`` and ``yesterday`` are
wall times in the NODE's zone, read from ``--root`` as the node collector reads it
(:func:`collectors.node.zone`: /etc/localtime, /etc/timezone, /etc/sysconfig/clock), never this
machine's zone; each time that is not a plain offset time is said back in one line
(:meth:`NodeClock.read`), so that the engineer sees the UTC instant the bundle will record.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from datetime import datetime, tzinfo
from pathlib import Path

from ..artifact import Artifact, Status
from ..timeutil import UTC, human, iso_z, parse_iso, parse_when

NOW_ENV = "GPU_FORENSICS_NOW"


class _Peek:
    """The writer :func:`collectors.node.zone` gets when nothing is being collected: its one copy (the
    root's ``/usr/share/zoneinfo/NAME``) goes to a scratch directory, removed by :meth:`close`."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="gpu-forensics-zone-"))

    def copy(self, root, src: str, rel: str, **_kw) -> Artifact:
        from .. import hostfs
        try:
            with hostfs.open_regular(root, src) as f:
                (self.dir / "zone").write_bytes(f.read(1 << 20))
        except OSError:
            return Artifact(None, src, Status.ABSENT, "copy")
        return Artifact("zone", src, Status.COLLECTED, "copy")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class NodeClock:
    """"Now" and the node's zone for reading command-line times; the zone is read from ``root`` only
    when a zone-less time needs it (``root`` None: the zone is unknown). ``now`` (aware) defaults to
    ``$GPU_FORENSICS_NOW``, else the wall clock; a malformed ``$GPU_FORENSICS_NOW`` raises ``ValueError``."""

    def __init__(self, root: Path | None, now: datetime | None = None):
        self.root = Path(root) if root is not None else None
        env = os.environ.get(NOW_ENV)
        if now is None and env:
            try:
                now = parse_iso(env)
            except ValueError as e:
                raise ValueError(f"${NOW_ENV}: {e}") from None
        self.now = now or datetime.now(UTC)
        self._zone: tuple | None = None

    def zone(self) -> tuple[tzinfo | None, str | None, str | None]:
        """``(rules, IANA name, where it was read)`` of the node under ``root``, each None when the node
        does not say (:func:`collectors.node.zone`, run once)."""
        if self._zone is None and self.root is None:
            self._zone = (None, None, None)
        if self._zone is None:
            from types import SimpleNamespace
            from collectors import node
            peek = _Peek()
            try:
                name, said, rules = node.zone(SimpleNamespace(root=self.root, writer=peek))
            finally:
                peek.close()
            self._zone = (rules, name, said)
        return self._zone

    def read(self, text: str, base: datetime | None = None) -> tuple[datetime, str | None]:
        """``text`` (:func:`forensics.timeutil.parse_when`) as ``(UTC datetime, note)``; the note is the
        one line saying how it was read (None for a time with an offset), e.g. ``read 2026-11-30 14:00
        as Europe/Berlin (from /etc/timezone), = 2026-11-30 13:00:00 UTC``. Raises ``ValueError``."""
        utc, form, wall, flags = parse_when(text, self.now, lambda: self.zone()[0], base=base)
        if form == "offset":
            return utc, None
        t = text.strip()
        if form == "relative":
            if t.lower() == "now":
                return utc, f"read now as {human(utc)}"
            if t.startswith("+"):
                return utc, f"read {t} as {human(utc)} ({t[1:]} after START)"
            return utc, f"read {t} as {human(utc)} ({re.sub(r'^-|(?i: ago)$', '', t)} before now, {human(self.now)})"
        _rules, name, said = self.zone()
        shown = wall.strftime("%Y-%m-%d %H:%M" + (":%S" if wall.second or wall.microsecond else ""))
        odd = {"dst-gap": "; that wall time did not occur there (a DST gap): moved forward",
               "dst-fold": "; that wall time occurred twice there (a DST fold): the first one taken",
               "day-before": "; that clock time is still to come today, so yesterday's is taken",
               "day-after": "; that clock time comes before START, so the next day's is taken"}
        shown = shown if re.match(r"\d{4}-", t) else f"{t} ({shown})"  # today, yesterday, 14:00: the date said
        return utc, (f"read {shown} as {name or 'the node zone'} (from {said}), = {human(utc)}"
                     + "".join(odd[f] for f in flags))


def resolve_incident(text: str, clock: NodeClock) -> tuple[dict, list[str]]:
    """``START..END[=LABEL]`` to ``({"start", "end", "label", "text"}, notes)``: START and END in UTC
    (ISO ``Z``), each read by :meth:`NodeClock.read` (END may be ``+DURATION`` after START), and the
    notes to print. Raises ``ValueError`` (message without the option name) for anything else."""
    m = re.fullmatch(r"\s*([^.=]+?)\s*\.\.\s*([^=]+?)\s*(?:=(.*))?", text)
    if not m:
        raise ValueError("expected START..END[=LABEL], e.g. -2h..now, 2026-07-11T12:34..+30m or "
                         "2026-07-11T12:34+09:00..2026-08-02T00:00+09:00=july")
    s, n1 = clock.read(m.group(1))
    e, n2 = clock.read(m.group(2), base=s)
    if e < s:
        raise ValueError(f"END ({iso_z(e)}) is before START ({iso_z(s)})")
    return ({"start": iso_z(s), "end": iso_z(e), "label": m.group(3) or None, "text": text},
            [n for n in (n1, n2) if n])


def read_times(args, root: Path, note) -> list[dict]:
    """The ``--incident`` windows of ``args`` (:func:`resolve_incident`) and its ``--since``
    (``args.since`` replaced by its UTC ISO text, which the journal collector's check reads), against
    the node under ``root``; ``note(line)`` gets each reading's line. Raises ``ValueError`` naming the
    option (also for a malformed ``$GPU_FORENSICS_NOW``)."""
    clock = NodeClock(root)
    incidents = []
    for text in args.incident:
        try:
            inc, notes = resolve_incident(text, clock)
        except ValueError as e:
            raise ValueError(f"--incident {text!r}: {e}") from None
        incidents.append(inc)
        for n in notes:
            note(n)
    if getattr(args, "since", None):
        try:
            since, said = clock.read(args.since)
        except ValueError as e:
            raise ValueError(f"--since {args.since!r}: {e}") from None
        args.since = iso_z(since)
        if said:
            note(said)
    return incidents


#: the options whose value is a command-line time (a value starting with "-2h" must stay theirs)
TIME_FLAGS = ("--incident", "--since")


def join_negative_times(argv: list[str]) -> list[str]:
    """``--incident -2h..now`` as ``--incident=-2h..now``: argparse takes a value starting with ``-``
    and a letter for an option of its own, so such a value is joined to its flag first."""
    out: list[str] = []
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a in TIME_FLAGS and i + 1 < len(argv) and re.match(r"-\d", argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            next(it, None)
        else:
            out.append(a)
    return out
