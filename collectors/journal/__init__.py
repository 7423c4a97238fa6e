"""The systemd journal: acquire the entries that explain a daemon-reload, and read them back as events.

Acquisition opens the host's journal files read-only with libsystemd (``systemd.journal.Reader`` on
file descriptors obtained through :mod:`forensics.hostfs`), probing each file alone first, because
``Reader(path=)`` silently skips a bad file and ``Reader(files=[...])`` fails whole if one is bad
(docs/sources.md "Journal files and fields"). Only selected entries are stored, found with journal field
matches (``_PID=1``, ``_SYSTEMD_UNIT=``, ``SYSLOG_IDENTIFIER=``, ``_TRANSPORT=kernel``), time seeks,
and for the NVML and kernel texts the file's index of its distinct MESSAGE values
(:mod:`collectors.journal.unique`), never by reading every entry's text. The child that reads them runs while the later collectors collect
(:func:`begin`). The package's modules, in the order acquisition uses them:

- :mod:`collectors.journal.files`: probing each journal file alone, hashing them;
- :mod:`collectors.journal.header`: the journal file header, and why libsystemd refused a file;
- :mod:`collectors.journal.attempts`: the child that reads them, waited for, and read again after a file shrank;
- :mod:`collectors.journal.reader`, :mod:`~collectors.journal.journalctl`: the sources of entries
  (libsystemd on the probed files, or the node's journalctl), :mod:`~collectors.journal.damage`: what
  they read past a damaged file; :mod:`collectors.journal.unique`: a field's distinct values in one file;
- :mod:`collectors.journal.fileset`: the probed files read one at a time (memory flat in the number
  of files), the PID 1 and NVML passes shared among two forked readers (both cores);
- :mod:`collectors.journal.selection`: the rules that keep entries, and the spool that holds them;
- :mod:`collectors.journal.wording`, :mod:`~collectors.journal.kernel`, :mod:`~collectors.journal.runtime`:
  what PID 1, the units, the kernel and containerd say, and the events the stored entries become.

This module holds the entry points, :func:`acquire` and :func:`read`, with what they write and read.

Bundle files (all under ``journal/``):

- ``files.json``: one record per journal file: ``source``, ``size``, ``sha256``, ``header`` (flags,
  state, sizes, head/tail time), ``opened``, ``error``, ``errno``, and for a file that opened with
  entries ``first_usec`` / ``last_usec`` (its first and last entry, µs UTC, as read at the probe);
  ``hash_error`` when the file opened but could not be read to its end for the hash; ``truncated``
  (true) when the file shrank while it was read (its ``error`` says from and to what size); ``error``
  ``not read: time budget`` for a file the time budget did not reach.
- ``entries.jsonl``: one selected entry per line with all its fields as the journal stores them
  (text as str, non-UTF-8 as ``{"base64": ...}``, repeated fields as lists; unless ``--no-redact``,
  with the credentials :func:`forensics.redact.redact_bytes` recognises replaced, the same policy as
  for pod logs), ``__CURSOR``,
  ``__REALTIME_TIMESTAMP`` and ``__MONOTONIC_TIMESTAMP`` as int µs (UTC epoch / since boot), and
  ``_GF_SELECTED_BY``: the rules that selected it (``pid1``, ``unit``, ``requester``, ``nvml``,
  ``healthy``, ``boot``, ``coverage``, ``forged``, ``symptom``: a neighbouring GPU failure,
  forensics/neighbours.py; ``kernel``: a kernel line of forensics/kmsg.py; ``update-resources``:
  containerd's UpdateContainerResources lines).
- ``boots.json``: ``[{boot_id, first, last, first_usec, last_usec, first_cursor, last_cursor}]``.
- ``coverage.json``: first/last entry over all files (µs, ISO UTC, cursor), the same of the
  ``_TRANSPORT=kernel`` entries (``kernel_first_*``, ``kernel_last_*``: ``None`` for none), ``since``,
  ``files_found``, ``files_read``, ``files_failed``, ``method``, ``problems``, ``damaged``: the files read
  past a damage, what was read and lost and from when to when (:meth:`collectors.journal.damage.Walked.record`).
"""
from __future__ import annotations

