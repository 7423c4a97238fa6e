"""Prototype of the journal collector's NVML/kubelet pass, to size the fixes proposed in
bench/RESULTS.md before they are made in collectors/journal.py (this file changes nothing there).

The pass has to look at the MESSAGE of every kubelet/containerd entry (no journal field marks an
NVML error), so its per-entry cost decides the collector's speed on a big node, and the pages it
touches decide its RSS (libsystemd maps journal files in 8 MiB windows and keeps up to 64 of them).

    python3 bench/proto_journal_scan.py JOURNAL_DIR [--mode lazy|tight|tight-reopen] [--reopen N]

- ``lazy``: what the collector does today (a _Lazy view per entry, MESSAGE decoded, nvml_error()
  then healthy_probe() on text);
- ``tight``: one loop over bytes: ``_next()``, ``_get("MESSAGE")``, one compiled bytes regex; an
  entry is decoded only when the regex hits;
- ``tight-reopen``: ``tight``, with the Reader closed and reopened at its cursor every N entries, so
  that libsystemd's mmap windows are dropped and the mapped pages stop counting in RSS.
Prints one JSON line: entries, hits, wall_s, cpu_s, entries_per_s, peak RssAnon / RssFile (MB).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from systemd import journal as sdj  # noqa: E402

from collectors import journal_wording as w  # noqa: E402

HITS = re.compile(rb"Failed to initialize NVML|cuInit failed|NVML_ERROR_|CUDA_ERROR_|\"SyncLoop \(probe\)\"")


def _peaks(p):
    with open("/proc/self/status") as f:
        for line in f:
            k = line.split(":", 1)[0]
            if k in p:
                p[k] = max(p[k], int(line.split()[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("jdir")
    ap.add_argument("--mode", choices=["lazy", "tight", "tight-reopen", "per-file"], default="tight")
    ap.add_argument("--reopen", type=int, default=50_000)
    a = ap.parse_args()
    paths = sorted(str(p) for p in Path(a.jdir).iterdir() if p.name.endswith(".journal"))

    def reader(only=None):
        r = sdj.Reader(files=[os.open(p, os.O_RDONLY) for p in (only or paths)])
        units = [v.decode() for v in sdj._Reader.query_unique(r, "_SYSTEMD_UNIT") if w.nvml_unit(v.decode())]
        for u in units:
            r.add_match(f"_SYSTEMD_UNIT={u}")
        r.add_disjunction()
        r.add_match("SYSLOG_IDENTIFIER=kubelet")
        return r

    peaks = {"RssAnon": 0, "RssFile": 0}
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    n = hits = 0
    r = reader() if a.mode != "per-file" else None
    if r:
        r.seek_head()
    if a.mode == "per-file":
        for p in paths:  # each file alone, its Reader closed after (entries merged by time afterwards)
            r = reader([p])
            r.seek_head()
            while r._next():
                n += 1
                try:
                    m = r._get("MESSAGE")
                except KeyError:
                    continue
                if HITS.search(m):
                    hits += 1
                if n % 10_000 == 0:
                    _peaks(peaks)
                    if n % a.reopen == 0:
                        cur = r._get_cursor()
                        r.close()
                        r = reader([p])
                        r.seek_cursor(cur)
                        r._next()
            _peaks(peaks)
            r.close()
    elif a.mode == "lazy":
        from collectors.journal import _Lazy
        while r._next():
            e = _Lazy(r, r._get_realtime())
            msg = w.text(e.get("MESSAGE"))
            n += 1
            if w.nvml_error(msg) or w.healthy_probe(msg):
                hits += 1
            if n % 50_000 == 0:
                _peaks(peaks)
    else:
        while True:
            if not r._next():
                break
            n += 1
            try:
                m = r._get("MESSAGE")
            except KeyError:
                continue
            if HITS.search(m):
                hits += 1  # here the collector would read the whole entry (r._get_all())
            if n % 10_000 == 0:
                _peaks(peaks)
                if a.mode == "tight-reopen" and n % a.reopen == 0:
                    cur = r._get_cursor()
                    r.close()
                    r = reader()
                    r.seek_cursor(cur)
                    r._next()  # stands on the entry just read
    _peaks(peaks)
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    print(json.dumps({"mode": a.mode, "entries": n, "hits": hits, "wall_s": round(t1 - t0, 2), "cpu_s": round(cpu, 2),
                      "entries_per_s": round(n / (t1 - t0)), "peak_anon_mb": round(peaks["RssAnon"] / 1024),
                      "peak_file_mb": round(peaks["RssFile"] / 1024), "maxrss_mb": round(r1.ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
