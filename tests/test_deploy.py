"""deploy/: the container image and the Kubernetes manifests.

Every manifest (the kustomizations built here: resources listed, images set, the probe overlay's
JSON patch applied) is validated with kubernetes-validate (strict: unknown fields fail) against the
Kubernetes versions docs/usage.md names; then the contract the code relies on is checked: the host's
root read-only at /host and ``--root /host``, read-only hostPath mounts, GPU node selector and
taints, resource limits, capabilities, read-only RBAC, and an image that needs no shell at run time.
The image itself is not built here (no container daemon on this machine).
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

PROJECT = Path(__file__).resolve().parent.parent
DEPLOY = PROJECT / "deploy"
#: used when docs/usage.md names no version ("Kubernetes 1.29 and 1.31")
DEFAULT_VERSIONS = ("1.29", "1.31")
HOST_MOUNTS = {"/": "/host", "/run/containerd": "/host/run/containerd", "/run/systemd": "/host/run/systemd",
               "/var/log": "/host/var/log"}
CAPS = {"DAC_READ_SEARCH", "SYS_PTRACE", "SYS_CHROOT"}


def versions() -> tuple[str, ...]:
    """The Kubernetes minor versions docs/usage.md names (``Kubernetes 1.29 and 1.31``), else the defaults."""
    text = (PROJECT / "docs/usage.md").read_text()
    found = []
    for m in re.finditer(r"Kubernetes((?:[ ,]+(?:and|or|v)?\s*1\.\d+)+)", text):
        found += re.findall(r"1\.\d+", m.group(1))
    return tuple(dict.fromkeys(found)) or DEFAULT_VERSIONS


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 ``add`` and ``replace`` (all the overlay uses)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = doc
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if isinstance(target, list):
            if op["op"] == "add":
                target.insert(len(target) if last == "-" else int(last), op["value"])
            else:
                target[int(last)] = op["value"]
        else:
            assert op["op"] in ("add", "replace") and (op["op"] == "add" or last in target), op
            target[last] = op["value"]
    return doc


def kustomize(path: Path) -> list[dict]:
    """A small kustomize build: ``resources`` (files and directories), ``namespace``, ``images``
    and JSON6902 ``patches`` with a kind/name target; enough for deploy/."""
    k = yaml.safe_load((path / "kustomization.yaml").read_text())
    out = []
    for r in k.get("resources") or []:
        p = (path / r).resolve()
        out += kustomize(p) if p.is_dir() else _docs(p)
    for d in out:
        if k.get("namespace") and d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["namespace"] = k["namespace"]
    for patch in k.get("patches") or []:
        t = patch["target"]
        for i, d in enumerate(out):
            if d["kind"] == t["kind"] and d["metadata"]["name"] == t["name"]:
                out[i] = _json_patch(d, yaml.safe_load((path / patch["path"]).read_text()))
    for img in k.get("images") or []:
        for d in out:
            for c in _containers(d):
                if c["image"].split(":")[0] == img["name"]:
                    c["image"] = f"{img.get('newName', img['name'])}:{img['newTag']}"
    return out


def _pod_spec(d: dict) -> dict | None:
    if d["kind"] in ("DaemonSet", "Job"):
        return d["spec"]["template"]["spec"]
    return None


def _named(docs: list[dict], kind: str, name: str) -> dict:
    (d,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return d


def _containers(d: dict) -> list[dict]:
    ps = _pod_spec(d)
    return (ps.get("initContainers") or []) + ps["containers"] if ps else []


BASE = kustomize(DEPLOY)
PROBE = kustomize(DEPLOY / "probe")
JOBS = [d for f in sorted((DEPLOY / "jobs").glob("*.yaml")) for d in _docs(f)]
CGROUPV2 = kustomize(DEPLOY / "cgroupv2")
ALL = {"base": BASE, "probe": PROBE, "jobs": JOBS, "cgroupv2": CGROUPV2}


@pytest.mark.parametrize("version", versions())
@pytest.mark.parametrize("name", sorted(ALL))
def test_manifests_validate(name, version):
    for d in ALL[name]:
        assert kubernetes_validate.validate(d, version, strict=True), (d["kind"], d["metadata"]["name"])


def test_validation_catches_a_wrong_field():
    bad = copy.deepcopy([d for d in BASE if d["kind"] == "DaemonSet"][0])
    bad["spec"]["template"]["spec"]["hostPIDs"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, versions()[0], strict=True)


def test_kustomization_lists_every_manifest_and_the_overlay_only_adds_the_probe():
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in BASE)
    assert kinds == [("ClusterRole", "gpu-forensics-reader"), ("ClusterRoleBinding", "gpu-forensics-reader"),
                     ("DaemonSet", "gpu-forensics"), ("DaemonSet", "gpu-forensics-watch"), ("Namespace", "gpu-forensics"),
                     ("Service", "gpu-forensics-watch"), ("ServiceAccount", "gpu-forensics")]
    ds, pds = [_named(docs, "DaemonSet", "gpu-forensics") for docs in (BASE, PROBE)]
    assert _named(BASE, "DaemonSet", "gpu-forensics-watch") == _named(PROBE, "DaemonSet", "gpu-forensics-watch")
    assert ds["spec"]["template"]["spec"]["hostPID"] is False and pds["spec"]["template"]["spec"]["hostPID"] is True
    init, pinit = ds["spec"]["template"]["spec"]["initContainers"][0], pds["spec"]["template"]["spec"]["initContainers"][0]
    assert "--probe" not in init["args"] and pinit["args"][-1] == "--probe"
    assert set(pinit["securityContext"]["capabilities"]["add"]) - set(init["securityContext"]["capabilities"]["add"]) \
        == {"SYS_ADMIN"}
    writable = [m for m in pinit["volumeMounts"] if not m.get("readOnly")]
    assert {m["mountPath"] for m in writable} == {"/bundles", "/tmp", "/host/sys/fs/cgroup"}


@pytest.mark.parametrize("doc", [d for d in BASE + PROBE + JOBS + CGROUPV2 if d["kind"] in ("DaemonSet", "Job")
                                 and d["metadata"]["name"] != "gpu-forensics-watch"],
                         ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_collector_pods_keep_the_contract(doc):
    ps = _pod_spec(doc)
    vols = {v["name"]: v for v in ps["volumes"]}
    collect = [c for c in _containers(doc) if c["name"] == "collect"][0]
    # --root /host, and every host path the collector reads mounted read-only at the same place under /host
    args = collect["args"]
    # the node's Job collects only: kubectl gpu-forensics analyses the copy on the laptop
    assert args[args.index("--root") + 1] == "/host" and ("run" in args or "collect" in args) and "--kube" in args
    mounts = {m["mountPath"]: m for m in collect["volumeMounts"]}
    for host, inside in HOST_MOUNTS.items():
        m = mounts[inside]
        assert m.get("readOnly") is True, inside
        assert vols[m["name"]]["hostPath"]["path"] == host
    for m in collect["volumeMounts"]:
        if "hostPath" in vols[m["name"]] and not m.get("readOnly"):
            assert m["mountPath"] in ("/bundles", "/host/sys/fs/cgroup"), m  # bundles; the probe's cgroup.procs
    # GPU nodes and their taints (a Job for one node names the node instead)
    if "nodeName" not in ps:
        assert ps["nodeSelector"]["nvidia.com/gpu.present"] == "true"
        assert any(t.get("key") == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in ps["tolerations"])
    # limits everywhere, no privileged container, only the capabilities the collector needs
    for c in _containers(doc):
        assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]
        sc = c["securityContext"]
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged")
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        extra = set(sc["capabilities"].get("add") or []) - CAPS
        assert extra <= ({"SYS_ADMIN"} if ps.get("hostPID") else set()), (c["name"], extra)
        cmd = (c.get("command") or []) + (c.get("args") or [])
        assert cmd[0] not in ("sh", "/bin/sh", "bash", "/bin/bash"), "no shell at run time"
    assert ps["serviceAccountName"] == "gpu-forensics"


def test_rbac_reads_only():
    role = [d for d in BASE if d["kind"] == "ClusterRole"][0]
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list"}
        assert set(rule["resources"]) <= {"nodes", "pods", "events", "daemonsets"}
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("", "nodes"), ("", "pods"), ("", "events"), ("apps", "daemonsets")} <= granted


def test_dockerfile_builds_the_zipapp_apart_and_needs_no_shell_at_run_time():
    # the image scripts/build-image.sh builds (tests/test_image.py runs it): Debian's python3 and
    # libsystemd0, the zipapp; no venv, pip install, compiler or systemd-python in the runtime stage
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.\d+-slim", text) and "ARG DEBIAN_IMAGE=debian:bookworm-slim" in text
    build = text.split("AS build", 1)[1].split("\nFROM ", 1)[0]
    assert "scripts/build-collector.py /out/gpu-forensics.pyz" in build
    runtime = text.split("\nFROM ", 2)[2]
    assert "apt-get install -y --no-install-recommends python3 libsystemd0" in runtime
    assert "--include=python3,libsystemd0" in (PROJECT / "scripts" / "build-image.sh").read_text()
    code = "\n".join(ln for ln in runtime.splitlines() if not ln.lstrip().startswith("#"))
    for absent in ("gcc", "libsystemd-dev", "pip ", "venv", "systemd-python", "matplotlib"):
        assert absent not in code, absent
    entry = [ln for ln in lines if ln.startswith("ENTRYPOINT")][-1]
    assert json.loads(entry[len("ENTRYPOINT"):]) == ["gpu-forensics"]
    assert not any(ln.startswith("SHELL") for ln in lines)
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (PROJECT / src).exists(), src
    assert "systemd 219 to 257" in text and "chroot /host" in text


@pytest.mark.parametrize("argv,want", [(["verify", "/nonexistent-bundle"], 3), (["collect"], 0)])
def test_collect_once_maps_done_with_gaps_to_success(tmp_path, argv, want):
    if argv == ["collect"]:
        argv = ["--quiet", "collect", "--root", str(tmp_path / "host"), "--out", str(tmp_path / "b")]
        (tmp_path / "host/etc").mkdir(parents=True)  # a bare root: most evidence absent, so the tool exits 1
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    cp = subprocess.run([sys.executable, str(DEPLOY / "collect-once.py"), *argv], capture_output=True, text=True,
                        env=env, cwd=tmp_path, timeout=120)
    assert cp.returncode == want, cp.stderr[-2000:]
    assert re.search(r"gpu-forensics exited \d", cp.stderr)


# -- the watch agent: DaemonSet, Service, ServiceMonitor (issue 17 item 6) ---------------------------------
ALERTS = kustomize(DEPLOY / "alerts")
WATCH_MOUNTS = {**HOST_MOUNTS, "/run/dbus": "/host/run/dbus", "/run/log": "/host/run/log"}
#: `gpu-forensics watch`'s options, each with a value (forensics/ops/watch)
WATCH_OPTIONS = {"--root", "--listen", "--out", "--interval", "--keep-bundles", "--keep-bytes"}


def test_watch_daemonset_runs_the_agent_read_only_but_for_its_out_folder():
    ds = _named(BASE, "DaemonSet", "gpu-forensics-watch")
    ps = _pod_spec(ds)
    (c,) = ps["containers"]
    assert c["command"] == ["gpu-forensics"] and c["args"][0] == "watch"
    opts = dict(zip(c["args"][1::2], c["args"][2::2]))
    assert set(opts) <= WATCH_OPTIONS and len(c["args"]) == 1 + 2 * len(opts)
    assert opts["--root"] == "/host" and opts["--listen"] == "0.0.0.0:9464" and float(opts["--interval"]) == 60
    from forensics.ops.cli import build_parser  # the agent's own parser takes them as they are
    a = build_parser().parse_args(c["args"])
    assert (a.cmd, a.root, a.out, a.keep_bundles, a.keep_bytes) == ("watch", "/host", opts["--out"], 10, 2 ** 30)
    vols = {v["name"]: v for v in ps["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for host, inside in WATCH_MOUNTS.items():  # D-Bus sockets and both journal dirs among them
        assert mounts[inside].get("readOnly") is True and vols[mounts[inside]["name"]]["hostPath"]["path"] == host
    writable = {m["mountPath"]: vols[m["name"]] for m in c["volumeMounts"] if not m.get("readOnly")}
    assert set(writable) == {opts["--out"], "/tmp", "/host/sys/fs/cgroup"}
    assert writable[opts["--out"]]["hostPath"] == {"path": "/var/lib/gpu-forensics/watch", "type": "DirectoryOrCreate"}
    assert "emptyDir" in writable["/tmp"]
    # what the probe needs (as deploy/probe), and nothing more: not privileged, no token, no host network
    sc = c["securityContext"]
    assert ps["hostPID"] is True and not ps.get("hostNetwork") and ps["automountServiceAccountToken"] is False
    assert not sc["privileged"] and sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["DAC_READ_SEARCH", "SYS_PTRACE", "SYS_CHROOT", "SYS_ADMIN"]}
    assert set(sc["capabilities"]["add"]) - CAPS == {"SYS_ADMIN"}
    assert c["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi", "ephemeral-storage": "256Mi"}
    assert ps["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    port = {p["name"]: p for p in c["ports"]}["metrics"]
    assert port["containerPort"] == int(opts["--listen"].rsplit(":", 1)[1])
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}  # forensics/ops/watch routes()
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    from forensics.ops.watch import routes
    assert {"/healthz", "/metrics"} <= set(routes(None))


def test_watch_service_and_servicemonitor_select_the_agent_and_give_the_rules_job_and_node():
    from forensics.findings.alert_rules import WATCH_JOB
    ds, svc = _named(BASE, "DaemonSet", "gpu-forensics-watch"), _named(BASE, "Service", "gpu-forensics-watch")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items() and svc["spec"]["clusterIP"] == "None"
    assert ds["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}]
    sm = _named(ALERTS, "ServiceMonitor", "gpu-forensics-watch")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["metadata"]["namespace"] == svc["metadata"]["namespace"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [svc["metadata"]["namespace"]]}
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    # no jobLabel: the operator names the job after the Service, the job the rules use
    assert "jobLabel" not in sm["spec"] and svc["metadata"]["name"] == WATCH_JOB
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"} \
        in ep["relabelings"]
    pr = _named(ALERTS, "PrometheusRule", "gpu-forensics")
    assert pr["metadata"]["namespace"] == "gpu-forensics" and len(pr["spec"]["groups"]) == 2


def test_cgroupv2_overlay_only_makes_the_watch_agent_privileged():
    """On cgroup v2 a non-privileged container has a private cgroup namespace (containerd) and systemd's
    nsdelegate makes the kernel refuse the probe's cgroup.procs write (deploy/cgroupv2/kustomization.yaml)."""
    base, v2 = _named(BASE, "DaemonSet", "gpu-forensics-watch"), _named(CGROUPV2, "DaemonSet", "gpu-forensics-watch")
    sc = _pod_spec(v2)["containers"][0]["securityContext"]
    assert sc["privileged"] is True and sc["allowPrivilegeEscalation"] is True  # the API server refuses false with it
    undo = copy.deepcopy(v2)
    undo["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(privileged=False,
                                                                               allowPrivilegeEscalation=False)
    assert undo == base
    others = lambda docs: [d for d in docs if d["metadata"]["name"] != "gpu-forensics-watch"]  # noqa: E731
    assert others(CGROUPV2) == others(BASE)
