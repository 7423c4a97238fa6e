"""The pipeline: every collector's ``acquire`` against the host into a new bundle (:func:`collect`), and
every collector's ``read`` over a bundle into the analysis (:func:`read_all`, :func:`analyze`).

Collection is the only part of the program that touches the host, and it only reads (through
:mod:`forensics.hostfs`). Each collector failing is recorded as an ``error`` artifact (or, when
reading, a problem) and the others still run, so one broken source never costs the rest of the
evidence. This module is the only loop over ``collectors.COLLECTORS``.
"""
from __future__ import annotations

import gc
import os
import platform
import shlex
import signal
import sys
import time
import traceback
from contextlib import contextmanager
from datetime import datetime, timezone
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Mapping

from ..artifact import Artifact, Status
from ..bundle import Bundle, BundleWriter
from ..output import BundleWriteError
from ..redact import description as redaction_description, redact_argv
from ..source import FACT_KEYS, CollectContext, Option, Reading, Readings, option_values, recorded_options
from ..timeutil import iso_z
from .exits import Interrupted, stopped_by


def collector_options() -> list[Option]:
    """Every collector's :class:`Option` s, in ``collectors.COLLECTORS`` order."""
    from collectors import COLLECTORS
    return [o for mod in COLLECTORS for o in mod.OPTIONS]


def collect(root: str | os.PathLike, out: str | os.PathLike, *, options: Mapping[str, Any] | None = None,
            incidents: list[dict] | None = None, node_name: str | None = None, argv: list[str] | None = None,
            log: Callable[[str], None] = lambda msg: None, redact: bool = True,
            time_budget: float | None = 600) -> tuple[Path, str, list[Artifact]]:
    """Acquire every source under ``root`` into a new bundle at ``out`` (directory or ``.tar.gz``).

    ``options`` are the collectors' option values keyed by :class:`Option` ``dest`` (``{"since":
    datetime, "probe": True, "prometheus": URL, ...}``; a missing one is its default), already
    converted and checked (the CLI runs each option's ``check``). ``incidents`` are ``{"start": ISO,
    "end": ISO, "label": str}`` dicts from ``--incident``; they are stored in the manifest so that
    analysis can be repeated from the bundle alone. ``node_name`` (``--node``) is the node's name
    for every collector (``ctx.node.hostname_override``).
    ``redact`` (on unless ``--no-redact``) is handed to every collector and also applies to the
    command line the manifest records (:func:`redact_argv`). ``time_budget`` (seconds) bounds the
    whole run: collectors check ``ctx.expired()`` and mark what they hold as truncated; a collector
    not yet started when it is spent is recorded as truncated.
    Returns ``(bundle path, manifest sha256, artifacts)``. Raises ``FileExistsError`` when ``out``
    exists, ``ValueError`` for an option name no collector declares, :class:`BundleWriteError` when
    the bundle cannot be written (collection stops at the first failed write; ``kept`` names the
    partial bundle, marked incomplete with the reason) and :class:`Interrupted` on SIGINT/SIGTERM
    (when :func:`interruptible` is in force; the partial bundle is kept the same way).
    """
    from collectors import COLLECTORS

    declared = collector_options()
    values = option_values(declared, options or {})
    started = datetime.now(timezone.utc)
    argv = list(argv if argv is not None else sys.argv)
    writer = BundleWriter(out)
    ctx = CollectContext(root=Path(root), writer=writer, log=log, redact=redact, options=values,
                         deadline=time.monotonic() + time_budget if time_budget else None)
    # before the collectors: the metrics queries select the node by this name
    ctx.node.hostname_override = node_name or None
    try:
        _run_collectors(COLLECTORS, ctx, writer, log, time_budget)
    except Interrupted as e:
        e.kept = writer.abandon(f"interrupted by {e.name} while collecting")
        raise
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT, writer.abandon("interrupted by SIGINT while collecting")) from None
    if writer.write_error is not None:
        raise BundleWriteError(writer.write_error.message, writer.write_error.errno,
                               writer.abandon(f"stopped: {writer.write_error.message}"))
    writer.meta.update(_manifest_head(ctx, root, started, argv, incidents, redact,
                                      {**recorded_options(declared, values), "time_budget_s": time_budget}))
    try:
        path, digest = writer.finish()
    except Interrupted as e:
        e.kept = writer.abandon(f"interrupted by {e.name} while finishing") if writer.dir.is_dir() else None
        raise
    return path, digest, writer.artifacts


