#!/usr/bin/env python3
"""Run ``gpu-forensics`` once as a Kubernetes init container or Job and exit 0 when a bundle was made.

``gpu-forensics run`` exits 1 when it finished but some evidence was unreadable (that is recorded in
the bundle's manifest). In a DaemonSet's init container or a Job, a non-zero exit would make Kubernetes
run the collection again and again, each time into a new bundle; so 0 and 1 both end with 0 here, and
a usage error (2: an output that exists or that another collection is writing, too), an invalid bundle
(3), a bundle that could not be written (5: full disk, read-only or /proc, /sys output; the partial
bundle is kept as ``<out>.incomplete``) and an interruption (130 SIGINT, 143 SIGTERM) fail the
container. The real exit code is printed.
Arguments are those of ``gpu-forensics`` itself.

In the node image (scripts/build-image.sh: the zipapp on Debian's python3, no jinja2 or matplotlib)
``run`` cannot write the reports; there it collects with the same collection options, uploads the
bundle when ``--upload-url`` asks, and says that the analysis is to be done elsewhere.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

from forensics.ops import cli

#: what ``analyze`` imports beyond ``collect`` (pyproject.toml's "report" extra)
REPORT_LIBS = ("jinja2", "matplotlib")


def collect_argv(parser: argparse.ArgumentParser, argv: list) -> list:
    """``argv`` of a ``run`` as the ``collect`` of the same collection: the subcommand renamed, the
    options ``collect`` does not know (the reports', the upload's) left out with their values."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    known = {s for a in subs["collect"]._actions for s in a.option_strings}
    takes_value = {s: a.nargs != 0 for a in subs["run"]._actions for s in a.option_strings}
    i = next(k for k, t in enumerate(argv) if not t.startswith("-"))  # before it only -q/-v
    out, rest = argv[:i] + ["collect"], iter(argv[i + 1:])
    for tok in rest:
        name = tok.split("=", 1)[0]
        value = [next(rest, None)] if takes_value.get(name) and "=" not in tok else []
        if name in known or not tok.startswith("-"):
            out += [tok, *value]
    return [t for t in out if t is not None]


def run_without_reports(argv: list) -> int:
    """``run`` where the report libraries are absent: collect, upload if asked; the exit code of
    ``run`` (the worst of the two). Usage errors exit 2 from argparse as ``gpu-forensics`` does."""
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    coll = collect_argv(parser, argv)
    if args.out is None:
        args.out = str(cli._default_out(args.node))
        coll += ["--out", args.out]
    rc = cli.main(coll)
    print(f"gpu-forensics: note: not analysed here: this image has no report libraries ({', '.join(REPORT_LIBS)}); "
          f"analyze the bundle elsewhere: gpu-forensics analyze {args.out}", file=sys.stderr)
    if not args.upload_url or rc not in (0, 1):
        return rc
    try:
        return max(rc, cli._upload(Path(args.out), args))
    except cli.UsageError as e:
        print(f"gpu-forensics: error: {e}", file=sys.stderr)
        return cli.EXIT_USAGE


def main(argv: list) -> int:
    """The exit code of ``gpu-forensics argv`` (``run`` without reports: :func:`run_without_reports`)."""
    sub = next((t for t in argv if not t.startswith("-")), None)
    if sub == "run" and not all(importlib.util.find_spec(m) for m in REPORT_LIBS):
        return run_without_reports(argv)
    return cli.main(argv)


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    print(f"gpu-forensics exited {rc}", file=sys.stderr)
    sys.exit(0 if rc in (0, 1) else rc)
