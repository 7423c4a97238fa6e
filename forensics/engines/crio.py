"""CRI-O: Kubernetes' engine on OpenShift and some others, over containers/storage.

Layout: ``<runroot>/<driver>-containers/<id>/userdata/config.json`` is the bundle (containers/storage
store.go ``filepath.Join(s.RunRoot(), middleDir, id, "userdata")``; stacks.md section 7), run root
/run/containers/storage unless ``[crio] runroot`` of crio.conf(.d), ``[storage] runroot`` of
storage.conf or ``crio --runroot``; its runc state is under the runtime's ``runtime_root`` (crio.conf
``[crio.runtime.runtimes.<name>] runtime_root``, /run/runc by default). Its conmon runs in
``crio-conmon-<id>.scope``, which is no container."""
from __future__ import annotations

from forensics.engines.engine import Engine

CONFIGS = ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d")

ENGINE = Engine(
    name="crio", title="CRI-O", scope_prefix="crio",   # cri-o internal/config/cgmgr/systemd.go
    cgroup_default={None: ("systemd", "CRI-O's default (cgroup_manager = \"systemd\"; cri-o "
                                      "internal/config/cgmgr/cgmgr_linux.go, stacks.md section 7)")},
    cgroup_setting="crio.conf [crio.runtime] cgroup_manager",
    pod_annotations=("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name"))
