"""``gpu-forensics watch``: a long-running node agent that catches the loss of GPU access when it happens.

It learns of every daemon-reload at once (:mod:`.triggers`: systemd's ``Reloading`` D-Bus signal, PID 1's
journal lines) and sweeps every ``--interval`` seconds too; each sweep (:mod:`.sweep`) probes every GPU
container from inside its device cgroup; the answers are Prometheus metrics on ``--listen`` (``/metrics``,
and ``/healthz``: whether sweeps happen; :mod:`.listener`, bounded against any client of the pod network), and
a container going from access 1 to 0 gets a bundle written under ``--out`` at once (:mod:`.state`: bounded,
oldest pruned, state kept across restarts and checked before it is trusted). It writes nowhere but ``--out``
(a sweep's scratch bundle goes under ``$TMPDIR`` while ``--out`` is full, :mod:`.sweep`). Exit codes: 0 on
SIGTERM/SIGINT, 2 for bad arguments or a listener that cannot bind, 1 when the sweep loop died (the reason in
one line: a restarted agent starts over, never a live process that watches nothing).
Issue 17; the metric names are the contract with the alert rules in deploy/alerts/.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

from . import state as st

DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 60.0


def add_parser(sub, formatter_class=argparse.HelpFormatter) -> argparse.ArgumentParser:
    """Register the ``watch`` subcommand on the CLI's subparsers ``sub``; returns its parser."""
    w = sub.add_parser("watch", help="node agent: probe GPU containers at every daemon-reload, export metrics, "
                       "keep a bundle at each loss", formatter_class=formatter_class,
                       epilog="example: sudo gpu-forensics watch --out /var/lib/gpu-forensics")
    w.add_argument("--root", default="/", help="the host's root (/host in a pod)")
    w.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"metrics (default {DEFAULT_LISTEN})")
    w.add_argument("--out", default="/var/lib/gpu-forensics", help="state and loss bundles; nothing is written elsewhere")
    w.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                   help=f"sweep at least this often (default {DEFAULT_INTERVAL_S:.0f})")
    w.add_argument("--keep-bundles", type=int, default=10, metavar="N", help="loss bundles kept (default 10)")
    w.add_argument("--keep-bytes", type=st.parse_size, default=st.parse_size("1G"), metavar="SIZE",
                   help="bytes of loss bundles kept, the newest included (a hard limit), e.g. 500M (default 1G)")
    return w


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` to ``(host, port)``. Raises ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _log(msg: str) -> None:
    stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    print(f"{stamp} gpu-forensics watch: {msg}", file=sys.stderr, flush=True)


def run_args(args) -> int:
    """Run the agent until SIGTERM or SIGINT (exit 0); 2 for bad arguments or when it cannot start; 1 when its
    sweep loop died (said in one line)."""
    from prometheus_client import disable_created_metrics
    importlib.import_module("jeepney.io.blocking")  # before the threads that use it start
    from .agent import Agent
    from .listener import Listener
    from .triggers import DbusReloads, JournalReloads
    try:
        host, port = parse_listen(args.listen)
        if args.interval <= 0 or args.keep_bundles < 1:
            raise ValueError("--interval and --keep-bundles must be positive")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
    except (ValueError, OSError) as e:
        print(f"gpu-forensics: error: {e}", file=sys.stderr)
        return 2
    disable_created_metrics()  # the *_created series would only say when the agent started
    agent = Agent(args.root, out, args.interval, args.keep_bundles, args.keep_bytes, _log,
                  ["gpu-forensics", "watch", "--root", args.root, "--out", str(out)])
    try:
        listener = Listener(host, port, routes(agent), _log)
    except OSError as e:
        print(f"gpu-forensics: error: cannot listen on {args.listen}: {e}", file=sys.stderr)
        return 2
    listener.start()
    _log(f"metrics on http://{args.listen}/metrics, health on /healthz; state and bundles under {out}; "
         f"pid {os.getpid()}")
    agent.dbus = DbusReloads(args.root, agent.notify, _log)
    agent.dbus.first = agent.dbus.connect()  # before the journal is opened (DbusReloads.connect)
    agent.dbus.start()
    JournalReloads(args.root, agent.notify, _log).start()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: agent.stop())
    loop = threading.Thread(target=agent.run, name="watch-loop", daemon=True)
    loop.start()
    loop.join()  # interrupted by the signal handlers (lock waits are, on POSIX), then resumed
    listener.close()
    if agent.failure:
        print(f"gpu-forensics: error: the sweep loop died ({agent.failure}); exiting so that it is restarted",
              file=sys.stderr)
        return 1
    _log("stopped")
    return 0


def routes(agent) -> dict:
    """The listener's routes for ``agent``: ``/metrics`` (Prometheus text format 0.0.4, its registry) and
    ``/healthz`` (200 while sweeps happen, 503 once the loop died or stalled; :meth:`.agent.Agent.health`)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    def healthz():
        ok, line = agent.health()
        return (200 if ok else 503), "text/plain; charset=utf-8", (line + "\n").encode()
    return {"/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(agent.metrics.registry)),
            "/healthz": healthz}
