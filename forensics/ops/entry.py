"""The ``gpu-forensics`` console script's own module, kept free of imports (the command line,
:mod:`forensics.ops.cli`, is imported inside :func:`entry`): Ctrl-C while the interpreter loads the tool
ends it with one line and exit code 130, never Python's ``KeyboardInterrupt`` traceback."""
from __future__ import annotations

import os
import sys

EXIT_USAGE, EXIT_SIGINT = 2, 128 + 2


def entry(main=None) -> None:
    """Run ``main`` (default :func:`forensics.ops.cli.main`, imported here), then end the process with its exit
    code without the interpreter's teardown. After a big bundle the heap holds about a million objects in
    reference cycles (matplotlib's figure, the readings), and freeing them one by one took 0.4-0.8 s on bench L
    for nothing: every file main writes is closed, and a ``.tar.gz`` bundle's scratch directory removed, before
    it returns. Standard output and error are flushed first; a reader that closed the pipe (``| head``) ends
    it quietly. Ctrl-C before ``main``'s own handler (while importing or parsing) prints one line, exit 130."""
    try:
        if main is None:
            from .cli import main
        rc = main()
    except KeyboardInterrupt:
        print("gpu-forensics: interrupted by SIGINT; nothing was collected", file=sys.stderr)
        rc = EXIT_SIGINT
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            quiet_stdout()
    os._exit(rc if isinstance(rc, int) else EXIT_USAGE)


def quiet_stdout() -> None:
    """Point stdout at /dev/null once a write to it failed, so that the interpreter's flush at exit
    neither fails again nor prints a traceback (the Python docs' recipe for SIGPIPE)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
