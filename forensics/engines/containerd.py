"""containerd and its CRI plugin (Kubernetes' engine on most nodes; k3s and RKE2 embed it).

Layout (docs/sources.md "Container engine layouts"): tasks under ``<state>/io.containerd.runtime.v2.task/
<namespace>/<id>/`` (the v1 shim's ``io.containerd.runtime.v1.linux``) for the state dirs below, the task
directory being the bundle runc ran; the CRI plugin runs Kubernetes containers in the namespace ``k8s.io``
(containerd pkg/cri constants) and its settings apply to that namespace only (docs/cri/config.md: "not
recognized by other containerd clients such as ctr, nerdctl, and Docker/Moby")."""
from __future__ import annotations

from forensics.engines.engine import Engine

#: containerd's own, k3s's and RKE2's, and dockerd's private one (moby daemon/command/daemon.go ``<exec-root>/
#: containerd/daemon``)
STATE_DIRS = ("/run/containerd", "/run/k3s/containerd", "/run/docker/containerd/daemon")
TASK_DIRS = ("io.containerd.runtime.v2.task", "io.containerd.runtime.v1.linux")
#: the namespace the CRI plugin runs Kubernetes containers in (containerd pkg/cri constants)
CRI_NAMESPACE = "k8s.io"

ENGINE = Engine(
    name="containerd", title="containerd", scope_prefix="cri-containerd",
    cgroup_default={None: ("cgroupfs", "containerd's default (SystemdCgroup is false unless set; containerd "
                                       "docs/cri/config.md: \"containerd and Kubernetes use the legacy cgroupfs "
                                       "driver for managing cgroups by default\")")},
    cgroup_setting="the CRI plugin's runc options SystemdCgroup in config.toml",
    pod_annotations=("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                     "io.kubernetes.cri.container-name"))
