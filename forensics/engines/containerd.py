"""containerd and its CRI plugin (Kubernetes' engine on most nodes; k3s and RKE2 embed it).

Layout (docs/sources.md "Container engine layouts"): tasks under ``<state>/io.containerd.runtime.v2.task/
<namespace>/<id>/`` (the v1 shim's ``io.containerd.runtime.v1.linux``) for the state dirs below, the task
directory being the bundle runc ran; the CRI plugin runs Kubernetes containers in the namespace ``k8s.io``
(containerd pkg/cri constants) and its settings apply to that namespace only (docs/cri/config.md: "not
recognized by other containerd clients such as ctr, nerdctl, and Docker/Moby")."""
from __future__ import annotations

import posixpath
import re

from forensics.engines.engine import Discovery, Engine, Version, flag

#: containerd's own, k3s's and RKE2's, and dockerd's private one (moby daemon/command/daemon.go ``<exec-root>/
#: containerd/daemon``)
STATE_DIRS = ("/run/containerd", "/run/k3s/containerd", "/run/docker/containerd/daemon")
TASK_DIRS = ("io.containerd.runtime.v2.task", "io.containerd.runtime.v1.linux")
#: the namespace the CRI plugin runs Kubernetes containers in (containerd pkg/cri constants)
CRI_NAMESPACE = "k8s.io"
#: a task directory (the bundle runc ran): ``<state>/<task dir>/<namespace>/<id>``
TASK_PATH = re.compile(r"\A(?P<state>/.*)/(?:io\.containerd\.runtime\.v2\.task|io\.containerd\.runtime\.v1\.linux)"
                       r"/(?P<ns>[^/]+)/(?P<id>[^/]+)/?\Z")


def roots_from_cmdline(name: str, argv: list[str], cwd: str | None, where: str) -> list[tuple]:
    """A shim's state dir (its working directory is its task's bundle; its ``-address`` socket's directory,
    and ``daemon/`` beside it for dockerd's containerd) and the v1 shim's ``-runtime-root`` (runc's
    ``--root <runtime-root>/<namespace>``); ``containerd --state``."""
    out = []
    if name.startswith("containerd-shim"):
        m = TASK_PATH.match(cwd or "")
        if m:
            out.append(("containerd", m["state"], f"{where} working directory {cwd}"))
        address = flag(argv, "address")
        if address and address.startswith("/"):
            sock_dir = posixpath.dirname(address)
            out += [("containerd", sock_dir, f"{where} -address {address}"),
                    ("containerd", f"{sock_dir}/daemon", f"{where} -address {address} (dockerd's containerd keeps "
                                                         "its state in daemon/ beside the socket)")]
        out.append(("runc", flag(argv, "runtime-root"), f"{where} -runtime-root"))
    elif name == "containerd":
        out.append(("containerd", flag(argv, "state"), f"{where} containerd --state"))
    return out


ENGINE = Engine(
    name="containerd", title="containerd", scope_prefix="cri-containerd",
    # packages: Debian's, Docker's repository's, and AKS's (moby-containerd)
    version=Version(("containerd", "--version"), r"containerd \S+ v?(\d\S*)",
                    ("containerd", "containerd.io", "moby-containerd")),
    cgroup_default={None: ("cgroupfs", "containerd's default (SystemdCgroup is false unless set; containerd "
                                       "docs/cri/config.md: \"containerd and Kubernetes use the legacy cgroupfs "
                                       "driver for managing cgroups by default\")")},
    cgroup_setting="the CRI plugin's runc options SystemdCgroup in config.toml",
    pod_annotations=("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                     "io.kubernetes.cri.container-name"),
    cri_runtime="containerd://", namespace=CRI_NAMESPACE, scope_decides=False, hook_user=False,
    daemon=("containerd.service", "containerd"),
    # k3s runs its containerd as a link to its multicall binary
    discovery=Discovery(roots={"containerd": STATE_DIRS},
                        commands={"containerd": ("containerd", "k3s"), "containerd-shim*": ("containerd-shim*",)},
                        from_cmdline=roots_from_cmdline, pid_file="init.pid", cwd_of=("containerd-shim*",)))
