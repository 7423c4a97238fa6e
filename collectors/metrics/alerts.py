"""What Prometheus itself recorded of its alerts: the ``ALERTS`` and ``ALERTS_FOR_STATE`` series of the node
over the window Prometheus holds, read back as episodes (when each alert was pending, when it fired, when it
ended, for which GPU).

Prometheus writes these series for every alerting rule it evaluates (docs/practices/rules.md upstream,
"Inspecting alerts during runtime"): ``ALERTS{alertname, alertstate="pending"|"firing", <the alert's
labels>} 1`` at each evaluation while the alert is active, and ``ALERTS_FOR_STATE{alertname, <labels>}``
whose value is the Unix time the alert became active (its ``activeAt``, restored after a restart). A series
exists only while the alert is active, so its samples *are* the episodes. Rules evaluated elsewhere (Thanos
Ruler, Mimir's ruler, another Prometheus) leave no ``ALERTS`` in this server: the collection says which
alert names the server recorded at all in the window, so that "no alert" and "no record" differ.

Which series are the node's: those with one of the node's labels equal to its name (the DCGM exporter's
spellings, ``node``, ``instance`` of the node's exporters: the matchers the DCGM query used), and those with
no node identity at all (an ``absent(...)`` or ``count(...) < N`` rule: a cluster-wide alert); an alert for
another node is never asked for. The findings floor says which cluster-wide ones are about GPUs.

Queries (coarse then exact, as the Xid history, :mod:`collectors.metrics.xid`): ``max_over_time`` of each
selector per coarse step, in chunks (:func:`collectors.metrics.changes.range_chunks`); then, for each episode's first
and last step, the raw samples of that one series in that step (at most :data:`MAX_REFINE` queries), so an
episode's start and end are real evaluation times. Times are unix seconds (UTC).
"""
from __future__ import annotations

import math
from datetime import datetime, timezone

from forensics.events import Event
from forensics.timeutil import iso_z

from .changes import range_chunks
from .promclient import answered, evidence, promql_str, stored_data, stored_result
from .xid import gpu_labels

ALERTS, FOR_STATE = "ALERTS", "ALERTS_FOR_STATE"
MAX_REFINE = 24       #: raw-sample queries for all episodes together
MAX_NAMES = 500       #: alert names kept from the label-values answer
BASIS = ("ALERTS and ALERTS_FOR_STATE, the series Prometheus writes for each pending or firing alert of the "
         "rules it evaluates itself")


def node_selectors(node_labels, node: str, used: list[str]) -> list[str]:
    """The label matchers that select the node's alerts: each of ``node_labels`` equal to ``node``, the
    DCGM matchers ``used`` (exporter pod names, pod IPs), and one that matches a series with none of those
    labels nor an ``instance`` (a cluster-wide alert)."""
    own = [f"{lab}={promql_str(node)}" for lab in node_labels] if node else []
    nobody = ",".join(f'{lab}=""' for lab in (*node_labels, "instance"))
    return list(dict.fromkeys([*own, *used, nobody]))


def collect(client, q, selectors: list[str], w0: int, now: int, step: int, info: dict) -> None:
    """Ask ``client`` for the alert names recorded anywhere in ``[w0, now]`` and for the node's ``ALERTS`` and
    ``ALERTS_FOR_STATE`` (``selectors`` from :func:`node_selectors`) per ``step`` seconds, then for the raw
    samples at each episode's bounds, through ``q(client, path, params, purpose, role, args)`` (the
    collector's one-call wrapper, which stores each answer). Records ``info["alerts"] = {"selectors"}``."""
    info["alerts"] = {"selectors": selectors}
    q(client, "/api/v1/label/alertname/values", {"match[]": [ALERTS], "start": w0, "end": now},
      "alert names recorded in the window (any node)", "alerts-names")
    for c, start, end in range_chunks(w0, now, step):
        for metric in (ALERTS, FOR_STATE):
            expr = " or ".join(f"max_over_time({metric}{{{s}}}[{step}s])" for s in selectors)
            q(client, "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step},
              f"{metric} per {step} s", "alerts-coarse", {"metric": metric, "chunk": c})
    asked = set()
    for key, eps in sorted(_episodes(_coarse(client.writer.dir, client.entries), step).items()):
        for first, last in eps:
            for t in (first, last):
                if (key, t) in asked or len(asked) >= MAX_REFINE:
                    continue
                asked.add((key, t))
                q(client, "/api/v1/query", {"query": f"{ALERTS}{_exact(key)}[{step}s]", "time": t},
                  "alert: raw samples at an episode's bound", "alerts-refine", {"series": list(map(list, key)), "t": t})


