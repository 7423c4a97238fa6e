"""Docker (moby): dockerd runs its containers through its own containerd, in the namespace ``moby``.

Docker keeps each container's settings in ``<data-root>/containers/<id>/config.v2.json`` (moby
container/container.go), data root /var/lib/docker unless ``dockerd --data-root`` or daemon.json's
``data-root`` (``graph`` in older releases) says otherwise; its OCI spec carries no pod identity, which
cri-dockerd (and dockershim before it) put in the container's labels (stacks.md section 6)."""
from __future__ import annotations

from forensics.engines.engine import Engine

#: moby daemon/config ``DefaultContainersNamespace``
NAMESPACE = "moby"
DATA_ROOT = "/var/lib/docker"
DAEMON_JSON = "/etc/docker/daemon.json"
_WHY = "moby daemon/daemon_unix.go UsingSystemd, Docker 20.10+ (moby#40846); stacks.md section 6"

ENGINE = Engine(
    name="docker", title="Docker", scope_prefix="docker",   # moby daemon/oci_linux.go scopePrefix
    cgroup_default={2: ("systemd", "Docker's default on cgroup v2 (systemd when native.cgroupdriver is unset and "
                                   f"the host booted with systemd; {_WHY})"),
                    1: ("cgroupfs", f"Docker's default on cgroup v1 (cgroupfs; {_WHY})")},
    cgroup_setting="daemon.json exec-opts native.cgroupdriver",
    pod_annotations=("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name"),
    cdi_run="docker run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi -L")
