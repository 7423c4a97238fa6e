"""What the command line says on stderr: progress notes (:func:`log`, :func:`progress`; quiet with
--quiet), the lines the engineer must see with --quiet too (:func:`note`), and the gaps of a
collection (:func:`gaps`). The answer (bundle, hash, verdicts, report paths) goes to stdout, in
:mod:`forensics.ops.cli`."""
from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager

from ..artifact import Artifact, Status
from ..words import count_of


VERBOSITY = {"quiet": False, "verbose": False}


def log(msg: str) -> None:
    """Progress notes go to stderr: always with --verbose, never with --quiet, else on a TTY."""
    if VERBOSITY["quiet"]:
        return
    if VERBOSITY["verbose"] or sys.stderr.isatty():
        print(f"gpu-forensics: {msg}", file=sys.stderr)


@contextmanager
def progress(total: int):
    """A rich progress bar on stderr while collectors run; plain notes when stderr is not a TTY
    (nothing with --quiet)."""
    if VERBOSITY["quiet"] or not sys.stderr.isatty() or importlib.util.find_spec("rich") is None:
        # rich is the "report" extra: a node's collect (the zipapp, a base install) has plain notes
        yield log
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("collecting", total=total)

        def step(msg: str) -> None:
            bar.update(task, description=msg, advance=1 if msg.startswith("collecting ") else 0)
        yield step


def note(msg: str) -> None:
    """A line the engineer must see (how a time was read, what was cut): stderr, with --quiet too."""
    print(f"gpu-forensics: {msg}", file=sys.stderr)


def gaps(arts: list[Artifact], cuts: list[tuple[str, str]], budget: float) -> int:
    """Print one line per artifact that failed or was unreadable, one per source the time budget cut
    (``cuts``, :func:`forensics.ops.pipeline.budget_cuts`), the note on running without root, and, when
    there is any gap, the "done with gaps" line; returns how many gaps (exit 1 when any)."""
    bad = [a for a in arts if a.status in (Status.UNREADABLE, Status.ERROR)]
    for a in bad:
        print(f"  {a.status.value}: {a.source}" + (f" (errno {a.errno})" if a.errno else "")
              + (f": {a.message}" if a.message else ""), file=sys.stderr)
    for source, why in cuts:
        print(f"  cut: {source}: {why}", file=sys.stderr)
    if os.geteuid() != 0:
        denied = [a for a in arts if a.status is Status.UNREADABLE]
        print(f"  note: not root: {count_of(len(denied), 'artifact')} {'was' if len(denied) == 1 else 'were'} unreadable. Root would add them, and also the "
              "journal files of other users, containerd/runc state under /run, cgroup device rules and the "
              "--probe. Re-run with sudo.", file=sys.stderr)
    parts = [f"{_n(len(cuts), 'source')} cut by the {budget:g} s time budget"] if cuts else []
    parts += [f"{_n(len(bad), 'artifact')} failed or unreadable"] if bad else []
    if parts:
        note(f"done with gaps (exit 1): {', '.join(parts)}; the manifest records each"
             + ("; a larger --time-budget (0: no limit) reads the rest" if cuts else ""))
    return len(cuts) + len(bad)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
