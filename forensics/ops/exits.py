"""The exit codes of ``gpu-forensics`` (the table is :mod:`forensics.ops.cli`'s docstring) and the errors
that end a command with one of them: :class:`UsageError` (2) and :class:`Unavailable` (6)."""
from __future__ import annotations

import importlib.util

EXIT_OK, EXIT_MISSING, EXIT_USAGE, EXIT_INVALID, EXIT_WRITE, EXIT_UNAVAILABLE = 0, 1, 2, 3, 5, 6
#: what the reports import beyond ``collect`` (pyproject.toml's "report" extra; absent from the node image)
REPORT_LIBS = ("jinja2", "matplotlib")


class UsageError(Exception):
    """Bad input from the user; printed as one line with a hint, exit code 2."""


class Unavailable(Exception):
    """What this installation cannot do (the single-file collector and the node image collect only: no
    report libraries, no sample node); printed as one line saying where to do it, exit code 6."""


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
