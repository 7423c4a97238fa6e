"""The systemd journal: acquire the entries that explain a daemon-reload, and read them back as events.

Acquisition opens the host's journal files read-only with libsystemd (``systemd.journal.Reader`` on
file descriptors obtained through :mod:`forensics.hostfs`), probing each file alone first, because
``Reader(path=)`` silently skips a bad file and ``Reader(files=[...])`` fails whole if one is bad
(../shared/research/formats.md §1.1). Only selected entries are stored, found with journal field
matches (``_PID=1``, ``_SYSTEMD_UNIT=``, ``SYSLOG_IDENTIFIER=``), time seeks, and for the NVML texts
the file's index of its distinct MESSAGE values (:mod:`collectors.journal.unique`), never by reading
every entry's text. The child that reads them runs while the later collectors collect
(:func:`begin`). The package's modules, in the order acquisition uses them:

- :mod:`collectors.journal.files`: probing each journal file alone, hashing them;
- :mod:`collectors.journal.header`: the journal file header, and why libsystemd refused a file;
- :mod:`collectors.journal.attempts`: the child that reads them, waited for, and read again after a file shrank;
- :mod:`collectors.journal.reader`: the sources of entries (libsystemd on the probed files, or the
  node's journalctl); :mod:`collectors.journal.unique`: a field's distinct values in one file;
- :mod:`collectors.journal.fileset`: the probed files read one at a time (memory flat in the number
  of files), the PID 1 and NVML passes shared among two forked readers (both cores);
- :mod:`collectors.journal.selection`: the rules that keep entries, and the spool that holds them;
- :mod:`collectors.journal.wording`: what PID 1's and the units' messages say, and the events the
  stored entries become (used at acquisition and at reading, so the two never disagree).

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
  forensics/neighbours.py).
- ``boots.json``: ``[{boot_id, first, last, first_usec, last_usec, first_cursor, last_cursor}]``.
- ``coverage.json``: first/last entry over all files (µs, ISO UTC, cursor), ``since``,
  ``files_found``, ``files_read``, ``files_failed``, ``method``, ``problems``.
"""
from __future__ import annotations

import base64
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
from . import attempts, isolate, selection, wording as w
from .attempts import _size
from .files import METHOD, _File, _final, _hash_all, _probe
from .fileset import _FileSet, _room_for
from .reader import _JournalctlSource


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
    for f in files:
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
                    _fallback(ctx, unread) if unread else None  # none: the time budget reached no file
                if src is not None:
                    src.deadline = ctx.deadline
                    with closing(src):
                        _store(ctx, src, source, len(files), len(files) - len(good) if good else 0)
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


# -- reading entries: libsystemd, or the node's own journalctl ---------------------------------------
def _fallback(ctx, files: list[_File]):
    """A journalctl source when no file opened here; records why when there is none."""
    jc = next((p for p in ("/usr/bin/journalctl", "/bin/journalctl") if hostfs.exists(ctx.root, p)), None)
    why = None
    if jc is None:
        why = "no journalctl on the node (/usr/bin/journalctl, /bin/journalctl) to fall back on"
    elif ctx.live:
        return _JournalctlSource([str(hostfs.resolve(ctx.root, jc))],
                                 [str(hostfs.resolve(f.root, f.path)) for f in files], getattr(ctx.writer, "dir", None))
    elif os.geteuid() != 0:
        why = "running the node's journalctl under chroot needs root"
    else:
        host = [f.path for f in files if f.root == str(ctx.root)]
        if host:
            return _JournalctlSource(["chroot", str(ctx.root), jc], host, getattr(ctx.writer, "dir", None))
        why = "the unreadable files are outside --root, so the node's journalctl cannot reach them"
    ctx.writer.record(Artifact(None, ENTRIES, Status.ERROR, METHOD,
                               message=f"none of the {len(files)} journal files could be opened, and {why}"))
    return None


