#!/usr/bin/env python3
"""gpu-forensics benchmark (issue 7): build S and L node roots, time ``collect`` and ``analyze``
against journalctl, plaso and dissect.target on the same files, and print a table and the goals.

    python3 bench/run.py [--sizes S,L] [--repeat 3] [--no-plaso] [--no-dissect] [--no-phases] [--profile]

Inputs and the anchors' virtual environments are cached under bench/.cache/ (git-ignored); the
first run builds them (the L journal takes a few minutes). Not a test: CI does not run it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
CACHE = HERE / ".cache"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(PROJECT))
import gen  # noqa: E402

PY = sys.executable
GEN_VERSION = "7"  # bump when gen.py changes what it writes, to rebuild cached roots
ANCHORS = {
    "plaso": {"venv": CACHE / "venv-plaso", "pip": ["plaso"], "exe": "log2timeline"},
    "dissect": {"venv": CACHE / "venv-dissect", "pip": ["dissect.target", "backports.zstd", "zstandard", "lz4"], "exe": "target-query"},
}


# -- measuring ---------------------------------------------------------------------------------------
#: a verdict line as ``analyze`` and ``run`` print it (forensics.findings.headline.verdict_sentence)
VERDICT_LINE = re.compile(r" is (CONFIRMED|INFERRED|EXCLUDED|UNDETERMINED)\b")


def _timed_lines(stream, t0: float, out: list) -> None:
    """``(seconds since t0, line)`` for each line the child writes, as it arrives."""
    for line in iter(stream.readline, b""):
        out.append((time.perf_counter() - t0, line.decode(errors="replace").rstrip("\n")))


PYCACHE = CACHE / "pycache"


def installed_env(env=None) -> dict:
    """``env`` (default: this process's) as an installed tool runs: its modules' bytecode cached
    (``PYTHONDONTWRITEBYTECODE`` dropped, the cache kept under ``.cache/pycache`` by
    ``PYTHONPYCACHEPREFIX``, not beside the checkout's sources). A shell that sets
    PYTHONDONTWRITEBYTECODE would otherwise make every run compile the tool again (about 0.4 s of a
    1 s analyze on S)."""
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm_bytecode() -> None:
    """Compile the checkout's packages into :data:`PYCACHE` before anything is timed."""
    subprocess.run([PY, "-m", "compileall", "-q", "forensics", "collectors", "reports"], cwd=PROJECT,
                   env=installed_env(), check=False, stdout=subprocess.DEVNULL)


def measure(argv, *, cwd=PROJECT, stdout=subprocess.DEVNULL, timeout=None, env=None, lines=False) -> dict:
    """Run ``argv`` as a child and return wall time, CPU time (user+sys, the child and the
    descendants it waited for) and peak RSS, from wait4()'s rusage.

    With ``lines``, the child's stdout and stderr go through one pipe (unbuffered: PYTHONUNBUFFERED=1)
    and each line is timed as it arrives: ``verdict_s`` is when the last verdict line
    (:data:`VERDICT_LINE`) came, ``None`` when none did. It does not depend on the order the child
    prints in (verdicts before or after the reports are rendered)."""
    stderr_path = CACHE / "last-stderr.txt"
    timed: list = []
    env = installed_env(env)
    if lines:
        env["PYTHONUNBUFFERED"] = "1"
    with open(stderr_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE if lines else stdout,
                             stderr=subprocess.STDOUT if lines else err, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        reader = threading.Thread(target=_timed_lines, args=(p.stdout, t0, timed), daemon=True) if lines else None
        if reader:
            reader.start()
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        timer = threading.Timer(timeout, kill) if timeout else None
        if timer:
            timer.start()
        peaks = {"RssAnon": 0, "RssFile": 0}
        done = threading.Event()

        def sample():  # the child's own anonymous and file-backed resident memory, every 20 ms
            while not done.is_set():
                try:
                    with open(f"/proc/{p.pid}/status") as st:
                        for line in st:
                            k = line.split(":", 1)[0]
                            if k in peaks:
                                peaks[k] = max(peaks[k], int(line.split()[1]))
                except (OSError, ValueError):
                    pass
                done.wait(0.02)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        if reader:
            reader.join(timeout=10)
            p.stdout.close()
            err.write("\n".join(text for _, text in timed).encode())
        if timer:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    res = {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
           "anon_mb": peaks["RssAnon"] / 1024, "file_mb": peaks["RssFile"] / 1024, "rc": p.returncode,
           "timed_out": timed_out.is_set()}
    if lines:
        res["verdict_s"] = max((t for t, text in timed if VERDICT_LINE.search(text)), default=None)
    if p.returncode not in (0, 1) and not timed_out.is_set():
        res["stderr"] = stderr_path.read_text(errors="replace")[-1500:]
    return res


def median_of(runs: list[dict]) -> dict:
    out = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "rss_mb", "anon_mb", "file_mb")}
    out.update(rc=runs[-1]["rc"], timed_out=any(r["timed_out"] for r in runs), n=len(runs),
               walls=[round(r["wall_s"], 2) for r in runs])
    if "verdict_s" in runs[-1]:
        seen = [r["verdict_s"] for r in runs if r.get("verdict_s") is not None]
        out["verdict_s"] = statistics.median(seen) if len(seen) == len(runs) else None
    if "stderr" in runs[-1]:
        out["stderr"] = runs[-1]["stderr"]
    return out


# -- inputs --------------------------------------------------------------------------------------------
def ensure_root(size: gen.Size, log) -> tuple[Path, dict]:
    root = CACHE / "roots" / size.name
    stamp = root.with_suffix(".json")
    if stamp.exists():
        info = json.loads(stamp.read_text())
        if info.get("gen_version") == GEN_VERSION and root.is_dir():
            return root, info
    log(f"building node root {size.name} ({size.entries} journal entries, {size.dpkg_lines} dpkg.log lines, "
        f"{size.containers} containers) under {root} ...")
    tmp = root.with_name(root.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.monotonic()
    info = gen.build_root(size, tmp, log=log)
    info["build_s"] = round(time.monotonic() - t0, 1)
    info["gen_version"] = GEN_VERSION
    info["incident"] = gen.incident(size)
    os.rename(tmp, root)
    stamp.write_text(json.dumps(info, indent=1))
    log(f"built {size.name} in {info['build_s']} s (journal {info['journal_build_s']} s, "
        f"{info['journal']['bytes'] / 1e6:.0f} MB in {len(info['journal']['files'])} files)")
    return root, info


def ensure_anchor(name: str, log) -> str | None:
    """The anchor's executable, installing it from PyPI into its own venv when missing; ``None``
    (after saying why) when it cannot be installed."""
    a = ANCHORS[name]
    exe = a["venv"] / "bin" / a["exe"]
    if exe.exists():
        return str(exe)
    log(f"installing {name} into {a['venv']} (pip install {' '.join(a['pip'])}) ...")
    try:
        subprocess.run([PY, "-m", "venv", str(a["venv"])], check=True, capture_output=True)
        r = subprocess.run([str(a["venv"] / "bin" / "pip"), "install", "-q", *a["pip"]], capture_output=True,
                           text=True, timeout=1800)
        if r.returncode != 0 or not exe.exists():
            log(f"ANCHOR {name} NOT INSTALLED: pip exited {r.returncode}: {r.stderr.strip()[-600:]}")
            return None
    except (OSError, subprocess.SubprocessError) as e:
        log(f"ANCHOR {name} NOT INSTALLED: {e}")
        return None
    return str(exe)


# -- what is run -----------------------------------------------------------------------------------------
def collector_groups(jdir: Path) -> list[list[tuple[str, str]]]:
    """The journal match groups the collector uses (collectors.journal.selection.select): PID 1 lines,
    the requester groups (package-manager units, sudo) and the NVML/kubelet groups."""
    from collectors.journal import wording as w
    units = subprocess.run(["journalctl", "-D", str(jdir), "-F", "_SYSTEMD_UNIT"], capture_output=True,
                           text=True).stdout.split()
    nvml_units = sorted(u for u in units if w.nvml_unit(u))
    groups = [list(g) for g in w.PID1]
    groups += [[("_SYSTEMD_UNIT", u) for u in w.REQUESTER_UNITS], [("SYSLOG_IDENTIFIER", "sudo")]]
    groups += ([[("_SYSTEMD_UNIT", u) for u in nvml_units]] if nvml_units else []) + [[("SYSLOG_IDENTIFIER", "kubelet")]]
    return groups


def journalctl_args(groups) -> list[str]:
    out = []
    for i, g in enumerate(groups):
        out += (["+"] if i else []) + [f"{f}={v}" for f, v in g]
    return out


PLASO_FILTER = """description: the logs gpu-forensics reads
type: include
path_separator: '/'
paths:
- '/var/log/journal/.+/.+[.]journal'
- '/var/log/dpkg[.]log.*'
- '/var/log/apt/history[.]log.*'
"""


def run_size(size: gen.Size, args, exes: dict, log) -> dict:
    root, info = ensure_root(size, log)
    jdir = root / "var/log/journal" / gen.MACHINE_ID
    out_dir = CACHE / "out" / size.name
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    r: dict = {"size": size.name, "input": {
        "journal_entries": info["journal"]["entries"], "journal_mb": round(info["journal"]["bytes"] / 1e6),
        "journal_files": len(info["journal"]["files"]), "reloads": info["journal"]["reloads"],
        "dpkg_lines": info["packages"]["dpkg_lines"], "apt_stanzas": info["packages"]["apt_stanzas"],
        "containers": info["containers"]["containers"], "gpu_containers": info["containers"]["gpu"],
        "build_s": info.get("build_s"), "journal_build_s": info.get("journal_build_s")}}
    # warm the page cache once, so that every tool below reads the same warm files
    subprocess.run(["cat", *map(str, sorted(jdir.iterdir()))], stdout=subprocess.DEVNULL)

    def collect_cmd(i):
        return [PY, "-m", "forensics.ops.cli", "-q", "collect", "--root", str(root), "--out", str(out_dir / f"bundle-{i}"),
                "--incident", info["incident"]]

    log(f"[{size.name}] collect x{args.repeat}")
    runs = [measure(collect_cmd(i)) for i in range(args.repeat)]
    r["collect"] = median_of(runs)
    bundle = out_dir / "bundle-0"
    log(f"[{size.name}] analyze x{args.repeat}")
    r["analyze"] = median_of([measure([PY, "-m", "forensics.ops.cli", "-q", "analyze", str(bundle), "--json",
                                       str(out_dir / "analysis.json"), "--html", str(out_dir / "report.html"),
                                       "--markdown", str(out_dir / "report.md")], lines=True)
                              for _ in range(args.repeat)])

    def run_cmd(i):  # collect, then analyze with all three reports: what the engineer waits for
        d = out_dir / f"run-{i}"
        return [PY, "-m", "forensics.ops.cli", "-q", "run", "--root", str(root), "--out", str(d / "bundle"),
                "--incident", info["incident"], "--json", str(d / "analysis.json"), "--html", str(d / "report.html"),
                "--markdown", str(d / "report.md")]
    log(f"[{size.name}] run x{args.repeat}")
    r["run"] = median_of([measure(run_cmd(i), lines=True) for i in range(args.repeat)])
    sel = bundle / "journal" / "entries.jsonl"
    r["collect"]["selected_entries"] = sum(1 for _ in open(sel)) if sel.exists() else None
    r["collect"]["entries_per_s"] = info["journal"]["entries"] / r["collect"]["wall_s"]
    if args.no_phases:
        r["phases"] = {}
    else:
        r["phases"] = phases(root, out_dir, size, log)
    # anchors
    groups = collector_groups(jdir)
    log(f"[{size.name}] journalctl anchors x{args.repeat}")
    jm = ["journalctl", "-D", str(jdir), "--no-pager", "-o", "export", *journalctl_args(groups)]
    r["journalctl_matches"] = median_of([measure(jm) for _ in range(args.repeat)])
    cnt = subprocess.run(["journalctl", "-D", str(jdir), "--no-pager", "-o", "cat", "--output-fields=_PID",
                          *journalctl_args(groups)], capture_output=True)
    r["journalctl_matches"]["entries"] = cnt.stdout.count(b"\n")
    r["journalctl_all"] = median_of([measure(["journalctl", "-D", str(jdir), "--no-pager", "-o", "export"])
                                     for _ in range(args.repeat)])
    if exes.get("plaso"):
        log(f"[{size.name}] plaso log2timeline (once; timeout {args.plaso_timeout} s)")
        filt = CACHE / "plaso-filter.yaml"
        filt.write_text(PLASO_FILTER)
        store = out_dir / "plaso.plaso"
        r["plaso"] = median_of([measure([exes["plaso"], "--unattended", "--status_view", "none", "--quiet",
                                         "--parsers", "systemd_journal,text/dpkg,text/apt_history",
                                         "--timezone", gen.TZ_NAME, "--hashers", "none", "-f", str(filt),
                                         "--storage_file", str(store), "--logfile", str(out_dir / "plaso.log.gz"),
                                         str(root)], timeout=args.plaso_timeout)])
        try:
            ev = subprocess.run([str(Path(exes["plaso"]).with_name("pinfo")), "--output_format", "json",
                                 str(store)], capture_output=True, text=True, timeout=600)
            r["plaso"]["events"] = _plaso_events(ev.stdout)
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        r["plaso"] = None
    if exes.get("dissect"):
        log(f"[{size.name}] dissect.target target-query (once; timeout {args.plaso_timeout} s)")
        r["dissect"] = median_of([measure([exes["dissect"], "-q", "-f", "journal,dpkg.log,apt.logs", str(root)],
                                          timeout=args.plaso_timeout)])
    else:
        r["dissect"] = None
    if args.profile:
        r["profile"] = profile(size, root, info, out_dir, log)
    return r


def phases(root: Path, out_dir: Path, size, log) -> dict:
    """Each collector's ``acquire`` alone, wall and CPU s (bench/phases.py, one child)."""
    log(f"[{size.name}] collect phases (each collector's acquire alone)")
    ph = subprocess.run([PY, str(HERE / "phases.py"), str(root), str(out_dir / "phases-bundle")], cwd=PROJECT,
                        capture_output=True, text=True, env=installed_env())
    try:
        return json.loads(ph.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": ph.stderr[-800:]}


def _plaso_events(text: str):
    try:
        d = json.loads(text)
    except ValueError:
        return None
    for sess in (d.get("storage_counters") or {}, ):
        ev = sess.get("parsers") or sess.get("event_data")
        if isinstance(ev, dict):
            return ev.get("total")
    return None


def profile(size, root, info, out_dir, log) -> dict:
    """Profiles of one collect and one analyze under bench/.cache: py-spy's flame graph SVG and raw
    stacks when py-spy is on PATH or in bench/.cache/venv-prof, else bench/sample.py's raw stacks
    (a SIGPROF sampler in the child; nothing is installed). bench/profile_summary.py reads the raw ones."""
    spy = shutil.which("py-spy") or (CACHE / "venv-prof" / "bin" / "py-spy")
    spy = Path(spy) if Path(spy).exists() else None
    res = {}
    for what, args in (("collect", ["-q", "collect", "--root", str(root), "--out", str(out_dir / "bundle-prof"),
                                    "--incident", info["incident"]]),
                       ("analyze", ["-q", "analyze", str(out_dir / "bundle-0"), "--json", str(out_dir / "prof.json"),
                                    "--html", str(out_dir / "prof.html"), "--markdown", str(out_dir / "prof.md")])):
        kinds = (("raw", "txt"), ("flamegraph", "svg")) if spy else (("raw", "txt"),)
        for fmt, ext in kinds:
            dst = CACHE / f"profile-{what}-{size.name}.{ext}"
            shutil.rmtree(out_dir / "bundle-prof", ignore_errors=True)
            cmd = ([str(spy), "record", "-r", "250", "-f", fmt, "-o", str(dst), "--", PY, "-m", "forensics.ops.cli"]
                   if spy else [PY, str(HERE / "sample.py"), "-o", str(dst), "-m", "forensics.ops.cli"])
            subprocess.run([*cmd, *args], cwd=PROJECT, capture_output=True, env=installed_env())
            res[f"{what}_{fmt}"] = str(dst)
        log(f"profile of {what} {size.name}: {res.get(what + '_flamegraph') or res.get(what + '_raw')}")
    return res


# -- report ------------------------------------------------------------------------------------------------
def fmt_run(m) -> str:
    if not m:
        return "not run (not installed, or --no-plaso / --no-dissect) | | | "
    t = f"{m['wall_s']:.2f}" + (" (timeout)" if m.get("timed_out") else "")
    v = "" if "verdict_s" not in m else "none printed" if m["verdict_s"] is None else f"{m['verdict_s']:.2f}"
    return f"{t} | {v} | {m['cpu_s']:.2f} | {m['rss_mb']:.0f} ({m['anon_mb']:.0f} / {m['file_mb']:.0f})"


def ratio(a, b) -> str:
    if not a or not b or b["wall_s"] <= 0:
        return "-"
    s = f"{a['wall_s'] / b['wall_s']:.2f}x"
    return (">=" + s) if a.get("timed_out") else s


def table(results: list[dict]) -> str:
    lines = ["| size | what | wall s | time to verdict s | CPU s | peak RSS MB (anon / file, main process) | entries/s "
             "| ratio to collect (wall) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        c = r["collect"]
        inp = r["input"]
        rows = [("gpu-forensics collect", c, f"{c['entries_per_s']:,.0f}", "1.00x"),
                ("gpu-forensics analyze (JSON, Markdown, HTML with chart)", r["analyze"], "", ratio(r["analyze"], c)),
                ("gpu-forensics run (collect, analyze, three reports)", r["run"], "", ratio(r["run"], c)),
                (f"journalctl -D, collector's matches ({r['journalctl_matches'].get('entries', '?'):,} entries), -o export",
                 r["journalctl_matches"], f"{inp['journal_entries'] / r['journalctl_matches']['wall_s']:,.0f}",
                 ratio(r["journalctl_matches"], c)),
                ("journalctl -D, no matches, -o export", r["journalctl_all"],
                 f"{inp['journal_entries'] / r['journalctl_all']['wall_s']:,.0f}", ratio(r["journalctl_all"], c)),
                ("plaso log2timeline (journal, dpkg, apt_history)", r["plaso"],
                 f"{inp['journal_entries'] / r['plaso']['wall_s']:,.0f}" if r["plaso"] and not r["plaso"]["timed_out"] else "",
                 ratio(r["plaso"], c)),
                ("dissect.target target-query -f journal,dpkg.log,apt.logs", r["dissect"],
                 f"{inp['journal_entries'] / r['dissect']['wall_s']:,.0f}" if r["dissect"] and not r["dissect"]["timed_out"] else "",
                 ratio(r["dissect"], c))]
        for name, m, eps, rat in rows:
            lines.append(f"| {r['size']} | {name} | {fmt_run(m)} | {eps} | {rat} |")
    return "\n".join(lines)


def phases_table(results: list[dict]) -> str:
    names = sorted({k for r in results for k in r.get("phases", {}) if k != "error"},
                   key=lambda k: list(results[0].get("phases", {})).index(k) if k in results[0].get("phases", {}) else 99)
    lines = ["| size | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for r in results:
        p = r.get("phases", {})
        lines.append(f"| {r['size']} | " + " | ".join(f"{p[n]['wall_s']:.2f} ({p[n]['cpu_s']:.2f})" if n in p else "-"
                                                      for n in names) + " |")
    return "\n".join(lines)


def goals(results: list[dict]) -> list[tuple[str, bool | None, str]]:
    by = {r["size"]: r for r in results}
    L, S = by.get("L"), by.get("S")
    out = []
    if L:
        c, jm = L["collect"], L["journalctl_matches"]
        limit = max(1.5 * jm["wall_s"], 10.0)
        out.append(("L collect <= max(1.5 x journalctl with matches, 10 s)", c["wall_s"] <= limit,
                    f"{c['wall_s']:.2f} s vs limit {limit:.2f} s (journalctl {jm['wall_s']:.2f} s)"))
        if L["plaso"]:
            rat = L["plaso"]["wall_s"] / c["wall_s"]
            out.append(("L collect >= 20x faster than plaso", rat >= 20,
                        f"plaso {L['plaso']['wall_s']:.1f} s{' (timed out)' if L['plaso']['timed_out'] else ''} "
                        f"/ collect {c['wall_s']:.2f} s = {'>=' if L['plaso']['timed_out'] else ''}{rat:.1f}x"))
        else:
            out.append(("L collect >= 20x faster than plaso", None, "plaso not run"))
        out.append(("L collect peak RSS < 200 MB", c["rss_mb"] < 200, f"{c['rss_mb']:.0f} MB"))
        if S:
            d = (c["rss_mb"] - S["collect"]["rss_mb"]) / S["collect"]["rss_mb"]
            out.append(("collect peak RSS within 15% between S and L", abs(d) <= 0.15,
                        f"S {S['collect']['rss_mb']:.0f} MB, L {c['rss_mb']:.0f} MB ({d:+.0%})"))
        cont = (L.get("phases") or {}).get("containers")
        if cont:
            out.append((f"{L['input']['containers']} containers < 5 s (probe off)", cont["wall_s"] < 5,
                        f"{cont['wall_s']:.2f} s"))
        out.append(("L analyze < 5 s", L["analyze"]["wall_s"] < 5, f"{L['analyze']['wall_s']:.2f} s"))
    out += run_goals(L, S, by.get("P"))
    return out


#: issue 30's goals: run <= 0.3x journalctl's full export in wall time and <= 0.6x in CPU time on L, <= 0.6x in
#: wall time on S and P; analyze's peak RSS under 100 MB on L and within 15 % of S's
RUN_L_WALL, RUN_L_CPU, RUN_OTHER_WALL, RSS_LIMIT_MB, FLAT = 0.3, 0.6, 0.6, 100, 0.15


def run_goals(L: dict | None, S: dict | None, P: dict | None = None) -> list[tuple[str, bool | None, str]]:
    """The goal rows of issue 30 (``None``: not measured in this run); every ratio against the export of the
    same journal in the same run."""
    out = []
    for r, wall_limit in ((L, RUN_L_WALL), (S, RUN_OTHER_WALL), (P, RUN_OTHER_WALL)):
        if r:
            run, ja = r["run"], r["journalctl_all"]
            out.append((f"{r['size']} run <= {wall_limit}x journalctl -D DIR -o export (wall)",
                        run["wall_s"] <= wall_limit * ja["wall_s"],
                        f"{run['wall_s']:.2f} s vs {wall_limit} x {ja['wall_s']:.2f} s ({run['wall_s'] / ja['wall_s']:.2f}x)"))
    if L:
        run, ja = L["run"], L["journalctl_all"]
        out.append((f"L run <= {RUN_L_CPU}x journalctl -D DIR -o export (CPU)", run["cpu_s"] <= RUN_L_CPU * ja["cpu_s"],
                    f"{run['cpu_s']:.2f} s vs {RUN_L_CPU} x {ja['cpu_s']:.2f} s ({run['cpu_s'] / ja['cpu_s']:.2f}x)"))
        m = L["analyze"]
        out.append((f"L analyze peak RSS < {RSS_LIMIT_MB} MB", m["rss_mb"] < RSS_LIMIT_MB, f"{m['rss_mb']:.0f} MB"))
        if S:
            a, b = S["analyze"]["rss_mb"], m["rss_mb"]
            out.append((f"analyze peak RSS S -> L within {FLAT:.0%}", abs(b - a) / a <= FLAT,
                        f"S {a:.0f} MB, L {b:.0f} MB ({(b - a) / a:+.0%})"))
    return out


def _secs(v) -> str:
    return "-" if v is None else f"{v:.2f} s"


def machine() -> str:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    jv = subprocess.run(["journalctl", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    return (f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM, {platform.platform()}, "
            f"Python {platform.python_version()}, {jv[0] if jv else 'journalctl ?'}, load avg "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="S,P,L", help="comma-separated: S, M, P, L (default S,P,L)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of collect/analyze/journalctl per size (median)")
    ap.add_argument("--no-plaso", action="store_true")
    ap.add_argument("--no-dissect", action="store_true")
    ap.add_argument("--plaso-timeout", type=int, default=900, help="seconds for each plaso / dissect run")
    ap.add_argument("--profile", action="store_true", help="also record profiles of collect and analyze (py-spy, else bench/sample.py)")
    ap.add_argument("--build-only", action="store_true", help="build the cached inputs and anchors, measure nothing")
    ap.add_argument("--no-phases", action="store_true", help="skip the per-collector phases (bench/phases.py)")
    args = ap.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    if not shutil.which("journalctl"):
        log("journalctl not found: apt-get install systemd")
        return 2
    try:
        gen.journal_remote()
    except FileNotFoundError as e:
        log(str(e))
        return 2
    exes: dict = {}
    wanted = [n for n in ("plaso", "dissect") if not getattr(args, f"no_{n}")]
    installers = {n: threading.Thread(target=lambda n=n: exes.__setitem__(n, ensure_anchor(n, log))) for n in wanted}
    for t in installers.values():
        t.start()  # the installs overlap with building the inputs
    sizes = [gen.SIZES[s.strip()] for s in args.sizes.split(",") if s.strip()]
    for s in sizes:
        ensure_root(s, log)
    for t in installers.values():
        t.join()
    for n in wanted:
        if not exes.get(n):
            log(f"anchor {n}: could not be installed, its rows say 'not run'")
    if args.build_only:
        return 0
    warm_bytecode()
    results = [run_size(s, args, exes, log) for s in sizes]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (CACHE / f"results-{stamp}.json").write_text(json.dumps({"machine": machine(), "results": results}, indent=1,
                                                            default=str))
    print(f"machine: {machine()}\n")
    for r in results:
        i = r["input"]
        print(f"{r['size']}: {i['journal_entries']:,} journal entries in {i['journal_files']} files "
              f"({i['journal_mb']} MB), {i['reloads']} reloads; dpkg.log {i['dpkg_lines']:,} lines; "
              f"{i['apt_stanzas']:,} apt stanzas; {i['containers']} containers ({i['gpu_containers']} GPU); "
              f"collect kept {r['collect'].get('selected_entries')} journal entries")
    print()
    print(table(results))
    print("\ncollect phases, wall s (CPU s), each collector's acquire alone (bench/phases.py):\n")
    print(phases_table(results))
    print("\ngoals:")
    ok = True
    for name, met, detail in goals(results):
        print(f"  [{'met' if met else 'NOT MET' if met is False else 'n/a'}] {name}: {detail}")
        ok = ok and met is not False
    for r in results:
        for k in ("collect", "analyze", "run"):
            if r[k].get("rc") not in (0, 1):
                print(f"  warning: {r['size']} {k} exited {r[k]['rc']}: {r[k].get('stderr', '')[-400:]}")
    print(f"\n(figures move with machine load; medians of {args.repeat} runs, warm page cache; "
          f"raw results: {CACHE / f'results-{stamp}.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
