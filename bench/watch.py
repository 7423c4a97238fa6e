"""Bench of ``gpu-forensics watch`` (issue 17 item 7; not a timed test). Run as root from the checkout:

    .venv/bin/python bench/watch.py sweep [--sizes 10,100,1000] [--repeat 3]
    .venv/bin/python bench/watch.py lab [--reloads 20] [--idle 600]

``sweep``: one sweep (forensics.ops.watch.sweep.sweep: node + runtime_config + containers with the probe, read
back, exposure rules) of generated roots with N GPU containers (tests/nodegen.py's cri-v1-nvdp-ubuntu2204 node
plus N-2 more hook-injected GPU containers of its shape; no live process, so the probe child is never started
and every container is a "no probe answer" error: the figure is discovery + lstat + records + exposure).
``lab``: the real-systemd lab (tests/syslab.py, v1): the agent inside; ``--reloads`` real ``systemctl
daemon-reload`` one after the other, each timed from its end (systemctl returned) to the moment /metrics shows
a sweep finished after it (``gpu_forensics_last_sweep_timestamp_seconds``, set once the whole sweep is done;
for the first one also the moment the hook container's access went 1 -> 0, which is published earlier); then the agent left idle for ``--idle`` seconds with the default ``--interval 60``
(its periodic sweeps count) and its CPU time (utime + stime of /proc/<pid>/stat, probe children included
through cutime/cstime) and RSS (VmRSS, VmHWM) read. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests")]
PORT = 19465

INSIDE = r"""
import json, subprocess, sys, time, urllib.request
def metrics():
    text = urllib.request.urlopen("http://127.0.0.1:%(port)d/metrics", timeout=5).read().decode()
    return {l.split(" ")[0]: float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l and not l.startswith("#")}
out, first_access = [], None
for i in range(%(reloads)d):
    subprocess.run(["systemctl", "daemon-reload"], check=True, timeout=60)
    end = time.time(); t0 = time.monotonic()
    while True:
        m = metrics()
        if i == 0 and first_access is None and any(k.startswith('gpu_forensics_container_gpu_access{container="hook"')
                                                   and v == 0 for k, v in m.items()):
            first_access = time.monotonic() - t0
        if m["gpu_forensics_last_sweep_timestamp_seconds"] > end:
            out.append(time.monotonic() - t0); break
        if time.monotonic() - t0 > 30:
            out.append(None); break
        time.sleep(0.02)
    time.sleep(1.0)
print(json.dumps({"latencies": out, "first_access": first_access, "metrics": m}))
"""


def bench_sweep(sizes: list[int], repeat: int) -> dict:
    """Median wall and CPU seconds of one sweep per size (module docstring)."""
    import nodegen as N
    from forensics.ops.watch.sweep import sweep
    r = N.BY_ID["cri-v1-nvdp-ubuntu2204"]
    out = {}
    with tempfile.TemporaryDirectory(prefix="watch-bench-") as tmp:
        for n in sizes:
            root = Path(tmp) / f"root-{n}"
            _, t = N.make_root(root, r)
            for i in range(n - 2):
                N.container(root, r, t, f"worker-{i}", pod=f"train-{i}", pod_ns="ml", image="nvcr.io/nvidia/pytorch:24.05",
                            env={"NVIDIA_VISIBLE_DEVICES": "0"}, gpu=N.GPUS, pid=20000 + 2 * i)
            scratch = Path(tmp) / f"out-{n}"
            scratch.mkdir()
            walls, cpus, seen = [], [], 0
            for _ in range(repeat):
                c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
                s = sweep(root, scratch)
                c1 = resource.getrusage(resource.RUSAGE_SELF)
                walls.append(time.monotonic() - w0)
                cpus.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
                seen = len(s.seen)
            out[n] = {"gpu_containers": seen, "wall_s": round(statistics.median(walls), 3),
                      "cpu_s": round(statistics.median(cpus), 3), "walls": [round(w, 3) for w in walls]}
    out["maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def _ticks(lab, pid: int) -> int:
    f = lab.read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15])  # utime stime cutime cstime (fields 14-17)


def _status(lab, pid: int) -> dict:
    return {k: v.strip() for k, _, v in (x.partition(":") for x in lab.read(f"/proc/{pid}/status").splitlines())
            if k in ("VmRSS", "VmHWM")}


def bench_lab(reloads: int, idle: float) -> dict:
    """Latency over ``reloads`` real reloads, then idle CPU and RSS over ``idle`` seconds (module docstring)."""
    import syslab as S
    from test_watch_lab import Agent
    lab = S.SysLab(Path(tempfile.mkdtemp(prefix="watch-bench-lab-")), "v1")
    dog = threading.Timer(idle + 600, lab.down)
    dog.daemon = True
    dog.start()
    try:
        lab.up()
        lab.sh("ip", "link", "set", "lo", "up")
        agent = Agent(lab)
        import test_watch_lab as T
        T.PORT = PORT
        cmd = shlex.join([sys.executable, "-m", "forensics.ops.cli", "watch", "--root", "/", "--out", str(agent.out),
                          "--listen", f"127.0.0.1:{PORT}"])
        with open(agent.log, "ab") as log:
            subprocess.Popen(["nsenter", "-t", str(lab.pid1()), "-m", "-u", "-i", "-n", "-p", "-C", "--", "env", "-i",
                              f"PATH={S.PATH}", "LANG=C.UTF-8", "/bin/sh", "-c", f"cd {shlex.quote(str(PROJECT))} && exec {cmd}"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        line = T._wait(lambda: next((x for x in agent._lines() if "; pid " in x), None), 60)
        pid = int(line.rsplit("; pid ", 1)[1])
        T._wait(lambda: agent.sweeps(), 60)
        got = json.loads(lab.sh(sys.executable, "-c", INSIDE % {"port": PORT, "reloads": reloads}, timeout=600).stdout)
        lat = [x for x in got["latencies"] if x is not None]
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), _ticks(lab, pid)
        time.sleep(idle)
        t1, c1 = time.monotonic(), _ticks(lab, pid)
        sweeps = agent.sweeps()
        return {"reloads": reloads, "hook_access_1_to_0_s": got["first_access"], "latency_p50_s": round(statistics.median(lat), 3), "latency_max_s": round(max(lat), 3),
                "latencies_s": [round(x, 3) for x in lat], "missed": got["latencies"].count(None),
                "reloads_counted": got["metrics"].get("gpu_forensics_daemon_reloads_total"),
                "bundles": got["metrics"].get("gpu_forensics_bundles_written_total"),
                "idle_window_s": round(t1 - t0, 1), "idle_cpu_pct_of_a_core": round(100 * (c1 - c0) / hz / (t1 - t0), 3),
                "rss": _status(lab, pid), "sweeps_total": len(sweeps), "last_sweep_line": sweeps[-1] if sweeps else None}
    finally:
        dog.cancel()
        lab.down()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench/watch.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("sweep", "lab"))
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reloads", type=int, default=20)
    ap.add_argument("--idle", type=float, default=600)
    a = ap.parse_args(argv)
    load0 = os.getloadavg()
    res = bench_sweep([int(x) for x in a.sizes.split(",")], a.repeat) if a.what == "sweep" else bench_lab(a.reloads, a.idle)
    print(json.dumps({"what": a.what, "loadavg_before": load0, "loadavg_after": os.getloadavg(), "result": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
