"""dpkg and apt: copy the package logs into the bundle, and read the copies back into events.

Package upgrades matter here because maintainer scripts run ``systemctl daemon-reload``
(docs/sources.md "Package logs"): every package whose postinst or postrm carries a dh_installsystemd snippet
reloads PID 1 when it is configured or removed.

Bundle layout written by :func:`acquire`::

    packages/dpkg/dpkg.log[.N[.gz]]              /var/log/dpkg.log and its rotations, raw bytes
    packages/apt/history.log[.N[.gz]]            /var/log/apt/history.log and its rotations (*)
    packages/unattended-upgrades/*.log*          /var/log/unattended-upgrades/*.log* (*)
    packages/units.json                          {"<pkg>": {"postinst": [marker], "postrm": [marker]}}

(*) raw bytes too, unless a line holds a credential (a proxy URL with a password in apt's
``Commandline:``): then that value is replaced (:func:`redact_copy`; not with ``--no-redact``) and
the manifest record says so.

All three logs are written in local time without a zone; :func:`read` interprets them in the
node's zone (``NodeFacts.tz``). Line grammars live in :mod:`collectors.packages.parse`, and the
readers that turn each log's lines into events in :mod:`collectors.packages.events`; this module
holds :func:`acquire` and :func:`read` with what they copy, scan and load.
"""
from __future__ import annotations

import fnmatch
import gzip
import zlib
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import PurePosixPath

from forensics import hostfs
from forensics.redact import TEXT_NOTE, redact_bytes
from forensics.artifact import Artifact, Status, errno_name, from_oserror
from forensics.bundle import Bundle
from forensics.source import CollectContext
from forensics.events import Coverage, Event, NodeFacts
from forensics.source import Reading
from forensics.timeutil import WINDOW_REACH, ZONE_UNKNOWN_NOTE, iso_z, parse_iso

from . import parse as pp
from . import rotation as pr
from .events import _apt_events, _dpkg_events, _uu_events, near_windows

SCRIPT_LIMIT = 256 << 10    #: bytes of each maintainer script scanned
PIECE = 1 << 20             #: bytes redacted between two looks at the time budget (~0.1-0.3 s)
GUNZIP_LIMIT = 256 << 20    #: bytes a rotated .gz may decompress to and still be scanned for credentials
#: bytes copied of one package log (a month of dpkg.log on a busy node is a few MiB; a bigger one, a
#: sparse file included, keeps its last LOG_LIMIT bytes from a line boundary, the newest lines, and is
#: recorded as truncated with what was skipped (forensics.tailcopy); a .gz keeps its first LOG_LIMIT
#: bytes. This also bounds the memory a redacted copy takes: it is read whole, up to this)
LOG_LIMIT = 64 << 20
MARKERS = ("daemon-reload", "deb-systemd-invoke", "deb-systemd-helper", "dh_installsystemd")
INFO_DIR = "/var/lib/dpkg/info"
UNITS = "packages/units.json"


@dataclass(frozen=True)
class _Log:
    source: str   #: Event.source
    dir: str      #: directory on the host
    base: str     #: current file name; rotations are base.N[.gz]
    rel: str      #: folder in the bundle

    @property
    def path(self) -> str:
        return f"{self.dir}/{self.base}"


DPKG = _Log("dpkg", "/var/log", "dpkg.log", "packages/dpkg")
APT = _Log("apt", "/var/log/apt", "history.log", "packages/apt")
UU = _Log("unattended-upgrades", "/var/log/unattended-upgrades", "unattended-upgrades.log",
          "packages/unattended-upgrades")


NAME = "packages"
OPTIONS: list = []  #: none
WINDOWED = True  #: :func:`read` takes the incident windows (forensics/source.py)


# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Copy dpkg.log, apt history.log and the unattended-upgrades logs (with every rotation, ``.gz``
    kept compressed) into ``packages/``, and write ``packages/units.json`` from the maintainer
    scripts in /var/lib/dpkg/info. Every attempt, missing or not, is a manifest record.
    Raises nothing for a missing, unreadable or odd host file (those become manifest records)."""
    w = ctx.writer
    redact = ctx.redact
    rotation: dict[str, dict] = {}
    skipped: set[str] = set()

    def copy(log: _Log, name: str, copied: dict) -> None:  # records absent/unreadable itself
        # apt's Commandline: and unattended-upgrades' output can carry a proxy URL with a password
        scrub = redact_copy(name, ctx.expired) if redact and log is not DPKG else None
        path = f"{log.dir}/{name}"
        if ctx.expired():  # recorded once, though the rotation check after the copies asks again
            if path not in skipped:
                skipped.add(path)
                w.record(Artifact(None, path, Status.TRUNCATED, "copy",
                                  message="not copied: the time budget (--time-budget) was spent"))
            return
        copied[name] = pr.identify(ctx.root, path)
        # an oversized plain log keeps its end, the newest lines (a .gz's end cannot be decompressed alone)
        w.copy(ctx.root, path, f"{log.rel}/{name}", transform=scrub, limit=LOG_LIMIT, tail=not name.endswith(".gz"))
        ctx.log(f"packages: copied {path}")  # a progress note; tests rotate the logs here, as logrotate would

    listed = []
    for log in (DPKG, APT, UU):
        wanted = _wanted(log)
        names = ctx.listdir(log.dir, record_absent=log is UU)
        copied: dict = {}
        if names is not None or log is not UU:
            copy(log, log.base, copied)
            for name in sorted((n for n in names or () if wanted(n) and n != log.base), key=_key(log)):
                copy(log, name, copied)
            listed.append((log, [n for n in names or () if wanted(n)], copied))
    _scan_units(ctx)
    for log, first, copied in listed:  # logrotate may have run meanwhile: list again, match by identity
        rotation[log.source] = pr.reconcile(ctx, log.source, log.dir, first, copied, _wanted(log),
                                            lambda n, log=log, c=copied: copy(log, n, c), _key(log))
    w.write_json(pr.REPORT, rotation, source=", ".join(f"{log.dir}/" for log in (DPKG, APT, UU)), method="listdir",
                 notes=("each directory listed before and after its files were copied "
                        "(collectors/packages/rotation.py)",))


def _wanted(log: _Log):
    """Which names of ``log.dir`` belong to ``log``: its rotations (unattended-upgrades: every ``*.log*``)."""
    if log is UU:
        return lambda n: fnmatch.fnmatchcase(n, "*.log*")
    return lambda n: bool(pp.rotation_key(n, log.base))


def _key(log: _Log):
    """Sort key of ``log``'s names, oldest rotation first (other unattended-upgrades logs by name)."""
    return lambda n: pp.rotation_key(n, log.base) or (3, n, 0)


def redact_copy(name: str, expired=None):
    """The ``transform`` (see :meth:`forensics.bundle.BundleWriter.copy`) that copies the package log
    ``name`` with credentials replaced (:func:`forensics.redact.redact_bytes`: URL
    credentials, ``Bearer``/``Basic`` values, credential ``NAME=X``). A file with
    none is stored byte for byte; a ``.gz`` with some is decompressed (at most
    :data:`GUNZIP_LIMIT` bytes), redacted and stored recompressed (gzip, mtime 0). With ``expired``
    (``CollectContext.expired``), a plain file is redacted newest piece first (:func:`_newest_first`)
    and, once the time budget is spent, its older pieces are dropped, with a ``truncated:`` note
    (:data:`collectors.packages.rotation.DROPPED`). Raises nothing."""
    def transform(data: bytes) -> tuple[bytes, tuple[str, ...]]:
        text, gz_note, gz = data, None, name.endswith(".gz")
        if gz:
            text, gz_note, gz = _gunzip(data)
            if text is None:
                return data, (gz_note,)
        out, dropped = _newest_first(text, expired) if expired and not gz else (redact_bytes(text), 0)
        if dropped:
            text = text[dropped:]
        if out == text:
            return (text if dropped else data), ((pr.DROPPED.format(n=dropped),) if dropped else ())
        n = sum(a != b for a, b in zip(*(t.decode("utf-8", "surrogateescape").splitlines() for t in (text, out))))
        notes = (f"credentials redacted in {n} lines ({TEXT_NOTE})",)
        notes += (gz_note,) if gz_note else ()
        notes += (pr.DROPPED.format(n=dropped),) if dropped else ()
        return (gzip.compress(out, mtime=0) if gz else out), notes
    return transform


