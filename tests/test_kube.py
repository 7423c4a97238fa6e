"""collectors/kube (and collectors/kube/transport.py): the cluster-side context of ``--kube``.

There is no cluster here. The answers below have the shape the API server returns (Kubernetes API
reference v1.29-v1.31: Node, PodList, DaemonSet apps/v1, EventList core/v1, as ``kubectl get -o json``
prints them, managedFields and all); the device plugin's DaemonSet is NVIDIA's upstream static
manifest (NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml, v0.17.1) as the API
server stores it, with the env a Helm install adds. Acquisition is run for real against no cluster
(no configuration; a refused connection), and once against a loopback server that replays these
answers, so the real client's requests are checked too; no HTTP library is mocked. The same
server answers over HTTPS (a CA made by ``openssl``, tests/kubeapi_replay.py) to the stdlib transport
of a pod (the kubelet's service variables, a ServiceAccount folder): its bundle files are those of the
client path byte for byte, with the ``kubernetes`` package made unimportable while it runs.
"""
from __future__ import annotations

import copy
import http.server
import json
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

import kubeapi_replay as kr
from collectors import kube
from collectors.kube import transport as kt
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext, HostFacts
from forensics.events import NodeFacts

NODE_NAME = "gpu-a100-007"
LAST_APPLIED = ('{"apiVersion":"v1","kind":"Pod","metadata":{"name":"trainer-7"},"spec":{"containers":[{"env":'
                '[{"name":"WANDB_API_KEY","value":"wandb-planted-4c1e"}]}]}}')
MANAGED = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-29T23:55:02Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}, "subresource": "status"}]