import base64
import dataclasses
import errno
import json
import os
import re
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import datetime, timezone

from forensics import hostfs
from forensics.redact import TEXT_NOTE, redact_bytes, redact_text
from forensics.artifact import Artifact, Status, from_oserror
from forensics.source import CollectContext, Option, Reading
from forensics.timeutil import from_usec, iso_z, parse_iso
from forensics.output import BundleWriteError
from . import attempts, damage, isolate, kernel as kern, selection, wording as w
from .spans import coverage as journal_coverage
from .sudo import sudo_verdict
from .attempts import _size
from .files import METHOD, _File, _final, _hash_all, _probe, unusable
from .fileset import _FileSet, _room_for
from .journalctl import fallback


def _since(text: str, _values) -> datetime:
    try:
        return parse_iso(text)
    except ValueError as e:
        raise ValueError(f"--since: {e}") from None


def _existing(paths: list[str], _values) -> list[str]:
    for p in paths:
        if not os.path.exists(p):
            raise ValueError(f"--journal-dir {p}: no such file or directory")
    return paths


NAME = "journal"
#: extra journal directories or files (paths on this machine, not under --root)
JOURNAL_DIRS = Option("--journal-dir", "journal_dirs", "extra journal directory or file to read (besides those "
                      "under --root)", metavar="DIR", action="append", default=(), check=_existing,
                      record=lambda ps: [str(p) for p in ps])
#: a datetime (UTC when naive): entries before it are not scanned
SINCE = Option("--since", "since", "only scan journal entries at or after this ISO 8601 time", check=_since,
               record=iso_z)
OPTIONS = [JOURNAL_DIRS, SINCE]

HOST_DIRS = ("/var/log/journal", "/run/log/journal")
FILES, ENTRIES, BOOTS, COVERAGE = ("journal/files.json", "journal/entries.jsonl", "journal/boots.json",
                                   "journal/coverage.json")
MACHINE_ID = re.compile(r"[0-9a-f]{32}")


def acquire(ctx: CollectContext) -> None:
    """Select the reload-related journal entries of the host under ``ctx.root`` (and of each
    :data:`JOURNAL_DIRS` directory or file) into ``journal/`` of ``ctx.writer``'s bundle.

    Records every journal file it could not open as an ``error`` / ``unreadable`` artifact, and an
    ``absent`` one for ``/var/log/journal`` when no journal exists. The files are read in a child
    process (:mod:`collectors.journal.isolate`): when it dies (SIGBUS: a file shrank under
    libsystemd's mmap), each file smaller than when the collection found it is recorded as truncated
    while read (``error``, and ``truncated`` in files.json) and the others are read again, up to
    :data:`collectors.journal.attempts.RETRIES` times. Files the time budget does not reach are
    recorded as ``truncated``, "not read: time budget". Raises nothing for bad input;
    ``BundleWriteError`` when the bundle cannot be written.
    """
    pending = begin(ctx)
    if pending is not None:
        pending()


class _Begun:
    """What :func:`begin` started: call it to finish (as :func:`acquire` ends)."""

    def __init__(self, ctx: CollectContext, pending: attempts.Pending):
        self.ctx, self.pending = ctx, pending

    def __call__(self) -> None:
        records, failed = self.pending.finish()
        self.ctx.log(f"journal: {len(records)} files, {sum(not r.get('opened') for r in records)} not read")
        self.ctx.writer.write_json(FILES, records, source=self.pending.source, method=METHOD)
        if failed is not None:  # files.json is written even when selection failed
            raise failed


