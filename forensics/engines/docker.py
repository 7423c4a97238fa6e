"""Docker (moby): dockerd runs its containers through its own containerd, in the namespace ``moby``.

Docker keeps each container's settings in ``<data-root>/containers/<id>/config.v2.json`` (moby
container/container.go), data root /var/lib/docker unless ``dockerd --data-root`` or daemon.json's
``data-root`` (``graph`` in older releases) says otherwise; its OCI spec carries no pod identity, which
cri-dockerd (and dockershim before it) put in the container's labels (stacks.md section 6)."""
from __future__ import annotations

from forensics import configdoc as cd
from forensics.versions import at_least, gate, number
from forensics.engines.engine import Cdi, Discovery, Engine, Settings, Version, flag

#: moby daemon/config ``DefaultContainersNamespace``
NAMESPACE = "moby"
DATA_ROOT = "/var/lib/docker"
DAEMON_JSON = "/etc/docker/daemon.json"
_WHY = "moby daemon/daemon_unix.go UsingSystemd, Docker 20.10+ (moby#40846); stacks.md section 6"
#: features.cdi exists from Docker 25.0 and is on by default from 28.2 (stacks.md 6)
CDI_MIN_VERSION, CDI_DEFAULT_ON = "25.0", "28.2"


def settings(docs: list[dict]) -> dict:
    """``/etc/docker/daemon.json`` (dockerd(8) "Daemon configuration file") → ``{"runtimes": {name: path},
    "default_runtime": str|None, "cgroup_driver": "systemd"|"cgroupfs"|None (``exec-opts``
    ``native.cgroupdriver``; None: not set, dockerd's default applies), "cdi": bool|None
    (``features.cdi``; None: not set: off before Docker 28.2, on from 28.2, stacks.md 6), "cdi_spec_dirs":
    [str], "live_restore": bool (containers survive a dockerd restart)}``. ``docs``: the one file (none:
    every value unset). A value of the wrong type counts as absent."""
    doc = docs[0] if docs else {}
    rts = {str(k): cd.text(cd.tab(v).get("path")) for k, v in cd.tab(doc.get("runtimes")).items()}
    driver = None
    for opt in cd.str_list(doc.get("exec-opts")):
        key, _, val = opt.partition("=")
        if key.strip() == "native.cgroupdriver" and val.strip() in ("systemd", "cgroupfs"):
            driver = val.strip()
    cdi = cd.tab(doc.get("features")).get("cdi")
    return {"runtimes": rts, "default_runtime": cd.text(doc.get("default-runtime")), "cgroup_driver": driver,
            "cdi": cdi if isinstance(cdi, bool) else None, "cdi_spec_dirs": cd.str_list(doc.get("cdi-spec-dirs")),
            "live_restore": doc.get("live-restore") is True}


def _driver(s: dict) -> tuple[str | None, str]:
    v = s["cgroup_driver"]
    return v, (f"exec-opts native.cgroupdriver={v}" if v else "exec-opts sets no native.cgroupdriver: dockerd's "
               "default applies (systemd on cgroup v2 with systemd, else cgroupfs)")


def _roots(said: str, data_root, exec_root) -> list[tuple]:
    """The roots a data root and an exec root name, each source being ``said`` + the key."""
    out = [("docker", data_root, f"{said}data-root")]
    if isinstance(exec_root, str) and exec_root.startswith("/"):  # moby: runc's root <exec-root>/runtime-runc, its containerd's <exec-root>/containerd/daemon
        out += [("runc", f"{exec_root}/runtime-runc", f"{said}exec-root"),
                ("containerd", f"{exec_root}/containerd/daemon", f"{said}exec-root")]
    return out


def roots_from_cmdline(name: str, argv: list[str], cwd: str | None, where: str) -> list[tuple]:
    """``dockerd --data-root`` (Docker's data root) and ``--exec-root`` (its runc root and its containerd's state)."""
    return _roots(f"{where} dockerd --", flag(argv, "data-root"), flag(argv, "exec-root"))


def roots_from_settings(path: str, doc: dict) -> list[tuple]:
    """daemon.json's ``data-root`` (``graph`` in older releases) and ``exec-root``, as :func:`roots_from_cmdline`."""
    return _roots(f"{path} ", doc.get("data-root") or doc.get("graph"), doc.get("exec-root"))


RUN = "docker run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi -L"
RUN_WHAT = "Start GPU containers with CDI devices instead of --gpus"


