"""Metrics evidence from Prometheus (and dcgm-exporter): when each GPU's DCGM metrics were last seen,
the node's GPU capacity history, Prometheus retention as a gap, and the cluster's alert rules.

Acquire (only with ``--prometheus``; every raw answer is kept, see :mod:`collectors.metrics.promclient`):
server clock (``time()``), ``/api/v1/status/runtimeinfo`` and ``/flags`` (retention), the server's
own ``/metrics`` (``prometheus_tsdb_lowest_timestamp_seconds``: the oldest sample held), the node's
DCGM series (``/api/v1/series``), their first and last sample per GPU, ``up`` of each exporter target
right after its last DCGM sample, ``kube_node_status_capacity``/``allocatable{resource="nvidia_com_gpu"}``
(coarse range queries, then raw samples around each change), the node's ``DCGM_FI_DEV_XID_ERRORS`` history
the same way (:mod:`collectors.metrics.xid`), ``/api/v1/rules``, the node's ``ALERTS`` and ``ALERTS_FOR_STATE``
(:mod:`collectors.metrics.alerts`); with ``--dcgm-url``,
one scrape of dcgm-exporter's ``/metrics``.

Traps designed around (docs/sources.md "Prometheus", "DCGM exporter and kube-state-metrics"):
``timestamp(last_over_time(X[d]))`` and ``timestamp(<any non-selector>)`` return the *evaluation* time, so
last/first samples come from ``max_over_time(timestamp(X{…})[d:1m])`` with a plain selector inside
``timestamp()``; range queries stop at 11,000 points, so coarse queries are chunked; ``/status/tsdb`` covers only
the head block, so the oldest sample comes from the server's own metrics; dcgm-exporter spells the node label
``Hostname``, ``hostname`` or (old deployments) puts the exporter *pod* name there, and Prometheus Operator
renames clashing labels to ``exported_*``.
"""
from __future__ import annotations

import re
import statistics
import time
from datetime import datetime, timezone

from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.source import CollectContext, Option, Reading
from forensics.events import Coverage, Event, NodeFacts
from forensics.timeutil import iso_z, local_iso
from forensics.redact import redact_url

from .changes import CHUNK_POINTS, change_points, coarse_points, range_chunks, suspicious_spans
from .promclient import (PromClient, PrometheusError, Unreachable, answered, duration_seconds, evidence, fetch_text,
                         last_samples, lowest_timestamp, promql_str, read_credential, selector_matches, stats_expr,
                         stored_data, stored_result)
from .urls import shown_source, url_problem
from .alerts import collect as alerts_collect, node_selectors, read as alerts_read
from .scrape import read as scrape_read
from .xid import BASIS as XID_BASIS, METRIC as XID_METRIC, collect as xid_collect, gpu_labels as _gpu, read as xid_read

NODE_LABELS = ("Hostname", "hostname", "exported_Hostname", "exported_hostname", "node", "kubernetes_node",
               "nodename")
CAPACITY = {"capacity": "kube_node_status_capacity", "allocatable": "kube_node_status_allocatable"}
RESOURCE = "nvidia_com_gpu"
STEP = 60              # subquery step (s); must stay below the 5 m lookback for exact last samples
COARSE_POINTS = 1000   # coarse points per capacity series over the whole window
MAX_REFINE = 24        # raw-sample queries per capacity series
MAX_DCGM_METRICS, DCGM_BATCH, MAX_TARGETS = 64, 8, 8
UP_AFTER = 600         # seconds of `up` samples looked at after a target's last DCGM sample
MAX_WINDOW = 400 * 86400
TIMEOUT, BUDGET = 15.0, 60.0  # seconds per request, for all requests (also bounded by ctx.deadline)



def _shown(url: str | None) -> str | None:
    """A URL as the manifest's options record it: without credentials or query."""
    return redact_url(url) if url else None


