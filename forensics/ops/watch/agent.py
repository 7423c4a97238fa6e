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
``gpu_forensics_bundles_written_total``, ``gpu_forensics_probe_errors_total``, ``gpu_forensics_build_info{version}``;
and what went wrong at a loss or with ``--out`` (issue 27): ``gpu_forensics_losses_total`` (every 1 -> 0, bundle
or not), ``gpu_forensics_bundles_failed_total`` (not written: ``--out`` full or unwritable),
``gpu_forensics_bundles_dropped_total`` (written, then removed: alone over ``--keep-bytes``),
``gpu_forensics_state_write_errors_total``. :meth:`Agent.health` (``/healthz``) says whether the loop makes
progress: a sweep at least every ``interval`` (plus what a sweep or a bundle may take).
Reloads are counted from D-Bus (``Reloading(true)``) while a D-Bus socket is followed, else from the
journal's main.c line (``Reloading.``/``Reexecuting.``), so one reload is never counted twice.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from forensics import __version__
from forensics.bundle_open import plain
from forensics.timeutil import iso_z

import forensics.ops.watch.state as st
from forensics.ops.watch.sweep import SWEEP_BUDGET_S, sweep

QUIET_S = 0.25        #: no trigger for this long (and no reload in progress): sweep
JOURNAL_QUIET_S = 2.0  #: the same after a journal line while no D-Bus socket is followed
MAX_DELAY_S = 60.0    #: a sweep at the latest this long after the first trigger of a storm that goes on
WINDOW_BEFORE_S = 300  #: the loss bundle's incident starts this long before the last sweep that saw access
LABELS = ("namespace", "pod", "container", "id")
#: the node's runtime configuration (node + runtime_config collectors, for at_risk) is read again at every
#: triggered sweep and every this many periodic ones; the probe runs at every sweep
RUNTIME_EVERY = 10
LOSS_BUDGET_S = 300.0  #: a loss bundle's collection time budget
#: /healthz: the loop is stalled when it has not finished a sweep this long after the one due (its triggers may
#: hold it MAX_DELAY_S), or a sweep or a bundle runs this much past its own time budget
SLACK_S = 60.0


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
        self.losses = Counter("gpu_forensics_losses", "containers' GPU access going from 1 to 0 (one per sweep that "
                              "saw it), whether a bundle could be written or not", registry=r)
        self.failed = Counter("gpu_forensics_bundles_failed", "loss bundles that could not be written (--out full "
                              "or unwritable; the loss is in watch-losses.txt and the log)", registry=r)
        self.dropped = Counter("gpu_forensics_bundles_dropped", "loss bundles removed at once because alone they "
                               "are over --keep-bytes", registry=r)
        self.state_errors = Counter("gpu_forensics_state_write_errors", "saves of watch-state.json that failed "
                                    "(--out full or unwritable)", registry=r)
        Gauge("gpu_forensics_build_info", "the agent's version", ["version"], registry=r).labels(__version__).set(1)


