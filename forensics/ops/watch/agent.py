"""The watch agent's loop: triggers in, debounced sweeps, metrics out, a bundle at each loss.

A trigger (a ``Reloading`` signal, a PID 1 reload line, :mod:`.triggers`) arms a sweep; the sweep runs
once systemd is not mid-reload and no trigger came for :data:`QUIET_S` seconds (a burst of reloads is one
sweep), and at the latest :data:`MAX_DELAY_S` after the first; without triggers, every ``interval``
seconds (those read the runtime configuration again only every :data:`RUNTIME_EVERY`-th time; the probe
runs at every sweep). After each sweep (:func:`.sweep.sweep`) the gauges are set (a container gone from the node
loses its series), the counters advance, the state is saved (:mod:`.state`), and when a container went
from access 1 to 0 one bundle is collected for that loss, however many containers it took.

Metrics (names agreed with the alert rules, /work/h-contracts-s3.md): ``gpu_forensics_container_gpu_access``
and ``gpu_forensics_container_at_risk`` ``{namespace,pod,container,id}``, ``gpu_forensics_daemon_reloads_total``,
``gpu_forensics_last_reload_timestamp_seconds``, ``gpu_forensics_last_sweep_timestamp_seconds``,
``gpu_forensics_bundles_written_total``, ``gpu_forensics_probe_errors_total``, ``gpu_forensics_build_info{version}``.
Reloads are counted from D-Bus (``Reloading(true)``) while a D-Bus socket is followed, else from the
journal's main.c line (``Reloading.``/``Reexecuting.``), so one reload is never counted twice.
"""
from __future__ import annotations

import shutil
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from forensics import __version__
from forensics.timeutil import iso_z

import forensics.ops.watch.state as st
from forensics.ops.watch.sweep import sweep

QUIET_S = 0.25        #: no trigger for this long (and no reload in progress): sweep
JOURNAL_QUIET_S = 2.0  #: the same after a journal line while no D-Bus socket is followed
MAX_DELAY_S = 60.0    #: a sweep at the latest this long after the first trigger of a storm that goes on
WINDOW_BEFORE_S = 300  #: the loss bundle's incident starts this long before the last sweep that saw access
LABELS = ("namespace", "pod", "container", "id")
#: the node's runtime configuration (node + runtime_config collectors, for at_risk) is read again at every
#: triggered sweep and every this many periodic ones; the probe runs at every sweep
RUNTIME_EVERY = 10


class Metrics:
    """The agent's metrics in their own registry (served by :func:`prometheus_client.start_http_server`)."""

    def __init__(self):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.access = Gauge("gpu_forensics_container_gpu_access", "1 while the container's GPU device nodes open "
                            "(or fail only with ENXIO), 0 once its device cgroup denies them (EPERM)", LABELS, registry=r)
        self.at_risk = Gauge("gpu_forensics_container_at_risk", "1 when the next daemon-reload would revoke the "
                             "container's GPU access (gpu-forensics exposure rules)", LABELS, registry=r)
        self.reloads = Counter("gpu_forensics_daemon_reloads", "systemd daemon-reloads seen", registry=r)
        self.last_reload = Gauge("gpu_forensics_last_reload_timestamp_seconds", "unix time of the last reload", registry=r)
        self.last_sweep = Gauge("gpu_forensics_last_sweep_timestamp_seconds", "unix time of the last finished sweep",
                                registry=r)
        self.bundles = Counter("gpu_forensics_bundles_written", "loss bundles written under --out", registry=r)
        self.errors = Counter("gpu_forensics_probe_errors", "GPU containers not answered for by a sweep's probe "
                              "(vanished mid-probe, timed out) and sweep failures", registry=r)
        Gauge("gpu_forensics_build_info", "the agent's version", ["version"], registry=r).labels(__version__).set(1)