def begin(ctx: CollectContext) -> _Begun | None:
    """:func:`acquire` in two steps: find the files (recording what it records for none) and start
    the child that reads them; returns ``None`` when there is nothing to read, else the call that
    waits for the child and records the rest (what :func:`acquire` raises, it raises; interrupted
    while it waits, it kills the child). Meanwhile this process may collect other sources
    (:func:`forensics.ops.pipeline.collect`): the child has its own copy of ``ctx``."""
    files, dirs, refused = _find(ctx)
    if not files and not refused:
        where = ", ".join(dirs) if dirs else " or ".join(HOST_DIRS)
        ctx.writer.record(Artifact(None, HOST_DIRS[0], Status.ABSENT, METHOD,
                                   message=f"no journal files (*.journal, *.journal~) in {where}"))
    if not files:
        return None
    return _Begun(ctx, attempts.Pending(ctx, files, ", ".join(dirs), _read_files, (ENTRIES, BOOTS, COVERAGE)))


def _read_files(ctx: CollectContext, files: list[_File], source: str):
    """In the child: probe ``files``, select their entries into the bundle; returns ``(files.json
    records, the manifest records made, the exception selection raised or None)``."""
    n0, broke = len(ctx.writer.artifacts), None
    ctx.log = lambda _msg: None  # the parent's progress bar holds locks of a thread not forked here
    records, good, spans = [], [], []
    _room_for(len(files))
    why = unusable()  # no libsystemd here: every file goes to the node's journalctl (journalctl.fallback)
    for f in files:
        if why is not None and not ctx.expired():
            rec = {"source": f.source, "size": _size(f), "sha256": None, "header": None, "opened": False,
                   "errno": None, "error": f"not opened with libsystemd ({why}): given to the node's journalctl"}
            records.append(rec)
            continue
        if ctx.expired():
            rec = {"source": f.source, "size": _size(f), "sha256": None, "header": None, "opened": False,
                   "errno": None, "error": "not read: time budget"}
            records.append(rec)
            ctx.writer.record(Artifact(None, f.source, Status.TRUNCATED, METHOD,
                                       message="not read: the time budget (--time-budget) was spent"))
            continue
        rec, fh, failed = _probe(f)
        records.append(rec)
        if fh:
            good.append(fh)
            spans.append((rec.get("first_usec"), rec.get("last_usec"), _final(f, rec)))
        else:
            ctx.writer.record(failed)
    # the SHA-256 of every opened file (a gigabyte on a big node) is taken on the other core while
    # the entries are selected: os.pread and hashlib let go of the GIL
    opened = [rec for rec in records if rec["opened"]]
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="journal-hash") as pool:
            hashed = pool.submit(_hash_all, opened, [fh.fileno() for fh in good], ctx.deadline)
            try:
                unread = [f for f, rec in zip(files, records) if rec["error"] != "not read: time budget"]
                src = _FileSet([fh.fileno() for fh in good], spans, getattr(ctx.writer, "dir", None),
                               [rec["source"] for rec in opened]) if good else \
                    fallback(ctx, unread, ENTRIES, why) if unread else None  # none: the time budget reached no file
                if src is not None:
                    src.deadline = ctx.deadline
                    with closing(src):
                        _store(ctx, src, source, len(files), len(files) - len(good) if good else 0,
                               [f"read by the node's journalctl: this collector cannot load libsystemd ({why})"]
                               if why and not good else [])
            except BundleWriteError as e:
                broke = e
            except OSError as e:
                ctx.writer.record(Artifact(None, source, Status.ERROR, METHOD, errno=e.errno,
                                           message=f"opening the readable journal files together failed: {e}"))
            except Exception as e:  # a bug, a MemoryError: files.json is still written (by the parent)
                broke = isolate.portable(e)
            hashed.result()
    finally:
        for fh in good:
            fh.close()
    return records, ctx.writer.artifacts[n0:], broke


# -- finding files ---------------------------------------------------------------------------------
def _is_journal(name: str) -> bool:
    return name.endswith(".journal") or name.endswith(".journal~")


