"""Other GPU failures seen on the node: the neighbours of the EPERM class (issue 14 item 7), each its
own symptom class with its own remedy, never merged with it.

The collectors keep the lines (:mod:`forensics.neighbours` holds the wordings and their sources):
``journal.symptom`` (kubelet, containerd, docker, NVIDIA units, by journald's trusted fields),
``container.log-symptom`` (pod logs of GPU pods and device plugins) and ``kube.event`` (a plugin pod's
``BackOff`` event). :func:`classify` turns them into analysis.json's top-level ``symptoms``. A
``journal.nvml-error`` / ``container.log-error`` (the EPERM class) is never read here, and the
collectors never make a neighbour's line one of those.
"""
from __future__ import annotations

from .. import neighbours
from ..events import Event
from ..timeutil import iso_z
from .commands import Ev, command, valid
from .record import Record
from .requester import cite

#: the kinds whose lines may show a neighbouring failure
KINDS = ("journal.symptom", "container.log-symptom", "kube.event")
#: every kind :func:`classify` reads: those, and the containers it names (handing it only these leaves a
#: dpkg line's deferred fields unmade)
READS = frozenset(KINDS) | {"container.created"}
#: evidence citations kept per class (``count`` counts them all)
MAX_EVIDENCE = 20
#: restarts or re-registrations of a device plugin that make a crash loop without a back-off line
CRASHLOOP_RESTARTS = 2

#: class -> (the signatures of forensics.neighbours it gathers, title, what it means and what to change, sources)
CLASSES: dict[str, tuple[tuple[str, ...], str, str, tuple[str, ...]]] = {
    "driver-not-ready": (
        ("spec-device-missing",),
        "A GPU device node was missing when the container was created",
        "containerd could not build the container's spec: a device node the NVIDIA runtime or CDI spec names "
        "does not exist under the driver root. Either the containerised driver (the GPU Operator's driver "
        "pod, which mounts its root at /run/nvidia/driver) is not up yet or failed, or the driver root given "
        "to the toolkit and device plugin is wrong (a driver installed on the host has root /). Get the driver "
        "pod Running and validated, or set the driver root to where the driver really is; the pod is created "
        "once the node exists. Not the EPERM class: no container ran.",
        ("https://github.com/NVIDIA/gpu-operator/issues/377", "https://github.com/NVIDIA/gpu-operator/issues/425")),
    "cdi-driver-root": (
        ("cdi-libcuda-missing",),
        "CDI spec generation could not find libcuda.so",
        "nvidia-ctk or the device plugin (deviceListStrategy cdi-*) looked for the driver's libraries under "
        "the driver root it was given and found none: the root is wrong. Set the device plugin's driver root "
        "(NVIDIA's chart: nvidiaDriverRoot, env NVIDIA_DRIVER_ROOT) to the directory that holds the driver: / "
        "for a host-installed driver, /run/nvidia/driver for the GPU Operator's driver container, "
        "/home/kubernetes/bin/nvidia on GKE COS (stacks.md GKE). Not the EPERM class: no CDI device was made.",
        ("https://github.com/NVIDIA/nvidia-container-toolkit/issues/735",
         "https://github.com/NVIDIA/k8s-device-plugin/issues/621")),
    "cuda-no-device": (
        ("cuda-no-device",),
        "CUDA found no device (cuInit error 100)",
        "CUDA returns error 100 (CUDA_ERROR_NO_DEVICE, 'no CUDA-capable device is detected'; HAMi-core prints "
        "'cuInit failed:100') when the process sees no GPU: CUDA_VISIBLE_DEVICES set to the empty string or to "
        "no device given to the container, or no GPU asked for. Remove CUDA_VISIBLE_DEVICES=\"\" from the pod "
        "spec (or set it to the GPUs given) and check the pod requests the GPU resource. Not the EPERM class: "
        "the device cgroup denied nothing.",
        ("https://github.com/Project-HAMi/HAMi/issues/1351", "https://github.com/Project-HAMi/HAMi/issues/1202")),
    "driver-not-loaded": (
        ("nvml-driver-not-loaded",),
        "The NVIDIA kernel driver was not loaded",
        "libnvidia-container found no loaded NVIDIA kernel module, so no GPU container can start: the driver is "
        "not installed, not built for the running kernel (a kernel upgrade), or its driver container is not up. "
        "Install or load the driver for this kernel; restarting pods does not help. Not the EPERM class.",
        ("https://github.com/NVIDIA/nvidia-container-toolkit/issues/260",
         "https://github.com/NVIDIA/nvidia-container-toolkit/issues/1269")),
    "allocate-failed": (
        ("allocate-failed",),
        "The device plugin failed the kubelet's Allocate call",
        "The kubelet asked the device plugin for the pod's GPUs and the call failed, so the pod was rejected "
        "(UnexpectedAdmissionError) before any container was made. The error the line quotes is the plugin's "
        "(NVML init failed, GPU lost, plugin gone); a plugin whose NVML init failed stays so until it "
        "restarts (k8s-device-plugin#1223). Read the plugin's log. Not the EPERM class.",
        ("https://github.com/kubernetes/kubernetes/issues/97131", "https://github.com/NVIDIA/k8s-device-plugin/issues/231",
         "https://github.com/NVIDIA/k8s-device-plugin/issues/1223")),
    "device-plugin-crashloop": (
        ("back-off", "plugin-restart", "plugin-registered"),
        "The device plugin is in a crash loop",
        "The device plugin keeps exiting and the kubelet backs off restarting it (or it restarted or "
        "re-registered again and again): while it is down the node advertises and allocates no GPU. Its "
        "previous run's last lines say why (NVML init failed, a config error, the driver not ready). Not the "
        "EPERM class: running GPU containers keep their devices.",
        ("https://github.com/NVIDIA/gpu-operator/issues/699", "https://github.com/NVIDIA/k8s-device-plugin/issues/652",
         "https://github.com/NVIDIA/k8s-device-plugin/issues/13")),
}
_CLASS_OF = {sig: name for name, (sigs, *_rest) in CLASSES.items() for sig in sigs}