# -- selecting and storing -------------------------------------------------------------------------
def _store(ctx, src, source: str, n_files: int, n_failed: int) -> None:
    given = ctx.value(SINCE)
    since_dt = given.replace(tzinfo=given.tzinfo or timezone.utc) if isinstance(given, datetime) else None
    since = int(since_dt.timestamp() * 1_000_000) if since_dt else None
    problems: list[str] = []
    redact = ctx.redact
    with selection.Spool(dir=getattr(ctx.writer, "dir", None)) as spool:  # in the bundle being written
        try:
            sel, boots, first, last = selection.select(src, since, problems, spool)
        except (OSError, subprocess.SubprocessError) as e:
            ctx.writer.record(Artifact(None, source, Status.ERROR, src.method,
                                       message=f"reading the journal failed: {e}"))
            return
        with ctx.writer.create(ENTRIES, source=source, method=src.method,
                               notes=_notes(since_dt, problems, redact)) as out:
            for e in sel.entries():
                out.write(json.dumps(redact_entry(e) if redact else e, sort_keys=True) + "\n")
    ctx.writer.write_json(BOOTS, boots, source=source, method=src.method)
    ctx.writer.write_json(COVERAGE, {**selection.edge_record(first, "first"), **selection.edge_record(last, "last"),
                                     "since": iso_z(since_dt),
                                     "files_found": n_files, "files_read": n_files - n_failed,
                                     "files_failed": n_failed,
                                     "method": src.method, "problems": problems},
                          source=source, method=src.method)


def _notes(since_dt, problems: list[str], redact: bool) -> list[str]:
    notes = ["selected by journal matches: PID 1 reload/reexec/SIGHUP/banner lines and start/stop lines of units "
             "that matter; entries from the requesting PID, package-manager units and sudo systemctl "
             f"{selection.BEFORE_US // 10**6} s before to {selection.AFTER_US // 10**6} s after each reload; "
             "NVML/CUDA errors and healthy probe lines of kubelet, containerd, docker, nvidia* and dcgm* units; "
             "first and last entry of each boot and of the journal; lines claiming to be PID 1's or kubelet's by "
             "SYSLOG_IDENTIFIER/SYSLOG_PID that journald's _PID, _TRANSPORT, _SYSTEMD_UNIT, _COMM and _UID "
             "contradict (kept as forged)"]
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
    :data:`forensics.events.KINDS`), the journal's coverage, and facts: ``systemd_version`` and
    ``systemd_version_basis``, ``boots`` (``[{boot_id, first, last}]``), ``journal_first``,
    ``journal_last`` (ISO UTC). Reads only the bundle; ``node`` is not needed by this source.

    An entry that claims to be PID 1's or kubelet's while journald's trusted fields (``_PID``,
    ``_TRANSPORT``, ``_SYSTEMD_UNIT``, ``_COMM``, ``_UID``) say otherwise becomes one
    ``journal.forged`` event and nothing else (:func:`collectors.journal.wording.forged_claim`).

    Never raises for bad content: a malformed line or file is skipped and reported in
    ``Reading.problems``.
    """
    out = Reading()
    cov, boots = _load(bundle, COVERAGE, out, dict), _load(bundle, BOOTS, out, list)
    for f in _load(bundle, FILES, out, list):
        if isinstance(f, dict) and not f.get("opened"):
            out.problems.append({"artifact": FILES,
                                 "message": f"{f.get('source')} was not read: {f.get('error')}"})
    lines, pid1 = {}, []
    for n, e in _stored(bundle, out):
        rules = e.get("_GF_SELECTED_BY") if isinstance(e.get("_GF_SELECTED_BY"), list) else []
        at = from_usec(e["__REALTIME_TIMESTAMP"])
        evidence = {"artifact": ENTRIES, "cursor": e["__CURSOR"], "line": n}
        lines[e["__CURSOR"]] = n
        if "pid1" in rules and not w.forged_claim(e, rules):  # a forged one is a journal.forged event
            pid1.append((at, e, evidence))
        out.events += w.entry_events(at, e, rules, evidence)
    events, version = w.manager_events(sorted(pid1, key=lambda x: (x[0], x[2]["line"])))
    out.events += events + w.boot_events(boots, lines, out.problems)
    out.events.sort(key=lambda ev: ev.at)
    refused = [f"{a.source}: {a.status.value}" + (f" ({a.message})" if a.message else "")
               for a in bundle.artifacts() if a.method in (METHOD, "journalctl") and not a.path]
    out.coverage.append(w.coverage(cov, refused, out.problems))
    out.facts.update({"systemd_version": version[0] if version else None,
                      "systemd_version_basis": version[1] if version else None,
                      "boots": [{k: b.get(k) for k in ("boot_id", "first", "last")}
                                for b in boots if isinstance(b, dict)],
                      "journal_first": cov.get("first"), "journal_last": cov.get("last")})
    return out


def _load(bundle, rel: str, out: Reading, kind: type):
    if not bundle.find(rel):
        return kind()
    try:
        data = json.loads(bundle.path(rel).read_text())
        if isinstance(data, kind):
            return data
        out.problems.append({"artifact": rel, "message": f"expected a JSON {kind.__name__}"})
    except (OSError, ValueError, RecursionError) as e:
        out.problems.append({"artifact": rel, "message": f"unreadable: {e}"})
    return kind()


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
