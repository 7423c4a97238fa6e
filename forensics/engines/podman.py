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

from forensics import configdoc as cd
import forensics.engines.storage as storage
from forensics.engines.engine import Cdi, Discovery, Engine, Settings, Version, flag
from forensics.versions import gate

#: containers.conf(5): the system file, its drop-ins, and the distribution's defaults, in override order
CONFIGS = ("/usr/share/containers/containers.conf", "/etc/containers/containers.conf",
           "/etc/containers/containers.conf.d")
MARKER = ("io.container.manager", "libpod")
CDI_MIN_VERSION = "4.1.0"


def settings(docs: list[dict]) -> dict:
    """Podman's containers.conf files in override order (containers.conf(5): /usr/share, then /etc, then
    the drop-ins in name order) → ``{"cgroup_manager": str|None (None: not set; Podman's default is systemd),
    "hooks_dir": [str] | None (None: not set), "cdi_spec_dirs": [str] | None}``, all from ``[engine]``."""
    merged: dict = {}
    for d in docs:
        merged = cd.merge(merged, d, deep_plugins=False)
    eng = cd.tab(merged.get("engine"))
    return {"cgroup_manager": cd.text(eng.get("cgroup_manager")),
            "hooks_dir": cd.str_list(eng.get("hooks_dir")) or None,
            "cdi_spec_dirs": cd.str_list(eng.get("cdi_spec_dirs")) or None}


def _driver(s: dict) -> tuple[str | None, str]:
    v = s["cgroup_manager"]
    return (v if v in ("systemd", "cgroupfs") else None, f"[engine] cgroup_manager = {v}" if v else
            "[engine] cgroup_manager not set: Podman's default (systemd) applies")


def roots_from_cmdline(name: str, argv: list[str], cwd: str | None, where: str) -> list[tuple]:
    """Podman's conmon: the cleanup command it runs at exit is podman with its storage roots
    (``--exit-command-arg --root G --exit-command-arg --runroot R``), as seen on Podman 4.3."""
    if str(flag(argv, "exit-command") or "").rsplit("/", 1)[-1] != "podman":
        return []
    exit_args = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--exit-command-arg"]
    return [("graph", flag(exit_args, "root"), f"{where} conmon --exit-command podman --root"),
            ("crio", flag(exit_args, "runroot"), f"{where} conmon --exit-command podman --runroot")]


RUN = "podman run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi -L"
RUN_WHAT = "Start GPU containers with CDI devices instead of the OCI hook"


def _spec_why(conf: dict) -> str:
    dirs = conf.get("cdi_spec_dirs")
    return "podman resolves --device nvidia.com/gpu=... from " + (
        f"the cdi_spec_dirs containers.conf sets ({', '.join(dirs)})" if dirs else "the specs in /etc/cdi and /var/run/cdi")


def cdi_steps(conf: dict, hook_users: list, version: dict | None = None) -> list[dict]:
    """``--device nvidia.com/gpu=...`` in place of the toolkit's OCI hook (Podman reads CDI specs itself from
    4.1.0: no engine setting to change; ``version``, the runtime facts' ``{"version", "basis"}``, is said against
    that gate); never containerd's CRI snippet nor a daemon restart (Podman has no daemon)."""
    hooks = [h for h in hook_users if h.startswith("OCI hook file")]
    return [{"what": RUN_WHAT,
             "change": [RUN, "# then recreate each GPU container with --device nvidia.com/gpu=<index or UUID>"],
             "needs": f"the CDI spec above; {gate('Podman', CDI_MIN_VERSION, version)}",
             "breaks": "the containers are recreated (stopped and started again)"
                       + (f"; the hook file stays for the containers not yet moved ({'; '.join(hooks)})" if hooks else ""),
             "why": "the toolkit's OCI hook (hooks.d) makes the GPU nodes inside the container after runc set its "
                    "device rules, outside the spec, so a rebuild of the rules from the spec drops them; a CDI "
                    "device enters linux.devices"}]


ENGINE = Engine(
    name="podman", title="Podman", scope_prefix="libpod",
    # podman --version: "podman version 4.3.1" (Podman 4.3.1 on Debian 12, seen here)
    version=Version(("podman", "--version"), r"podman version v?(\d\S*)", ("podman",)),
    cgroup_default={None: ("systemd", "Podman's default (containers.conf(5) [engine] cgroup_manager: "
                                      "\"systemd\" unless set)")},
    cgroup_setting="containers.conf [engine] cgroup_manager",
    marker=MARKER,
    settings=Settings(CONFIGS[:2], "toml", "containers.conf", settings, _driver, drop_ins=CONFIGS[2],
                      suffixes=(".conf",)),
    discovery=Discovery(roots={"crio": storage.RUNROOTS, "graph": storage.GRAPHROOTS}, commands={"conmon": ("conmon",)},
                        from_cmdline=roots_from_cmdline, from_settings=storage.roots_in, also=(storage.CONF,),
                        storage_bundle="graph"),
    cdi=Cdi(_spec_why, cdi_steps, RUN_WHAT))