def _exact(key: tuple) -> str:
    return "{" + ",".join(f"{a}={promql_str(b)}" for a, b in key) + "}"


def _key(metric: dict) -> tuple:
    return tuple(sorted((str(a), str(b)) for a, b in metric.items() if a != "__name__"))


def _coarse(root, entries, metric: str = ALERTS) -> dict[tuple, list]:
    """``{series key: [(t, value)]}`` from the stored coarse answers of ``metric``, in time order (a result or
    a sample of another shape, in a bundle that was tampered with, is passed over)."""
    out: dict[tuple, set] = {}
    for e in entries:
        if e.get("role") == "alerts-coarse" and _args(e).get("metric") == metric and answered(e):
            for res in stored_result(root, e):
                if isinstance(res, dict) and isinstance(res.get("metric") or {}, dict):
                    out.setdefault(_key(res.get("metric") or {}), set()).update(
                        (int(t), v) for t, v in _samples(res.get("values")))
    return {k: sorted(v) for k, v in out.items() if v}


def _samples(values) -> list[tuple[float, float]]:
    """The ``[t, "value"]`` pairs of a matrix result that are numbers, as floats; nothing else."""
    out = []
    for s in values if isinstance(values, list) else ():
        if isinstance(s, (list, tuple)) and len(s) == 2:
            try:
                t, v = float(s[0]), float(s[1])
            except (TypeError, ValueError, OverflowError):
                continue
            if math.isfinite(t) and 0 <= t < 1e11:
                out.append((t, v))
    return out


def _args(e: dict) -> dict:
    return e.get("args") if isinstance(e.get("args"), dict) else {}


def _episodes(coarse: dict[tuple, list], step: int) -> dict[tuple, list[tuple[int, int]]]:
    """Each series' runs of consecutive coarse steps with samples: ``[(first step, last step)]``."""
    out = {}
    for key, pts in coarse.items():
        runs: list[list[int]] = []
        for t, _ in pts:
            if runs and t - runs[-1][1] <= step:
                runs[-1][1] = t
            else:
                runs.append([t, t])
        out[key] = [tuple(r) for r in runs]
    return out


def _iso(t: float | None) -> str | None:
    return None if t is None else iso_z(datetime.fromtimestamp(float(t), timezone.utc))


