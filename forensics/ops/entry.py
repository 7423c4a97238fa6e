"""The ``gpu-forensics`` console script, kept free of imports: the command line (:mod:`forensics.ops.cli`)
is imported inside :func:`entry`, so that Ctrl-C while the interpreter loads the tool ends it with one line
and exit code 130, never Python's ``KeyboardInterrupt`` traceback."""
from __future__ import annotations

import sys

from .exits import finish


def entry() -> None:
    """Import and run :func:`forensics.ops.cli.main`, then :func:`~forensics.ops.exits.finish` with its exit
    code. Ctrl-C before ``main``'s own handler (while importing or parsing) prints one line, exit 130."""
    try:
        from .cli import main
        rc = main()
    except KeyboardInterrupt:
        print("gpu-forensics: interrupted by SIGINT; nothing was collected", file=sys.stderr)
        rc = 128 + 2
    finish(rc)