NAME = "metrics"
PROMETHEUS = Option("--prometheus", "prometheus", "Prometheus base URL (metrics evidence)", metavar="URL", record=_shown)
DCGM_URL = Option("--dcgm-url", "dcgm_url", "dcgm-exporter /metrics URL", metavar="URL", record=_shown)
TOKEN_ENV = Option("--prometheus-token-env", "prometheus_token_env", "environment variable holding 'Bearer TOKEN' "
                   "or 'Basic user:password' (never stored)", metavar="VAR")
TOKEN_FILE = Option("--prometheus-token-file", "prometheus_token_file", "file holding the same (never stored)",
                    metavar="FILE")
CA = Option("--prometheus-ca", "prometheus_ca", "CA bundle (PEM) for Prometheus's TLS", metavar="FILE")
REQUEST_TIMEOUT = Option(None, "prometheus_timeout", "seconds per Prometheus request", default=TIMEOUT)
PROM_BUDGET = Option(None, "prometheus_budget", "seconds for all Prometheus requests", default=BUDGET)
OPTIONS = [PROMETHEUS, DCGM_URL, TOKEN_ENV, TOKEN_FILE, CA, REQUEST_TIMEOUT, PROM_BUDGET]


def acquire(ctx: CollectContext) -> None:
    """Query :data:`PROMETHEUS` (``http(s)://…`` or recorded ``file://DIR``) into ``metrics/``, and
    scrape :data:`DCGM_URL` once into ``metrics/dcgm-exporter.metrics.txt``.

    Does nothing when neither is set. Authenticates with :data:`TOKEN_ENV` (name of an environment
    variable) or :data:`TOKEN_FILE`, verifies TLS with :data:`CA`, and stops after
    :data:`REQUEST_TIMEOUT` per request and :data:`PROM_BUDGET` in all (seconds; also bounded by
    ``ctx.deadline``). The node is ``ctx.node.name`` (``--node``, else the host name). Never raises
    for a bad server: no answer or an error answer becomes an ``error`` artifact, and
    ``metrics/index.json`` records the calls and how far it got.
    """
    ca, url, dcgm = ctx.value(CA), ctx.value(PROMETHEUS), ctx.value(DCGM_URL)
    bad_dcgm, bad_url = url_problem("--dcgm-url", dcgm), url_problem("--prometheus", url)
    if bad_dcgm:
        ctx.writer.record(Artifact(None, shown_source("--dcgm-url", dcgm), Status.ERROR, "http-get", message=bad_dcgm))
    elif dcgm:
        try:
            fetch_text(dcgm, ctx.writer, "metrics/dcgm-exporter.metrics.txt", ca=ca)
        except PrometheusError as e:
            ctx.log(f"dcgm-exporter: {e}")
    if not url:
        return
    node = ctx.node.name or ""
    info = {"node": node, "resource": RESOURCE}
    # a URL that is not one is said in one line (not as the HTTP library's text), and no call is made
    aborted, what = (bad_url, shown_source("--prometheus", url)) if bad_url else (None, None)
    if not aborted:
        try:
            cred = read_credential(ctx.value(TOKEN_ENV), ctx.value(TOKEN_FILE))
        except (OSError, KeyError) as e:
            aborted, what = f"cannot read the Prometheus credential: {type(e).__name__}: {e}", "prometheus credential"
    if aborted:
        info["aborted"] = aborted
        ctx.writer.record(Artifact(None, what, Status.ERROR, "prometheus-api", message=aborted))
        ctx.writer.write_json("metrics/index.json", {**info, "source": redact_url(url), "calls": []},
                              redact_url(url), "prometheus-api")
        return
    budget = ctx.value(PROM_BUDGET) or BUDGET
    if ctx.deadline:  # the whole collection's time budget (collect(time_budget=…))
        budget = max(0.0, min(budget, ctx.deadline - time.monotonic()))
    client = PromClient(url, ctx.writer, credential=cred, ca=ca,
                        timeout=ctx.value(REQUEST_TIMEOUT) or TIMEOUT, budget=budget, log=ctx.log)
    try:
        _collect(client, node, info)
    except PrometheusError as e:  # no answer at all, or the first call (the clock) failed
        info["aborted"] = str(e)
        ctx.log(f"prometheus: {redact_url(url)}: {e}")
    finally:
        index = client.index(info)
        ctx.writer.write_json("metrics/index.json", index, index["source"] or "", "prometheus-api",
                              ("the calls made, in order, and what each was for",))