def _find(ctx) -> tuple[list[_File], list[str], bool]:
    """Journal files under the host's journal directories and ``--journal-dir`` paths, each once;
    the directories read; whether a directory could not be listed (recorded as an artifact)."""
    places = [(str(ctx.root), d, d, False) for d in HOST_DIRS]
    places += [("/", os.path.abspath(p), str(p), True) for p in ctx.value(JOURNAL_DIRS)]
    found, dirs, seen, refused = [], [], set(), False

    def add(root, path, shown):
        try:
            st = os.stat(hostfs.resolve(root, path))
        except OSError:
            st = None  # let _probe report it
        key = (st.st_dev, st.st_ino) if st else (root, path)
        if key not in seen:
            seen.add(key)
            found.append(_File(shown, root, path))

    for root, path, shown, given in places:
        try:
            real = hostfs.resolve(root, path)
            if given and stat.S_ISREG(os.stat(real).st_mode):
                dirs.append(shown)
                add(root, path, shown)
                continue
            names = os.listdir(real)
        except OSError as e:
            if given or e.errno not in (errno.ENOENT, errno.ENOTDIR):  # a missing host directory is normal
                refused = refused or e.errno not in (errno.ENOENT, errno.ENOTDIR)
                ctx.writer.record(from_oserror(shown, METHOD, e))
            continue
        dirs.append(shown)
        for name in sorted(names):
            sub = f"{path}/{name}"
            if _is_journal(name):
                add(root, sub, f"{shown}/{name}")
            elif MACHINE_ID.fullmatch(name) and os.path.isdir(hostfs.resolve(root, sub)):
                try:
                    inner = sorted(os.listdir(hostfs.resolve(root, sub)))
                except OSError as e:
                    refused = True
                    ctx.writer.record(from_oserror(f"{shown}/{name}", METHOD, e))
                    continue
                for n in inner:
                    if _is_journal(n):
                        add(root, f"{sub}/{n}", f"{shown}/{name}/{n}")
    return found, dirs, refused


# -- selecting and storing -------------------------------------------------------------------------
def _store(ctx, src, source: str, n_files: int, n_failed: int, how: list[str] = ()) -> None:
    """Select ``src``'s entries and write entries.jsonl (``how``: notes on the reader used and why),
    boots.json and coverage.json."""
    given = ctx.value(SINCE)
    since_dt = given.replace(tzinfo=given.tzinfo or timezone.utc) if isinstance(given, datetime) else None
    since = int(since_dt.timestamp() * 1_000_000) if since_dt else None
    problems: list[str] = []
    redact = ctx.redact
    with selection.Spool(dir=getattr(ctx.writer, "dir", None)) as spool:  # in the bundle being written
        try:
            sel, boots, first, last = selection.select(src, since, problems, spool)
            kfirst, klast = selection.kernel_span(src)
        except (OSError, subprocess.SubprocessError) as e:
            ctx.writer.record(Artifact(None, source, Status.ERROR, src.method,
                                       message=f"reading the journal failed: {e}"))
            return
        damaged = damage.per_file(getattr(src, "damage", ()))
        problems += [damage.sentence(d) for d in damaged]
        if getattr(src, "skipped", 0):
            problems.append(f"{src.skipped} output lines of journalctl were no journal entry and were skipped")
        with ctx.writer.create(ENTRIES, source=source, method=src.method,
                               notes=[*how, *_notes(since_dt, problems, redact),
                                      *(damage.sentence(d) for d in damaged)]) as out:
            for e in sel.entries():
                out.write(json.dumps(redact_entry(e) if redact else e, sort_keys=True) + "\n")
    ctx.writer.write_json(BOOTS, boots, source=source, method=src.method)
    ctx.writer.write_json(COVERAGE, {**selection.edge_record(first, "first"), **selection.edge_record(last, "last"),
                                     **selection.edge_record(kfirst, "kernel_first"),
                                     **selection.edge_record(klast, "kernel_last"),
                                     "since": iso_z(since_dt),
                                     "files_found": n_files, "files_read": n_files - n_failed,
                                     "files_failed": n_failed,
                                     "method": src.method, "problems": problems, "damaged": damaged},
                          source=source, method=src.method)