def _newest_first(text: bytes, expired) -> tuple[bytes, int]:
    """``(redacted bytes, bytes dropped at the head)``: ``text`` redacted in pieces of about
    :data:`PIECE` bytes from its end, each starting after a blank line (apt's stanza separator; a
    multi-line credential such as a PEM block holds none, so no piece splits one; text with no blank
    line is one piece), the newest first; once ``expired()`` says the budget is spent, the older rest
    is dropped (the newest piece is always redacted: :data:`PIECE` bytes cost a fraction of a second)."""
    out, end = [], len(text)
    while end > 0 and not (out and expired()):
        i = text.rfind(b"\n\n", 0, end - PIECE) if end > PIECE else -1
        start = 0 if i < 0 else i + 2
        out.append(redact_bytes(text[start:end]))
        end = start
    return b"".join(reversed(out)), end


def _gunzip(data: bytes) -> tuple[bytes | None, str | None, bool]:
    """``(decompressed bytes, note, was gzip)`` for every gzip member of ``data``: ``None`` bytes
    when they would exceed :data:`GUNZIP_LIMIT`; ``data`` itself when it is not gzip (scanned as it
    is). A stream cut short gives what it held, with a note."""
    out, total, rest = [], 0, data
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(rest, GUNZIP_LIMIT - total + 1)
        except zlib.error:
            return (b"".join(out), None, True) if out else (data, None, False)
        total += len(chunk)
        out.append(chunk)
        if total > GUNZIP_LIMIT:
            return None, f"not scanned for credentials: decompresses to more than {GUNZIP_LIMIT} bytes", True
        if not d.eof:
            return b"".join(out), "the .gz was cut short on the node: stored recompressed with what it held", True
        rest = d.unused_data
    return b"".join(out), None, True


def _scan_units(ctx: CollectContext) -> None:
    """Which packages' postinst/postrm run systemd snippets (docs/sources.md "Package logs"; debhelper
    autoscripts postinst-systemd-*, postrm-systemd-reload-only)."""
    try:
        names = hostfs.listdir(ctx.root, INFO_DIR)
    except OSError as e:
        ctx.writer.record(from_oserror(INFO_DIR, "scan", e))
        return
    units: dict[str, dict[str, list[str]]] = {}
    scanned, failed, long = 0, [], 0
    for name in names:
        stem, _, kind = name.rpartition(".")
        if kind not in ("postinst", "postrm") or not stem:
            continue
        try:
            with hostfs.open_regular(ctx.root, f"{INFO_DIR}/{name}") as f:
                data = f.read(SCRIPT_LIMIT + 1)
        except OSError as e:
            failed.append(f"{name}: {errno_name(e.errno) or type(e).__name__}")
            continue
        scanned += 1
        long += len(data) > SCRIPT_LIMIT
        found = [m for m in MARKERS if m.encode() in data[:SCRIPT_LIMIT]]
        if found:
            entry = units.setdefault(pp.package_name(stem), {"postinst": [], "postrm": []})
            entry[kind] = sorted(set(entry[kind]) | set(found), key=MARKERS.index)
    notes = [f"scanned {scanned} maintainer scripts (first {SCRIPT_LIMIT} bytes each) for {', '.join(MARKERS)}"]
    if long:
        notes.append(f"{long} scripts are longer than {SCRIPT_LIMIT} bytes; only their start was scanned")
    if failed:
        notes.append(f"{len(failed)} scripts could not be read: " + "; ".join(failed[:20]))
    ctx.writer.write_json(UNITS, units, source=f"{INFO_DIR}/*.postinst, {INFO_DIR}/*.postrm",
                          method="scan", notes=tuple(notes))


# -- read ------------------------------------------------------------------------------------------
@dataclass
class _Span:
    first: datetime | None = None
    last: datetime | None = None
    newest: datetime | None = None
    count: int = 0

    def add(self, ev: Event, end: datetime | None) -> None:
        if self.newest is not None and ev.at < self.newest:
            ev.flags = ev.flags + ("out-of-order",)
        self.saw(ev.at, end)

    def saw(self, at: datetime, end: datetime | None = None) -> None:
        """A line at ``at`` (UTC) ending at ``end``, with or without an event of its own."""
        self.newest = at if self.newest is None else max(self.newest, at)
        self.first = at if self.first is None else min(self.first, at)
        tail = max(at, end) if end else at
        self.last = tail if self.last is None else max(self.last, tail)
        self.count += 1