def _manifest_head(ctx: CollectContext, root, started: datetime, argv: list[str], incidents, redact: bool,
                   options: dict) -> dict:
    """What the manifest says of the collection besides its artifacts: the node and its facts, its zone,
    when, where and by whom it was collected, the command line (redacted unless ``--no-redact``), the
    incidents given, the redaction and what each recorded option was (with the tool's own time budget)."""
    return {
        "node": ctx.node.name,
        "node_facts": ctx.node.manifest(),
        "timezone": {"name": ctx.node.tz_name, "utc_offset": ctx.node.utc_offset, "source": ctx.node.tz_source},
        "boot_time": ctx.node.boot_time,
        "collection": {"start": iso_z(started), "end": iso_z(datetime.now(timezone.utc)),
                       "root": str(root), "collector_host": platform.node(), "euid": os.geteuid()},
        "command_line": shlex.join(redact_argv(argv) if redact else argv),
        "incidents": incidents or [],
        "redaction": {"enabled": redact, "what": redaction_description(redact)},
        "options": options,
    }


def _run_collectors(collectors, ctx: CollectContext, writer: BundleWriter, log, time_budget) -> None:
    """Every collector's ``acquire``, in order, until the bundle cannot be written any more. A
    collector with ``begin`` (the journal: :func:`collectors.journal.begin`) is started in a child
    and the ones after it run here meanwhile (issue 18: both cores busy); its manifest records are put
    where its turn was, so the manifest holds them in the collectors' order all the same."""
    pending = None  #: (collector, the call that finishes it, where its records go)
    try:
        for mod in collectors:
            name = mod.NAME
            log(f"collecting {name}")
            if ctx.expired():
                writer.record(Artifact(None, f"collector:{name}", Status.TRUNCATED, name,
                                       message=f"not run: the {time_budget:g} s time budget was spent"))
                continue
            try:
                if pending is None and hasattr(mod, "begin"):
                    done = mod.begin(ctx)
                    pending = (mod, done, len(writer.artifacts)) if done is not None else None
                else:
                    mod.acquire(ctx)
            except Exception as e:  # a collector bug must not cost the other sources
                _failed(writer, name, e)
            if writer.write_error is not None:  # a full or read-only disk: what follows could not be kept
                break
    except BaseException:  # SIGINT/SIGTERM (interruptible): what the child reads is kept all the same
        if pending is not None:
            log(f"interrupted: waiting for the {pending[0].NAME} child to finish (interrupt again to stop it)")
            _finish(writer, *pending)  # a second interruption kills the child (collectors.journal.isolate.finish)
        raise
    if pending is not None:
        _finish(writer, *pending)


def _finish(writer: BundleWriter, mod, done, at: int) -> None:
    """Wait for the collector :func:`_run_collectors` started with ``begin``; its records go at ``at``."""
    later = writer.artifacts[at:]
    del writer.artifacts[at:]
    try:
        done()
    except Exception as e:
        _failed(writer, mod.NAME, e)
    finally:
        writer.artifacts.extend(later)


def _failed(writer: BundleWriter, name: str, e: Exception) -> None:
    """Record collector ``name``'s exception ``e`` (a bug, or the bundle's write error) as its error."""
    if isinstance(e, BundleWriteError):
        writer._failed(e)
    writer.record(Artifact(None, f"collector:{name}", Status.ERROR, name, message=f"{type(e).__name__}: {e}",
                           notes=(traceback.format_exc(limit=3)[-800:],)))


def budget_cuts(artifacts: list[Artifact]) -> list[tuple[str, str]]:
    """``(source, why)`` of each source the time budget cut, in manifest order, once per source: the
    ``truncated`` records whose message or notes say "time budget" (a collector not run, a file not
    read, a scan stopped; the collectors write those words), not those cut by a size bound or a selection."""
    out: dict[str, str] = {}
    for a in artifacts:
        if a.status is not Status.TRUNCATED or a.source in out:
            continue
        why = next((t for t in (a.message, *a.notes) if t and "time budget" in t), None)
        if why:
            out[a.source] = " ".join(why.split())
    return list(out.items())