def cdi_steps(d: dict, hook_users: list, version: dict | None = None) -> list[dict]:
    """stacks.md 6: CDI in dockerd (daemon.json ``features.cdi``) unless it is on (set true, or not set on a
    Docker of :data:`CDI_DEFAULT_ON` or later, by ``version``: the runtime facts' ``{"version", "basis"}``; a
    ``cdi-spec-dirs`` of ``[""]`` turns it off either way, moby daemon/daemon.go), then ``--device
    nvidia.com/gpu=...`` in place of ``--gpus``; never containerd's CRI snippet."""
    out = []
    cdi, new_enough, old = d.get("cdi"), at_least(version, CDI_DEFAULT_ON), at_least(version, CDI_MIN_VERSION) is False
    dirs_off = d.get("cdi_spec_dirs") == [""]
    if cdi is not None:
        said = "true" if cdi else "false"
    elif new_enough:
        said = (f"not set, which is on in Docker {number(version['version'])}, on by default from {CDI_DEFAULT_ON} "
                "(unless dockerd's command line says --feature cdi=false: not read)")
    elif new_enough is False:
        said = f"not set, which is off in Docker {number(version['version'])}, on by default only from {CDI_DEFAULT_ON}"
    else:
        said = f"not set (off before Docker {CDI_DEFAULT_ON}, on from {CDI_DEFAULT_ON})"
    said += '; cdi-spec-dirs is [""], which turns CDI off' if dirs_off else ""
    if (cdi is not True and not (cdi is None and new_enough)) or dirs_off:
        out.append({"what": "Enable CDI in dockerd",
                    "change": ["nvidia-ctk runtime configure --runtime=docker --cdi.enabled",
                               *(['# and take "cdi-spec-dirs": [""] out of /etc/docker/daemon.json'] if dirs_off else []),
                               "systemctl restart docker"],
                    "needs": f"{gate('Docker', CDI_MIN_VERSION, version)}, where features.cdi exists"
                             + (f" (on by default from {CDI_DEFAULT_ON}, where this only makes it explicit)"
                                if cdi is None and new_enough is None and not dirs_off else "")
                             + "; NVIDIA Container Toolkit >= 1.15.0",
                    "breaks": None if d.get("live_restore") else "restarting dockerd stops every running container: "
                              "daemon.json does not set live-restore",
                    "why": f"daemon.json features.cdi is {said}"})
    out.append({"what": RUN_WHAT,
                "change": [RUN, "# then recreate each --gpus container with --device nvidia.com/gpu=<index or UUID> "
                                "in place of --gpus"],
                "needs": "the CDI spec and dockerd's CDI support" + (" above" if out else f": features.cdi is {said}")
                         + (f"; {gate('Docker', CDI_MIN_VERSION, version)}" if old and not out else ""),
                "breaks": "the containers are recreated (stopped and started again)",
                "why": "--gpus goes through the standalone hook, outside the spec (from Docker 29.2 only when "
                       "nvidia-cdi-hook is not on PATH); a CDI device enters linux.devices"})
    return out


ENGINE = Engine(
    name="docker", title="Docker", scope_prefix="docker",   # moby daemon/oci_linux.go scopePrefix
    # dockerd --version: "Docker version 20.10.17, build a89b842"
    version=Version(("dockerd", "--version"), r"Docker version v?(\d[^,\s]*)",
                    ("docker-ce", "docker.io", "moby-engine")),  # Docker's repository, Debian's, AKS's
    cgroup_default={2: ("systemd", "Docker's default on cgroup v2 (systemd when native.cgroupdriver is unset and "
                                   f"the host booted with systemd; {_WHY})"),
                    1: ("cgroupfs", f"Docker's default on cgroup v1 (cgroupfs; {_WHY})")},
    cgroup_setting="daemon.json exec-opts native.cgroupdriver",
    pod_annotations=("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name"),
    cri_runtime="docker://", namespace=NAMESPACE, daemon=("docker.service", "dockerd"),   # cri-dockerd (and dockershim before it) report docker://
    settings=Settings((DAEMON_JSON,), "json", "daemon.json", settings, _driver, one_file=True,
                      shows_engine="{files} exists (stacks.md 6)"),
    discovery=Discovery(roots={"docker": (DATA_ROOT,)}, commands={"dockerd": ("dockerd",)},
                        from_cmdline=roots_from_cmdline, from_settings=roots_from_settings),
    cdi=Cdi(lambda d: "dockerd resolves --device nvidia.com/gpu=... from the specs in /etc/cdi and /var/run/cdi",
            cdi_steps, RUN_WHAT))
