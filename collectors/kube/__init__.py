"""Cluster-side context (opt-in ``--kube``): what the Kubernetes API server knows about this node.

In a pod, with its ServiceAccount over the standard library alone (the node image and the
single-file collector have no ``kubernetes`` package); out of one, with the official Python client
(``kubernetes``) from a kubeconfig (``--kubeconfig``, else ``$KUBECONFIG`` / ``~/.kube/config``):
:mod:`collectors.kube.transport`. Both give the same bundle files for the same answers. ``GET`` only
(the RBAC in deploy/ grants ``get``/``list`` on nodes, pods, daemonsets and events, nothing else):

- ``GET /api/v1/nodes/<node>``: capacity and allocatable (``nvidia.com/gpu``), conditions, labels;
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``: the pods on the node, of which those
  requesting ``nvidia.com/*`` are kept with their status and restart counts;
- ``GET /apis/apps/v1/namespaces/<ns>/daemonsets/<name>`` for the owner of each device plugin pod on
  the node (env, args and images of the NVIDIA device plugin);
- ``GET /api/v1/events?fieldSelector=involvedObject.kind=Node,involvedObject.name=<node>`` and
  ``GET /api/v1/namespaces/<ns>/events?fieldSelector=involvedObject.kind=Pod,involvedObject.name=<pod>``
  for the node, each GPU pod and the device plugin pod; :func:`read` keeps the last hour before collection.

Lists are asked with ``resourceVersion=0``, so the API server answers from its watch cache instead of
etcd. Requests are spaced by at least ``1/QPS`` seconds; each has a connect and read timeout, and
an answer over :data:`MAX_ANSWER` bytes is not stored. The bearer token is in no file and no message.

Bundle files (the API's JSON answers, as returned, except that ``metadata.managedFields`` is dropped
and, as for container specs (forensics/redact.py), env values outside the allowlist,
credential-looking flags and annotations, and ``kubectl.kubernetes.io/last-applied-configuration``
are replaced by ``<redacted hmac:...>``)::

    kube/node.json   kube/pods.json   kube/daemonsets/<ns>/<name>.json
    kube/events/node.json   kube/events/<ns>/<pod>.json
    kube/requests.json   one record per request: name, path, query, HTTP status, seconds, error

Formats: Kubernetes API reference v1.29-v1.31 (Node, Pod, DaemonSet apps/v1, Event core/v1).
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta

from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle
from forensics.events import Event, NodeFacts
from forensics.excerpt import excerpt
from forensics.neterror import network_error
from forensics.source import CollectContext, Option, Reading
from forensics.timeutil import iso_z, parse_iso

from forensics import redact as rd


QPS = 5.0                         #: requests per second at most, from one collector
TIMEOUT = (5.0, 20.0)             #: (connect, read) seconds per request
MAX_ANSWER = 64 << 20             #: bytes of one answer at most (a PodList of 250 pods is a few MiB)
EVENTS_SINCE = timedelta(hours=1)
GPU_PREFIX = "nvidia.com/"        #: extended resources counted as GPUs (nvidia.com/gpu, nvidia.com/mig-*)
PLUGIN_TOKENS = ("nvidia-device-plugin", "k8s-device-plugin", "hami-device-plugin")
MAX_POD_EVENTS = 16               #: pods whose events are asked for (GPU pods first, then the plugin)


def _kubeconfig(path: str, values) -> str:
    if not values.get("kube"):
        raise ValueError("--kubeconfig is only used with --kube")
    if not os.path.isfile(path):
        raise ValueError(f"--kubeconfig {path}: no such file")
    return path


NAME = "kube"
KUBE = Option("--kube", "kube", "also read the node, its GPU pods, the device plugin DaemonSet and the last hour's "
              "events from the Kubernetes API (read-only GETs; in-cluster or --kubeconfig)", action="store_true",
              default=False, record=True)
KUBECONFIG = Option("--kubeconfig", "kubeconfig", "kubeconfig for --kube (default: the pod's ServiceAccount, then "
                    "$KUBECONFIG or ~/.kube/config)", metavar="FILE", check=_kubeconfig, record=True)
OPTIONS = [KUBE, KUBECONFIG]


# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Read the node, its GPU pods, the device plugin DaemonSet and recent events into ``kube/``.

    Does nothing unless :data:`KUBE` (``--kube``). :data:`KUBECONFIG` names a kubeconfig; without
    one, in a pod, its ServiceAccount (standard library only), else the client's default kubeconfig
    (:func:`collectors.kube.transport.connect`). The node name is ``--node``
    (``ctx.node.hostname_override``), else ``$NODE_NAME`` (the Downward API in deploy/), else the host
    name. Answers are redacted unless ``ctx.redact`` is false (``--no-redact``); once ``ctx.expired()``
    (``--time-budget``) the remaining requests are recorded as truncated. No usable configuration
    (no pod, no client for a kubeconfig, a kubeconfig that cannot be loaded) is one ``kube:config``
    ``error`` artifact saying what is missing; an answer that is not 2xx is an ``error`` artifact; this
    never raises for an unreachable or refusing API server.
    """
    if not ctx.value(KUBE):
        return
    node = ctx.node.hostname_override or os.environ.get("NODE_NAME") or ctx.node.hostname
    if not node:
        ctx.writer.record(Artifact(None, "kube:node", Status.ERROR, "kube-api",
                                   message="the Kubernetes node name is unknown (no --node, $NODE_NAME or host name)"))
        return
    import collectors.kube.transport as kt  # its HTTP and TLS libraries, only where the API server is read
    try:
        api = kt.connect(ctx.value(KUBECONFIG))
    except kt.ConfigError as e:
        ctx.writer.record(Artifact(None, "kube:config", Status.ERROR, "kube-api", message=str(e)))
        return
    except Exception as e:  # noqa: BLE001 - ConfigException, OSError, ssl and YAML errors: all recorded
        ctx.writer.record(Artifact(None, "kube:config", Status.ERROR, "kube-api",
                                   message=f"no Kubernetes configuration: {type(e).__name__}: {e}"))
        return
    s = _Session(ctx, api)
    try:
        _acquire(s, node)
    finally:
        ctx.writer.write_json("kube/requests.json", s.log, source=s.host, method="kube-api",
                              notes=("read-only GETs; lists with resourceVersion=0 (API server cache)",))
        api.close()