def read(root, entries: list, idx: dict) -> tuple[dict | None, list[Event]]:
    """``(alerts_recorded, events)`` from the stored answers; ``(None, [])`` for a bundle from before this
    query. ``alerts_recorded``: ``{"basis", "selectors", "names_answered": bool, "names_anywhere": [alertname]
    (recorded in the window for any node), "alerts": [{"alertname", "alertstate", "severity", "labels": {..},
    "gpu", "uuid", "node_bound": bool (a node label names this node; else cluster-wide), "active_since": [ISO]
    (ALERTS_FOR_STATE values seen), "episodes": [{"start", "end": ISO UTC, "open": bool (still active at the
    query), "resolution": "sample" | "coarse"}], "evidence"}]}``. Events: ``metrics.alert`` at each episode's
    start (attrs ``alertname, alertstate, severity, gpu, uuid, until, active_since``)."""
    info = idx.get("alerts")
    if not isinstance(info, dict):
        return None, []
    step, now = idx.get("coarse_step") or 60, idx["now"]
    if not isinstance(step, int) or step <= 0 or not isinstance(now, (int, float)):
        return None, []
    names_e = next((e for e in entries if e.get("role") == "alerts-names" and answered(e)), None)
    names = stored_data(root, names_e) if names_e else None
    rec = {"basis": BASIS, "selectors": info.get("selectors") or [], "names_answered": isinstance(names, list),
           "names_anywhere": sorted(str(x) for x in names)[:MAX_NAMES] if isinstance(names, list) else [],
           "alerts": []}
    coarse, since = _coarse(root, entries), _coarse(root, entries, FOR_STATE)
    raw = _raw(root, entries)
    first_coarse = next((evidence(e) for e in entries if e.get("role") == "alerts-coarse" and answered(e)), {})
    events = []
    for key, eps in sorted(_episodes(coarse, step).items()):
        lab = dict(key)
        uuid, gpu, host = gpu_labels(lab)
        state_free = tuple(p for p in key if p[0] != "alertstate")
        a = {"alertname": lab.get("alertname"), "alertstate": lab.get("alertstate"), "severity": lab.get("severity"),
             "labels": {k: v for k, v in lab.items() if k not in ("alertname", "alertstate")}, "gpu": gpu,
             "uuid": uuid, "node_bound": not _nobody(lab, rec["selectors"]),
             "active_since": sorted({_iso(v) for _, v in since.get(state_free, []) if 1e9 < v < 1e11}),
             "episodes": [], "evidence": first_coarse}
        for first, last in eps:
            a["episodes"].append(_episode(raw, key, first, last, step, now))
        rec["alerts"].append(a)
        for ep in a["episodes"]:
            events.append(Event(datetime.fromisoformat(ep["start"].replace("Z", "+00:00")), "prometheus",
                                "metrics.alert", _summary(a, ep, host, step),
                                {"alertname": a["alertname"], "alertstate": a["alertstate"],
                                 "severity": a["severity"], "gpu": gpu, "uuid": uuid,
                                 "until": None if ep["open"] else ep["end"], "active_since": a["active_since"]},
                                ep["evidence"] or first_coarse))
    return rec, events


def _nobody(lab: dict, selectors: list[str]) -> bool:
    """Whether the series carries none of the node labels the last selector requires empty."""
    nobody = selectors[-1] if selectors else ""
    return all(not lab.get(m.split("=")[0]) for m in nobody.split(",") if m)


def _raw(root, entries) -> dict[tuple, tuple[list[float], dict]]:
    """``{(series key, t): (sample times, evidence)}`` from the stored raw answers."""
    out = {}
    for e in entries:
        series = _args(e).get("series")
        if e.get("role") == "alerts-refine" and answered(e) and isinstance(series, list) and all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in series):
            times = sorted(t for r in stored_result(root, e) if isinstance(r, dict) for t, _ in _samples(r.get("values")))
            out[(tuple(tuple(p) for p in series), _args(e).get("t"))] = (times, evidence(e))
    return out


def _episode(raw: dict, key: tuple, first: int, last: int, step: int, now: float) -> dict:
    """One episode: its first and last sample where the raw answers hold them, else the coarse bounds
    (the start lies within the step before ``first``, the end within the step before ``last``)."""
    head, tail = raw.get((key, first)), raw.get((key, last))
    start = head[0][0] if head and head[0] else None
    end = tail[0][-1] if tail and tail[0] else None
    return {"start": _iso(start if start is not None else first - step), "end": _iso(end if end is not None else last),
            "open": last + step > now, "resolution": "sample" if start is not None and end is not None else "coarse",
            "evidence": (head or tail or (None, {}))[1]}


def _summary(a: dict, ep: dict, host, step: int) -> str:
    who = f"GPU {a['gpu']}" + (f" ({a['uuid']})" if a["uuid"] else "") if a["gpu"] or a["uuid"] else (
        host or ("the node" if a["node_bound"] else "cluster-wide"))
    until = "still active at collection" if ep["open"] else f"until {ep['end']}"
    return (f"alert {a['alertname']} {a['alertstate']} for {who}, {until}"
            + ("" if ep["resolution"] == "sample" else f" (within the {step} s step)"))
