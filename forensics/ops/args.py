"""The argument builders of the command line (:mod:`forensics.ops.cli` wires them into its subcommands)."""
from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from ..output import refuse_pseudo
from .exits import UsageError

#: the epilog of ``collect`` and ``run`` on the time forms (:func:`forensics.timeutil.parse_when`)
TIMES_HELP = """

times (--incident START..END, --since): ISO 8601 with an offset (2026-11-30T14:00+01:00); a date or
time without one, read in the NODE's zone from --root and said so (2026-11-30, 2026-11-30T14:00);
a clock time there (14:00: today's, or yesterday's while still to come; yesterday 23:00; an END before
START is the next day's); now, today, yesterday; a time ago (-2h, 2d, 90m ago); END may be +30m.
  e.g. --incident 14:00..15:00   --incident -2h..now   --incident 'yesterday 23:00..01:30'"""


def collect_args(p: argparse.ArgumentParser) -> None:
    """The tool's own collection flags, then every collector's :class:`forensics.source.Option` with a
    flag, in ``collectors.COLLECTORS`` order (their values land in ``args`` under each ``dest``)."""
    from .pipeline import collector_options
    p.add_argument("--root", default="/", help="host root as this process sees it (/ on the node, /host in a pod)")
    p.add_argument("--out", help="bundle path: a directory, or a file ending in .tar.gz "
                                 "(default ./gpu-forensics-<node>-<UTC time>)")
    p.add_argument("--incident", action="append", default=[], metavar="START..END[=LABEL]",
                   help="incident window; START and END each ISO 8601 with an offset, a date or time without "
                        "one (read in the node's zone, said so), a clock time (14:00, yesterday 23:00), now, today, "
                        "yesterday or a time ago (-2h, 2d); "
                        "END may be +30m after START; repeatable")
    p.add_argument("--node", help="node name to record (default: the host's /etc/hostname)")
    for o in collector_options():
        if o.flag is None:
            continue
        kw = {k: v for k, v in (("metavar", o.metavar), ("type", o.type), ("choices", o.choices)) if v is not None}
        if o.action:
            kw["action"] = o.action
        # argparse appends to its default: give it a fresh list, never the Option's shared one
        p.add_argument(o.flag, dest=o.dest, help=o.help, default=list(o.default) if o.action == "append" else o.default,
                       **kw)
    p.add_argument("--time-budget", type=float, default=600, metavar="SECONDS",
                   help="bound the whole collection; what is not reached is marked truncated, listed, and "
                        "makes the exit code 1 (default 600; 0: no limit)")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secret values (container env, annotations, URL credentials); recorded in the manifest")


def analyze_args(p: argparse.ArgumentParser, bundle: bool) -> None:
    """The report flags of ``analyze`` and ``run`` (with ``bundle``: the bundle argument, ``--expect``
    and ``--allow-tampered`` of ``analyze``)."""
    if bundle:
        p.add_argument("bundle", help="bundle directory or .tar.gz")
        expect_arg(p)
        p.add_argument("--allow-tampered", action="store_true",
                       help="analyse a bundle that does not match its manifest anyway (every report says so; exit 3)")
    from reports.formats import FLAVORS, FORMATS  # the one registry of report formats (no jinja2 needed)
    for f in FORMATS:
        p.add_argument(f.flag, help=f"write {f.what} here (default <bundle>-report/{f.file})")
    p.add_argument("--markdown-flavor", choices=FLAVORS, default=FLAVORS[0],
                   help=f"report.md as Markdown (GitHub, GitLab) or Jira wiki markup (default {FLAVORS[0]})")


def expect_arg(p: argparse.ArgumentParser) -> None:
    """``--expect SHA256`` (``analyze``, ``verify``)."""
    p.add_argument("--expect", metavar="SHA256", type=_sha256_arg,
                   help="the manifest.json SHA-256 recorded in the ticket; a different one is exit 3")


