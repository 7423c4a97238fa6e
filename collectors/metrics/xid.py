"""DCGM's Xid field history from Prometheus: ``DCGM_FI_DEV_XID_ERRORS`` per GPU of the node, over the whole
window Prometheus holds, and the time of each change to a new value.

dcgm-exporter exports the field by default (NVIDIA/dcgm-exporter ``etc/default-counters.csv``:
``DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.``): the gauge holds the last Xid
code the GPU reported until the next one (0: none since DCGM started watching). A change to a new
non-zero value is therefore the first sample after a new Xid, within one scrape interval of it.

Queries (the capacity history's method, :mod:`collectors.metrics.promclient`): coarse ``min`` and ``max``
``_over_time`` range queries per step, per series (no aggregation: one series per GPU), in chunks
(:func:`collectors.metrics.changes.range_chunks`: Prometheus refuses more than 11,000 points); then the raw
samples of each span where a series' value is not one constant (its first step included), at most
:data:`MAX_REFINE` queries, so that a change's time is a real sample's; a span left unrefined keeps the coarse
resolution (the change happened within that step), and says so.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone

from forensics.events import Event
from forensics.timeutil import iso_z

from .changes import change_points, coarse_points, merge_spans, range_chunks, suspicious_spans
from .promclient import answered, evidence, stored_result

METRIC = "DCGM_FI_DEV_XID_ERRORS"
MAX_REFINE = 24       #: raw-sample queries for all Xid series together
BASIS = ("DCGM_FI_DEV_XID_ERRORS, the last Xid each GPU reported (dcgm-exporter etc/default-counters.csv: "
         "\"Value of the last XID error encountered\")")


def gpu_labels(lab: dict) -> tuple:
    """``(uuid, gpu, hostname)`` from a DCGM series' labels, whichever spelling it uses."""
    def get(*names):
        return next((lab[n] for n in names if lab.get(n)), None)
    return (get("UUID", "uuid", "exported_UUID"), get("gpu", "exported_gpu"),
            get("Hostname", "hostname", "exported_Hostname", "exported_hostname", "node"))


def _key(metric: dict) -> tuple:
    return tuple(sorted((a, b) for a, b in metric.items() if a != "__name__"))


def _coarse(root, entries) -> dict[tuple, dict]:
    """``{series key: {"max": [result], "min": [result]}}`` from the stored coarse answers."""
    out: dict[tuple, dict] = {}
    for e in entries:
        if e.get("role") == "xid-coarse" and answered(e):
            for res in stored_result(root, e):
                out.setdefault(_key(res.get("metric") or {}), {"max": [], "min": []})[e["args"]["agg"]].append(res)
    return out


def _spans(coarse: dict, step: int, now: float) -> list[tuple[int, int]]:
    """The spans whose raw samples are asked for: every series' suspicious spans, merged (the same list
    when collecting and when reading, so that each raw answer is found again by its span)."""
    return merge_spans(s for answers in coarse.values() for s in suspicious_spans(coarse_points(answers), step, now))


def collect(client, q, used: list[str], exported: bool, w0: int, now: int, step: int, info: dict) -> None:
    """Ask ``client`` (a :class:`collectors.metrics.promclient.PromClient`) for the Xid history of the node's
    DCGM series (``used``: the label matchers that found them; ``exported``: whether :data:`METRIC` is among
    them) through ``q(client, path, params, purpose, role, args)`` (the collector's one-call wrapper, which
    stores each answer). Records ``info["xid"] = {"exported": bool, "matchers": [...]}``; asks nothing
    when the node exports no :data:`METRIC` series."""
    info["xid"] = {"exported": exported and bool(used), "matchers": used}
    if not info["xid"]["exported"]:
        return
    for c, start, end in range_chunks(w0, now, step):
        for agg in ("max", "min"):
            expr = " or ".join(f"{agg}_over_time({METRIC}{{{m}}}[{step}s])" for m in used)
            q(client, "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step},
              f"Xid: coarse {agg} per {step} s", "xid-coarse", {"agg": agg, "chunk": c})
    asked = 0
    for a, b in _spans(_coarse(client.writer.dir, client.entries), step, now):
        for m in used:
            if asked >= MAX_REFINE:
                return
            asked += 1
            q(client, "/api/v1/query", {"query": f"{METRIC}{{{m}}}[{b - a}s]", "time": b},
              "Xid: raw samples around a change", "xid-refine", {"start": a, "end": b, "matcher": m})


def _iso(t: float) -> str:
    return iso_z(datetime.fromtimestamp(float(t), timezone.utc))


def read(root, entries: list, idx: dict) -> tuple[list | None, list[Event]]:
    """``(xid_history, events)`` from the stored answers. ``xid_history`` is None when the collection did not
    ask (no :data:`METRIC` series on the node, or a bundle from before this query), else one record per
    GPU series: ``{"gpu", "uuid", "hostname", "job", "instance", "values": [{"at": ISO UTC, "xid": int,
    "resolution": "sample" | "coarse", "first_held": bool}]}``, ``values`` in time order: the first sample
    held (``first_held``: the GPU already showed that value when Prometheus's data begins) and every
    change. Events: ``metrics.xid`` at each change to a new non-zero value (attrs ``gpu, uuid, xid,
    hostname, job, instance``), at the first sample with it."""
    if not (idx.get("xid") or {}).get("exported"):
        return None, []
    step, now = idx.get("coarse_step") or 60, idx["now"]
    coarse = _coarse(root, entries)
    spans = _spans(coarse, step, now)
    refined: dict[tuple, list] = {}  # span -> its raw answers (one per matcher)
    for e in entries:
        if e.get("role") == "xid-refine" and answered(e):
            refined.setdefault((e["args"]["start"], e["args"]["end"]), []).append(e)
    history, events = [], []
    for key, answers in sorted(coarse.items()):
        lab = dict(key)

        def raw(a, b, key=key):
            got = [(e, [r for r in stored_result(root, e) if _key(r.get("metric") or {}) == key])
                   for e in refined.get((a, b), [])]
            got = [(e, rs) for e, rs in got if rs]  # the answer that holds this series (else: the coarse points)
            if not got:
                return None
            e, results = got[0]
            return sorted({(float(t), float(v)) for r in results for t, v in r.get("values", [])}), evidence(e)
        changes, first, _ = change_points(coarse_points(answers), spans, step, raw)
        uuid, gpu, host = gpu_labels(lab)
        rec = {"gpu": gpu, "uuid": uuid, "hostname": host, "job": lab.get("job"), "instance": lab.get("instance"),
               "values": []}
        if first and not math.isnan(first["value"]):
            rec["values"].append({"at": _iso(first["at"]), "xid": int(first["value"]),
                                  "resolution": first["resolution"], "first_held": True})
        for c in changes:
            if math.isnan(c["new"]):
                continue
            xid = int(c["new"])
            rec["values"].append({"at": _iso(c["at"]), "xid": xid, "resolution": c["resolution"],
                                  "first_held": False})
            if xid:
                ev = c["evidence"] or next((evidence(e) for e in entries if e.get("role") == "xid-coarse"), {})
                events.append(Event(datetime.fromtimestamp(c["at"], timezone.utc), "prometheus", "metrics.xid",
                                    f"DCGM Xid {xid} on GPU {gpu} ({uuid}) of {host}" + (
                                        "" if c["resolution"] == "sample" else f" (within the {step} s step)"),
                                    {"gpu": gpu, "uuid": uuid, "xid": xid, "hostname": host, "job": rec["job"],
                                     "instance": rec["instance"]}, ev))
        history.append(rec)
    return history, events
