"""Set up the sample node ``samples/node3-gpu`` (a host root) for the demo and the tests.

The journal is kept in git as Journal Export Format text (``node3-gpu.journal.export``) and built
into a real binary ``.journal`` with systemd-journal-remote here, at
``node3-gpu/var/log/journal/<machine-id>/system.journal`` (ignored by git).

The sample: node3-gpu, Asia/Seoul, Ubuntu 24.04 with systemd 255, a single boot since 2025-12-25.
- July incident: the pod's GPU was lost between 2026-07-11 12:34 and 2026-08-02 00:00 KST; the journal
  was rotated and starts 2026-07-17; apt/dpkg history reaches back to 2025-08 with nothing in the window.
- September incident: snapd's refresh requested a daemon-reload at 2026-09-02 13:05:13 KST and the
  trainer pod's readiness probe failed with "Failed to initialize NVML: Unknown Error" 14 s later.

Container and runtime evidence (the node as collected on 2026-11-30; all committed as plain files):
- Node: 2x NVIDIA H100 80GB HBM3 (GPU 0 GPU-5a8e2c41-..., GPU 1 GPU-9c1f7e22-...), driver 550.90.07 on
  the host, containerd 1.7.28, runc 1.2.5, nvidia-container-toolkit 1.17.8; cgroup v1 (hybrid;
  ``systemd.unified_cgroup_hierarchy=0`` in /proc/cmdline). /proc/devices: nvidia 195, nvidia-uvm 508,
  nvidia-nvlink 509, nvidia-caps-imex-channels 510, nvidia-caps 511.
- /etc/containerd/config.toml: ``version = 2`` (a ``containerd config default`` dump), ``enable_cdi =
  false``, default runtime ``nvidia`` (BinaryName /usr/bin/nvidia-container-runtime), plus ``nvidia-cdi``
  (/usr/bin/nvidia-container-runtime.cdi, ``pod_annotations = ["cdi.k8s.io/*"]``) and ``runc``; every
  handler has ``SystemdCgroup = true``. /etc/nvidia-container-runtime/config.toml: ``mode = "legacy"``.
  /etc/cdi/nvidia.yaml: ``nvidia-ctk cdi generate`` output (devices 0, 1, both UUIDs, all), written
  when the canary below was set up.
- Containers (bundle config.json as the runtime rewrote it, runc state.json, cgroup v1 devices.list,
  systemd transient unit + 50-*.conf drop-ins, CRI log under /var/log/pods; sandbox bundles left out):
  - kube-system/nvidia-device-plugin-daemonset-7xk2p, created 2026-06-30 10:12:57 KST from the static
    manifest: DEVICE_LIST_STRATEGY=envvar, PASS_DEVICE_SPECS=false, NVIDIA_DRIVER_ROOT=/,
    NVIDIA_VISIBLE_DEVICES=all from its image; legacy prestart hook, no GPU in the spec. Its log is
    start-up only (it holds its device files open, so it never noticed).
  - gpu-operator/nvidia-dcgm-exporter-x7k9q, created 2026-06-30 10:13:19 KST, the same way. Its
    metrics stop at 2026-07-11 12:34 KST (samples/record_prometheus.py) while its log stays silent.
    Both lost their GPU rules in the July reload: devices.list holds runc's defaults only. The
    correlator folds both into the July incident (their windows contain it).
  - ml/trainer-0 (pod uid 3f9d2a1c-...; container 6a1f0c2e9b7d..., created 13:03:41 KST on
    2026-09-02), NVIDIA_VISIBLE_DEVICES=all then =GPU 0's UUID (the last wins), legacy hook. Its
    entrypoint runs ``nvidia-smi -L`` every 10 s: OK until 13:05:13.09 KST, then "Failed to initialize
    NVML: Unknown Error" from 13:05:23 KST, backing off to every 6 h. Its training process keeps its
    device files open and runs on, so the pod was never restarted. Its env holds the planted fake
    credential ``AWS_SECRET_ACCESS_KEY=sample-not-a-secret-...``, which must never reach a bundle.
  - gpu-ops/gpu-probe, a CDI canary that ops created 2026-10-14 10:15:52 KST (runtime class
    nvidia-cdi, pod annotation ``cdi.k8s.io/gpu-probe: nvidia.com/gpu=<GPU 1's UUID>``) before testing
    with the manual daemon-reload of 10:22:03 KST in the journal: GPU 1 and the common nodes are in
    linux.devices, resources.devices, the DeviceAllow drop-in and devices.list; ``nvidia-smi -L`` every
    hour, all OK.
- Not in the sample: /dev (device nodes cannot be committed to git) and /proc/<pid> of the container
  inits. The containers' /dev therefore cannot be read (each init's /proc/<pid>/stat is recorded as
  absent) and --probe has nothing to open; the host's NVIDIA nodes and /dev/char links are unknown.

Run ``python3 samples/build.py`` to (re)build the journal.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from journalbuild import build_journal  # noqa: E402

ROOT = HERE / "node3-gpu"
EXPORT = HERE / "node3-gpu.journal.export"
MACHINE_ID = "5f1c0b9e7d3a4c21a8e6b2f4d9c1e370"
JOURNAL = ROOT / "var" / "log" / "journal" / MACHINE_ID / "system.journal"
#: answers recorded from a real Prometheus by samples/record_prometheus.py (replayed via file://)
PROMETHEUS = HERE / "node3-gpu-prometheus"
#: windows the demo passes with --incident: none; July comes from the metrics, September from the journal
INCIDENTS: list[str] = []


def ensure_journal(force: bool = False) -> Path:
    """Build the sample's binary journal when it is missing or older than the export text.
    Returns its path. Raises ``FileNotFoundError`` when systemd-journal-remote is not installed."""
    if force or not JOURNAL.exists() or JOURNAL.stat().st_mtime < EXPORT.stat().st_mtime:
        build_journal(EXPORT, JOURNAL)
    return JOURNAL


if __name__ == "__main__":
    print(ensure_journal(force=True))
