"""Command line (docs/design.md "Command line and JSON: stable"; stable, scripts depend on it).

Exit codes: 0 done; 1 done with gaps (evidence missing, unreadable, or cut by --time-budget: each
named on stderr); 2 usage error (an output that exists or is being written included); 3 bundle invalid
or tampered; 4 ``drill``: still exposed; 5 an output could not be written (the bundle: full disk,
read-only or /proc, /sys output, what was written kept as ``<out>.incomplete``, marked with the
reason; a report; the timeline on stdout), one line saying what to do; 6 a command this installation
cannot run (the single-file collector: analyze, fleet, demo); 130 / 143 / 129 interrupted by SIGINT /
SIGTERM / SIGHUP (the partial bundle kept the same way; a report being written left as it was).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..bundle import Bundle, BundleError
from ..output import BundleWriteError, describe, refuse_nonempty
from ..source import option_values
from ..timeutil import sane_tz
from ..words import count_of
from .args import (TIMES_HELP, analyze_args, check_report_paths, collect_args, expect_arg, human_stream, report_paths,
                   upload_args)
from . import say
from .exits import (EXIT_INVALID, EXIT_MISSING, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, EXIT_WRITE, Interrupted,
                    Unavailable, UsageError, finish, missing_report_libs, need_reports, quiet_stderr, quiet_stdout,
                    stopped_by)
from .verify import cmd_verify, integrity_of as _integrity
from .when import NodeClock, join_negative_times, read_times, resolve_incident


IGNORED_TZ = sane_tz()  # before any collector (python-systemd) is imported
PROJECT = Path(__file__).resolve().parents[2]
SAMPLE_ROOT = PROJECT / "samples" / "node3-gpu"


def parse_incident(text: str, clock: NodeClock | None = None) -> dict:
    """``START..END[=LABEL]`` to ``{"start", "end", "label", "text"}`` in UTC (:func:`forensics.ops.when.
    resolve_incident`; without ``clock`` only times with an offset or relative to now are read). Raises
    :class:`UsageError` for anything else."""
    try:
        return resolve_incident(text, clock or NodeClock(None))[0]
    except ValueError as e:
        raise UsageError(f"--incident {text!r}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for every subcommand."""
    ex = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="gpu-forensics", formatter_class=ex,
                                description="Snapshot a GPU node's evidence before deleting a broken pod, and explain it.",
                                epilog="example: sudo gpu-forensics run --incident 2026-09-02T13:00+09:00..2026-09-02T13:10+09:00")
    p.add_argument("--version", action="version", version=f"gpu-forensics {__version__}")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the final summary")
    p.add_argument("-v", "--verbose", action="store_true", help="say what each step does")
    missing = missing_report_libs()  # the single-file collector: analyze, fleet and demo are not offered
    if missing:
        p.epilog += (f"\n\nanalyze, fleet and demo are not in this installation (no {', '.join(missing)}): run them "
                     "where 'pip install gpu-forensics[report]' is, e.g. on a laptop with the bundle")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{collect,run,timeline,verify,drill,watch}"
                           if missing else None)
    # a subcommand given no help is left out of the list (argparse lists only those with one; SUPPRESS
    # would print "==SUPPRESS==" before Python 3.12)
    offered = (lambda text: {}) if missing else (lambda text: {"help": text})
    c = sub.add_parser("collect", help="copy the evidence into a bundle (read-only on the host)", formatter_class=ex,
                       epilog="example: sudo gpu-forensics collect --out /var/tmp/node3.tar.gz" + TIMES_HELP)
    collect_args(c)
    a = sub.add_parser("analyze", **offered("rebuild the timeline and verdicts from a bundle"), formatter_class=ex,
                       epilog="example: gpu-forensics analyze node3.tar.gz --html report.html")
    analyze_args(a, bundle=True)
    r = sub.add_parser("run", help="collect, then analyze", formatter_class=ex,
                       epilog="example: sudo gpu-forensics run --incident 2026-07-11T12:34+09:00..2026-08-02T00:00+09:00=july"
                       + TIMES_HELP)
    collect_args(r)
    analyze_args(r, bundle=False)
    upload_args(r)
    t = sub.add_parser("timeline", help="print the events of a bundle", formatter_class=ex,
                       epilog="example: gpu-forensics timeline node3.tar.gz --format csv > timeline.csv")
    t.add_argument("bundle")
    from reports.timeline import FORMATS
    t.add_argument("--format", choices=list(FORMATS), default="table",
                   help="timesketch: JSON Lines with the message/datetime/timestamp_desc columns Timesketch imports")
    v = sub.add_parser("verify", help="recompute every hash of a bundle", formatter_class=ex,
                       epilog="example: gpu-forensics verify node3.tar.gz")
    v.add_argument("bundle")
    expect_arg(v)
    from . import drill as drill_mod, fleet as fleet_mod
    f = sub.add_parser("fleet", **offered("one exposure report across many nodes' bundles"), formatter_class=ex,
                       epilog="example: gpu-forensics fleet bundles/ --out fleet-report")
    fleet_mod.add_arguments(f)
    dr = sub.add_parser("drill", help="after the fix: run daemon-reload and check that GPU containers keep "
                        "their devices (needs --yes-reload-systemd)", formatter_class=ex,
                        epilog="example: sudo gpu-forensics drill --yes-reload-systemd --container trainer-0")
    drill_mod.add_arguments(dr)
    d = sub.add_parser("demo", **offered("collect and analyze the embedded sample node"), formatter_class=ex,
                       epilog="example: gpu-forensics demo --out /tmp/demo")
    d.add_argument("--out", default="gpu-forensics-demo", help="folder for the demo bundle and reports")
    from . import watch as watch_mod
    watch_mod.add_parser(sub, ex)
    return p