class Agent:
    """One agent on the node under ``root``, writing only under ``out``; ``log`` takes one line per event."""

    def __init__(self, root: str, out: Path, interval: float, keep_bundles: int, keep_bytes: int,
                 log: Callable[[str], None], argv: list[str] | None = None, state_dirs: tuple = ()):
        """``state_dirs``: extra containerd state directories for the sweeps and the loss bundles (the
        containers collector's ``containerd_state_dirs``)."""
        self.root, self.out, self.interval, self.state_dirs = root, Path(out), interval, tuple(state_dirs)
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
        self.failure: str | None = None  # why the loop died, once it has
        self.last_end: float | None = None  # monotonic end of the last sweep, failed or not
        self.due_by = time.monotonic() + 2 * SWEEP_BUDGET_S + LOSS_BUDGET_S + SLACK_S  # for /healthz
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
        bundle left pending by a killed agent is written first. Should the loop die all the same, the reason is
        logged and kept in :attr:`failure` (the process then exits non-zero, :func:`..watch.run_args`)."""
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - said in one line, and the process exits 1 (run_args)
            self.failure = f"{type(e).__name__}: {e}"
            self.log(f"the sweep loop died: {self.failure}")

    def health(self) -> tuple[bool, str]:
        """``(healthy, one line)`` for ``/healthz``: healthy while the loop lives and has finished a sweep
        within what its schedule allows (``interval`` + :data:`MAX_DELAY_S` + :data:`SLACK_S`; the time budget
        of a sweep or a loss bundle while one runs)."""
        now = time.monotonic()
        last = f"last sweep {now - self.last_end:.0f} s ago" if self.last_end is not None else "no sweep yet"
        if self.failure:
            return False, f"the sweep loop died: {self.failure}"
        if now > self.due_by:
            return False, f"stalled: {last}, sweeps every {self.interval:g} s; one was due {now - self.due_by:.0f} s ago"
        return True, f"ok: {last}, sweeps every {self.interval:g} s"

    def _run(self) -> None:
        try:
            st.make_record(self.out)
        except OSError as e:
            self.log(f"{self.out / st.LOSSES} could not be made ({e}); tried again at a loss")
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
            self.due_by = time.monotonic() + 2 * SWEEP_BUDGET_S + SLACK_S
            self.sweep_once(reason)
            self.last_end = time.monotonic()
            next_periodic = self.last_end + self.interval
            self.due_by = next_periodic + MAX_DELAY_S + SLACK_S

    def sweep_once(self, reason: str) -> None:
        """One sweep, its metrics and state, and the loss bundle when a container went 1 -> 0. The access
        gauges are set as soon as the probe has answered (:meth:`_publish_access`), before the exposure rules;
        a loss the probe showed is recorded even when the rest of the sweep fails."""
        lost: list[str] = []
        result = None
        try:
            fresh = reason != "interval" or self.runtime_age >= RUNTIME_EVERY or self.runtime is None
            result = sweep(self.root, self.out, self.state_dirs, runtime=None if fresh else self.runtime,
                           on_access=lambda seen: lost.extend(self._publish_access(seen)))
            self.runtime, self.runtime_age = result.runtime, 0 if fresh else self.runtime_age + 1
        except Exception as e:  # noqa: BLE001 - an agent that dies on a bad node watches nothing
            with self.cond:
                self.state["probe_errors_total"] += 1
                self.metrics.errors.inc()
            self.log(f"sweep failed ({reason}): {type(e).__name__}: {e}")
        m, s = self.metrics, self.state
        with self.cond:
            prev_sweep = s["last_sweep"]
            if result is not None:
                self._publish_sweep(result)
            if lost:
                s["pending"] = self._loss(lost, prev_sweep or (result.started if result else time.time()))
                m.losses.inc()
            self._save()
        if result is not None:
            summary = ", ".join(f"{plain(v.container or v.id[:12])}={v.access if v.access is not None else '?'}"
                                f"{' at-risk' if v.at_risk else ''}" for v in result.seen.values())
            self.log(f"sweep {s['sweeps_total']} ({reason}): {len(result.seen)} GPU containers [{summary}], "
                     f"{result.errors} probe errors, {result.elapsed:.2f} s"
                     + "".join(f"; {w}" for w in result.notes + result.why[:5]))
        if lost:
            self._write_loss(s["pending"])

    def _publish_sweep(self, result) -> None:
        """The at-risk gauges, the counters and the last sweep's time of a finished sweep (``cond`` held)."""
        m, s = self.metrics, self.state
        for seen in result.seen.values():
            if seen.at_risk is not None:
                m.at_risk.labels(**seen.labels()).set(1 if seen.at_risk else 0)
            else:
                _drop(m.at_risk, seen.labels())
        s["probe_errors_total"] += result.errors
        if result.errors:
            m.errors.inc(result.errors)
        s["sweeps_total"] += 1
        s["last_sweep"] = time.time()
        m.last_sweep.set(s["last_sweep"])

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

    def _save(self) -> None:
        """Save the state (the caller holds ``cond``); a full or unwritable ``--out`` is counted and logged,
        and the agent goes on with the state in memory."""
        try:
            st.save(self.out, self.state)
        except OSError as e:
            self.metrics.state_errors.inc()
            self.log(f"state not saved: {e}")

    def _write_loss(self, pending: dict) -> None:
        """Collect the loss bundle (:meth:`_collect_loss`), count it, prune to the bounds (the new one too
        when alone it is over ``keep_bytes``: said in the log and ``bundles_dropped``), record the loss in
        ``watch-losses.txt`` (bundle or not) and clear ``pending``. Never raises for a full or unwritable ``--out``."""
        t0 = time.monotonic()
        self.due_by = t0 + LOSS_BUDGET_S + SLACK_S
        path, name, problems = self._collect_loss(pending)
        size = st.size(path) if path is not None else 0
        removed = st.prune(self.out, self.keep_bundles, self.keep_bytes)
        written = path is not None
        if not written:
            fate = f"NOT written: {'; '.join(problems[:3])}"
        elif path in removed:
            removed.remove(path)
            fate = f"written, then removed: its {size} bytes alone are over --keep-bytes {self.keep_bytes}"
            problems, path = [*problems, fate], None
        else:
            fate = "verified" if not problems else f"NOT verified: {'; '.join(problems[:3])}"
        with self.cond:
            s = self.state
            (self.metrics.bundles if written else self.metrics.failed).inc()
            if written:
                s["bundles_written_total"] += 1
                if path is None:
                    self.metrics.dropped.inc()
            s["losses"].append({"name": name, "ids": pending["ids"], "at": pending["incident"]["end"],
                                "path": str(path) if path else None, "verified": path is not None and not problems,
                                "problems": [p[:st.MAX_TEXT] for p in problems[:20]]})
            s["pending"] = None
            self._save()
        inc = pending["incident"]
        line = plain(f"{inc['end']} {inc['label']} [{' '.join(i[:12] for i in pending['ids'])}]: "
                     f"bundle {self.out / name} {fate}")
        try:
            st.make_record(self.out)
            st.record_loss(self.out, line)
        except OSError as e:
            self.log(f"{self.out / st.LOSSES} not written ({e})")
        self.log(f"loss: {line} ({time.monotonic() - t0:.1f} s"
                 + (f"; pruned {', '.join(p.name for p in removed)}" if removed else "") + ")")

    def _collect_loss(self, pending: dict) -> tuple[Path | None, str, list[str]]:
        """``(path, name, problems)`` of the loss bundle: collected now under ``pending``'s name, or found there
        verified (written before a restart). Anything else already at that name (or its ``.incomplete``) is
        left as it is and the bundle takes a new name; ``path`` is None when it could not be written (then
        ``problems`` says why, and a partial bundle this call made that holds no evidence is removed)."""
        from forensics.bundle import BundleError, verify
        from ..pipeline import collect
        path = self.out / pending["name"]
        if os.path.lexists(path) or os.path.lexists(f"{path}.incomplete"):
            try:
                if path.is_dir() and not path.is_symlink() and not verify(path):
                    self.log(f"loss bundle {path} was already written (before a restart)")
                    return path, path.name, []
            except BundleError:
                pass
            path = self.out / (st.PREFIX + datetime.now(timezone.utc).strftime(st.STAMP))
            self.log(f"{pending['name']} under {self.out} is not a verified bundle of this loss: kept as it is; "
                     f"the bundle is written as {path.name}")
        try:
            got, _, _ = collect(self.root, path, options={"probe": True, "containerd_state_dirs": self.state_dirs},
                                incidents=[pending["incident"]], argv=self.argv, time_budget=LOSS_BUDGET_S)
        except Exception as e:  # noqa: BLE001 - a full --out above all; recorded, the agent watches on
            made = Path(f"{path}.incomplete")  # not there before this call (checked above)
            if made.is_dir() and not made.is_symlink() and set(_files(made)) <= {"INCOMPLETE", "manifest.json"}:
                shutil.rmtree(made, ignore_errors=True)  # made by this call, and empty of evidence
            return None, path.name, [f"{type(e).__name__}: {e}"]
        try:
            return got, got.name, verify(got)
        except BundleError as e:
            return got, got.name, [str(e)]


def _files(path: Path) -> list[str]:
    """The names of the files under ``path`` (relative), links not followed."""
    return [os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names]


def _drop(gauge: Gauge, labels: dict) -> None:
    """Remove the series of ``labels`` from ``gauge`` (nothing when it has none)."""
    try:
        gauge.remove(*[labels[k] for k in LABELS])
    except KeyError:
        pass