def _signature(e: Event) -> tuple[str, dict] | None:
    if e.kind == "kube.event":
        return neighbours.match(e.attrs.get("message") or "")
    sig = e.attrs.get("signature")
    return (sig, {"path": e.attrs.get("path"), "container": e.attrs.get("container")}) if sig else None


def _pod(e: Event) -> tuple[str | None, str | None]:
    """``(namespace, name)`` of the pod a symptom line is about, as far as it says."""
    a = e.attrs
    if e.kind == "container.log-symptom":
        return a.get("namespace"), a.get("pod")
    if e.kind == "kube.event":
        return a.get("namespace"), a.get("name")
    pod = a.get("pod") or ""
    if "/" in pod:
        ns, _, name = pod.partition("/")
        return ns, name
    if "_" in pod:  # the kubelet's back-off line: pod=name_namespace(uid)
        name, _, ns = pod.partition("_")
        return ns, name
    return None, None


def classify(events: list[Event], facts: dict, node: str | None) -> list[dict]:
    """analysis.json's ``symptoms``: one record per class of :data:`CLASSES` the events show, in the order
    of that table: ``{"class", "title", "count", "first", "last" (ISO UTC), "signatures" ({signature:
    lines}), "evidence" (citations: bundle path and line or cursor, at most :data:`MAX_EVIDENCE`),
    "evidence_omitted", "remedy": {"what", "check" (commands only), "sources"}}``. ``facts`` (the
    containers' records) adds the containers whose spec sets ``CUDA_VISIBLE_DEVICES`` to the empty string
    to ``cuda-no-device``. A device plugin's crash loop needs a back-off line or
    :data:`CRASHLOOP_RESTARTS` restarts and re-registrations (pod logs give only a run's second
    registration on: the first is its start). Raises nothing for odd attrs."""
    found: dict[str, list[tuple[Event, str, dict]]] = {}
    for e in events:
        if e.kind not in KINDS or not (sig := _signature(e)) or sig[0] not in _CLASS_OF:
            continue
        found.setdefault(_CLASS_OF[sig[0]], []).append((e, sig[0], sig[1]))
    loop = found.get("device-plugin-crashloop", [])
    if loop and not any(s == "back-off" for _, s, _g in loop) and len(loop) < CRASHLOOP_RESTARTS:
        del found["device-plugin-crashloop"]
    out = []
    for name, (_sigs, title, what, sources) in CLASSES.items():
        if name not in found:
            continue
        hits = sorted(found[name], key=lambda h: h[0].at)
        tally: dict[str, int] = {}
        for e, s, _g in hits:
            tally[s] = tally.get(s, 0) + _lines(e)
        evidence = [cite(e) for e, _s, _g in hits[:MAX_EVIDENCE]]
        if name == "cuda-no-device":
            evidence += _empty_visible_devices(facts, events)
        out.append({"class": name, "title": title, "count": sum(tally.values()), "first": iso_z(hits[0][0].at),
                    "last": iso_z(hits[-1][0].at), "signatures": tally, "evidence": evidence,
                    "evidence_omitted": max(0, len(hits) - MAX_EVIDENCE),
                    "remedy": {"what": what, "check": _checks(name, hits, node), "sources": list(sources)}})
    return out