def read(bundle: Bundle, node: NodeFacts, windows: list | None = None) -> Reading:
    """Read the bundle's package logs into events (never the live host).

    Returns a :class:`Reading` with ``package.dpkg-action`` (one per dpkg.log line),
    ``package.transaction`` (one per history.log stanza) and ``package.unattended-run`` (one per
    unattended-upgrades run) events in file order (oldest rotation first), one :class:`Coverage`
    per source (``dpkg``, ``apt``, ``unattended-upgrades``; UTC, ``None`` when the source is
    missing; up to the collection when the current file was collected, :func:`still_written`; its
    ``holes`` the periods no stored file holds, :func:`collectors.packages.rotation.holes`; a copy a
    rotation during collection duplicated, ``packages/rotation.json``, is skipped), facts
    ``packages_last_change`` (package -> ISO UTC of its last install, upgrade, removal or purge in
    dpkg.log), ``package_event_counts`` and ``packages_with_unit_scripts``,
    and ``problems`` for every unreadable file or line. ``ships_units`` (dpkg: bool; apt: list of
    package names) is ``None`` when the bundle has no ``packages/units.json`` to say. When the node's
    zone is unknown (``node.tz_unknown``) every event is flagged ``tz-unknown`` and each coverage's
    ``uncertain`` is :data:`forensics.timeutil.ZONE_UNKNOWN_NOTE`: the times are read as UTC, ±14 h.
    ``windows`` (UTC ``(start, end)`` pairs, the incident windows): a dpkg.log line whose text time lies
    farther than :data:`forensics.timeutil.WINDOW_REACH` from all of them makes no event; it is counted in
    the fact ``package_lines_outside_windows`` (and in ``package_event_counts``), and its time, its change of
    a package and its place in the coverage are kept as before. Raises nothing for bad file contents.
    """
    reading = Reading()
    units = _load_units(bundle, reading.problems)
    counts, last_change, outside = {}, {}, {}
    zone_note = ZONE_UNKNOWN_NOTE if node.tz_unknown else None
    for log, reader in ((DPKG, _dpkg_events), (APT, _apt_events), (UU, _uu_events)):
        span, spans = _Span(), []
        rotated = pr.load(bundle, log.source, reading.problems)
        files = [a for a in _stored(bundle, log) if PurePosixPath(a.path).name not in (rotated.get("duplicates") or {})]
        more = {"changes": last_change} if log is DPKG else {}
        if log is DPKG and windows is not None:
            more["near"] = near_windows(windows, WINDOW_REACH)
            outside[log.source] = 0
        for art in files:
            lines = reader(bundle.path(art.path), art.path, node.tz, units, reading.problems, **more)
            spans.append(_read_file(art, lines, span, reading.events, "tz-unknown" if zone_note else None, outside,
                                    log.source))
        cov = still_written(_coverage(bundle, log, files, span, node), bundle.manifest)
        cov.reason += pr.note(rotated) + pr.heads(spans)
        empty = [PurePosixPath(a.path).name for a in files if pp.current(a.path) and a.size == 0]
        if empty and cov.start:  # rotated just now: the older files cover, the current one holds nothing since
            cov.reason += f"; {empty[0]} itself is empty (nothing written since its last rotation)"
        cov.holes = tuple(pr.holes(spans, log.base, cov.end))
        cov.uncertain = zone_note if cov.start else None
        if cov.uncertain:
            cov.reason += f"; {zone_note}"
        reading.coverage.append(cov)
        counts[log.source] = span.count
    reading.facts = {"packages_last_change": {k: iso_z(v) for k, v in sorted(last_change.items())},
                     "package_event_counts": counts,
                     "packages_with_unit_scripts": None if units is None else len(units)}
    if windows is not None:
        reading.facts["package_lines_outside_windows"] = outside
    return reading


