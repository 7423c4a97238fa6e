"""Podman (libpod): daemonless containers over containers/storage, each watched by its own conmon.

Seen on a real rootful Podman 4.3.1 (Debian 12) with runc, and in libpod's sources:

- the bundle runc runs is the container's *static* directory under the graph root,
  ``<graphroot>/<driver>-containers/<id>/userdata/config.json`` (libpod ``ctr.bundlePath()``), not the run
  root's ``userdata`` (which holds only conmon.pid, pidfile, hosts, resolv.conf, oci-log): runc's
  state.json names it in its ``bundle=`` label, conmon's ``-b``;
- runc's state is under /run/runc (runc's default root; crun keeps its own under /run/crun);
- every spec carries ``io.container.manager=libpod`` (libpod/define/annotations.go
  ``ContainerManagerAnnotation``), and also ``io.kubernetes.cri-o.Created`` and ``.TTY``: an
  ``io.kubernetes.cri-o.*`` annotation is no sign of CRI-O;
- the cgroup manager is containers.conf(5) ``[engine] cgroup_manager``, "systemd" unless set (libpod
  pkg/config default; rootless on cgroup v1 falls back to cgroupfs); under systemd a container runs in
  ``machine.slice/libpod-<id>.scope`` (libpod/runtime_ctr.go), under cgroupfs in
  ``/libpod_parent/libpod-<id>``;
- GPUs: CDI devices by name, ``podman run --device nvidia.com/gpu=all`` (Podman >= 4.1.0), from the specs
  in /etc/cdi and /var/run/cdi; the legacy way is the toolkit's OCI hook in
  /usr/share/containers/oci/hooks.d (``oci-nvidia-hook.json``), outside the spec.
"""
from __future__ import annotations

from forensics.engines.engine import Engine

#: containers.conf(5): the system file, its drop-ins, and the distribution's defaults, in override order
CONFIGS = ("/usr/share/containers/containers.conf", "/etc/containers/containers.conf",
           "/etc/containers/containers.conf.d")
MARKER = ("io.container.manager", "libpod")
CDI_MIN_VERSION = "4.1.0"

ENGINE = Engine(
    name="podman", title="Podman", scope_prefix="libpod",
    cgroup_default={None: ("systemd", "Podman's default (containers.conf(5) [engine] cgroup_manager: "
                                      "\"systemd\" unless set)")},
    cgroup_setting="containers.conf [engine] cgroup_manager",
    marker=MARKER,
    cdi_run="podman run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi -L")