def _default_out(node: str | None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"gpu-forensics-{node or 'node'}-{stamp}")


def _budget(seconds: float) -> None:
    """``--time-budget``: negative or NaN is a usage error; 0 (no limit) is said."""
    if not seconds >= 0:
        raise UsageError(f"--time-budget {seconds:g}: give the seconds the collection may take, or 0 for no limit")
    if seconds == 0:
        say.note("--time-budget 0: no time limit; every source is read to its end")


def cmd_collect(args, argv, announce: bool = True) -> tuple[Path, int, str]:
    """``collect`` (and the first half of ``run``): check the arguments, then collect; returns ``(bundle,
    exit code, manifest.json SHA-256)``, printing the bundle and its hash when ``announce`` (``run``
    prints them once, at its end). Each collector option's own check (``Option.check``: --journal-dir
    exists, --probe needs root, --kubeconfig needs --kube and must exist) raises ``ValueError``, shown
    as a usage error. Exit 1 when a source failed, was unreadable or was cut by the time budget: one
    line per such source."""
    from .pipeline import budget_cuts, collect, collector_options, interruptible
    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"--root {root}: not a directory (give the host's root, e.g. / or /host)")
    _budget(args.time_budget)
    try:
        incidents = read_times(args, root, say.note)
    except ValueError as e:
        raise UsageError(str(e)) from None
    declared = collector_options()
    try:
        options = option_values(declared, {o.dest: getattr(args, o.dest) for o in declared if o.flag},
                                checked=True)
    except ValueError as e:
        raise UsageError(str(e)) from None
    out = Path(args.out) if args.out else _default_out(args.node or _hostname(root))
    from collectors import COLLECTORS
    try:
        with interruptible(), say.progress(len(COLLECTORS)) as log:
            path, digest, arts = collect(root, out, options=options, incidents=incidents, node_name=args.node,
                                         argv=argv, log=log, redact=not args.no_redact, time_budget=args.time_budget)
    except FileExistsError as e:
        raise UsageError(str(e)) from None
    if announce:
        print(f"bundle: {path}\nmanifest.json sha256: {digest}")
    gaps = say.gaps(arts, budget_cuts(arts), args.time_budget)
    return path, EXIT_MISSING if gaps else EXIT_OK, digest


def _hostname(root: Path) -> str | None:
    from .. import hostfs
    try:
        return hostfs.read_text(root, "/etc/hostname", 256).strip() or None
    except OSError:
        return None


