"""Time each collector's ``acquire`` alone, in this process, over one node root (run as a subprocess
by bench/run.py). It is the same code path as ``gpu-forensics collect`` (forensics.ops.pipeline), split
by collector so that the journal, package and container phases can be read separately.

usage: python3 bench/phases.py ROOT OUT [--incident TEXT] [--only NAME]
(``--only journal``: that collector alone; the code is the tree this file is in)
prints one JSON object: {collector: {"wall_s", "cpu_s", "maxrss_mb_after", "children_maxrss_mb_after"}}
(CPU and the children's peak RSS include the forked children a collector reads in)
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from forensics.bundle import BundleWriter  # noqa: E402
from forensics.source import CollectContext  # noqa: E402


def _usage() -> tuple[float, int, int]:
    """``(CPU s of this process and its reaped children, this process's peak RSS KiB, the largest
    child's peak RSS KiB)``: the journal collector reads its files in forked children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, me.ru_maxrss, kids.ru_maxrss


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    from collectors import COLLECTORS
    writer = BundleWriter(out)
    ctx = CollectContext(root=root, writer=writer)
    res = {}
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    for mod in COLLECTORS:
        name = mod.__name__.rsplit(".", 1)[-1]
        if only is not None and name != only:
            continue
        r0, t0 = _usage(), time.perf_counter()
        mod.acquire(ctx)
        t1, r1 = time.perf_counter(), _usage()
        res[name] = {"wall_s": round(t1 - t0, 3), "cpu_s": round(r1[0] - r0[0], 3),
                     "maxrss_mb_after": round(r1[1] / 1024, 1), "children_maxrss_mb_after": round(r1[2] / 1024, 1)}
    writer.meta.update({"node": ctx.node.hostname, "node_facts": ctx.node.manifest(), "incidents": []})
    writer.finish()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
