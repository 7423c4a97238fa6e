"""The kubelet's word on a container's end through the Kubernetes API: ``lastState.terminated`` (a restarted
container's previous run) and ``state.terminated`` (a container that ended and stays ended), with
``reason: OOMKilled``, ``exitCode: 137`` and ``restartCount``, reach ``kube.container-terminated`` events at
their ``finishedAt``. The answers are served by tests/kubeapi_replay.py and read by collectors.kube's own
acquire (the official client from a kubeconfig)."""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

from collectors import kube
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import CollectContext, HostFacts

from kubeapi_replay import Replay, kubeconfig

NODE = "gpu-a100-007"
# containerStatuses as an API server returned them for a container the kernel OOM-killed once (a kubeshark
# worker's `kubectl get pod -o json`, public code corpus id 42626243527), byte for byte but for the image
OOM_RESTARTED = {
    "containerID": "docker://a679663ef486d6dc6f24e8157685eb561d26707193924555af537a158a34ec03",
    "image": "nvcr.io/nvidia/pytorch:24.08-py3", "imageID": "docker-pullable://kubeshark/worker@sha256:1a9b92de",
    "lastState": {"terminated": {"containerID": "docker://9821ba51c94d650a7950daf2c32eb3d6582f84a3423ec555ad4b2e9161c4750b",
                                 "exitCode": 137, "finishedAt": "2023-05-06T21:03:57Z", "reason": "OOMKilled",
                                 "startedAt": "2023-05-06T16:54:42Z"}},
    "name": "trainer", "ready": True, "restartCount": 1, "started": True,
    "state": {"running": {"startedAt": "2023-05-06T21:03:58Z"}}}
# the same run, for a Job's container (restartPolicy: Never): it stays in state.terminated
OOM_ENDED = {**copy.deepcopy(OOM_RESTARTED), "lastState": {}, "restartCount": 0, "ready": False, "started": False,
             "state": copy.deepcopy(OOM_RESTARTED["lastState"])}


def _pod(name: str, status: dict, restart: str) -> dict:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "creationTimestamp": "2023-05-06T16:54:37Z"},
            "spec": {"nodeName": NODE, "restartPolicy": restart, "containers": [
                {"name": "trainer", "image": status["image"],
                 "resources": {"limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running" if restart == "Always" else "Failed", "qosClass": "Burstable",
                       "containerStatuses": [status]}}


PODS = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
        "items": [_pod("trainer-0", OOM_RESTARTED, "Always"), _pod("eval-job-x7k2p", OOM_ENDED, "Never")]}


def _collect(tmp_path: Path, pods: dict) -> Bundle:
    with Replay({"GET /api/v1/pods": [(200, pods)]}) as api:
        w = BundleWriter(tmp_path / "b")
        ctx = CollectContext(root=Path("/"), writer=w, node=HostFacts(hostname=NODE),
                             options={"kube": True, "kubeconfig": str(kubeconfig(tmp_path / "kc", api.url))})
        kube.acquire(ctx)
    w.meta["collection"] = {"start": "2023-05-06T21:30:00Z", "end": "2023-05-06T21:30:01Z"}
    w.finish()
    return Bundle.open(tmp_path / "b")


def test_oom_killed_runs_reach_container_terminated_events_at_finished_at(tmp_path):
    r = kube.read(_collect(tmp_path, PODS), NodeFacts())
    ev = sorted((e for e in r.events if e.kind == "kube.container-terminated"), key=lambda e: e.attrs["pod"])
    assert [(e.attrs["pod"], e.attrs["reason"], e.attrs["exit_code"], e.attrs["restart_count"]) for e in ev] == [
        ("eval-job-x7k2p", "OOMKilled", 137, 0), ("trainer-0", "OOMKilled", 137, 1)]
    assert {e.at for e in ev} == {datetime(2023, 5, 6, 21, 3, 57, tzinfo=timezone.utc)}
    assert ev[0].evidence == {"artifact": "kube/pods.json"}
    pods = {p["name"]: p["containers"][0] for p in r.facts["kube"]["gpu_pods"]}
    assert pods["eval-job-x7k2p"]["terminated"] == {"reason": "OOMKilled", "exit_code": 137,
                                                    "finished_at": "2023-05-06T21:03:57Z"}
    assert pods["eval-job-x7k2p"]["last_terminated"] is None and pods["trainer-0"]["terminated"] is None
    assert pods["trainer-0"]["state"] == "running" and pods["trainer-0"]["restart_count"] == 1


def test_one_run_shown_in_both_states_is_one_event_and_a_bad_time_is_a_problem(tmp_path):
    both = {**copy.deepcopy(OOM_ENDED), "lastState": copy.deepcopy(OOM_ENDED["state"]), "restartCount": 1}
    bad = copy.deepcopy(OOM_RESTARTED)
    bad["lastState"]["terminated"]["finishedAt"] = "yesterday"
    pods = {"kind": "PodList", "items": [_pod("a-0", both, "Never"), _pod("b-0", bad, "Always")]}
    r = kube.read(_collect(tmp_path, pods), NodeFacts())
    assert [e.attrs["pod"] for e in r.events if e.kind == "kube.container-terminated"] == ["a-0"]
    assert any("'yesterday'" in p["message"] for p in r.problems)