def _sha256_arg(text: str) -> str:
    t = text.strip().lower()
    if len(t) != 64 or t.strip("0123456789abcdef"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a SHA-256 (64 hex digits)")
    return t


def upload_args(p: argparse.ArgumentParser) -> None:
    """``run``'s upload flags (:mod:`forensics.ops.upload`)."""
    p.add_argument("--upload-url", metavar="URL", help="PUT (or POST) the bundle archive and the reports here, as sos does")
    p.add_argument("--upload-method", choices=["put", "post"], default="put")
    p.add_argument("--upload-auth-env", metavar="VAR", help="environment variable holding the Authorization header value")
    p.add_argument("--upload-auth-file", metavar="FILE", help="file holding the Authorization header value")
    p.add_argument("--upload-ca", metavar="FILE", help="CA bundle for the upload's TLS")
    p.add_argument("--upload-timeout", type=float, default=300, metavar="SECONDS",
                   help="bound the whole upload, every file and retry (default 300); the bundle is kept either way")


def report_paths(args, bundle_path: Path) -> dict[str, Path]:
    """``{format name: path}`` for every format of :data:`reports.formats.FORMATS`: its flag's value
    (:func:`given_path`), else its default file in ``<bundle>-report/``."""
    from reports.formats import FORMATS
    base = bundle_path.name[: -len(".tar.gz")] if bundle_path.name.endswith(".tar.gz") else bundle_path.name
    d = bundle_path.with_name(base + "-report")
    return {f.name: given_path(getattr(args, f.name, None), f.file) if getattr(args, f.name, None) else d / f.file
            for f in FORMATS}


#: what names standard output as a report's path, besides ``-``
STDOUT_NAMES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def given_path(value: str, file: str) -> Path:
    """A report flag's ``value`` as a path: ``-`` is standard output (``/dev/stdout``); a folder (one that
    exists, or a value ending in ``/``) gets the format's default ``file`` in it (pathlib would read
    ``reports/`` as a file named ``reports``)."""
    if value == "-":
        return Path(STDOUT_NAMES[0])
    if value.endswith("/") or os.path.isdir(value):
        return Path(value) / file
    return Path(value)


DEV_NULL = os.makedev(1, 3)  #: /dev/null's device number: a report thrown away there shares nothing with a person


def human_stream(paths) -> object:
    """Where the lines for a person go (the verdicts, ``wrote ...``, the summary): ``sys.stderr`` when one of
    the report ``paths`` names standard output (:data:`STDOUT_NAMES`), is it (the terminal, file or pipe it is;
    /dev/null aside), or standard output is closed, so that the report stays whole there; ``sys.stdout``
    otherwise."""
    paths = list(paths)
    if sys.stdout is None or any(str(p) in STDOUT_NAMES for p in paths):
        return sys.stderr
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return sys.stdout
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino) and st.st_rdev != DEV_NULL:
            return sys.stderr
    return sys.stdout


def report_flags() -> tuple[str, ...]:
    """The report formats' flags, from :data:`reports.formats.FORMATS`: ``("--html", "--markdown", "--json")``."""
    from reports.formats import FORMATS
    return tuple(f.flag for f in FORMATS)


def check_report_paths(args, bundle_path: Path | None) -> None:
    """Before anything is done: a report path under /proc or /sys is refused
    (:func:`forensics.output.refuse_pseudo`; exit 5); two reports written to one file or stream (a terminal or
    /dev/null aside), or a report that is, or is inside, the bundle ``bundle_path`` (it would no longer match
    its manifest; ``None``: not named yet, only the paths given are compared), are :class:`UsageError` (exit 2)."""
    from reports.formats import FORMATS
    for flag in report_flags():
        given = getattr(args, flag[2:], None)
        if given:
            refuse_pseudo(given_path(given, "x"), flag)
    paths = report_paths(args, bundle_path or Path("/nonexistent/bundle"))
    seen: dict = {}
    bundle = os.path.realpath(bundle_path) if bundle_path else None
    for f in FORMATS:
        if bundle_path is None and not getattr(args, f.name, None):
            continue
        p = paths[f.name]
        try:
            st = os.stat(p)
        except OSError:
            st = None
        if st is not None and stat.S_ISCHR(st.st_mode):
            continue
        key = (st.st_dev, st.st_ino) if st is not None else os.path.realpath(p)
        if key in seen:
            raise UsageError(f"{seen[key]} and {f.flag} name the same file ({p}); give each report its own")
        seen[key] = f.flag
        real = os.path.realpath(p)
        if bundle and real == bundle:  # a .tar.gz bundle, or the folder itself
            raise UsageError(f"{f.flag} {p} is the bundle {bundle_path}: the report would take its place; give a path "
                             "outside it (the default is beside it, in <bundle>-report/)")
        if bundle and real.startswith(bundle + os.sep):
            raise UsageError(f"{f.flag} {p} is inside the bundle {bundle_path}: a file written there makes it no "
                             f"longer match its manifest; give a path outside it (the default is {bundle_path}-report/)")