class Agent:
    """One agent on the node under ``root``, writing only under ``out``; ``log`` takes one line per event."""

    def __init__(self, root: str, out: Path, interval: float, keep_bundles: int, keep_bytes: int,
                 log: Callable[[str], None], argv: list[str] | None = None):
        self.root, self.out, self.interval = root, Path(out), interval
        self.keep_bundles, self.keep_bytes, self.log = keep_bundles, keep_bytes, log
        self.argv = argv or ["gpu-forensics", "watch"]
        self.metrics = Metrics()
        self.state = st.load(self.out, log)
        self.cond = threading.Condition()
        self.stopping = False
        self.first_trigger: float | None = None
        self.last_trigger = 0.0
        self.in_reload = False
        self.last_reload_end = 0.0  # unix s of the last end of reload D-Bus signalled
        self.reason = "start"
        self.runtime: dict | None = None  # runtime_config facts of the last sweep that read them
        self.runtime_age = 0
        self.dbus = None  # set by the caller: a .triggers.DbusReloads whose ``connected`` says who counts
        self._restore()

    def _restore(self) -> None:
        m, s = self.metrics, self.state
        for c, n in ((m.reloads, s["reloads_total"]), (m.bundles, s["bundles_written_total"]),
                     (m.errors, s["probe_errors_total"])):
            if n:
                c.inc(n)
        if s["last_reload"]:
            m.last_reload.set(s["last_reload"])

    # -- triggers (any thread) --------------------------------------------------------------------
    def notify(self, kind: str, source: str, at: float) -> None:
        """A trigger from :mod:`.triggers`; counts the reload and arms a debounced sweep."""
        with self.cond:
            counting = (kind == "reload-start") or (kind == "journal-reload" and not (self.dbus and self.dbus.connected))
            if counting:
                self.state["reloads_total"] += 1
                self.state["last_reload"] = at
                self.metrics.reloads.inc()
                self.metrics.last_reload.set(at)
            if kind == "reload-start":
                self.in_reload = True
            elif kind == "reload-end":
                self.in_reload = False
                self.last_reload_end = at
            if kind.startswith("journal") and self.dbus and self.dbus.connected and at <= self.last_reload_end:
                # PID 1 logged this reload as it started, and its end has come on D-Bus already: the sweep
                # for it is armed or done (journald can hand the line over after that end: one storm, one sweep)
                return
            now = time.monotonic()
            self.first_trigger = self.first_trigger or now
            # PID 1's journal line comes as the reload starts and systemd 252 logs no end: without the D-Bus
            # signal's end of reload, wait long enough for the reload to be over
            quiet = QUIET_S if (self.dbus and self.dbus.connected) else JOURNAL_QUIET_S
            self.last_trigger = max(self.last_trigger, now + quiet - QUIET_S)
            self.reason = f"{kind} ({source})"
            self.cond.notify_all()

    def stop(self) -> None:
        """Ask the loop to end after the sweep or bundle in progress (SIGTERM)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        """Sweep at start, then on triggers and every ``interval`` seconds, until :meth:`stop`; a loss
        bundle left pending by a killed agent is written first."""
        if self.state["pending"]:
            self._write_loss(self.state["pending"])
        next_periodic = 0.0
        while True:
            with self.cond:
                while not self.stopping:
                    now = time.monotonic()
                    if self.first_trigger is not None:
                        due = max(self.last_trigger + QUIET_S, now if not self.in_reload else now + QUIET_S)
                        due = min(due, self.first_trigger + MAX_DELAY_S)
                    else:
                        due = next_periodic
                    if now >= due:
                        break
                    self.cond.wait(due - now)
                if self.stopping:
                    return
                reason = self.reason if self.first_trigger is not None else ("interval" if next_periodic else "start")
                self.first_trigger = None
                self.in_reload = False  # an end of reload lost with its connection holds back one sweep at most
            self.sweep_once(reason)
            next_periodic = time.monotonic() + self.interval

    def sweep_once(self, reason: str) -> None:
        """One sweep, its metrics and state, and the loss bundle when a container went 1 -> 0. The access
        gauges are set as soon as the probe has answered (:meth:`_publish_access`), before the exposure rules."""
        lost: list[str] = []
        try:
            fresh = reason != "interval" or self.runtime_age >= RUNTIME_EVERY or self.runtime is None
            result = sweep(self.root, self.out, on_access=lambda seen: lost.extend(self._publish_access(seen)),
                           runtime=None if fresh else self.runtime)
            self.runtime, self.runtime_age = result.runtime, 0 if fresh else self.runtime_age + 1
        except Exception as e:  # noqa: BLE001 - an agent that dies on a bad node watches nothing
            with self.cond:
                self.state["probe_errors_total"] += 1
                self.metrics.errors.inc()
            self.log(f"sweep failed ({reason}): {type(e).__name__}: {e}")
            return
        m, s = self.metrics, self.state
        with self.cond:
            for cid, seen in result.seen.items():
                if seen.at_risk is not None:
                    m.at_risk.labels(**seen.labels()).set(1 if seen.at_risk else 0)
                else:
                    _drop(m.at_risk, seen.labels())
            s["probe_errors_total"] += result.errors
            if result.errors:
                m.errors.inc(result.errors)
            s["sweeps_total"] += 1
            prev_sweep, s["last_sweep"] = s["last_sweep"], time.time()
            m.last_sweep.set(s["last_sweep"])
            if lost:
                s["pending"] = self._loss(lost, prev_sweep or result.started)
            st.save(self.out, s)
        summary = ", ".join(f"{v.container or v.id[:12]}={v.access if v.access is not None else '?'}"
                            f"{' at-risk' if v.at_risk else ''}" for v in result.seen.values())
        self.log(f"sweep {s['sweeps_total']} ({reason}): {len(result.seen)} GPU containers [{summary}], "
                 f"{result.errors} probe errors, {result.elapsed:.2f} s"
                 + "".join(f"; {w}" for w in result.why[:5]))
        if lost:
            self._write_loss(s["pending"])

    def _publish_access(self, seen: dict) -> list[str]:
        """Set the access gauges from a sweep's probe answers (a container gone from the node loses its
        series; one without an answer has none); returns the ids that went from 1 to 0."""
        m, s, lost = self.metrics, self.state, []
        with self.cond:
            for cid in set(s["labels"]) - set(seen):  # gone from the node: its series go too
                labels = s["labels"].pop(cid)
                s["access"].pop(cid, None)
                for g in (m.access, m.at_risk):
                    _drop(g, labels)
            for cid, v in seen.items():
                labels, old = v.labels(), s["labels"].get(cid)
                if old and old != labels:
                    for g in (m.access, m.at_risk):
                        _drop(g, old)
                s["labels"][cid] = labels
                if v.access is not None:
                    if s["access"].get(cid) == 1 and v.access == 0:
                        lost.append(cid)
                    s["access"][cid] = v.access  # the last answer is kept for the next 1 -> 0
                    m.access.labels(**labels).set(v.access)
                else:  # no answer this time: unknown, so no series (never the last value shown as now)
                    _drop(m.access, labels)
        return lost

    def _loss(self, ids: list[str], seen_ok: float) -> dict:
        """The pending loss: its bundle's name and incident, from :data:`WINDOW_BEFORE_S` before the last sweep
        that saw access (``seen_ok``, unix seconds: the reload that took it came later) to now."""
        now = datetime.now(timezone.utc)
        names = [self.state["labels"][i]["container"] or i[:12] for i in ids]
        return {"name": st.PREFIX + now.strftime("%Y%m%dT%H%M%S.%fZ"), "ids": ids,
                "incident": {"start": iso_z(datetime.fromtimestamp(seen_ok - WINDOW_BEFORE_S, timezone.utc)),
                             "end": iso_z(now), "label": f"watch: GPU access lost ({', '.join(names)[:200]})"}}

    def _write_loss(self, pending: dict) -> None:
        """Collect the loss bundle (once: a verified bundle of that name is taken as written), verify it,
        count it, prune the oldest ones, and clear ``pending``."""
        from forensics.bundle import verify
        from ..pipeline import collect
        path = self.out / pending["name"]
        problems: list[str] = []
        t0, written = time.monotonic(), False
        try:
            if path.is_dir() and not verify(path):
                self.log(f"loss bundle {path} was already written (before a restart)")
                written = True
            else:
                for p in (path, path.with_name(path.name + ".incomplete")):
                    if p.is_dir():
                        shutil.rmtree(p)
                path, _, _ = collect(self.root, path, options={"probe": True}, incidents=[pending["incident"]],
                                     argv=self.argv, time_budget=300)
                written = True
                problems = verify(path)
        except Exception as e:  # noqa: BLE001 - recorded; the agent watches on
            problems = [f"{type(e).__name__}: {e}"]
        with self.cond:
            s = self.state
            if written:
                s["bundles_written_total"] += 1
                self.metrics.bundles.inc()
            s["losses"].append({"name": pending["name"], "ids": pending["ids"], "at": pending["incident"]["end"],
                                "path": str(path) if written else None, "verified": written and not problems,
                                "problems": problems[:20]})
            s["pending"] = None
            st.save(self.out, s)
        removed = st.prune(self.out, self.keep_bundles, self.keep_bytes, keep=path)
        self.log(f"loss bundle written: {path} ({time.monotonic() - t0:.1f} s; "
                 + ("verified" if not problems else f"NOT verified: {'; '.join(problems[:3])}")
                 + (f"; pruned {', '.join(p.name for p in removed)}" if removed else "") + ")")


def _drop(gauge: Gauge, labels: dict) -> None:
    """Remove the series of ``labels`` from ``gauge`` (nothing when it has none)."""
    try:
        gauge.remove(*[labels[k] for k in LABELS])
    except KeyError:
        pass