def _lines(e: Event) -> int:
    """How many log lines an event stands for: a Kubernetes event's ``count`` (it folds repeats), else 1."""
    n = e.attrs.get("count") if e.kind == "kube.event" else 1
    return n if isinstance(n, int) and n > 0 else 1


def _empty_visible_devices(facts: dict, events: list[Event]) -> list[dict]:
    created = {e.attrs.get("id"): e for e in events if e.kind == "container.created"}
    out = []
    for c in (Record.of(c) for c in facts.get("containers") or [] if isinstance(c, dict)):
        if c.env.get("CUDA_VISIBLE_DEVICES") == "":
            ev = created.get(c.id)
            out.append({**(cite(ev) if ev else {}), "source": "containers", "container": c.id,
                        "pod": f"{c.pod_namespace}/{c.pod}", "finding": 'CUDA_VISIBLE_DEVICES=""'})
    return out




def _checks(name: str, hits: list, node: str | None) -> list[str]:
    """Read-only commands that check what the class says, built only from names that have their grammar
    (:mod:`forensics.findings.commands`: a path or pod name from the evidence that does not is left out:
    evidence may be hostile)."""
    on_node = (command("kubectl get pods -A -o wide --field-selector", Ev("node", node, "spec.nodeName="))
               or "kubectl get pods -A -o wide")
    pods = sorted({p for e, _s, _g in hits if valid("namespace", (p := _pod(e))[0]) and valid("pod", p[1])})
    if name == "driver-not-ready":
        paths = sorted({g["path"] for _e, _s, g in hits if valid("path", g.get("path"))})
        return ([command("ls -l", Ev("path", p)) for p in paths] + [f"{on_node} | grep -i -E 'driver|toolkit|validator'",
                                                 "lsmod | grep nvidia"])
    if name == "cdi-driver-root":
        return ["find / -xdev -name 'libcuda.so.*' 2>/dev/null",
                "kubectl get ds -A -o yaml | grep -n -E 'NVIDIA_DRIVER_ROOT|nvidiaDriverRoot|driver-root'"]
    if name == "cuda-no-device":
        return [f"kubectl exec -n {ns} {pod} -- printenv CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES"
                for ns, pod in pods] + [f"kubectl get pod -n {ns} {pod} -o yaml | grep -n -E 'CUDA_VISIBLE_DEVICES|"
                                        "nvidia.com/'" for ns, pod in pods]
    if name == "driver-not-loaded":
        return ["lsmod | grep nvidia", "nvidia-smi", "dmesg | grep -i -E 'NVRM|nvidia' | tail -n 50"]
    plugin = f"{on_node} | grep -i device-plugin"
    if name == "allocate-failed":
        return [plugin]
    return [plugin] + [f"kubectl logs -n {ns} {pod} --all-containers --previous --tail=50" for ns, pod in pods]