NODE = {
    "kind": "Node", "apiVersion": "v1",
    "metadata": {
        "name": NODE_NAME, "uid": "0b6f3f5e-5a8e-4b35-9d2c-6c3e0f0d7a11", "resourceVersion": "48213377",
        "creationTimestamp": "2026-06-02T08:14:51Z",
        "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "p4d.24xlarge",
                   "beta.kubernetes.io/os": "linux", "eks.amazonaws.com/nodegroup": "gpu-a100",
                   "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                   "node.kubernetes.io/instance-type": "p4d.24xlarge", "nvidia.com/gpu.count": "8",
                   "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                   "topology.kubernetes.io/zone": "us-east-1a"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        "managedFields": MANAGED},
    "spec": {"providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f60718",
             "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
    "status": {
        "capacity": {"cpu": "96", "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                     "memory": "1176439432Ki", "nvidia.com/gpu": "8", "pods": "250"},
        "allocatable": {"cpu": "95690m", "ephemeral-storage": "95551679124", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                        "memory": "1162939016Ki", "nvidia.com/gpu": "8", "pods": "250"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-11-29T23:55:02Z",
             "lastTransitionTime": "2026-06-02T08:14:51Z", "reason": "KubeletHasSufficientMemory",
             "message": "kubelet has sufficient memory available"},
            {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": "2026-11-29T23:55:02Z",
             "lastTransitionTime": "2026-06-02T08:14:51Z", "reason": "KubeletHasNoDiskPressure",
             "message": "kubelet has no disk pressure"},
            {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": "2026-11-29T23:55:02Z",
             "lastTransitionTime": "2026-06-02T08:14:51Z", "reason": "KubeletHasSufficientPID",
             "message": "kubelet has sufficient PID available"},
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T23:55:02Z",
             "lastTransitionTime": "2026-06-02T08:15:22Z", "reason": "KubeletReady",
             "message": "kubelet is posting ready status"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.14.23"}, {"type": "Hostname", "address": NODE_NAME}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": "ec2b7c9d1a0e4f6a8b3c2d1e0f9a8b7c", "systemUUID": "ec2b7c9d-1a0e-4f6a-8b3c-2d1e0f9a8b7c",
                     "bootID": "4c8f2a61-7b1d-4e0f-9a3c-5d6e7f8a9b0c", "kernelVersion": "5.10.220-209.869.amzn2.x86_64",
                     "osImage": "Amazon Linux 2", "containerRuntimeVersion": "containerd://1.7.11",
                     "kubeletVersion": "v1.29.3-eks-ae9a62a", "kubeProxyVersion": "v1.29.3-eks-ae9a62a",
                     "operatingSystem": "linux", "architecture": "amd64"}}}


def _pod(name, ns, containers, statuses, owner=None, phase="Running", ready=True, annotations=None):
    md = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "48211002",
          "creationTimestamp": "2026-11-28T10:00:00Z", "labels": {"app": name.rsplit("-", 1)[0]},
          "managedFields": MANAGED}
    if annotations:
        md["annotations"] = annotations
    if owner:
        md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}",
                                  "controller": True, "blockOwnerDeletion": True}]
    return {"metadata": md,
            "spec": {"nodeName": NODE_NAME, "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "containers": containers, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                                "effect": "NoSchedule"}]},
            "status": {"phase": phase, "hostIP": "10.0.14.23", "podIP": "10.0.15.77", "qosClass": "Burstable",
                       "startTime": "2026-11-28T10:00:00Z",
                       "conditions": [{"type": "Initialized", "status": "True", "lastProbeTime": None,
                                       "lastTransitionTime": "2026-11-28T10:00:00Z"},
                                      {"type": "Ready", "status": "True" if ready else "False", "lastProbeTime": None,
                                       "lastTransitionTime": "2026-11-30T01:31:40Z"}],
                       "containerStatuses": statuses}}


PODS = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "48213390"}, "items": [
    _pod("trainer-7", "ml", [
        {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "command": ["python", "train.py"],
         "args": ["--api-token=tok-planted-88aa", "--epochs", "90"],
         "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                 {"name": "WANDB_API_KEY", "value": "wandb-planted-4c1e"},
                 {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
         "resources": {"limits": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "8"},
                       "requests": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "8"}}},
        {"name": "log-shipper", "image": "docker.io/fluent/fluent-bit:3.1", "resources": {}}],
        [{"name": "trainer", "ready": False, "restartCount": 3, "image": "nvcr.io/nvidia/pytorch:24.08-py3",
          "imageID": "nvcr.io/nvidia/pytorch@sha256:5a0e", "containerID": "containerd://e2a1",
          "started": True, "state": {"running": {"startedAt": "2026-11-30T01:31:12Z"}},
          "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-11-30T00:58:03Z",
                                       "finishedAt": "2026-11-30T01:30:41Z", "containerID": "containerd://d9f0"}}},
         {"name": "log-shipper", "ready": True, "restartCount": 0, "image": "docker.io/fluent/fluent-bit:3.1",
          "imageID": "docker.io/fluent/fluent-bit@sha256:77c2", "containerID": "containerd://f3b2", "started": True,
          "state": {"running": {"startedAt": "2026-11-28T10:00:05Z"}}, "lastState": {}}],
        owner=("StatefulSet", "trainer"), ready=False,
        annotations={"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED}),
    _pod("nvidia-device-plugin-daemonset-x7k2p", "kube-system", [
        {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
         "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        [{"name": "nvidia-device-plugin-ctr", "ready": True, "restartCount": 0, "started": True,
          "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "imageID": "nvcr.io/nvidia/k8s-device-plugin@sha256:1b2c",
          "containerID": "containerd://d1aa", "state": {"running": {"startedAt": "2026-06-02T08:16:01Z"}}, "lastState": {}}],
        owner=("DaemonSet", "nvidia-device-plugin-daemonset")),
    _pod("kube-proxy-4q8zr", "kube-system", [
        {"name": "kube-proxy", "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy:v1.29.3",
         "command": ["kube-proxy", "--v=2", "--config=/var/lib/kube-proxy-config/config"]}],
        [{"name": "kube-proxy", "ready": True, "restartCount": 0, "started": True, "image": "kube-proxy:v1.29.3",
          "imageID": "kube-proxy@sha256:9e1f", "containerID": "containerd://a0a0",
          "state": {"running": {"startedAt": "2026-06-02T08:15:10Z"}}, "lastState": {}}],
        owner=("DaemonSet", "kube-proxy")),
]}

