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
- ``nvml-version-mismatch``: ``Failed to initialize NVML: Driver/library version mismatch`` (nvidia-smi;
  NVIDIA/k8s-device-plugin#1431) and ``nvidia-container-cli: initialization error: nvml error:
  driver/library version mismatch`` (NVIDIA/gpu-operator#898): new user space, old kernel module;
- ``cuda-system-not-ready``: CUDA error 802 ``system not yet initialized`` / ``cudaErrorSystemNotReady``
  (pytorch/pytorch#35710: fabric manager not running on an NVSwitch system); ``fabric-manager-error``: the
  fabric manager's own ``aborting fabric manager``, ``detected NVSwitch fatal error``, ``request to query
  NVSwitch device information from NVSwitch driver failed`` (NVIDIA/gpu-operator#610; leptonai/gpud
  ``fabric-manager/log_matcher.go``);
- ``ecc-uncorrectable``: ``uncorrectable ECC error encountered`` (cudaGetErrorString of
  ``cudaErrorECCUncorrectable``); ``illegal-memory-access``: ``CUDA error: an illegal memory access was
  encountered`` (``cudaErrorIllegalAddress``, error 700; PaddlePaddle/PaddleNLP#6031 and many others);
- ``gpu-lost``: nvidia-smi's ``Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.
  Reboot the system to recover this GPU`` (JosephKJ/OWOD#81; NVIDIA/open-gpu-kernel-modules#387 with
  ``: Unknown Error`` after the GPU fell off the bus), go-nvml's ``ERROR_GPU_IS_LOST`` (leptonai/gpud#604);
- ``driver-unreachable``: ``NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA
  driver``; ``nvml-library-missing``: ``NVML Shared Library Not Found`` (nvidia-smi without
  libnvidia-ml.so in the container); ``nvml-no-devices``: nvidia-smi's ``No devices were found``;
- ``cdi-unresolvable``: containerd's ``failed to inject CDI devices: unresolvable CDI devices
  nvidia.com/gpu=...`` (a CDI device the node's specs do not define);
- ``device-unhealthy``: NVIDIA/k8s-device-plugin ``internal/rm/health.go`` ``XidCriticalError: Xid=%d on
  Device=%s; marking device as unhealthy.`` (v0.14+; ``, the device will go unhealthy.`` before), ``Marking
  all devices as unhealthy``, and ``internal/plugin/server.go``'s ``'nvidia.com/gpu' device marked
  unhealthy: <id>`` (docs/sources.md "Device plugin health");
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
    # issue 26: the other ways a pod's GPU fails, each its own symptom (the wordings' sources are above)
    ("nvml-version-mismatch", re.compile(r"[Dd]river/library version mismatch")),
    ("cuda-system-not-ready", re.compile(r"system not yet initialized|cudaErrorSystemNotReady"
                                         r"|CUDA_ERROR_SYSTEM_NOT_READY")),
    ("ecc-uncorrectable", re.compile(r"uncorrectable ECC error encountered|CUDA_ERROR_ECC_UNCORRECTABLE"
                                     r"|cudaErrorECCUncorrectable")),
    ("illegal-memory-access", re.compile(r"an illegal memory access was encountered|CUDA_ERROR_ILLEGAL_ADDRESS"
                                         r"|cudaErrorIllegalAddress")),
    ("gpu-lost", re.compile(r"Unable to determine the device handle for GPU|NVML_ERROR_GPU_IS_LOST"
                            r"|ERROR_GPU_IS_LOST|: GPU is lost")),
    ("driver-unreachable", re.compile(r"couldn't communicate with the NVIDIA driver")),
    ("nvml-library-missing", re.compile(r"NVML Shared Library Not Found")),
    ("nvml-no-devices", re.compile(r"No devices were found")),
    ("cdi-unresolvable", re.compile(r"unresolvable CDI devices")),
    ("device-unhealthy", re.compile(rf"XidCriticalError: Xid[=:](?P<xid>\d{{1,4}}) on Device=(?P<device>{_SAFE}{{1,80}}?)"
                                    r"[;,] (?:marking device as unhealthy|the device will go unhealthy)"
                                    r"|device marked unhealthy: |Marking all devices as unhealthy")),
    ("fabric-manager-error", re.compile(r"aborting fabric manager|detected NVSwitch fatal error"
                                        r"|request to query NVSwitch device information from NVSwitch driver failed")),
)
#: the failure a line shows (an incident's symptom class): what the cause rules say they can explain
#: (forensics/findings/causes). ``nvml-unknown`` is the EPERM family ("Failed to initialize NVML: Unknown
#: Error", ``cuInit failed``: journal.nvml-error, container.log-error), which no signature here is;
#: ``unknown`` is a window whose symptom no line names (``--incident``, Prometheus).
SYMPTOM_CLASSES: dict[str, str] = {
    "nvml-unknown": "NVML or CUDA cannot open the GPU (\"Failed to initialize NVML: Unknown Error\", cuInit failed)",
    "version-mismatch": "NVML's user-space library and the loaded kernel module differ (\"Driver/library version mismatch\")",
    "gpu-lost": "the GPU is lost to the driver (\"Unable to determine the device handle\", \"GPU is lost\")",
    "ecc": "an uncorrectable ECC error (\"uncorrectable ECC error encountered\")",
    "app-fault": "a fault in the application's own GPU code (\"an illegal memory access was encountered\")",
    "system-not-ready": "CUDA says the system is not yet initialized (error 802: NVSwitch fabric not ready)",
    "no-driver": "no usable driver in the container (driver not loaded, unreachable, or its library missing)",
    "create-failed": "the container could not be created with its GPU (device node, CDI or allocation failure)",
    "no-device": "the process sees no GPU (CUDA error 100, \"No devices were found\")",
    "oom": "a process or container was killed for memory (OOM kill)",
    "device-unhealthy": "the device plugin marked a GPU unhealthy (allocatable GPUs fell)",
    "plugin-down": "the device plugin is down or crash-looping",
    "unknown": "a window whose symptom no log line names (--incident, Prometheus)",
}
#: signature -> the symptom class of :data:`SYMPTOM_CLASSES` it shows (``plugin-registered`` shows none)
SYMPTOM_OF: dict[str, str] = {
    "spec-device-missing": "create-failed", "cdi-libcuda-missing": "create-failed", "cdi-unresolvable": "create-failed",
    "allocate-failed": "create-failed", "cuda-no-device": "no-device", "nvml-no-devices": "no-device",
    "nvml-driver-not-loaded": "no-driver", "driver-unreachable": "no-driver", "nvml-library-missing": "no-driver",
    "back-off": "plugin-down", "plugin-restart": "plugin-down", "nvml-version-mismatch": "version-mismatch",
    "cuda-system-not-ready": "system-not-ready", "fabric-manager-error": "system-not-ready",
    "ecc-uncorrectable": "ecc", "illegal-memory-access": "app-fault", "gpu-lost": "gpu-lost",
    "device-unhealthy": "device-unhealthy",
}
#: the signatures whose line in a GPU pod's log or a runtime's journal opens an incident (a failure the pod
#: itself met); a device plugin's restarts and its marking of a GPU are the node's, weighed as causes
OPENS_INCIDENT = frozenset({"spec-device-missing", "cdi-libcuda-missing", "cdi-unresolvable", "allocate-failed",
                            "cuda-no-device", "nvml-no-devices", "nvml-driver-not-loaded", "driver-unreachable", "nvml-library-missing",
                            "nvml-version-mismatch", "cuda-system-not-ready", "ecc-uncorrectable",
                            "illegal-memory-access", "gpu-lost"})
#: one search for any of them, so most lines are passed over with one test
ANY = re.compile("|".join(f"(?:{p.pattern})" for _, p in SIGNATURES))
#: texts one of which every line :data:`ANY` finds contains (each alternative's longest literal run), so that a
#: reader may pass over a line with ``in`` tests before the search (the journal's NVML pass);
#: tests/test_one_home.py derives them from the patterns again and checks they agree
TEXTS = ("failed to generate spec: lstat ", "failed to locate libcuda.so", "cuInit failed:", "CUDA_ERROR_NO_DEVICE",
         "cudaErrorNoDevice", "no CUDA-capable device is detected", "nvml error: driver not loaded",
         "Allocate failed due to ", "restarting failed container", "Registered device plugin ",
         "river/library version mismatch", "system not yet initialized", "cudaErrorSystemNotReady",
         "CUDA_ERROR_SYSTEM_NOT_READY", "uncorrectable ECC error encountered", "CUDA_ERROR_ECC_UNCORRECTABLE",
         "cudaErrorECCUncorrectable", "an illegal memory access was encountered", "CUDA_ERROR_ILLEGAL_ADDRESS",
         "cudaErrorIllegalAddress", "Unable to determine the device handle for GPU", "ERROR_GPU_IS_LOST",
         ": GPU is lost", "couldn't communicate with the NVIDIA driver", "NVML Shared Library Not Found",
         "No devices were found", "unresolvable CDI devices", "XidCriticalError: Xid", "device marked unhealthy: ",
         "Marking all devices as unhealthy", "aborting fabric manager", "detected NVSwitch fatal error",
         "request to query NVSwitch device information from NVSwitch driver failed")
#: the EPERM class's wording (``nvml-unknown``: NVML or CUDA cannot open a device the container still
#: sees), one table for every reader of a log (the journal's NVML pass, pod logs): ``(signature, regex)``,
#: the first that matches names the line; ``None`` names it by the matched text (``NVML_ERROR_*``,
#: ``CUDA_ERROR_*``, go-nvml's ``ERROR_UNKNOWN``). A line one of :data:`SIGNATURES` also matches is that
#: failure, not this class (:func:`nvml_class`)
NVML_CLASS = (("nvml-unknown-error", r"Failed to initialize NVML: Unknown Error"),
              (None, r"Failed to initialize NVML: ERROR_UNKNOWN"),  # go-nvml's spelling (device plugin, dcgm-exporter)
              ("nvml-init-failed", r"Failed to initialize NVML"),
              ("cuinit-failed", r"cuInit failed"),
              (None, r"NVML_ERROR_[A-Z_]*"), (None, r"CUDA_ERROR_[A-Z_]*"))
#: a text every line of :data:`NVML_CLASS` holds (a cheap test before the patterns; the journal's pass
#: searches MESSAGE for these)
NVML_MARKERS = ("Failed to initialize NVML", "cuInit failed", "NVML_ERROR_", "CUDA_ERROR_")
_NVML_CLASS = tuple((name, re.compile(p)) for name, p in NVML_CLASS)
_NVML_CLASS_BYTES = tuple((name, re.compile(p.encode())) for name, p in NVML_CLASS)
NVML_ANY_BYTES = re.compile(b"|".join(re.escape(m.encode()) for m in NVML_MARKERS))
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


def nvml_class(message: str | bytes) -> str | None:
    """The signature of :data:`NVML_CLASS` ``message`` (text, or bytes as a log holds them) shows
    (``nvml-unknown-error``, ``nvml-init-failed``, ``cuinit-failed``, or the matched name such as
    ``NVML_ERROR_NO_PERMISSION``), else ``None``; ``None`` too for a line of a neighbouring failure
    (:func:`match`: ``cuInit failed:100``, ``CUDA_ERROR_NO_DEVICE``, ``Failed to initialize NVML:
    Driver/library version mismatch``), which is not this class."""
    table = _NVML_CLASS_BYTES if isinstance(message, bytes) else _NVML_CLASS
    if not any((m.encode() if isinstance(message, bytes) else m) in message for m in NVML_MARKERS) or match(message):
        return None
    for name, pat in table:
        if m := pat.search(message):
            g = m.group(0)
            return name or (g.decode() if isinstance(g, bytes) else g)
    return None