def cmd_analyze(bundle_path: Path, args, announce: bool = True) -> int:
    """``analyze``: verify the bundle first; one that does not match its manifest (or ``--expect``) is
    not analysed (exit 3) unless ``--allow-tampered``, and then every report carries a banner. The
    verdict lines are printed before the reports are rendered (with --quiet too), then the reports'
    paths when ``announce`` (``run`` names them once, in its summary). A report that cannot be written
    raises :class:`BundleWriteError` (exit 5, one line)."""
    # the picture's child is started first, to import matplotlib while this one reads
    with _chart_child(True) as chart:
        return _analyze(bundle_path, args, announce, chart)


def _chart_child(wanted: bool):
    """A started :class:`reports.chartproc.ChartChild` when ``wanted`` (``run`` with the report
    libraries at hand), else an empty context whose value is ``None`` (nothing is drawn)."""
    if not wanted:
        return contextlib.nullcontext()
    from reports.chartproc import ChartChild
    return ChartChild()


def _analyze(bundle_path: Path, args, announce: bool, chart) -> int:
    """:func:`cmd_analyze`, with ``chart`` (a :class:`reports.chartproc.ChartChild`) drawing the picture."""
    from reports import render
    from .pipeline import analyze
    render.prepare()  # the template's compiler, before the analysis fills the heap
    b = Bundle.open(bundle_path)
    try:
        integrity = _integrity(b, getattr(args, "expect", None))
        if not integrity["verified"]:
            for p in integrity["problems"][:20]:
                print(p)
            if not getattr(args, "allow_tampered", False):
                print(f"gpu-forensics: error: {bundle_path}: bundle does NOT match its manifest "
                      f"({count_of(len(integrity['problems']), 'problem')}); not analysed (--allow-tampered analyses it anyway, "
                      "with a banner in every report)", file=sys.stderr)
                return EXIT_INVALID
            integrity["analysed_anyway"] = True
        a = analyze(b)
    finally:
        b.close()
    a["integrity"] = integrity
    from reports.formats import FLAVORS
    paths = report_paths(args, bundle_path)
    human = human_stream(paths.values())
    for v in a["verdicts"]:  # the answer first: before the HTML and its chart are rendered
        print(v, file=human)
    human.flush()
    try:
        written = render.write_all(a, paths, getattr(args, "markdown_flavor", FLAVORS[0]), chart=chart)
    except render.WriteFailed as e:  # every other one is written: they are said, then what was not
        _wrote(e.written, announce, human)
        _write_failed(e.error, paths)
    else:
        _wrote(written, announce, human)
    if not integrity["verified"]:
        return EXIT_INVALID
    return EXIT_MISSING if a["bundle"]["missing"] else EXIT_OK


def _wrote(written: list[Path], announce: bool, human) -> None:
    """``wrote <path>`` for each file written, to ``human`` (:func:`forensics.ops.args.human_stream`), when
    ``announce``; a path's control characters escaped (one line each)."""
    from reports.timeline import inert
    if announce:
        for p in written:
            print(f"wrote {inert(str(p), newline=False)}", file=human)


def _write_failed(e: OSError, paths: dict) -> None:
    """Raise :class:`BundleWriteError` for the report or rules file that :func:`reports.render.write_all` could
    not write (``e``, its ``filename`` the path as given, or a folder made for it), in one line saying what to
    do; nothing when a reader closed the page's stream (``--html /dev/stdout | head``: it has what it wanted)."""
    from reports.files import target
    from reports.formats import FORMATS
    from reports.timeline import inert
    stream = target(Path(e.filename))[2] if e.errno == errno.EPIPE and e.filename else None
    if stream is not None:  # the page's reader left (| head): it has what it wanted
        quiet_stdout() if stream == 1 else quiet_stderr()
        return
    bad = Path(e.filename or "")
    named = next(((n, p) for n, p in paths.items() if bad in (p, *p.parents)), None)
    if named is None:  # the rules, beside a report
        html = paths.get("html")
        raise BundleWriteError(f"cannot write the suggested alert rules {inert(str(bad), newline=False)}: "
                               f"{describe(e)}; the reports are written"
                               + (f", and {inert(str(html), newline=False)} holds the rules too" if html else ""),
                               e.errno)
    name, path = named
    where = f"{path}: {bad}" if bad != path else f"{path}"
    # a file where a folder should be: mkdir says EEXIST (the parent itself) or ENOTDIR (one above it)
    block = (next((q for q in reversed(path.parents) if q.exists() and not q.is_dir()), None)
             if e.errno in (errno.EEXIST, errno.ENOTDIR) else None)
    why = f"{block} is a file, not a folder" if block else describe(e)
    where = path if block else where
    example = next(f.file for f in FORMATS if f.name == name)
    raise BundleWriteError(f"cannot write the report {inert(str(where), newline=False)}: "
                           f"{inert(why, newline=False)}; give --{name} a writable place, e.g. --{name} "
                           f"/var/tmp/{example}", e.errno)