DAEMONSET = {
    "kind": "DaemonSet", "apiVersion": "apps/v1",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system",
                 "uid": "uid-nvidia-device-plugin-daemonset", "resourceVersion": "47001200", "generation": 3,
                 "creationTimestamp": "2026-06-01T12:00:00Z",
                 "annotations": {"deprecated.daemonset.template.generation": "3"}, "managedFields": MANAGED},
    "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
             "template": {"metadata": {"creationTimestamp": None, "labels": {"name": "nvidia-device-plugin-ds"}},
                          "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                                   "priorityClassName": "system-node-critical",
                                   "containers": [{"name": "nvidia-device-plugin-ctr",
                                                   "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                                                   "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                                                           {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"},
                                                           {"name": "PASS_DEVICE_SPECS", "value": "false"},
                                                           {"name": "NODE_NAME", "valueFrom": {"fieldRef": {
                                                               "apiVersion": "v1", "fieldPath": "spec.nodeName"}}}],
                                                   "resources": {}, "terminationMessagePath": "/dev/termination-log",
                                                   "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
                                                   "securityContext": {"allowPrivilegeEscalation": False,
                                                                       "capabilities": {"drop": ["ALL"]}},
                                                   "volumeMounts": [{"name": "kubelet-device-plugins-dir",
                                                                     "mountPath": "/var/lib/kubelet/device-plugins"}]}],
                                   "volumes": [{"name": "kubelet-device-plugins-dir",
                                                "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}],
                                   "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}},
             "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
             "revisionHistoryLimit": 10},
    "status": {"currentNumberScheduled": 12, "numberMisscheduled": 0, "desiredNumberScheduled": 12, "numberReady": 11,
               "observedGeneration": 3, "updatedNumberScheduled": 12, "numberAvailable": 11, "numberUnavailable": 1}}


def _event(name, ns, kind, obj, reason, message, last, typ="Warning", count=1, first=None):
    return {"metadata": {"name": f"{obj}.{name}", "namespace": ns or "default", "uid": f"uid-ev-{name}",
                         "resourceVersion": "48212001", "creationTimestamp": first or last},
            "involvedObject": {"kind": kind, "namespace": ns, "name": obj, "uid": f"uid-{obj}", "apiVersion": "v1",
                               **({"fieldPath": "spec.containers{trainer}"} if kind == "Pod" else {})},
            "reason": reason, "message": message,
            "source": {"component": "kubelet", "host": NODE_NAME},
            "firstTimestamp": first or last, "lastTimestamp": last, "count": count, "type": typ, "eventTime": None,
            "reportingComponent": "kubelet", "reportingInstance": NODE_NAME}


POD_EVENTS = {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "48213391"}, "items": [
    _event("187d1c2a0b3f4e10", "ml", "Pod", "trainer-7", "Pulled",
           'Container image "nvcr.io/nvidia/pytorch:24.08-py3" already present on machine', "2026-11-29T21:58:00Z",
           typ="Normal"),  # more than an hour before collection: left out
    _event("187d1c2a0b3f4e11", "ml", "Pod", "trainer-7", "Unhealthy",
           "Readiness probe failed: Failed to initialize NVML: Unknown Error", "2026-11-30T01:30:37Z", count=14,
           first="2026-11-30T00:59:12Z"),
    _event("187d1c2a0b3f4e12", "ml", "Pod", "trainer-7", "BackOff",
           "Back-off restarting failed container trainer in pod trainer-7_ml(uid-trainer-7)", "2026-11-30T01:30:52Z",
           count=3),
]}
NODE_EVENTS = {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "48213392"}, "items": [
    _event("187d1b000a000001", None, "Node", NODE_NAME, "NodeHasSufficientMemory",
           f"Node {NODE_NAME} status is now: NodeHasSufficientMemory", "2026-11-30T01:10:00Z", typ="Normal"),
]}
COLLECTED = "2026-11-30T01:45:00Z"


def _bundle(tmp_path: Path, answers: dict[str, dict]) -> Bundle:
    """A bundle holding the answers as acquire stores them (redacted)."""
    w = BundleWriter(tmp_path / "b")
    for rel, obj in answers.items():
        w.write_json(rel, kube.redact(obj), source=f"GET {rel}", method="kube-api")
    w.meta["collection"] = {"start": COLLECTED, "end": COLLECTED}
    w.finish()
    return Bundle.open(tmp_path / "b")