def _notes(since_dt, problems: list[str], redact: bool) -> list[str]:
    notes = ["selected by journal matches: PID 1 reload/reexec/SIGHUP/banner lines and start/stop lines of units "
             "that matter; entries from the requesting PID, package-manager units and sudo systemctl "
             f"{selection.BEFORE_US // 10**6} s before to {selection.AFTER_US // 10**6} s after each reload; "
             "NVML/CUDA errors, healthy probe lines and UpdateContainerResources lines of kubelet, containerd, "
             "docker, CRI-O, k3s, nvidia* and dcgm* units; kernel lines (_TRANSPORT=kernel) of the NVIDIA driver "
             "(Xid, GPU fallen off the bus, API mismatch, NVRM load and init), the OOM killer and PCIe AER; "
             "first and last entry of each boot and of the journal; lines claiming to be PID 1's, kubelet's or "
             "the kernel's by SYSLOG_IDENTIFIER/SYSLOG_PID that journald's _PID, _TRANSPORT, _SYSTEMD_UNIT, _COMM, "
             "_UID and SYSLOG_FACILITY contradict (kept as forged)"]
    if since_dt is not None:
        notes.append(f"entries filtered to {iso_z(since_dt)} and later")
    if any("time budget" in p for p in problems):
        notes.append("truncated: the time budget ran out while scanning; entries after that point were not read")
    if redact:
        notes.append(f"credentials redacted in field values: {TEXT_NOTE}")
    return notes


def redact_entry(e: dict) -> dict:
    """A stored entry with credentials in its field values redacted (the pod-log policy,
    :func:`forensics.redact.redact_text` without the ``-p`` rule), base64 values included;
    ``__`` fields (cursor, timestamps) and ``_GF_SELECTED_BY`` are left as they are. Raises nothing."""
    def one(v):
        if isinstance(v, str):
            return redact_text(v, p_flag=False)
        if isinstance(v, list):
            return [one(x) for x in v]
        if isinstance(v, dict) and isinstance(v.get("base64"), str):
            try:
                raw = base64.b64decode(v["base64"])
            except ValueError:
                return v
            return {"base64": base64.b64encode(redact_bytes(raw)).decode()}
        return v
    return {k: v if k.startswith("__") or k == "_GF_SELECTED_BY" else one(v) for k, v in e.items()}


# -- reading the bundle back ---------------------------------------------------------------------
def read(bundle, node) -> Reading:
    """Turn the bundle's ``journal/`` files into events (kinds ``journal.*`` in
    :data:`forensics.events.KINDS`; ``kernel.*``; ``runtime.update-resources``), two coverages (``journal``,
    and ``kernel``: :func:`collectors.journal.kernel.kernel_coverage`), and facts: ``systemd_version`` and
    ``systemd_version_basis``, ``boots`` (``[{boot_id, first, last}]``), ``journal_first``,
    ``journal_last`` (ISO UTC). Reads only the bundle; ``node`` is not needed by this source.

    An entry that claims to be PID 1's, kubelet's, containerd's or the kernel's while journald's
    trusted fields (``_PID``, ``_TRANSPORT``, ``_SYSTEMD_UNIT``, ``_COMM``, ``_UID``,
    ``SYSLOG_FACILITY``) say otherwise becomes one ``journal.forged`` event and nothing else
    (:func:`collectors.journal.wording.forged_claim`).

    Never raises for bad content: a malformed line or file is skipped and reported in
    ``Reading.problems``.
    """
    out = Reading()
    cov, boots = _load(bundle, COVERAGE, out, dict), _load(bundle, BOOTS, out, list)
    for f in _load(bundle, FILES, out, list):
        if isinstance(f, dict) and not f.get("opened"):
            out.problems.append({"artifact": FILES,
                                 "message": f"{f.get('source')} was not read: {f.get('error')}"})
    lines, pid1, kernel = {}, [], []
    for n, e in _stored(bundle, out):
        rules = e.get("_GF_SELECTED_BY") if isinstance(e.get("_GF_SELECTED_BY"), list) else []
        at = from_usec(e["__REALTIME_TIMESTAMP"])
        evidence = {"artifact": ENTRIES, "cursor": e["__CURSOR"], "line": n}
        lines[e["__CURSOR"]] = n
        if rules == ["forged"] and sudo_verdict(e) in ("sudo", "unverified"):
            rules = ["requester"]  # a sudo line an older collector took for forged (_UID, not its caps; or unverifiable)
        forged = w.forged_claim(e, rules)
        if "pid1" in rules and not forged:  # a forged one is a journal.forged event
            pid1.append((at, e, evidence))
        if "kernel" in rules and not forged:
            kernel.append((at, e, evidence))
        out.events += w.entry_events(at, e, rules, evidence)
    events, version = w.manager_events(sorted(pid1, key=lambda x: (x[0], x[2]["line"])))
    out.events += events + w.boot_events(boots, lines, out.problems)
    out.events += kern.kernel_events(sorted(kernel, key=lambda x: (x[0], x[2]["line"])))
    out.events.sort(key=lambda ev: ev.at)
    refused = [f"{a.source}: {a.status.value}" + (f" ({a.message})" if a.message else "")
               for a in bundle.artifacts() if a.method in (METHOD, "journalctl") and not a.path]
    files = _load(bundle, FILES, Reading(), list)
    spans = [journal_coverage(cov, refused, out.problems), kern.kernel_coverage(cov, refused, out.problems)]
    out.coverage += still_written(spans, files, bundle.manifest)
    out.facts.update({"systemd_version": version[0] if version else None,
                      "systemd_version_basis": version[1] if version else None,
                      "boots": [{k: b.get(k) for k in ("boot_id", "first", "last")}
                                for b in boots if isinstance(b, dict)],
                      "journal_first": cov.get("first"), "journal_last": cov.get("last")})
    return out


