"""The exit codes of ``gpu-forensics`` (the table is :mod:`forensics.ops.cli`'s docstring) and the errors
that end a command with one of them: :class:`UsageError` (2), :class:`Unavailable` (6) and
:class:`Interrupted` (128 + the signal); :func:`finish` ends the process with one. Light to import: the
console script (:mod:`forensics.ops.entry`) imports it before anything else."""
from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

EXIT_OK, EXIT_MISSING, EXIT_USAGE, EXIT_INVALID, EXIT_WRITE, EXIT_UNAVAILABLE = 0, 1, 2, 3, 5, 6
#: what the reports import beyond ``collect`` (pyproject.toml's "report" extra; absent from the node image)
REPORT_LIBS = ("jinja2", "matplotlib")


class UsageError(Exception):
    """Bad input from the user; printed as one line with a hint, exit code 2."""


class Unavailable(Exception):
    """What this installation cannot do (the single-file collector and the node image collect only: no
    report libraries, no sample node); printed as one line saying where to do it, exit code 6."""


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived (:func:`stopped_by`, :func:`forensics.ops.pipeline.interruptible`);
    ``kept`` is the partial bundle, once kept. A ``BaseException``, so that no collector's ``except Exception``
    swallows it; exit code 128 + ``signum``."""

    def __init__(self, signum: int, kept: Path | None = None):
        super().__init__(signum)
        self.signum, self.kept = signum, kept
        self.name = signal.Signals(signum).name


@contextmanager
def stopped_by(*signums: int):
    """Meanwhile each of ``signums`` raises :class:`Interrupted` in the main thread (elsewhere nothing changes),
    so that what is being written is cleaned up on the way out (a report's ``.part``, a bundle kept as
    incomplete) instead of the process dying where it stands; the old handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise Interrupted(signum)
    old = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def need_reports(cmd: str) -> None:
    """Raise :class:`Unavailable` when ``cmd`` cannot run here for want of :data:`REPORT_LIBS`."""
    missing = missing_report_libs()
    if missing:
        raise Unavailable(f"{cmd} is not available in this installation (no {', '.join(missing)}: the single-file "
                          "collector and the node image only collect); copy the bundle to a machine with "
                          "'pip install gpu-forensics[report]' and run it there")


def missing_report_libs() -> list[str]:
    """The :data:`REPORT_LIBS` this installation lacks (``[]`` with the "report" extra; the single-file
    collector and the node image lack both)."""
    return [m for m in REPORT_LIBS if importlib.util.find_spec(m) is None]


def finish(rc) -> None:
    """End the process with the exit code ``rc`` (not an int: :data:`EXIT_USAGE`) without the interpreter's
    teardown. After a big bundle the heap holds about a million objects in reference cycles (matplotlib's
    figure, the readings), and freeing them one by one took 0.4-0.8 s on bench L for nothing: every file a
    command writes is closed, and a ``.tar.gz`` bundle's scratch directory removed, before it returns.
    Standard output and error are flushed first; a reader that closed the pipe (``| head``) ends it quietly."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with that descriptor closed (>&-)
                stream.flush()
        except (BrokenPipeError, ValueError):
            quiet_stdout()
    os._exit(rc if isinstance(rc, int) else EXIT_USAGE)


def quiet_stdout() -> None:
    """Point stdout at /dev/null once a write to it failed, so that the interpreter's flush at exit
    neither fails again nor prints a traceback (the Python docs' recipe for SIGPIPE)."""
    if sys.stdout is not None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def quiet_stderr() -> None:
    """Point stderr at /dev/null once its reader left (a report written there, ``2>&1 >/dev/null | head``)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
