#!/usr/bin/env python3
"""A CPU-time sampling profiler for when py-spy is not installed: run a module as ``python -m`` would,
take its Python stack every ``--interval`` seconds of CPU time (``setitimer(ITIMER_PROF)``, SIGPROF;
time spent waiting is not sampled) and write the stacks in py-spy's ``--format raw`` (collapsed stacks,
``frame;frame;... count``), which bench/profile_summary.py reads. Also prints the peak RSS.

    python3 bench/sample.py -o profile.txt [--interval 0.004] -m forensics.ops.cli analyze BUNDLE ...

Only the main thread is sampled (the signal handler runs there); C code shows as the Python frame
that called it.
"""
from __future__ import annotations

import argparse
import collections
import os
import resource
import runpy
import signal
import sys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, help="collapsed stacks are written here")
    ap.add_argument("--interval", type=float, default=0.004, help="seconds of CPU time between samples")
    ap.add_argument("-m", dest="module", required=True, help="the module to run (then its arguments)")
    argv = sys.argv[1:]  # the tool's own arguments (after -m MODULE) are not this parser's: --out is not --output
    cut = argv.index("-m") + 2 if "-m" in argv else len(argv)
    args, rest = ap.parse_args(argv[:cut]), argv[cut:]
    sys.path[0] = os.getcwd()  # as `python -m` does: the current directory first, not bench/
    stacks: collections.Counter = collections.Counter()

    def take(_sig, frame):
        names = []
        while frame is not None:
            c = frame.f_code
            names.append(f"{c.co_name} ({c.co_filename}:{c.co_firstlineno})")
            frame = frame.f_back
        stacks[";".join(reversed(names))] += 1

    signal.signal(signal.SIGPROF, take)
    signal.setitimer(signal.ITIMER_PROF, args.interval, args.interval)
    sys.argv = [args.module, *rest]
    code = 0
    me, real_exit = os.getpid(), os._exit

    def leave(status):  # gpu-forensics ends with os._exit (no teardown): here it must reach the finally below
        if os.getpid() != me:  # a forked child of the tool (the chart's, the journal's readers) ends as it would
            real_exit(status)
        raise SystemExit(status)
    os._exit = leave
    try:
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        with open(args.output, "w") as f:
            for stack, n in stacks.items():
                f.write(f"{stack} {n}\n")
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(f"sample.py: {sum(stacks.values())} samples, CPU {ru.ru_utime + ru.ru_stime:.2f} s, "
              f"peak RSS {ru.ru_maxrss / 1024:.0f} MB -> {args.output}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