ANSWERS = {"kube/node.json": NODE, "kube/pods.json": PODS, "kube/events/node.json": NODE_EVENTS,
           "kube/events/ml/trainer-7.json": POD_EVENTS,
           "kube/daemonsets/kube-system/nvidia-device-plugin-daemonset.json": DAEMONSET}


def test_node_capacity_allocatable_conditions_and_labels():
    n = kube.parse_node(NODE)
    assert n["gpu"] == {"capacity": 8, "allocatable": 8}
    assert n["labels"]["eks.amazonaws.com/nodegroup"] == "gpu-a100"
    assert [(c["type"], c["status"]) for c in n["conditions"]][-1] == ("Ready", "True")
    assert (n["kubelet_version"], n["container_runtime_version"]) == ("v1.29.3-eks-ae9a62a", "containerd://1.7.11")
    assert n["taints"][0]["key"] == "nvidia.com/gpu"


def test_only_pods_requesting_gpus_with_status_and_restarts():
    pods = kube.parse_pods(PODS)
    assert [p["name"] for p in pods] == ["trainer-7"]
    p = pods[0]
    assert (p["gpus"], p["phase"], p["ready"], p["restarts"], p["owner"]) == (8, "Running", False, 3, "StatefulSet/trainer")
    t = p["containers"][0]
    assert t["last_terminated"] == {"reason": "Error", "exit_code": 1, "finished_at": "2026-11-30T01:30:41Z"}
    assert (t["gpus"], p["containers"][1]["gpus"]) == (8, 0)


def test_device_plugin_daemonset_env_args_images():
    ds = kube.parse_daemonset(DAEMONSET)
    assert ds["images"] == ["nvcr.io/nvidia/k8s-device-plugin:v0.17.1"]
    env = ds["containers"][0]["env"]
    assert (env["DEVICE_LIST_STRATEGY"], env["PASS_DEVICE_SPECS"]) == ("envvar", "false")
    assert env["NODE_NAME"] == "<from fieldRef>"
    assert (ds["desired"], ds["ready"], ds["generation"], ds["observed_generation"]) == (12, 11, 3, 3)


def test_events_of_the_last_hour_only():
    until = datetime(2026, 11, 30, 1, 45, tzinfo=timezone.utc)
    ev = kube.parse_events(POD_EVENTS, until)
    assert [e["reason"] for e in ev] == ["Unhealthy", "BackOff"]
    assert ev[0]["count"] == 14 and "Failed to initialize NVML" in ev[0]["message"]
    assert ev[0]["object"] == {"kind": "Pod", "namespace": "ml", "name": "trainer-7"}
    assert len(kube.parse_events(POD_EVENTS, None)) == 3


def test_redaction_of_stored_answers():
    red = kube.redact(copy.deepcopy(PODS))
    text = json.dumps(red)
    for planted in ("wandb-planted-4c1e", "tok-planted-88aa"):
        assert planted not in text
    c = red["items"][0]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"   # allowlisted: kept
    assert env["WANDB_API_KEY"].startswith("<redacted hmac:")
    assert c["args"][0].startswith("--api-token=<redacted hmac:") and c["args"][1:] == ["--epochs", "90"]
    assert "managedFields" not in red["items"][0]["metadata"]
    assert red["items"][0]["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].startswith(
        "<redacted hmac:")


