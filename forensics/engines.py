"""The container engines the tool knows, and how each names its containers' systemd scopes.

Under the systemd cgroup driver runc puts a container in the transient scope ``<prefix>-<id>.scope``,
the prefix being the middle part of the ``slice:prefix:name`` cgroupsPath its engine writes in the
spec (runc libcontainer/cgroups/systemd ``getUnitName``). The one table of those prefixes: the
containers collector looks for a container's drop-ins under them, the kernel-line reader takes a
container id out of an OOM line's cgroup with them, the requester rules out a container's scope as the
client of a reload with them, and stack recognition tells an engine by them.

- containerd's CRI plugin: ``cri-containerd`` (containerd internal/cri ``systemdCgroupPrefix``... the
  ``kubepods-...slice:cri-containerd:<id>`` path of its specs);
- Docker (moby daemon/oci_linux.go, ``scopePrefix = "docker"``);
- CRI-O: ``crio`` (internal/config/cgmgr/systemd.go; its conmon runs in ``crio-conmon-<id>.scope``,
  which is no container);
- Podman: ``libpod`` (libpod/runtime_ctr.go; conmon in ``libpod-conmon-<id>.scope``);
- plain runc with ``--systemd-cgroup`` and no cgroupsPath: ``runc`` (runc's default
  ``system.slice:runc:<id>``).

Issue 29 wants every engine's knowledge in one unit; this table is where the scope names live until
then, so that they are written once.
"""
from __future__ import annotations

import re

#: engine name (as container records carry it) -> the scope prefix of its containers
SCOPE_PREFIX = {"containerd": "cri-containerd", "docker": "docker", "crio": "crio", "podman": "libpod",
                "runc": "runc"}
#: ``<prefix>-`` of every engine, for ``str.startswith``
SCOPE_PREFIXES = tuple(f"{p}-" for p in SCOPE_PREFIX.values())
#: a cgroup path component that names a container: ``<prefix>-<64 hex>.scope`` or a bare ``<64 hex>``
#: (the cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>``, ``/docker/<id>``)
CONTAINER_IN_CGROUP = re.compile(r"^(?:(?:" + "|".join(map(re.escape, SCOPE_PREFIX.values()))
                                 + r")-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")


def scope_names(cid: str) -> list[str]:
    """The scope names ``cid`` would have under each engine, the table's order:
    ``["cri-containerd-<cid>.scope", "docker-<cid>.scope", ...]``."""
    return [f"{p}{cid}.scope" for p in SCOPE_PREFIXES]


def engine_of_scope(name: str) -> str | None:
    """The engine whose container scope ``name`` (a cgroup path's last component) is:
    ``"crio-<id>.scope"`` -> ``"crio"``; ``None`` for anything else (``crio-conmon-<id>.scope``
    included: CRI-O's monitor, not a container)."""
    m = CONTAINER_IN_CGROUP.match(name or "")
    if not m or not name.endswith(".scope"):
        return None
    return next((e for e, p in SCOPE_PREFIX.items() if name.startswith(f"{p}-")), None)