def _summary(bundle: Path, digest: str, args) -> None:
    """The end of ``run``: where everything is, and the hash the ticket should record: the SHA-256 of
    manifest.json, the value ``collect`` prints and ``verify`` prints and checks (``--expect``),
    whether the bundle is a directory or a ``.tar.gz``."""
    from reports.formats import FORMATS
    paths = report_paths(args, bundle)
    shown = "".join(f"{f.said}: {paths[f.name]}\n" for f in FORMATS)
    print(f"\n{shown}bundle: {bundle}\nmanifest.json sha256: {digest}", file=human_stream(paths.values()))


def _upload(bundle: Path, args) -> int:
    """Upload the bundle archive (made beside a bundle directory) and the reports. The answers go to
    ``<bundle>.upload.json``: the manifest is sealed before the upload, and changing it would change the
    SHA-256 just sent."""
    import tarfile
    from .upload import UploadError, upload
    archive = bundle
    if bundle.is_dir():
        archive = bundle.with_name(bundle.name + ".tar.gz")
        with tarfile.open(archive, "w:gz") as tf:
            tf.add(bundle, arcname=bundle.name)
    files = [archive] + [p for p in report_paths(args, bundle).values() if p.is_file()]  # not a pipe (--html -)
    try:
        recs = upload(args.upload_url, files, method=args.upload_method.upper(), auth_header_env=args.upload_auth_env,
                      auth_header_file=Path(args.upload_auth_file) if args.upload_auth_file else None,
                      ca_bundle=args.upload_ca, deadline_s=args.upload_timeout)
    except UploadError as e:
        raise UsageError(f"--upload-url: {e}") from None
    side = archive.with_name(archive.name + ".upload.json")
    side.write_text(json.dumps(recs, indent=2) + "\n")
    for r in recs:
        print(f"upload {r['file']}: {'ok' if r['ok'] else 'FAILED'} (HTTP {r['status']}, {r['attempts']} attempts)"
              + (f": {r['error']}" if r.get("error") else ""))
    print(f"upload record: {side}")
    return EXIT_OK if all(r["ok"] for r in recs) else EXIT_MISSING