def test_read_back_from_the_bundle(tmp_path):
    b = _bundle(tmp_path, ANSWERS)
    r = kube.read(b, NodeFacts())
    s = r.facts["kube"]
    assert s["node"]["name"] == NODE_NAME and [p["name"] for p in s["gpu_pods"]] == ["trainer-7"]
    assert s["device_plugin"]["name"] == "nvidia-device-plugin-daemonset"
    kinds = {e.kind for e in r.events}
    assert kinds == {"kube.event", "kube.node-condition", "kube.container-terminated"}
    unhealthy = [e for e in r.events if e.kind == "kube.event" and e.attrs["reason"] == "Unhealthy"][0]
    assert unhealthy.evidence == {"artifact": "kube/events/ml/trainer-7.json"}
    assert unhealthy.at == datetime(2026, 11, 30, 1, 30, 37, tzinfo=timezone.utc)
    term = [e for e in r.events if e.kind == "kube.container-terminated"][0]
    assert term.attrs == {"namespace": "ml", "pod": "trainer-7", "container": "trainer", "reason": "Error",
                          "exit_code": 1, "restart_count": 3}
    assert not r.problems
    empty = BundleWriter(tmp_path / "e")
    empty.finish()
    assert kube.summary(Bundle.open(tmp_path / "e")) == {} and not kube.read(Bundle.open(tmp_path / "e"), NodeFacts()).events


def _ctx(tmp_path, name="b", **attrs):
    w = BundleWriter(tmp_path / name)
    deadline = attrs.pop("deadline", None)  # the rest are kube's options (--kube, --kubeconfig)
    ctx = CollectContext(root=Path("/"), writer=w, deadline=deadline, node=HostFacts(hostname=NODE_NAME),
                         options=attrs)
    return ctx, w


def test_acquire_does_nothing_unless_asked(tmp_path):
    ctx, w = _ctx(tmp_path)
    kube.acquire(ctx)
    assert w.artifacts == []


def test_acquire_without_a_cluster_records_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    assert [(a.source, a.status.value) for a in w.artifacts] == [("kube:config", "error")]
    assert "configuration" in w.artifacts[0].message


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    p = tmp_path / "kubeconfig"
    p.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: {server}
users:
- name: reader
  user:
    token: token-planted-3f9c
contexts:
- name: lab
  context: {{cluster: lab, user: reader}}
current-context: lab
""")
    return p


def test_acquire_against_a_refused_connection_records_each_request(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    ctx, w = _ctx(tmp_path, kube=True, kubeconfig=str(_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")))
    kube.acquire(ctx)
    w.finish()
    errors = [a for a in w.artifacts if a.status.value == "error"]
    assert {a.source.split("?")[0] for a in errors} == {f"GET /api/v1/nodes/{NODE_NAME}", "GET /api/v1/pods",
                                                        "GET /api/v1/events"}
    # one plain sentence naming the peer (issue 28), never urllib3's "HTTPConnectionPool(...): Max retries"
    assert [a.message for a in errors] == [f"connection refused by 127.0.0.1:{port}"] * 3
    reqs = json.loads((tmp_path / "b/kube/requests.json").read_text())
    assert len(reqs) == 3 and all(r["error"] and r["status"] is None for r in reqs)
    assert b"token-planted-3f9c" not in b"".join(p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file())


class _Replay(http.server.BaseHTTPRequestHandler):
    """Answers GETs with the recorded answers above; any other verb is refused and remembered.
    ``on_get(count of GETs so far)`` runs before each answer; with ``echo_auth`` the 403 echoes the
    request's ``Authorization`` header (a hostile server)."""
    seen: list = []
    on_get = None
    echo_auth = False

    def do_GET(self):  # noqa: N802 - http.server's naming
        u = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        self.seen.append(("GET", u.path, q, self.headers.get("Authorization")))
        if self.on_get:
            type(self).on_get(len(self.seen))
        fs = q.get("fieldSelector", "")
        body, code = None, 200
        if u.path == f"/api/v1/nodes/{NODE_NAME}":
            body = NODE
        elif u.path == "/api/v1/pods" and fs == f"spec.nodeName={NODE_NAME}":
            body = PODS
        elif u.path == "/api/v1/events" and "involvedObject.kind=Node" in fs:
            body = NODE_EVENTS
        elif u.path == "/api/v1/namespaces/ml/events" and "involvedObject.name=trainer-7" in fs:
            body = POD_EVENTS
        elif u.path.startswith("/api/v1/namespaces/kube-system/events"):
            body = {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": []}
        elif u.path == "/apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin-daemonset":
            body, code = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                          "message": 'daemonsets.apps "nvidia-device-plugin-daemonset" is forbidden'
                          + (f" (sent: Authorization: {self.headers.get('Authorization')})" if self.echo_auth else "")}, 403
        else:
            body, code = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}, 404
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self):
        self.seen.append((self.command, self.path, {}, None))
        self.send_response(405)
        self.end_headers()

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def log_message(self, *a):
        pass