@contextmanager
def interruptible():
    """SIGINT, SIGTERM (a DaemonSet's pod being deleted, a CI cancel, ``timeout``) and SIGHUP (the
    terminal gone) raise :class:`Interrupted` meanwhile (:func:`forensics.ops.exits.stopped_by`).
    The first one waits for the journal's child (what it reads is kept); the next kills it with its
    readers (:func:`collectors.journal.isolate.kill`), so that nothing this run started outlives it."""
    with stopped_by(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        yield


def read_all(bundle: Bundle, defer: bool = False) -> Readings:
    """Run every collector's ``read`` over the bundle (node facts first, from ``collectors.node``) and
    merge what they give (:func:`_merge`). A collector that raises becomes a problem (``{"artifact": its
    name, "message"}``), not a crash.

    ``defer``: the collectors that read for windows (``WINDOWED``, forensics/source.py: the package logs)
    are not read yet; ``Readings.later(windows)`` reads them for the incident windows (UTC ``(start,
    end)`` pairs, ``None``: everything) and completes the readings in place, as if read here
    (issue 30: the analysis opens its incidents first, and a long-lived node's dpkg.log is then made
    into events only near them). Without ``defer`` every collector reads everything."""
    from collectors import COLLECTORS, node as node_collector

    out = Readings(node_collector.facts(bundle))
    parts: list[list] = []
    for mod in COLLECTORS:
        wait = defer and getattr(mod, "WINDOWED", False)
        parts.append([mod, None if wait else _read_one(mod, bundle, out.node)])
    own = [_merge(out, parts, [])]
    if any(r is None for _, r in parts):
        def later(windows) -> None:
            added = out.problems[own[0]:]  # what the analysis added since (an assessment that failed)
            for part in parts:
                if getattr(part[0], "WINDOWED", False):
                    part[1] = _read_one(part[0], bundle, out.node, windows)
            own[0] = _merge(out, parts, added)
        out.later = later
    return out


def _read_one(mod, bundle: Bundle, node, windows=None) -> Reading:
    try:
        return mod.read(bundle, node, windows) if windows is not None else mod.read(bundle, node)
    except Exception as e:  # keep the other sources' evidence
        return Reading(problems=[{"artifact": mod.NAME, "message": f"reading failed: {type(e).__name__}: {e}"}])


def _merge(out: Readings, parts: list[list], added: list[dict]) -> int:
    """Put the readings of ``parts`` (``[collector, Reading or None]`` in ``COLLECTORS`` order) into ``out``, in
    place: the events sorted by time (stable: a source's own order, then the collectors' order, is kept for
    equal times), the coverage, the facts (a later collector's key replaces an earlier one's) and the problems,
    then ``added``. A fact key not declared in :class:`forensics.source.Facts` is a problem and left out.
    Node facts lacking the systemd version take the one a reading found (``systemd_version``), and so do the
    runtime facts' ``versions`` (the /dev/char rule of findings/exposure reads them there). Returns the
    number of the collectors' problems."""
    events, coverage, facts, problems = [], [], {}, []
    for mod, r in parts:
        if r is None:
            continue
        events.extend(r.events)
        coverage.extend(r.coverage)
        for key in r.facts.keys() - FACT_KEYS:  # a fact no one declared is a collector bug, not evidence
            problems.append({"artifact": mod.NAME, "message": f"reading gave an undeclared fact {key!r}; "
                                                             "it was left out (declare it in forensics.source.Facts)"})
        facts.update({k: v for k, v in r.facts.items() if k in FACT_KEYS})
        problems.extend(r.problems)
    events.sort(key=attrgetter("at"))
    out.events[:], out.coverage[:], out.problems[:] = events, coverage, problems + list(added)
    out.facts.clear()
    out.facts.update(facts)
    if not out.node.systemd_version and out.facts.get("systemd_version"):
        out.node.systemd_version = out.facts["systemd_version"]
    versions = (out.facts.get("runtime") or {}).get("versions")
    if isinstance(versions, dict) and not (versions.get("systemd") or {}).get("version") and out.node.systemd_version:
        # runtime_config is read before the journal, whose start-up banner may be the only witness (RHEL)
        versions["systemd"] = {"version": out.node.systemd_version,
                               "basis": out.facts.get("systemd_version_basis") or "node facts"}
    return len(problems)


@contextmanager
def _no_cycle_collection():
    """Reading a bundle builds about ten small objects per log line (an Event, its attrs and evidence
    dicts, ...), a million on a busy node, and none of them in a reference cycle: reference counting
    frees them. Python's cycle collector would still walk every one of them each time the heap grows
    by a quarter (0.7 s of 5 s on the L benchmark bundle, finding nothing), so it is paused meanwhile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyze(bundle: Bundle, full_timeline: bool = False) -> dict:
    """The analysis dict of ``bundle`` (schema ``gpu-forensics/analysis/v1``): :func:`read_all` (the package
    logs deferred to the incident windows), then :func:`forensics.findings.analysis.build` (``full_timeline``
    keeps every context event in ``timeline[]``, and reads every package log line). Raises ``ValueError`` for a malformed ``--incident`` window in the manifest."""
    from ..findings.analysis import build
    with _no_cycle_collection():
        return build(read_all(bundle, defer=True), bundle, full_timeline)