def _read_file(art, lines, span: _Span, events: list, flag: str | None, outside: dict, source: str) -> pr.FileSpan:
    """Take the ``(event or None, end)`` pairs a reader of :mod:`collectors.packages.events` gives for the stored
    file ``art`` into ``events`` (each flagged ``flag`` when given) and ``span``; ``(None, at)`` is a line outside
    every window (counted in ``outside[source]``, its time still in the spans). Returns the file's own span."""
    one = pr.FileSpan.of(art)
    for ev, end in lines:
        if ev is None:
            at, end = end, None
            span.saw(at)
            outside[source] += 1
        else:
            if flag:
                ev.flags = ev.flags + (flag,)
            span.add(ev, end)
            at = ev.at
            events.append(ev)
        if one.first is None or at < one.first:
            one.first = at
        tail = at if end is None or end < at else end
        if one.last is None or tail > one.last:
            one.last = tail
    return one


def still_written(cov: Coverage, manifest: dict) -> Coverage:
    """``cov`` of a package log extended to the collection's start when the manifest holds a ``collected``
    record of the log's current file, or one stored without its head but with its end
    (:class:`collectors.packages.rotation.FileSpan`): an append-only log still written then would hold
    any later line."""
    path = {log.source: log.path for log in (DPKG, APT, UU)}.get(cov.source)
    collected = (manifest.get("collection") or {}).get("start")
    if not (path and cov.start and collected and any(a.get("source") == path and (a.get("status") == "collected" or (
            a.get("path") and (f := pr.FileSpan.of(Artifact.from_json(a))).head and not f.cut))
            for a in manifest.get("artifacts", []))):
        return cov
    at = parse_iso(collected)
    return replace(cov, end=max(cov.end or at, at),
                   reason=cov.reason + "; the log was still being written at collection")


def _stored(bundle: Bundle, log: _Log) -> list:
    arts = [a for a in bundle.find(log.rel + "/") if pp.rotation_key(PurePosixPath(a.path).name, log.base)]
    return sorted(arts, key=lambda a: pp.rotation_key(PurePosixPath(a.path).name, log.base))


def _load_units(bundle: Bundle, problems: list) -> set[str] | None:
    """Package names with systemd snippets, or ``None`` when the bundle does not say."""
    if not bundle.find(UNITS):
        return None
    data = bundle.json(UNITS, problems)
    return None if data is None else {str(k) for k in data}


def _coverage(bundle: Bundle, log: _Log, files: list, span: _Span, node: NodeFacts) -> Coverage:
    names = [PurePosixPath(a.path).name for a in files]
    rot = sum(1 for n in names if n != log.base)
    plural = "" if rot == 1 else "s"
    if log.base in names:
        what = f"{log.base} and {rot} rotation{plural} cover" if rot else f"{log.base} covers"
    else:
        what = f"{rot} rotation{plural} of {log.base} cover"
    cut = [n for a, n in zip(files, names) if pr.FileSpan.of(a).cut]  # a cut head is named by pr.heads
    tail = f"; truncated at collection: {', '.join(cut)}" if cut else ""
    if files and log.base not in names:  # then nothing says the log was silent up to collection
        tail += f"; current {log.base} not stored ({_missing_reason(bundle, log)})"
    if span.count:
        day = lambda t: t.astimezone(node.tz).date().isoformat()  # noqa: E731
        return Coverage(log.source, span.first, span.last, f"{what} {day(span.first)} .. {day(span.last)}{tail}")
    if files:
        return Coverage(log.source, None, None, f"{what} nothing: no dated entries{tail}")
    return Coverage(log.source, None, None, _missing_reason(bundle, log))


def _missing_reason(bundle: Bundle, log: _Log) -> str:
    records = {a.source: a for a in bundle.artifacts()}
    for src in ((log.dir, log.path) if log is UU else (log.path,)):
        a = records.get(src)
        if a is None or a.status in (Status.COLLECTED, Status.TRUNCATED):
            continue
        if a.status is Status.ABSENT:
            return f"absent: {a.source} not found on the node"
        if a.status is Status.UNREADABLE:
            return f"unreadable: {a.source} ({errno_name(a.errno)}: {a.message})"
        return f"{a.status.value}: {a.source}: {a.message}"
    return f"not collected: the bundle holds no record of {log.path}"