def _serve(tls: Path | None = None):
    _Replay.seen, _Replay.on_get, _Replay.echo_auth = [], None, False
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    if tls:
        kr.serve_tls(srv, tls)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv, f"{'https' if tls else 'http'}://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def replay():
    srv, url = _serve()
    yield url
    srv.shutdown()
    srv.server_close()


def test_acquire_reads_only_with_get_and_stores_redacted_answers(tmp_path, replay):
    ctx, w = _ctx(tmp_path, kube=True, kubeconfig=str(_kubeconfig(tmp_path, replay)))
    kube.acquire(ctx)
    w.meta["collection"] = {"start": COLLECTED, "end": COLLECTED}
    w.finish()
    assert {v for v, *_ in _Replay.seen} == {"GET"}
    assert all(auth == "Bearer token-planted-3f9c" for *_, auth in _Replay.seen)
    paths = [(p, q.get("resourceVersion")) for _, p, q, _ in _Replay.seen]
    assert (f"/api/v1/nodes/{NODE_NAME}", None) in paths and ("/api/v1/pods", "0") in paths
    assert ("/api/v1/namespaces/ml/events", "0") in paths       # the GPU pod
    assert ("/api/v1/namespaces/kube-system/events", "0") in paths  # the device plugin pod
    b = Bundle.open(tmp_path / "b")
    stored = {a.path for a in b.find("kube/")}
    assert {"kube/node.json", "kube/pods.json", "kube/events/node.json", "kube/events/ml/trainer-7.json",
            "kube/requests.json"} <= stored
    forbidden = [a for a in b.artifacts() if a.status.value == "error"]
    assert len(forbidden) == 1 and "HTTP 403" in forbidden[0].message and "daemonsets" in forbidden[0].source
    raw = b"".join(p.read_bytes() for p in b.root.rglob("*") if p.is_file())
    for planted in (b"wandb-planted-4c1e", b"tok-planted-88aa", b"token-planted-3f9c"):
        assert planted not in raw
    s = kube.summary(b)
    assert s["gpu_pods"][0]["restarts"] == 3 and s["device_plugin"] is None
    assert [e["reason"] for e in s["events"]] == ["NodeHasSufficientMemory", "Unhealthy", "BackOff"]
    assert [r["status"] for r in s["errors"]] == [403]


def test_a_spent_time_budget_asks_nothing_more(tmp_path, replay):
    import time
    ctx, w = _ctx(tmp_path, kube=True, kubeconfig=str(_kubeconfig(tmp_path, replay)), deadline=time.monotonic() - 1)
    kube.acquire(ctx)
    assert _Replay.seen == []
    assert [a.status.value for a in w.artifacts if a.path is None] == ["truncated"] * 3


# -- in a pod: the stdlib transport (collectors/kube/transport.py) ----------------------------------
SA_TOKEN = "eyJhbGciOiJSUzI1NiJ9.sa-token-planted-71d2.c2lnbmF0dXJl"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A throw-away CA and a serving certificate for 127.0.0.1 (openssl)."""
    return kr.tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def replay_tls(tls):
    srv, url = _serve(tls)
    yield url
    srv.shutdown()
    srv.server_close()


def _pod_env(monkeypatch, tmp_path, url, ca: Path, token=SA_TOKEN) -> Path:
    """This process as a pod: the kubelet's service variables for ``url`` and a ServiceAccount folder."""
    port = urlsplit(url).port
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    sa = kr.service_account(tmp_path / "serviceaccount", ca, token)
    monkeypatch.setattr(kt, "SERVICEACCOUNT", sa)
    return sa


def _no_client(monkeypatch):
    """``import kubernetes`` fails from here on, as on the node image's python3 (ModuleNotFoundError)."""
    for name in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kubernetes", None)