def _acquire(s: "_Session", node: str) -> None:
    s.get("kube/node.json", f"/api/v1/nodes/{node}")
    pods = s.get("kube/pods.json", "/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}", "resourceVersion": "0"})
    s.get("kube/events/node.json", "/api/v1/events",
          {"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node}", "resourceVersion": "0"})
    items = (pods or {}).get("items") or []
    gpu = [p for p in items if _pod_gpus(p)]
    plugin = [p for p in items if _is_plugin(p)]
    for p in (gpu + plugin)[:MAX_POD_EVENTS]:
        ns, name = p["metadata"].get("namespace"), p["metadata"].get("name")
        s.get(f"kube/events/{ns}/{name}.json", f"/api/v1/namespaces/{ns}/events",
              {"fieldSelector": f"involvedObject.kind=Pod,involvedObject.name={name}", "resourceVersion": "0"})
    owners = {(p["metadata"].get("namespace"), o.get("name")) for p in plugin
              for o in p["metadata"].get("ownerReferences") or [] if o.get("kind") == "DaemonSet"}
    for ns, name in sorted(owners):
        s.get(f"kube/daemonsets/{ns}/{name}.json", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")


class _Session:
    """GET only, spaced by 1/QPS, every answer stored redacted and every request logged."""

    def __init__(self, ctx, api):
        self.ctx, self.api, self.log, self.last = ctx, api, [], 0.0
        self.host = api.host

    def _error(self, source: str, rec: dict, message: str) -> None:
        rec["error"] = rd.scrub(message, self.api.secrets())
        self.ctx.writer.record(Artifact(None, source, Status.ERROR, "kube-api", message=rec["error"]))

    def get(self, rel: str, path: str, query: dict | None = None) -> dict | None:
        """The parsed answer (after redaction) or ``None``; stored at ``rel``, errors recorded."""
        source_q = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
        expired = getattr(self.ctx, "expired", None)
        if expired and expired():
            self.ctx.writer.record(Artifact(None, f"GET {path}{source_q}", Status.TRUNCATED, "kube-api",
                                            notes=("truncated: not asked, the time budget was spent",)))
            return None
        wait = self.last + 1 / QPS - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self.last = time.monotonic()
        rec = {"name": rel, "path": path, "query": query or {}, "status": None, "seconds": None, "error": None}
        self.log.append(rec)
        source = f"GET {path}{source_q}"
        started = time.monotonic()
        try:
            status, reason, data = self.api.get(path, query or {}, TIMEOUT, MAX_ANSWER)
            rec["status"] = status
        except Exception as e:  # noqa: BLE001 - OSError, ssl, http.client, urllib3, ApiException: not reached
            self._error(source, rec, network_error(e, self.api.host, TIMEOUT[1]))
            return None
        finally:
            rec["seconds"] = round(time.monotonic() - started, 3)
        if not 200 <= status < 300:
            self._error(source, rec, f"HTTP {status} {reason or ''}".strip() + f": {data[:300].decode('utf-8', 'replace')}")
            return None
        if len(data) > MAX_ANSWER:
            self._error(source, rec, f"answer over {MAX_ANSWER} bytes: not stored")
            return None
        keep = not getattr(self.ctx, "redact", True)
        try:
            obj = json.loads(data) if keep else redact(json.loads(data))
        except ValueError as e:
            self._error(source, rec, f"answer is not JSON: {e}")
            return None
        self.ctx.writer.write_json(rel, obj, source=source, method="kube-api",
                                   notes=("API answer as received (--no-redact)",) if keep else
                                   ("API answer; managedFields dropped, env values, credential flags "
                                    "and annotations, last-applied-configuration redacted",))
        return obj


def redact(obj):
    """A redacted copy of an API answer, by :mod:`forensics.redact`'s rules placed on the Kubernetes
    shapes: ``env`` (``[{name, value}]``) values not :func:`~forensics.redact.env_kept` hashed, ``args``
    and ``command`` lists through :func:`~forensics.redact.redact_args`, ``annotations`` values
    :func:`~forensics.redact.api_annotation_hashed` hashed, every other string through
    :func:`~forensics.redact.redact_text` (without ``-p``); ``managedFields`` (server-side apply
    bookkeeping, no evidence) is dropped. Never raises."""
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return rd.redact_text(obj, p_flag=False)
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k == "managedFields":
            continue
        if k == "env" and isinstance(v, list):
            out[k] = [_redact_env(e) for e in v]
        elif k in ("args", "command") and isinstance(v, list):
            out[k] = rd.redact_args(v)
        elif k == "annotations" and isinstance(v, dict):
            out[k] = {a: rd.redacted(av) if rd.api_annotation_hashed(a) and isinstance(av, str) else redact(av)
                      for a, av in v.items()}
        else:
            out[k] = redact(v)
    return out


def _redact_env(e):
    if not isinstance(e, dict) or not isinstance(e.get("value"), str) or rd.env_kept(str(e.get("name"))):
        return redact(e)
    return {**redact(e), "value": rd.redacted(e["value"])}


# -- parsing (pure) --------------------------------------------------------------------------------
def _quantity(v) -> int | None:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


def _pod_gpus(pod: dict) -> int:
    """GPUs a pod asks for: the larger of limits and requests per container, summed over containers
    (extended resources must have limits == requests; init containers are not counted)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for key in set(res.get("limits") or {}) | set(res.get("requests") or {}):
            if key.startswith(GPU_PREFIX):
                total += max(_quantity((res.get("limits") or {}).get(key)) or 0,
                             _quantity((res.get("requests") or {}).get(key)) or 0)
    return total


def _is_plugin(pod: dict) -> bool:
    text = " ".join([pod.get("metadata", {}).get("name") or ""] + [
        f"{c.get('name')} {c.get('image')}" for c in (pod.get("spec") or {}).get("containers") or []]).lower()
    return any(t in text for t in PLUGIN_TOKENS) and "gpu-feature-discovery" not in text


def parse_node(obj: dict) -> dict:
    """A Node object (``GET /api/v1/nodes/<name>``) as ``{"name", "labels", "taints", "unschedulable",
    "capacity", "allocatable", "gpu": {"capacity", "allocatable"} (ints or None), "conditions": [{"type",
    "status", "reason", "message", "last_transition"}], "kubelet_version", "container_runtime_version",
    "kernel", "os_image"}``."""
    md, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    info = st.get("nodeInfo") or {}
    return {"name": md.get("name"), "labels": md.get("labels") or {}, "taints": spec.get("taints") or [],
            "unschedulable": bool(spec.get("unschedulable")), "capacity": st.get("capacity") or {},
            "allocatable": st.get("allocatable") or {},
            "gpu": {k: _quantity((st.get(k) or {}).get("nvidia.com/gpu")) for k in ("capacity", "allocatable")},
            "conditions": [{"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason"),
                            "message": c.get("message"), "last_transition": c.get("lastTransitionTime")}
                           for c in st.get("conditions") or []],
            "kubelet_version": info.get("kubeletVersion"), "container_runtime_version": info.get("containerRuntimeVersion"),
            "kernel": info.get("kernelVersion"), "os_image": info.get("osImage")}


def _terminated(t) -> dict | None:
    """A ContainerStateTerminated (core/v1) as ``{"reason", "exit_code", "finished_at"}``; None when absent.
    ``reason`` is the runtime's (``OOMKilled`` with exit code 137 when the kernel killed it for its memory
    limit, ``Error``, ``Completed``)."""
    if not isinstance(t, dict):
        return None
    return {"reason": t.get("reason"), "exit_code": t.get("exitCode"), "finished_at": t.get("finishedAt")}


def parse_pods(obj: dict) -> list[dict]:
    """The pods of a PodList that request ``nvidia.com/*``: ``[{"namespace", "name", "uid", "phase",
    "gpus", "ready", "restarts", "owner", "containers": [{"name", "image", "gpus", "ready",
    "restart_count", "state", "terminated": the current ``state.terminated`` (a container that ended and was
    not restarted), "last_terminated": ``lastState.terminated`` (the run before a restart), each
    {"reason", "exit_code", "finished_at"} | None}]}]``."""
    out = []
    for p in obj.get("items") or []:
        gpus = _pod_gpus(p)
        if not gpus:
            continue
        md, st = p.get("metadata") or {}, p.get("status") or {}
        statuses = {c.get("name"): c for c in st.get("containerStatuses") or []}
        conts = []
        for c in (p.get("spec") or {}).get("containers") or []:
            s = statuses.get(c.get("name")) or {}
            conts.append({"name": c.get("name"), "image": c.get("image"), "gpus": _pod_gpus({"spec": {"containers": [c]}}),
                          "ready": s.get("ready"), "restart_count": s.get("restartCount", 0),
                          "state": next(iter(s.get("state") or {}), None),
                          "terminated": _terminated((s.get("state") or {}).get("terminated")),
                          "last_terminated": _terminated((s.get("lastState") or {}).get("terminated"))})
        ready = next((c.get("status") == "True" for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
        owner = next((f"{o.get('kind')}/{o.get('name')}" for o in md.get("ownerReferences") or []), None)
        out.append({"namespace": md.get("namespace"), "name": md.get("name"), "uid": md.get("uid"),
                    "phase": st.get("phase"), "gpus": gpus, "ready": ready, "owner": owner,
                    "restarts": sum(c["restart_count"] or 0 for c in conts), "containers": conts})
    return out


def parse_daemonset(obj: dict) -> dict:
    """A DaemonSet (apps/v1) as ``{"namespace", "name", "images", "containers": [{"name", "image",
    "env": {name: value, or "<from configMapKeyRef ...>"}, "args", "command"}], "desired", "ready",
    "updated", "available", "generation", "observed_generation"}``."""
    md, st = obj.get("metadata") or {}, obj.get("status") or {}
    pod_spec = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {})
    conts = []
    for c in (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or []):
        env = {}
        for e in c.get("env") or []:
            src = e.get("valueFrom")
            env[e.get("name")] = e.get("value") if src is None else f"<from {next(iter(src), '?')}>"
        conts.append({"name": c.get("name"), "image": c.get("image"), "env": env, "args": c.get("args") or [],
                      "command": c.get("command") or []})
    return {"namespace": md.get("namespace"), "name": md.get("name"),
            "images": sorted({c["image"] for c in conts if c["image"]}), "containers": conts,
            "desired": st.get("desiredNumberScheduled"), "ready": st.get("numberReady"),
            "updated": st.get("updatedNumberScheduled"), "available": st.get("numberAvailable"),
            "generation": md.get("generation"), "observed_generation": st.get("observedGeneration")}


def event_time(e: dict) -> datetime | None:
    """When an Event (core/v1) last happened: ``lastTimestamp``, else ``eventTime`` (events.k8s.io
    writers), else ``series.lastObservedTime``, else ``metadata.creationTimestamp``."""
    for v in (e.get("lastTimestamp"), e.get("eventTime"), (e.get("series") or {}).get("lastObservedTime"),
              (e.get("metadata") or {}).get("creationTimestamp")):
        if isinstance(v, str) and v:
            try:
                return parse_iso(v)
            except ValueError:
                continue
    return None


def parse_events(obj: dict, until: datetime | None = None, since: timedelta | None = EVENTS_SINCE) -> list[dict]:
    """The Events of an EventList inside ``[until - since, until]`` (all when ``until`` is ``None``),
    oldest first: ``[{"at", "type", "reason", "message", "count", "source", "object": {"kind",
    "namespace", "name"}}]``."""
    out = []
    for e in obj.get("items") or []:
        at = event_time(e)
        if at is None or (until and since and not (until - since <= at <= until)):
            continue
        io = e.get("involvedObject") or {}
        out.append({"at": iso_z(at), "type": e.get("type"), "reason": e.get("reason"), "message": e.get("message"),
                    "count": e.get("count") or (e.get("series") or {}).get("count") or 1,
                    "source": (e.get("source") or {}).get("component") or e.get("reportingComponent"),
                    "object": {"kind": io.get("kind"), "namespace": io.get("namespace"), "name": io.get("name")}})
    return sorted(out, key=lambda x: x["at"])


# -- read ------------------------------------------------------------------------------------------
def summary(bundle: Bundle, problems: list | None = None) -> dict:
    """What the stored answers say: ``{"node": parse_node | None, "gpu_pods": parse_pods, "device_plugin":
    {parse_daemonset of the first plugin DaemonSet} | None, "daemonsets": [...], "events": parse_events
    (last hour before collection, each with its "artifact"), "errors": [request records with an error]}``;
    ``{}`` when the bundle holds no ``kube/`` answers."""
    problems = problems if problems is not None else []
    arts = {a.path: a for a in bundle.find("kube/")}
    if not arts:
        return {}
    coll = bundle.manifest.get("collection") or {}
    until = parse_iso(coll["start"]) if coll.get("start") else None
    node = bundle.json("kube/node.json", problems) if "kube/node.json" in arts else None
    pods = bundle.json("kube/pods.json", problems) if "kube/pods.json" in arts else None
    dss = [parse_daemonset(d) for rel in sorted(arts) if rel.startswith("kube/daemonsets/")
           if (d := bundle.json(rel, problems))]
    events = [{**e, "artifact": rel} for rel in sorted(arts) if rel.startswith("kube/events/")
              for e in parse_events(bundle.json(rel, problems) or {}, until)]
    reqs = bundle.json("kube/requests.json", problems, list) if "kube/requests.json" in arts else []
    return {"node": parse_node(node) if node else None, "gpu_pods": parse_pods(pods) if pods else [],
            "daemonsets": dss, "device_plugin": dss[0] if dss else None,
            "events": sorted(events, key=lambda e: e["at"]), "errors": [r for r in reqs or [] if r.get("error")]}


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """The stored answers as ``facts["kube"]`` (:func:`summary`) and events: ``kube.event`` per Event of
    the last hour (attrs ``type, reason, message, count, object_kind, namespace, name``),
    ``kube.node-condition`` at each condition's ``lastTransitionTime`` (attrs ``type, status, reason,
    message``) and ``kube.container-terminated`` at the ``finishedAt`` of each termination the API still
    shows for a GPU pod's container: ``state.terminated`` (it ended and was not restarted) and
    ``lastState.terminated`` (the run before its latest restart), one event when both are the same run
    (attrs ``namespace, pod, container, reason`` (``OOMKilled``...), ``exit_code``, ``restart_count``)."""
    r = Reading()
    s = summary(bundle, r.problems)
    if not s:
        return r
    r.facts["kube"] = s
    for e in s["events"]:
        o = e["object"]
        r.events.append(Event(parse_iso(e["at"]), "kube", "kube.event",
                              f"{e['type']} {e['reason']} on {o['kind']} {o['namespace'] + '/' if o['namespace'] else ''}"
                              f"{o['name']}: {excerpt(e['message'] or '', 160)}",
                              {"type": e["type"], "reason": e["reason"], "message": e["message"], "count": e["count"],
                               "object_kind": o["kind"], "namespace": o["namespace"], "name": o["name"]},
                              {"artifact": e["artifact"]}))
    for c in (s.get("node") or {}).get("conditions") or []:
        if c["last_transition"]:
            r.events.append(Event(parse_iso(c["last_transition"]), "kube", "kube.node-condition",
                                  f"node condition {c['type']}={c['status']} ({c['reason']})",
                                  {k: c[k] for k in ("type", "status", "reason", "message")},
                                  {"artifact": "kube/node.json"}))
    for p in s["gpu_pods"]:
        for c in p["containers"]:
            runs = [t for t in (c.get("terminated"), c["last_terminated"]) if t and t.get("finished_at")]
            for t in [t for i, t in enumerate(runs) if t not in runs[:i]]:
                try:
                    at = parse_iso(t["finished_at"])
                except (TypeError, ValueError):  # a finishedAt that is no time: no event, the fact keeps it
                    r.problems.append({"artifact": "kube/pods.json", "message": f"finishedAt {t['finished_at']!r} of "
                                       f"{p['namespace']}/{p['name']} {c['name']} is not a time"})
                    continue
                r.events.append(Event(at, "kube", "kube.container-terminated",
                                      f"container {c['name']} of {p['namespace']}/{p['name']} terminated: {t['reason']} "
                                      f"(exit {t['exit_code']}, {c['restart_count']} restarts)",
                                      {"namespace": p["namespace"], "pod": p["name"], "container": c["name"],
                                       "reason": t["reason"], "exit_code": t["exit_code"],
                                       "restart_count": c["restart_count"]}, {"artifact": "kube/pods.json"}))
    return r