def cmd_timeline(args) -> int:
    from reports.timeline import write
    from .pipeline import analyze
    b = Bundle.open(args.bundle)
    try:
        a = analyze(b, full_timeline=True)
    finally:
        b.close()
    try:
        write(a, args.format, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        quiet_stdout()
        raise BundleWriteError(f"cannot write the timeline to standard output: {describe(e)}; "
                               "redirect it to a file on a disk with room (> timeline.txt)", e.errno) from None
    return EXIT_OK


def cmd_demo(args) -> int:
    """Collect and analyse the sample node into ``args.out``; :class:`Unavailable` without reports or sample."""
    from .demo import sample
    need_reports("demo")
    out = Path(args.out)
    try:
        refuse_nonempty(out, "--out")
    except FileExistsError as e:
        raise UsageError(str(e)) from None
    with contextlib.ExitStack() as stack:
        try:
            smp = stack.enter_context(sample())
        except FileNotFoundError as e:
            raise Unavailable(f"demo is not available in this installation: {e}") from None
        out.mkdir(parents=True, exist_ok=True)
        bundle = out / f"bundle-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
        argv = ["gpu-forensics", "collect", "--root", str(smp.root), "--out", str(bundle),
                "--prometheus", f"file://{smp.prometheus}"]
        for inc in smp.incidents:
            argv += ["--incident", inc]
        ns = build_parser().parse_args(argv[1:])
        path = cmd_collect(ns, argv)[0]
    ns_a = argparse.Namespace(html=str(out / "report.html"), markdown=str(out / "report.md"),
                              json=str(out / "analysis.json"))
    cmd_analyze(path, ns_a)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gpu-forensics`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(join_negative_times(argv))
    say.VERBOSITY.update(quiet=args.quiet, verbose=args.verbose)
    if IGNORED_TZ is not None:
        print(f"gpu-forensics: note: TZ={IGNORED_TZ!r} is not a valid time zone; ignored (UTC used)", file=sys.stderr)
    full = ["gpu-forensics"] + argv
    collected: list[Path] = []  # run: the bundle once collected, named if an interrupt comes later
    try:
        with stopped_by(signal.SIGTERM, signal.SIGHUP):  # a report being written is cleaned up, as on Ctrl-C
            return _dispatch(args, full, collected)
    except UsageError as e:
        print(f"gpu-forensics: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Unavailable as e:
        print(f"gpu-forensics: error: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except BundleError as e:
        print(f"gpu-forensics: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except BundleWriteError as e:
        kept = f"; what was written is kept, marked incomplete, in {e.kept}" if e.kept else ""
        print(f"gpu-forensics: error: {e}{kept}", file=sys.stderr)
        return EXIT_WRITE
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        quiet_stdout()
        return EXIT_OK
    except (KeyboardInterrupt, Interrupted) as e:
        stop = e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)
        if stop.kept:
            kept = f"; the partial bundle is kept, marked incomplete, in {stop.kept}"
        elif collected:
            kept = f"; the bundle was complete and is kept in {collected[0]} (gpu-forensics analyze {collected[0]})"
        else:
            kept = ""
        print(f"gpu-forensics: interrupted by {stop.name}{kept}", file=sys.stderr)
        return 128 + stop.signum


def _dispatch(args, full: list[str], collected: list[Path]) -> int:
    """Run the subcommand ``args.cmd``; its exit code. ``collected`` gets ``run``'s bundle once written."""
    if args.cmd == "collect":
        return cmd_collect(args, full)[1]
    if args.cmd == "analyze":
        need_reports("analyze")
        check_report_paths(args, Path(args.bundle))
        return cmd_analyze(Path(args.bundle), args)
    if args.cmd == "run":
        return _cmd_run(args, full, collected)
    if args.cmd == "timeline":
        return cmd_timeline(args)
    if args.cmd == "verify":
        return cmd_verify(args)
    if args.cmd == "fleet":
        need_reports("fleet")
        from . import fleet as fleet_mod
        return fleet_mod.run_args(args)
    if args.cmd == "drill":
        from . import drill as drill_mod
        return drill_mod.run_args(args)
    if args.cmd == "demo":
        return cmd_demo(args)
    if args.cmd == "watch":
        from . import watch as watch_mod
        return watch_mod.run_args(args)
    return EXIT_USAGE


def _cmd_run(args, full: list[str], collected: list[Path]) -> int:
    """``run``: collect, then analyze the bundle here (the picture drawn by a child started first, so that
    matplotlib is imported while collecting), then upload it when asked."""
    check_report_paths(args, Path(args.out) if args.out else None)
    missing = missing_report_libs()
    with _chart_child(not missing) as chart:
        path, rc, digest = cmd_collect(args, full, announce=False)
        collected.append(path)
        if missing:  # the zipapp or the node image: the bundle is the answer; analysis is done elsewhere
            say.note(f"not analysed here: no report libraries ({', '.join(missing)}); analyze the bundle "
                     f"elsewhere: gpu-forensics analyze {path}")
            print(f"bundle: {path}\nmanifest.json sha256: {digest}")
            rc2 = EXIT_OK
        else:
            try:
                rc2 = _analyze(path, args, False, chart)
            except BundleWriteError:  # where the bundle is, and its hash, even when a report could not be written
                _summary(path, digest, args)
                raise
            _summary(path, digest, args)
    rc3 = _upload(path, args) if args.upload_url else EXIT_OK
    return max(rc, rc2, rc3)


if __name__ == "__main__":  # the console script is forensics.ops.entry
    finish(main())