def _kube_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "kube").rglob("*")) if p.is_file()}


def _records(w) -> list[dict]:
    return [a.to_json() for a in w.artifacts if a.path != "kube/requests.json"]


def test_in_a_pod_the_stdlib_gives_the_client_paths_files_byte_for_byte(tmp_path, replay_tls, tls, monkeypatch):
    kc = _kubeconfig(tmp_path, replay_tls)
    kc.write_text(kc.read_text().replace(f"server: {replay_tls}",
                                         f"server: {replay_tls}\n    certificate-authority: {tls / 'ca.crt'}"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ctx, client_w = _ctx(tmp_path, "client", kube=True, kubeconfig=str(kc))
    kube.acquire(ctx)
    client_seen, _Replay.seen = list(_Replay.seen), []
    assert {auth for *_, auth in client_seen} == {"Bearer token-planted-3f9c"}  # the client, from the kubeconfig

    _pod_env(monkeypatch, tmp_path, replay_tls, tls / "ca.crt")
    _no_client(monkeypatch)
    ctx, pod_w = _ctx(tmp_path, "pod", kube=True)
    kube.acquire(ctx)
    assert {auth for *_, auth in _Replay.seen} == {f"Bearer {SA_TOKEN}"}
    assert [(p, q) for _, p, q, _ in _Replay.seen] == [(p, q) for _, p, q, _ in client_seen]
    assert len(_Replay.seen) == 6  # node, pods, node events, 2 pods' events, the plugin's DaemonSet
    for w in (client_w, pod_w):
        w.finish()
    client_files, pod_files = _kube_files(tmp_path / "client"), _kube_files(tmp_path / "pod")
    assert sorted(pod_files) == ["kube/events/kube-system/nvidia-device-plugin-daemonset-x7k2p.json",
                                 "kube/events/ml/trainer-7.json", "kube/events/node.json", "kube/node.json",
                                 "kube/pods.json", "kube/requests.json"]
    assert {k: v for k, v in pod_files.items() if k != "kube/requests.json"} == \
        {k: v for k, v in client_files.items() if k != "kube/requests.json"}
    assert _records(pod_w) == _records(client_w)  # sources, hashes, the 403's message, notes
    reqs = [json.loads(f["kube/requests.json"]) for f in (client_files, pod_files)]
    assert [[{k: v for k, v in r.items() if k != "seconds"} for r in rs] for rs in reqs][0] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in reqs[1]]
    assert [r["status"] for r in reqs[1]] == [200, 200, 200, 200, 200, 403]
    assert [a.source for a in pod_w.artifacts if a.path == "kube/requests.json"] == [replay_tls]
    b = Bundle.open(tmp_path / "pod")
    assert kube.summary(b)["gpu_pods"][0]["containers"][0]["last_terminated"]["exit_code"] == 1
    raw = b"".join(p.read_bytes() for p in b.root.rglob("*") if p.is_file())
    assert SA_TOKEN.encode() not in raw and b"sa-token-planted-71d2" not in raw and b"wandb-planted-4c1e" not in raw


def test_in_a_pod_the_token_is_reread_and_kept_out_of_messages(tmp_path, replay_tls, tls, monkeypatch):
    sa = _pod_env(monkeypatch, tmp_path, replay_tls, tls / "ca.crt")
    rotated = "eyJhbGciOiJSUzI1NiJ9.rotated-planted-5e0b.c2ln"
    _Replay.on_get = lambda n: (sa / "token").write_text(rotated) if n == 2 else None  # the kubelet rotates it
    _Replay.echo_auth = True
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    w.finish()
    auths = [auth for *_, auth in _Replay.seen]
    assert auths[:2] == [f"Bearer {SA_TOKEN}"] * 2 and set(auths[2:]) == {f"Bearer {rotated}"}
    forbidden = [a for a in w.artifacts if a.status.value == "error"]
    assert len(forbidden) == 1 and "HTTP 403" in forbidden[0].message
    assert "(sent: Authorization: Bearer <redacted>)" in forbidden[0].message
    raw = b"".join(p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert b"rotated-planted-5e0b" not in raw and b"sa-token-planted-71d2" not in raw


def test_in_a_pod_the_api_servers_certificate_is_verified(tmp_path, replay_tls, monkeypatch):
    other = kr.tls_files(tmp_path / "other-ca")  # a CA that did not sign the server's certificate
    _pod_env(monkeypatch, tmp_path, replay_tls, other / "ca.crt")
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    errors = [a for a in w.artifacts if a.status.value == "error"]
    assert _Replay.seen == []  # no request got through the handshake
    assert len(errors) == 3 and all(a.message.startswith("TLS with 127.0.0.1:") for a in errors)
    assert all("failed: certificate verify failed: unable to get local issuer certificate" in a.message for a in errors)


def test_in_a_pod_a_refused_connection_and_an_oversized_answer_are_errors(tmp_path, replay_tls, tls, monkeypatch):
    closed = kr.free_port_closed()
    _pod_env(monkeypatch, tmp_path, f"https://127.0.0.1:{closed}", tls / "ca.crt")
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    assert [a.message for a in w.artifacts if a.status.value == "error"] == [f"connection refused by 127.0.0.1:{closed}"] * 3
    _pod_env(monkeypatch, tmp_path, replay_tls, tls / "ca.crt")
    monkeypatch.setattr(kube, "MAX_ANSWER", 2048)  # the Node and PodList are larger, the EventList smaller
    ctx, w = _ctx(tmp_path, "b2", kube=True)
    kube.acquire(ctx)
    over = [a.source for a in w.artifacts if a.status.value == "error" and "answer over 2048 bytes" in a.message]
    assert over == [f"GET /api/v1/nodes/{NODE_NAME}", f"GET /api/v1/pods?fieldSelector=spec.nodeName={NODE_NAME}"
                    "&resourceVersion=0"]
    assert "kube/events/node.json" in {a.path for a in w.artifacts}


def test_without_the_client_and_outside_a_pod_one_error_says_what_is_needed(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    _no_client(monkeypatch)
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    assert [(a.source, a.status.value) for a in w.artifacts] == [("kube:config", "error")]
    msg = w.artifacts[0].message
    assert msg.startswith("no Kubernetes configuration: not in a pod (KUBERNETES_SERVICE_HOST is not set)")
    assert "in-cluster ServiceAccount credentials" in msg and "pip install 'gpu-forensics[kube]'" in msg
    ctx, w = _ctx(tmp_path, "b2", kube=True, kubeconfig=str(_kubeconfig(tmp_path, "https://127.0.0.1:1")))
    kube.acquire(ctx)
    assert w.artifacts[0].message.startswith(f"no Kubernetes configuration: --kubeconfig {tmp_path / 'kubeconfig'};")


def test_in_a_pod_without_a_mounted_token_the_error_names_it(tmp_path, tls, monkeypatch):
    sa = _pod_env(monkeypatch, tmp_path, "https://127.0.0.1:1", tls / "ca.crt")
    (sa / "token").unlink()
    _no_client(monkeypatch)
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    assert [(a.source, a.status.value) for a in w.artifacts] == [("kube:config", "error")]
    assert w.artifacts[0].message == (f"in a pod (KUBERNETES_SERVICE_HOST is set) but token missing in {sa} "
                                      "(automountServiceAccountToken: false?): --kube needs the ServiceAccount "
                                      "token mounted")


def test_a_token_file_that_cannot_be_a_header_is_refused_without_showing_it(tmp_path, tls, monkeypatch):
    sa = _pod_env(monkeypatch, tmp_path, f"https://127.0.0.1:{kr.free_port_closed()}", tls / "ca.crt")
    (sa / "token").write_text("planted-head-3a1c\nX-Injected: planted-tail-77e0\n")
    ctx, w = _ctx(tmp_path, kube=True)
    kube.acquire(ctx)
    w.finish()
    assert [a.message for a in w.artifacts if a.status.value == "error"] == \
        [f"ConfigError: {sa / 'token'} holds characters a bearer token cannot have"] * 3
    raw = b"".join(p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert b"planted-head-3a1c" not in raw and b"planted-tail-77e0" not in raw
