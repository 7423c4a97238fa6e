"""CRI-O: Kubernetes' engine on OpenShift and some others, over containers/storage.

Layout: ``<runroot>/<driver>-containers/<id>/userdata/config.json`` is the bundle (containers/storage
store.go ``filepath.Join(s.RunRoot(), middleDir, id, "userdata")``; stacks.md section 7), run root
/run/containers/storage unless ``[crio] runroot`` of crio.conf(.d), ``[storage] runroot`` of
storage.conf or ``crio --runroot``; its runc state is under the runtime's ``runtime_root`` (crio.conf
``[crio.runtime.runtimes.<name>] runtime_root``, /run/runc by default). Its conmon runs in
``crio-conmon-<id>.scope``, which is no container."""
from __future__ import annotations

from forensics import configdoc as cd
from forensics.engines.engine import Engine, Settings

CONFIGS = ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d")
#: CRI-O's compiled-in hooks_dir (cri-o pkg/config/config.go)
HOOKS_DEFAULT = ("/usr/share/containers/oci/hooks.d",)


def settings(docs: list[dict]) -> dict:
    """CRI-O's ``crio.conf`` then its drop-ins in name order (crio.conf(5): later files override) →
    ``{"cgroup_manager": str|None (None: not set; CRI-O's default is systemd, stacks.md 7),
    "hooks_dir": [str] (CRI-O's compiled default when not set), "hooks_dir_basis", "default_runtime":
    str|None, "runtimes": {name: runtime_path|None}}``."""
    merged: dict = {}
    for d in docs:
        merged = cd.merge(merged, d, deep_plugins=True)
    rt = cd.tab(cd.get(merged, "crio", "runtime"))
    hooks = cd.str_list(rt.get("hooks_dir"))
    return {"cgroup_manager": cd.text(rt.get("cgroup_manager")),
            "hooks_dir": hooks or list(HOOKS_DEFAULT),
            "hooks_dir_basis": "config" if hooks else "CRI-O's default (pkg/config/config.go)",
            "default_runtime": cd.text(rt.get("default_runtime")),
            "runtimes": {str(k): cd.text(cd.tab(v).get("runtime_path")) for k, v in cd.tab(rt.get("runtimes")).items()}}


def _driver(s: dict) -> tuple[str | None, str]:
    v = s["cgroup_manager"]
    return (v if v in ("systemd", "cgroupfs") else None,
            f"cgroup_manager = {v}" if v else "cgroup_manager not set: CRI-O's default (systemd) applies")


ENGINE = Engine(
    name="crio", title="CRI-O", scope_prefix="crio",   # cri-o internal/config/cgmgr/systemd.go
    cgroup_default={None: ("systemd", "CRI-O's default (cgroup_manager = \"systemd\"; cri-o "
                                      "internal/config/cgmgr/cgmgr_linux.go, stacks.md section 7)")},
    cgroup_setting="crio.conf [crio.runtime] cgroup_manager",
    pod_annotations=("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name"),
    settings=Settings(CONFIGS[:1], "toml", "CRI-O config", settings, _driver, drop_ins=CONFIGS[1],
                      suffixes=(".conf", ".toml")))