def still_written(spans: list, files: list, manifest: dict) -> list:
    """``spans`` (the journal's and its kernel lines' Coverage) extended to the collection's start when the
    journal was still being written then: collected from the live node (``--root /``) with a file in the
    ``online`` state (journald had it open). A journal that logged nothing between its last entry and the
    collection covers that time too: had PID 1 reloaded, it would be there. Otherwise unchanged."""
    col = manifest.get("collection") if isinstance(manifest.get("collection"), dict) else {}
    online = any(isinstance(f, dict) and (f.get("header") or {}).get("state") == "online" for f in files)
    try:
        at = parse_iso(col["start"]) if col.get("root") == "/" and online and col.get("start") else None
    except (TypeError, ValueError):
        at = None
    if at is None:
        return spans
    return [dataclasses.replace(c, end=at, reason=c.reason + "; the journal was still being written at collection "
                                f"(an online file of the live node), so it covers up to {iso_z(at)}")
            if c.start and c.end and c.end < at else c for c in spans]


def _load(bundle, rel: str, out: Reading, kind: type):
    """The stored ``rel`` (:meth:`forensics.bundle.Bundle.json`), an empty ``kind`` when absent or bad."""
    return (bundle.json(rel, out.problems, kind) if bundle.find(rel) else None) or kind()


def _stored(bundle, out: Reading):
    """``(line number, entry)`` for each well-formed line of entries.jsonl; others are reported."""
    if not bundle.find(ENTRIES):
        return
    try:
        with open(bundle.path(ENTRIES), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                try:
                    e = json.loads(line)
                    if not (isinstance(e, dict) and isinstance(e.get("__REALTIME_TIMESTAMP"), int)
                            and isinstance(e.get("__CURSOR"), str)):
                        raise ValueError("not an entry with __REALTIME_TIMESTAMP and __CURSOR")
                    from_usec(e["__REALTIME_TIMESTAMP"])
                except (ValueError, OverflowError, OSError, RecursionError) as err:
                    out.problems.append({"artifact": ENTRIES, "line": n, "message": f"line {n} skipped: {err}"})
                    continue
                yield n, e
    except OSError as err:
        out.problems.append({"artifact": ENTRIES, "message": f"unreadable: {err}"})
