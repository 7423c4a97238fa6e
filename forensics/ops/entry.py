"""The ``gpu-forensics`` console script, kept free of imports: the command line (:mod:`forensics.ops.cli`)
is imported inside :func:`entry`, so that Ctrl-C, SIGTERM or SIGHUP while the interpreter loads the tool ends
it with one line and exit code 128 + the signal, never Python's ``KeyboardInterrupt`` traceback nor a silent
death."""
from __future__ import annotations

import signal
import sys

from .exits import Interrupted, finish


def entry() -> None:
    """Import and run :func:`forensics.ops.cli.main`, then :func:`~forensics.ops.exits.finish` with its exit
    code. A signal before ``main``'s own handlers (while importing or parsing) prints one line."""
    def stop(signum, _frame):
        raise Interrupted(signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stop)
    try:
        from .cli import main
        rc = main()
    except (KeyboardInterrupt, Interrupted) as e:
        stopped = e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)
        print(f"gpu-forensics: interrupted by {stopped.name} while starting; nothing was written", file=sys.stderr)
        rc = 128 + stopped.signum
    for s in (signal.SIGTERM, signal.SIGHUP):  # past main: a signal now ends the process as it would have
        signal.signal(s, signal.SIG_DFL)
    finish(rc)
