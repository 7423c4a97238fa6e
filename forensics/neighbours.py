"""The wordings of GPU failures that neighbour the EPERM class ("Failed to initialize NVML: Unknown
Error" after a daemon-reload) without being it: one table, :data:`SIGNATURES`, that the journal and
pod-log collectors use to keep such lines and :mod:`forensics.findings.symptoms` to classify them.
Each signature is its own symptom; none of them is, or may be read as, the EPERM class, so a line
that matches one is never an NVML/CUDA error line of that class (the collectors check this table
first).

Wordings, each as the public report that shows it (issue trackers, read 2026-12):

- ``spec-device-missing``: containerd / kubelet at create time, ``failed to generate spec: lstat
  /run/nvidia/driver/dev/nvidiactl: no such file or directory`` (NVIDIA/gpu-operator#377, #425: the
  containerised driver is not up, or the driver root is wrong);
- ``cdi-libcuda-missing``: CDI spec generation (nvidia-ctk, the device plugin's ``cdi-cri``),
  ``failed to locate libcuda.so.535.183.06: pattern libcuda.so.535.183.06 not found``
  (NVIDIA/nvidia-container-toolkit#735, #82; NVIDIA/k8s-device-plugin#621 on GKE, whose driver is in
  ``/home/kubernetes/bin/nvidia``);
- ``cuda-no-device``: HAMi-core ``[HAMI-core ERROR (pid:1436 thread=... libvgpu.c:874)]: cuInit
  failed:100`` (Project-HAMi/HAMi#1202, #1351: CUDA_VISIBLE_DEVICES set to the empty string), CUDA's
  ``CUDA_ERROR_NO_DEVICE`` / ``cudaErrorNoDevice`` / ``no CUDA-capable device is detected`` (error 100;
  tkestack/gpu-manager#188);
- ``nvml-driver-not-loaded``: ``nvidia-container-cli: initialization error: nvml error: driver not
  loaded`` (NVIDIA/nvidia-container-toolkit#260, #1269; NVIDIA/nvidia-docker#1393: no kernel module);
- ``allocate-failed``: kubelet's ``Allocate failed due to device plugin GetPreferredAllocation rpc
  failed with err: ...`` / ``Allocate failed due to rpc error: ...`` (kubernetes/kubernetes#97131,
  NVIDIA/k8s-device-plugin#231, #1397, #1223, Project-HAMi/HAMi#39: the plugin's answer to the kubelet
  failed, the pod is rejected with ``UnexpectedAdmissionError``);
- ``back-off``: kubelet's ``back-off 5m0s restarting failed container=nvidia-device-plugin-ctr
  pod=...`` and the pod event ``Back-off restarting failed container nvidia-device-plugin-ctr in pod
  ...`` (NVIDIA/gpu-operator#699, NVIDIA/k8s-device-plugin#652, #28, NVIDIA/nvidia-container-toolkit#517);
  only a device plugin's container (:func:`device_plugin`) makes it a GPU symptom;
- ``plugin-registered``: the NVIDIA device plugin's ``Registered device plugin for 'nvidia.com/gpu'
  with Kubelet`` (``Registered device plugin with Kubelet`` before v0.9; NVIDIA/k8s-device-plugin#13):
  one per start, so several in one log are restarts.
"""
from __future__ import annotations

import re

#: a path or name taken from a line is kept only in these characters (it may end up in a command)
_SAFE = r"[A-Za-z0-9_./-]"
#: (signature, pattern), checked in this order; named groups are what the line says (path, container, pod)
SIGNATURES: tuple[tuple[str, re.Pattern], ...] = (
    ("spec-device-missing", re.compile(rf"failed to generate spec: lstat (?P<path>/{_SAFE}*/nvidia{_SAFE}*): "
                                       r"no such file or directory")),
    ("cdi-libcuda-missing", re.compile(r"failed to locate libcuda\.so")),
    ("cuda-no-device", re.compile(r"cuInit failed:\s?100\b|CUDA_ERROR_NO_DEVICE|cudaErrorNoDevice"
                                  r"|no CUDA-capable device is detected")),
    ("nvml-driver-not-loaded", re.compile(r"nvml error: driver not loaded")),
    ("allocate-failed", re.compile(r"Allocate failed due to ")),
    ("back-off", re.compile(rf"[Bb]ack-off (?:\S+ )?restarting failed container[= ](?P<container>{_SAFE}+)"
                            rf"(?:.*?\bpod[= ](?P<pod>{_SAFE}+))?")),
    ("plugin-registered", re.compile(r"Registered device plugin (?:for '[^']{1,253}' )?with Kubelet")),
)
#: one search for any of them, so most lines are passed over with one test
ANY = re.compile("|".join(f"(?:{p.pattern})" for _, p in SIGNATURES))
#: the words that name a device plugin's pod or container (NVIDIA's, GKE's, HAMi's, the GPU Operator's)
PLUGIN_HINT = "device-plugin"


def device_plugin(name: str | None) -> bool:
    """True when a pod or container name names a device plugin (``nvidia-device-plugin-ctr``,
    ``nvidia-gpu-device-plugin-...``, ``hami-device-plugin-...``)."""
    return bool(name) and PLUGIN_HINT in name.lower()


def match(message: str | bytes) -> tuple[str, dict] | None:
    """``(signature, {group: value})`` for the first signature of :data:`SIGNATURES` that ``message``
    (text, or bytes read as UTF-8 with replacement) shows, else ``None``. A ``back-off`` line is a match only when the container or pod it names is a
    device plugin's (:func:`device_plugin`): any pod may crash-loop."""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    if not ANY.search(message):
        return None
    for name, pat in SIGNATURES:
        m = pat.search(message)
        if not m:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v}
        if name == "back-off" and not (device_plugin(groups.get("container")) or device_plugin(groups.get("pod"))):
            return None
        return name, groups
    return None