def _q(client: PromClient, path: str, params, purpose: str, role: str, args=None, parse="json"):
    """One call; an error answer gives None (it is stored), no answer at all stops the collection."""
    try:
        return client.call(path, params, purpose, parse=parse, role=role, args=args)
    except Unreachable:
        if client.unreachable:
            raise
    except PrometheusError:
        pass
    return None


def _collect(client: PromClient, node: str, info: dict) -> None:
    now = int(client.now())
    info["now"] = now
    rt = _q(client, "/api/v1/status/runtimeinfo", None, "retention (storageRetention)", "runtimeinfo") or {}
    _q(client, "/api/v1/status/flags", None, "retention and lookback flags", "flags")
    text = _q(client, "/metrics", None, "oldest sample held (prometheus_tsdb_lowest_timestamp_seconds)",
              "self-metrics", parse="text")
    lowest = lowest_timestamp(text)
    if lowest is None:
        lowest = now - min(duration_seconds(rt.get("storageRetention")) or 15 * 86400, MAX_WINDOW)
    w0 = int(max(lowest, now - MAX_WINDOW) // 60 * 60 - 60)
    step = max(STEP, -(-(now - w0) // COARSE_POINTS // 60) * 60)
    info.update(window_start=w0, coarse_step=step)
    used, has_xid = _dcgm(client, node, w0, now, step)
    xid_collect(client, _q, used, has_xid, w0, now, step, info)
    for kind, metric in CAPACITY.items():
        _capacity(client, kind, f'{metric}{{resource="{RESOURCE}",node={promql_str(node)}}}', w0, now, step)
    _q(client, "/api/v1/rules", None, "alert rules (audit)", "rules")
    alerts_collect(client, _q, node_selectors(NODE_LABELS, node, used), w0, now, step, info)


def _dcgm(client: PromClient, node: str, w0: int, now: int, step: int) -> tuple[list[str], bool]:
    """Query the node's DCGM series; returns the label matchers that found them and whether
    ``DCGM_FI_DEV_XID_ERRORS`` is among them."""
    pods = _q(client, "/api/v1/series", {"match[]": [f'kube_pod_info{{node={promql_str(node)},pod=~".*dcgm.*"}}'],
                                         "start": w0, "end": now}, "dcgm-exporter pods on the node", "dcgm-pods") or []
    matchers = [f"{lab}={promql_str(node)}" for lab in NODE_LABELS]
    names = sorted({p["pod"] for p in pods if p.get("pod")})
    ips = sorted({p["pod_ip"] for p in pods if p.get("pod_ip")})
    if names:  # old dcgm-exporter put its own pod name in Hostname
        matchers += [f"{lab}=~`{'|'.join(map(re.escape, names))}`" for lab in ("Hostname", "hostname")]
    if ips:
        matchers.append(f"instance=~`({'|'.join(map(re.escape, ips))}):[0-9]+`")
    series = _q(client, "/api/v1/series", {"match[]": [f'{{__name__=~"DCGM_FI_.*",{m}}}' for m in matchers],
                                           "start": w0, "end": now}, "the node's DCGM series", "dcgm-series") or []
    used = [m for m in matchers if any(selector_matches(m, s) for s in series)]
    metrics = sorted({s["__name__"] for s in series})[:MAX_DCGM_METRICS]
    root = client.writer.dir
    for i in range(0, len(metrics), DCGM_BATCH):
        batch = metrics[i:i + DCGM_BATCH]
        # coarse: one subquery step per `step` s; the last sample seen lies within step + lookback of the real one
        _q(client, "/api/v1/query", {"query": stats_expr(batch, used, now - w0, step), "time": now},
           f"first/last DCGM sample per {step} s: {', '.join(batch)}", "dcgm-coarse", {"metrics": batch})
        if step <= STEP:
            continue
        coarse = last_samples(root, [client.entries[-1]])
        ended = sorted(t for t, _ in coarse.values() if t < now - 360)  # the still-reporting ones too
        groups: list[list[float]] = []
        for t in ended:
            (groups[-1].append(t) if groups and t - groups[-1][-1] <= 2 * step else groups.append([t]))
        for g in groups[:4]:  # refine: a 60 s subquery over the span where the real last sample lies
            te = int(min(now, g[-1] + step + 360))
            _q(client, "/api/v1/query", {"query": stats_expr(batch, used, int(te - g[0]) + 300, STEP, ("last",)),
                                         "time": te}, f"last DCGM sample, exact: {', '.join(batch)}",
               "dcgm-last-seen", {"metrics": batch})
    by_target: dict[tuple, float] = {}
    for k, (t, _) in last_samples(root, client.entries).items():
        lab = dict(k)
        tk = (lab.get("job", ""), lab.get("instance", ""))
        by_target[tk] = max(by_target.get(tk, 0.0), t)
    for (job, inst), last in sorted(by_target.items())[:MAX_TARGETS]:
        if last >= now - 300:
            continue  # still reporting
        te = int(min(now, last + UP_AFTER))
        _q(client, "/api/v1/query", {"query": f"up{{job={promql_str(job)},instance={promql_str(inst)}}}[{int(te - last) + 60}s]",
                                     "time": te}, f"up of {job} {inst} after its last DCGM sample", "up-after",
           {"job": job, "instance": inst, "last_seen": last})
    return used, any(s.get("__name__") == XID_METRIC for s in series)


def _capacity(client: PromClient, kind: str, sel: str, w0: int, now: int, step: int) -> None:
    for c, start, end in range_chunks(w0, now, step, CHUNK_POINTS):
        for agg in ("max", "min"):
            _q(client, "/api/v1/query_range", {"query": f"{agg} by (node, resource) ({agg}_over_time({sel}[{step}s]))",
                                               "start": start, "end": end, "step": step},
               f"{kind}: coarse {agg} per {step} s", "capacity-coarse", {"series": kind, "agg": agg, "chunk": c})
    points = coarse_points(_coarse_answers(client.writer.dir, client.entries, kind))
    for a, b in suspicious_spans(points, step, now)[:MAX_REFINE]:
        _q(client, "/api/v1/query", {"query": f"{sel}[{b - a}s]", "time": b}, f"{kind}: raw samples around a change",
           "capacity-refine", {"series": kind, "start": a, "end": b})


def _coarse_answers(root, entries, kind) -> dict:
    out = {"max": [], "min": []}
    for e in entries:
        if e.get("role") == "capacity-coarse" and e["args"].get("series") == kind and answered(e):
            out[e["args"]["agg"]].extend(stored_result(root, e))
    return out


# -- reading the bundle back ---------------------------------------------------------------------
def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """Read ``metrics/`` back into events, the Prometheus coverage, and facts (never the live server).

    Events: ``metrics.dcgm-last-seen`` (one per GPU whose DCGM metrics stopped before collection; attrs
    ``gpu``, ``uuid``, ``hostname``, ``metric``, ``job``, ``instance``), ``metrics.capacity-change``
    (attrs ``resource``, ``series`` = capacity|allocatable, ``old``, ``new``, ``last_old_at``) and
    ``metrics.xid`` (each change of a GPU's ``DCGM_FI_DEV_XID_ERRORS`` to a new non-zero value, at the first
    sample with it: :func:`collectors.metrics.xid.read`) and ``metrics.alert`` (each episode of an alert Prometheus
    recorded for the node: :func:`collectors.metrics.alerts.read`, whose record is the fact ``alerts_recorded``).
    Coverage: ``prometheus`` from the oldest sample held to the query time. Facts: ``metrics`` =
    ``{"source", "errors", "dcgm_exporter_now", "retention", "dcgm_last_seen", "capacity_history"
    ({kind: {"first_sample", "last_sample"}}), "capacity_changes", "resource", "dcgm_targets",
    "alert_rules"}`` (the last five only when Prometheus answered). ``dcgm_targets``: per exporter
    target whose DCGM series stopped, ``{"job", "instance", "last_seen": ISO, "up_after": [[ISO, value]]
    (its ``up`` samples after that), "gpus": [{"uuid", "gpu", "hostname"}], "evidence"}``;
    ``alert_rules``: ``{"answered": bool, "data": the /api/v1/rules answer's data or None}``;
    ``xid_history``: per GPU series ``{"gpu", "uuid", "hostname", "job", "instance", "values": [{"at", "xid",
    "resolution", "first_held"}]}`` or None when not asked (``xid_history_basis`` says what it is or why). These
    are facts only: the findings floor opens incidents from them and audits the rules. Returns an
    empty Reading when the bundle has no ``metrics/index.json``.
    """
    r = Reading()
    idx = bundle.json("metrics/index.json", r.problems)
    if idx is None:
        now = None if bundle.find("metrics/index.json") else scrape_read(bundle)
        if now:
            r.facts = {"metrics": {"dcgm_exporter_now": now}}
        return r
    root, entries, now = bundle.root, idx.get("calls", []), idx.get("now")
    m = {"source": idx.get("source"), "errors": [{"request": e["request"], "purpose": e.get("purpose"),
                                                   "error": e["error"], "artifact": e.get("file")}
                                                  for e in entries if e.get("error")]}
    r.facts = {"metrics": m}
    m["dcgm_exporter_now"] = scrape_read(bundle)
    if now is None:
        r.coverage.append(Coverage("prometheus", None, None, f"Prometheus did not answer: {idx.get('aborted')}"))
        return r
    m["retention"] = ret = _retention(root, entries, idx)
    gpus, targets = _dcgm_read(root, entries, now)
    m["dcgm_last_seen"] = gpus
    _read_capacity(m, ret, root, entries, idx)
    rules = next((e for e in entries if e["role"] == "rules" and answered(e)), None)
    m["alert_rules"] = {"answered": rules is not None, "data": stored_data(root, rules) if rules else None}
    m["resource"] = RESOURCE
    m["dcgm_targets"] = [{"job": job, "instance": inst, "last_seen": _iso(t["last_seen"]),
                          "up_after": [[_iso(at), v] for at, v in t["after"]],
                          "gpus": [{"uuid": u, "gpu": g, "hostname": h} for u, g, h in t["gpus"]],
                          "evidence": t["evidence"]} for (job, inst), t in sorted(targets.items())]
    m["xid_history"], xid_events = xid_read(root, entries, idx)
    m["xid_history_basis"] = XID_BASIS if m["xid_history"] is not None else (
        "not asked: the node's DCGM series hold no DCGM_FI_DEV_XID_ERRORS" if "xid" in idx else
        "not asked: a bundle from before the Xid query")
    m["alerts_recorded"], alert_events = alerts_read(root, entries, idx)
    r.events.extend(xid_events + alert_events)
    oldest = ret["oldest_sample"]
    r.coverage.append(Coverage("prometheus", _dt(oldest), _dt(now),
                               f"Prometheus retention {ret['storage_retention'] or 'unknown'}: holds data from "
                               f"{local_iso(_dt(oldest), node.tz) if oldest else 'an unknown time'} only"))
    r.events.extend(_events(gpus, m["capacity_changes"]))
    return r


def _read_capacity(m: dict, ret: dict, root, entries: list, idx: dict) -> None:
    """The capacity and allocatable GPU series: their first and last samples and changes into ``m``, and
    their first samples into the retention ``ret`` (the oldest sample when the server's own was not read)."""
    hist = {kind: _history(root, entries, kind, idx) for kind in CAPACITY}
    m["capacity_history"] = {k: {x: h[x] for x in ("first_sample", "last_sample")} for k, h in hist.items()}
    m["capacity_changes"] = [c for h in hist.values() for c in h["changes"]]
    ret["oldest_by_series"].update({CAPACITY[k]: h["first_sample"]["at"] for k, h in hist.items() if h["first_sample"]})
    if not ret["oldest_sample"] and ret["oldest_by_series"]:
        ret["oldest_sample"] = min(ret["oldest_by_series"].values())
        ret["oldest_sample_basis"] = "first sample of the queried series (the server's /metrics was not read)"


def _events(gpus: list[dict], changes: list[dict]) -> list[Event]:
    """``metrics.dcgm-last-seen`` for each GPU whose DCGM series stopped, ``metrics.capacity-change`` for each
    change of the node's GPU capacity or allocatable."""
    out = [Event(_dt(g["last_seen"]), "prometheus", "metrics.dcgm-last-seen",
                 f"last DCGM sample of GPU {g['gpu']} ({g['uuid']}) on {g['hostname']}: {g['metric']}",
                 {k: g[k] for k in ("gpu", "uuid", "hostname", "metric", "job", "instance")},
                 g["evidence"][0] if g["evidence"] else {}) for g in gpus if not g["still_reporting"]]
    return out + [Event(_dt(c["at"]), "prometheus", "metrics.capacity-change",
                        f"{c['resource']} {c['series']} {_n(c['old'])} -> {_n(c['new'])}",
                        {k: c[k] for k in ("resource", "series", "old", "new", "last_old_at")}, c["evidence"])
                  for c in changes]


def _dt(t) -> datetime | None:
    if t is None:
        return None
    if isinstance(t, str):
        return datetime.fromisoformat(t.replace("Z", "+00:00"))
    return datetime.fromtimestamp(float(t), timezone.utc)


def _iso(t) -> str | None:
    return iso_z(_dt(t))


def _n(v):
    return "none" if v is None else (int(v) if float(v).is_integer() else v)


def _dedup(items: list) -> list:
    return [x for i, x in enumerate(items) if x not in items[:i]]


def _retention(root, entries, idx) -> dict:
    by_role = {e["role"]: e for e in entries if answered(e)}
    rt = stored_data(root, by_role["runtimeinfo"]) if "runtimeinfo" in by_role else None
    fl = stored_data(root, by_role["flags"]) if "flags" in by_role else None
    lowest = None
    if "self-metrics" in by_role:
        try:
            lowest = lowest_timestamp((root / by_role["self-metrics"]["file"]).read_text(errors="replace"))
        except OSError:
            pass
    out = {"storage_retention": (rt or {}).get("storageRetention"), "now": _iso(idx["now"]),
           "retention_time_flag": (fl or {}).get("storage.tsdb.retention.time"),
           "retention_size_flag": (fl or {}).get("storage.tsdb.retention.size"),
           "lookback_delta": (fl or {}).get("query.lookback-delta"),
           "oldest_sample": _iso(lowest), "oldest_sample_basis": "prometheus_tsdb_lowest_timestamp_seconds" if lowest
           else None, "oldest_by_series": {},
           "oldest_by_series_basis": f"DCGM series: first sample seen by a subquery every {idx.get('coarse_step')} s "
                                     "(at most that much after the real one); capacity series: raw samples"}
    for e in entries:
        if e["role"] == "dcgm-coarse" and answered(e):
            for res in stored_result(root, e):
                if res["metric"].get("stat") == "first":
                    name, t = res["metric"].get("metric"), float(res["value"][1])
                    prev = out["oldest_by_series"].get(name)
                    out["oldest_by_series"][name] = min(prev, _iso(t)) if prev else _iso(t)
    return out


def _dcgm_read(root, entries, now) -> tuple[list[dict], dict]:
    """Per GPU: first/last sample and what ``up`` did after it; per exporter target: its last DCGM
    sample, the ``up`` samples after it, and the GPUs whose series stopped then."""
    gpus: dict[tuple, dict] = {}
    firsts: dict[tuple, float] = {}
    for e in entries:
        if e["role"] == "dcgm-coarse" and answered(e):
            for res in stored_result(root, e):
                if res["metric"].get("stat") == "first":
                    k = tuple(sorted((a, b) for a, b in res["metric"].items() if a != "stat"))
                    firsts[k] = min(firsts.get(k, float("inf")), float(res["value"][1]))
    series = last_samples(root, entries)
    for k, (t, entry) in series.items():
        lab = dict(k)
        key = _gpu(lab)
        g = gpus.setdefault(key, {"uuid": key[0], "gpu": key[1], "hostname": key[2], "model": lab.get("modelName"),
                                  "pod": lab.get("exported_pod") or lab.get("pod"), "last_seen": None,
                                  "first_seen": None, "metric": None, "job": None, "instance": None, "evidence": []})
        if g["last_seen"] is None or t > g["last_seen"]:
            g.update(last_seen=t, metric=lab.get("metric"), job=lab.get("job"), instance=lab.get("instance"),
                     evidence=[evidence(entry)])
        if k in firsts and (g["first_seen"] is None or firsts[k] < g["first_seen"]):
            g["first_seen"] = firsts[k]
    targets = {}
    for e in entries:
        if e["role"] == "up-after" and answered(e):
            job, inst, last = e["args"]["job"], e["args"]["instance"], e["args"]["last_seen"]
            samples = sorted((float(t), float(v)) for res in stored_result(root, e) for t, v in res.get("values", []))
            gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
            ended = [(dict(k), en) for k, (t, en) in series.items()
                     if (dict(k).get("job"), dict(k).get("instance")) == (job, inst) and t >= last - 300]
            targets[(job, inst)] = {
                "last_seen": last, "after": [x for x in samples if x[0] > last], "up_evidence": evidence(e),
                "gpus": sorted({_gpu(lab) for lab, _ in ended}, key=str),
                "evidence": _dedup([evidence(en) for _, en in ended] + [evidence(e)]),
                "scrape_interval_s": statistics.median(gaps) if gaps else None}
    out = []
    for g in sorted(gpus.values(), key=lambda g: (g["hostname"] or "", g["gpu"] or "", g["uuid"] or "")):
        t = targets.get((g["job"], g["instance"]), {})
        after = t.get("after")
        g["still_reporting"] = g["last_seen"] is not None and g["last_seen"] >= now - 300
        g["up_after_last_seen"] = None if after is None else (
            "no samples" if not after else ("1" if any(v == 1 for _, v in after) else "0"))
        g["scrape_interval_s"] = t.get("scrape_interval_s")
        if t:
            g["evidence"].append(t["up_evidence"])
        g["last_seen"], g["first_seen"] = _iso(g["last_seen"]), _iso(g["first_seen"])
        out.append(g)
    return out, targets


def _history(root, entries, kind: str, idx: dict) -> dict:
    """Change points of one capacity series from the stored answers (see promclient.change_points)."""
    step, now = idx.get("coarse_step") or STEP, idx["now"]
    points = coarse_points(_coarse_answers(root, entries, kind))
    refined = {(e["args"]["start"], e["args"]["end"]): e for e in entries
               if e["role"] == "capacity-refine" and e["args"].get("series") == kind and answered(e)}

    def raw(a, b):
        e = refined.get((a, b))
        return None if e is None else (
            sorted((float(t), float(v)) for res in stored_result(root, e) for t, v in res.get("values", [])), evidence(e))

    changes, first, last = change_points(points, suspicious_spans(points, step, now), step, raw)
    for c in changes:
        c.update(at=_iso(c["at"]), last_old_at=_iso(c["last_old_at"]), resource=RESOURCE, series=kind)
    if first:
        first["at"] = _iso(first["at"])
    ended = bool(points) and points[-1][0] < now - step
    return {"first_sample": first, "last_sample": {"at": _iso(last[0]), "value": last[1]} if last and ended else None,
            "changes": changes}
