"""CRI-O: Kubernetes' engine on OpenShift and some others, over containers/storage.

Layout: ``<runroot>/<driver>-containers/<id>/userdata/config.json`` is the bundle (containers/storage
store.go ``filepath.Join(s.RunRoot(), middleDir, id, "userdata")``; stacks.md section 7), run root
/run/containers/storage unless ``[crio] runroot`` of crio.conf(.d), ``[storage] runroot`` of
storage.conf or ``crio --runroot``; its runc state is under the runtime's ``runtime_root`` (crio.conf
``[crio.runtime.runtimes.<name>] runtime_root``, /run/runc by default). Its conmon runs in
``crio-conmon-<id>.scope``, which is no container."""
from __future__ import annotations

from forensics import configdoc as cd
import forensics.engines.storage as storage
from forensics.engines.engine import Discovery, Engine, Settings, Version, flag

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


def roots_from_cmdline(name: str, argv: list[str], cwd: str | None, where: str) -> list[tuple]:
    """``crio --runroot``; conmon's ``-c <id> -n <name>`` (the container's name) and runc's root among its
    ``--runtime-arg`` values (conmon's ``-r`` is the runtime binary, not a root)."""
    if name == "crio":
        return [("crio", flag(argv, "runroot"), f"{where} crio --runroot")]
    out = []
    cid, cname = flag(argv, "c", "cid"), flag(argv, "n", "name")
    if cid and cname:
        out.append(("name", (cid, cname), f"{where} conmon -n"))
    args = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--runtime-arg"]
    args += [a.split("=", 1)[1] for a in argv if a.startswith("--runtime-arg=")]
    return out + [("runc", flag(args, "root"), f"{where} conmon --runtime-arg --root")]


def roots_from_settings(path: str, doc: dict) -> list[tuple]:
    """``[crio] runroot`` and each ``[crio.runtime.runtimes.<name>] runtime_root`` of one crio.conf file (every
    file's, not only the winning one: discovery looks everywhere); storage.conf's roots."""
    crio = doc.get("crio")
    if path == storage.CONF or not isinstance(crio, dict):
        return storage.roots_in(path, doc)
    out = [("crio", crio.get("runroot"), f"{path} [crio] runroot")]
    runtimes = cd.tab(cd.tab(crio.get("runtime")).get("runtimes"))
    return out + [("runc", rt.get("runtime_root"), f"{path} [crio.runtime.runtimes.{rname}] runtime_root")
                  for rname, rt in runtimes.items() if isinstance(rt, dict)]


ENGINE = Engine(
    name="crio", title="CRI-O", scope_prefix="crio",   # cri-o internal/config/cgmgr/systemd.go
    # crio --version: "crio version 1.19.6", then "Version: ..." lines
    version=Version(("crio", "--version"), r"crio version v?(\d\S*)", ("cri-o",)),
    cgroup_default={None: ("systemd", "CRI-O's default (cgroup_manager = \"systemd\"; cri-o "
                                      "internal/config/cgmgr/cgmgr_linux.go, stacks.md section 7)")},
    cgroup_setting="crio.conf [crio.runtime] cgroup_manager",
    pod_annotations=("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name"),
    cri_runtime="cri-o://", daemon=("crio.service", "crio"),
    settings=Settings(CONFIGS[:1], "toml", "CRI-O config", settings, _driver, drop_ins=CONFIGS[1],
                      suffixes=(".conf", ".toml"), shows_engine="CRI-O config {files} (stacks.md 7)"),
    discovery=Discovery(roots={"crio": storage.RUNROOTS}, commands={"crio": ("crio",), "conmon": ("conmon",)},
                        from_cmdline=roots_from_cmdline, from_settings=roots_from_settings, also=(storage.CONF,),
                        storage_bundle="run", pid_file="pidfile"))
