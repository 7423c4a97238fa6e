"""The kernel's lines outside the journal: the syslog files /var/log/kern.log*, /var/log/messages* (and
/var/log/syslog* when no kern.log could be read), and on a live node the kernel's ring buffer, /dev/kmsg.

They matter when the journal does not hold the kernel's lines (journald ``ReadKMsg=no``, a volatile journal
rotated away, a node with rsyslog only) and on a dead node's disk, whose kern.log may reach further back than
its journal. Which files, read how far: :mod:`collectors.kernlog.files`; line formats and times:
:mod:`collectors.kernlog.syslog`; the ring buffer: :mod:`collectors.kernlog.ring`; coverage:
:mod:`collectors.kernlog.span`.

Bundle layout::

    kernlog/<name>.kernel    the kernel lines of /var/log/<name> (kern.log, kern.log.2.gz, messages-20260830...)
    kernlog/kmsg             the records of /dev/kmsg as read(2) returned them (live node only)
    kernlog/files.json       {"files": [one entry per file tried], "kmsg": entry or null}: mtimes, sizes, bytes
                             read, line counts, first/last dated line (collectors.kernlog.files.acquire)

A ``.kernel`` file holds only the lines with the ``kernel:`` tag, as they are in the host's file (a ``.gz``
decompressed), each prefixed with its line number in that file and a tab: ``4711\\tSep  2 04:05:13 gpu-node-3
kernel: [  123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``.
A syslog file holds every program's lines and can be gigabytes; only the kernel's are evidence here, so only
they are stored, and the manifest note of each says how many of how many lines. ``kernlog/kmsg`` keeps every
record, the kernel's (facility 0) and those written into /dev/kmsg from user space; only the kernel's are read
into events. Credentials are redacted in both (:func:`forensics.redact.redact_bytes`; the notes say how many
lines changed) unless ``--no-redact``.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from forensics import kmsg
from forensics.bundle import Bundle
from forensics.events import Event, NodeFacts
from forensics.source import CollectContext, Reading
from forensics.timeutil import parse_iso

from . import files, ring, span, syslog

NAME = "kernlog"
OPTIONS: list = []  #: none
META = "kernlog/files.json"
#: a kmsg record repeats a kern.log line when its text is the same and its time this close (btime is whole
#: seconds and rsyslog stamps the receipt: a second or two apart)
SAME_LINE = timedelta(seconds=3)
SUMMARY_CAP = 300  #: characters of a message kept in an event's summary


def acquire(ctx: CollectContext) -> None:
    """Store the kernel lines of the syslog files (:func:`collectors.kernlog.files.acquire`) and, on a live node,
    the ring buffer (:func:`collectors.kernlog.ring.acquire`), then ``kernlog/files.json``. Raises nothing for
    missing, unreadable or odd host files (each is a manifest record)."""
    entries = files.acquire(ctx)
    kmsg = ring.acquire(ctx)
    ctx.writer.write_json(META, {"files": entries, "kmsg": kmsg}, source=f"{files.LOG_DIR}/, {ring.KMSG}",
                          method="listdir", notes=("one entry per file tried (collectors/kernlog/files.py)",))


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """The stored kernel lines as ``kernel.*`` events (source ``kern.log`` or ``kmsg``, evidence
    ``{"artifact": REL, "line": N}``, N the line in the stored artifact, ``original`` the line's time text or the
    record's header), classified by :mod:`forensics.kmsg`, consecutive lines of one multi-line message joined;
    ``Coverage("kern.log")`` and ``Coverage("kmsg")`` (:mod:`collectors.kernlog.span`). A line stored twice (the
    same line in kern.log and messages, or in two rotations) gives one event; a kmsg record that repeats a
    kern.log line (same text, within :data:`SAME_LINE`) gives none. Raises nothing for bad content."""
    r = Reading()
    meta = _meta(bundle, r.problems)
    entries = [e for e in (meta.get("files") if isinstance(meta.get("files"), list) else []) if _entry(e)]
    spans, seen, zone_less, said, kern = {}, set(), False, {}, []
    for e in sorted(entries, key=_order):
        lines = _stored_lines(bundle, e, r.problems)
        if lines is None:
            continue
        anchors = [syslog.Line(0, None, t, "") for t in (e.get("first"), e.get("last")) if t]
        timed = anchors[:1] + lines + anchors[1:]
        syslog.read_times(timed, _when(e.get("mtime")), node.tz, node.tz_unknown)
        zone_less = zone_less or any(not ln.when[:1].isdigit() for ln in timed)
        spans[e["path"]] = (_first(timed), _last(timed))
        fresh = [ln for ln in lines if (ln.when, ln.text) not in seen]
        seen.update((ln.when, ln.text) for ln in lines)
        for ln in fresh:
            said.setdefault(_bare(ln.text), []).append(ln.at)
        kern += _events([_Said(ln.at, ln.flags, ln.when, ln.text, ln.n, ln.n) for ln in fresh if ln.at],
                        "kern.log", e["path"])
    r.events += kmsg.merge_oom(kern)
    r.coverage.append(span.syslog_coverage(bundle, entries, spans, zone_less, node.tz_unknown))
    ringed = meta.get("kmsg") if isinstance(meta.get("kmsg"), dict) else None
    ringed = ringed if ringed is None or isinstance(ringed.get("path"), (str, type(None))) else None
    r.events += kmsg.merge_oom(_ring_events(bundle, ringed, node, said, r))
    return r


def _entry(e) -> bool:
    """Whether a ``files.json`` entry has the shape acquire writes (a hand-edited bundle may hold anything)."""
    return (isinstance(e, dict) and e.get("family") in files.FAMILIES and isinstance(e.get("source"), str)
            and all(isinstance(e.get(k), (str, type(None))) for k in ("path", "first", "last", "mtime"))
            and all(isinstance(e.get(k), (int, type(None))) for k in ("kernel_lines", "head_skipped")))


def _order(e: dict) -> tuple:
    """Families in :data:`files.FAMILIES` order, each oldest rotation first."""
    base = e["family"]
    name = str(e.get("source", "")).rsplit("/", 1)[-1]
    return files.FAMILIES.index(base), files.rotation_key(name, base) or (9, 0)


def _stored_lines(bundle: Bundle, e: dict, problems: list) -> list | None:
    if not e.get("path") or not bundle.find(e["path"]):
        return None
    try:
        return syslog.parse_stored(bundle.path(e["path"]).read_bytes())
    except OSError as err:
        problems.append({"artifact": e["path"], "message": f"cannot read: {err}"})
        return None


def _ring_events(bundle: Bundle, entry: dict | None, node: NodeFacts, said: dict, r: Reading) -> list[Event]:
    """The kernel's kmsg records (facility 0) not already said by kern.log, as events; appends the coverage."""
    boot = node.boot_time or (_when(entry.get("boot_time")) if entry else None)
    records = []
    if entry and entry.get("path") and bundle.find(entry["path"]):
        try:
            records = ring.parse(bundle.path(entry["path"]).read_bytes())
        except OSError as err:
            r.problems.append({"artifact": entry["path"], "message": f"cannot read: {err}"})
    first = records[0].at(boot) if records and boot else None
    r.coverage.append(span.kmsg_coverage(entry, bundle, first, records[0].seq if records else None,
                                         _when(entry.get("read_at")) if entry else None))
    kernel = [(i, rec, rec.at(boot) if boot else None) for i, rec in enumerate(records) if rec.facility == 0]
    suspended = entry.get("suspended_s") if entry and isinstance(entry.get("suspended_s"), (int, float)) else 0
    near = SAME_LINE + timedelta(seconds=max(0, suspended))  # a record's time runs early by the time suspended
    fresh = [_Said(at, (), rec.original, rec.text, rec.n, i) for i, rec, at in kernel
             if at and not _said_before(rec.text, at, said, near)]
    return _events(fresh, "kmsg", ring.STORED)


def _said_before(text: str, at: datetime, said: dict, near: timedelta) -> bool:
    """Whether every line of a kmsg record's ``text`` is a kern.log line within ``near`` of ``at`` (a multi-line
    printk is one record with embedded newlines, and one kern.log line per line)."""
    return all(any(t and abs(t - at) <= near for t in said.get(line, ())) for line in text.split("\n"))


def _bare(text: str) -> str:
    """A kernel message without imklog's ``[  123.456789] `` stamp, to compare with a kmsg record's."""
    if text.startswith("[") and "] " in text[:20]:
        return text.split("] ", 1)[1]
    return text


class _Said(NamedTuple):
    """One kernel line or record to read: its time (UTC) and flags, ``original`` (the time text or the record's
    header), ``text`` (the message as stored, imklog's stamp kept), ``n`` its line in the stored artifact and
    ``pos`` its place among the kernel's lines there (consecutive lines of one message: consecutive places)."""

    at: datetime
    flags: tuple
    original: str
    text: str
    n: int
    pos: int


def _events(lines: list[_Said], source: str, artifact: str) -> list[Event]:
    """The ``kernel.*`` events of the kernel lines of one stored artifact (in its order), classified by
    :func:`forensics.kmsg.classify` on the text without imklog's stamp, consecutive lines of one multi-line
    driver message joined (:func:`forensics.kmsg.join_continuations`: next places, within a second);
    ``message`` holds the lines as stored (stamp kept), joined with ``\\n``."""
    wanted = [ln for ln in lines if kmsg.might_matter(ln.text)]
    out = []
    for group, joined in kmsg.join_continuations(wanted, lambda ln: _bare(ln.text), _adjacent):
        got = kmsg.classify(joined)
        if got is None:
            continue
        kind, attrs = got
        attrs["message"] = "\n".join(ln.text for ln in group)
        first = group[0]
        out.append(Event(first.at, source, kind, joined.replace("\n", " ")[:SUMMARY_CAP], attrs,
                         {"artifact": artifact, "line": first.n}, first.original, first.flags))
    return out


def _adjacent(a: _Said, b: _Said) -> bool:
    return b.pos == a.pos + 1 and abs(b.at - a.at) <= kmsg.OOM_MERGE


def _first(lines):
    return next((ln.at for ln in lines if ln.at), None)


def _last(lines):
    return next((ln.at for ln in reversed(lines) if ln.at), None)


def _when(text) -> object:
    try:
        return parse_iso(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _meta(bundle: Bundle, problems: list) -> dict:
    if not bundle.find(META):
        return {}
    return bundle.json(META, problems) or {}
