"""The container engines the tool knows, one module each, and the registry every floor reads them from.

An engine's module (``forensics/engines/<name>.py``) holds what the tool knows about it as data: where it
keeps its containers and state on disk, the files of its settings and its cgroup-driver key with its
default per cgroup version, the systemd scope its containers run in under the systemd driver, the spec
annotation that shows a spec is its own, how it names a container's pod, the CRI runtime scheme and the
containerd namespace that name it; and, as small functions over what a file or a process shows, how its
settings read (:class:`Settings`), which roots its processes and files name (:class:`Discovery`) and, for an
engine that starts GPU containers by its own command, the steps that move them to CDI devices
(:class:`Cdi`). The walks that use them live on their floors: discovery in collectors/containers
(containerd task directories, containers/storage roots, runc roots), the settings in
collectors/runtime_config, the driver decision in forensics/findings/cgroup_driver.py, the remedies in
forensics/findings/stack_remedies.py. Adding an engine whose containers lie in a layout already walked is
its module, one line in :data:`ENGINES`, and tests (tests/test_engine_unit.py); a floor that needs more of an
engine than the table holds adds a field here.

Scope names: under the systemd cgroup driver runc puts a container in the transient scope
``<prefix>-<id>.scope``, the prefix being the middle part of the ``slice:prefix:name`` cgroupsPath its
engine writes in the spec (runc libcontainer/cgroups/systemd ``getUnitName``); under cgroupfs the same
``<prefix>-<id>`` may name the cgroup directory (Podman's ``/libpod_parent/libpod-<id>``).
"""
from __future__ import annotations

import re

from .engine import Discovery, Engine, Settings


__all__ = ["Discovery", "Engine", "Settings", "ENGINES", "RUN_DIRS", "SCOPE_PREFIX", "SCOPE_PREFIXES", "CONTAINER_IN_CGROUP", "MARKER_ANNOTATIONS",
           "engine_of_labels", "engine_of_record", "namespace_owner", "engine_of_scope", "engine_of_spec", "scope_names", "title"]

from . import containerd, crio, docker, podman, runc, storage

#: containers/storage, the library CRI-O and Podman keep their containers with (forensics/engines/storage.py)
STORAGE_CONF, STORAGE_RUNROOTS, STORAGE_GRAPHROOTS = storage.CONF, storage.RUNROOTS, storage.GRAPHROOTS

#: every engine, by name, in the order scopes are tried; Podman before CRI-O (both use containers/storage,
#: and a Podman spec also carries io.kubernetes.cri-o.* annotations: the marker decides)
ENGINES: dict[str, Engine] = {e.name: e for e in (containerd.ENGINE, docker.ENGINE, crio.ENGINE, podman.ENGINE,
                                                   runc.ENGINE)}
#: engine name -> the scope prefix of its containers
SCOPE_PREFIX = {n: e.scope_prefix for n, e in ENGINES.items()}
#: ``<prefix>-`` of every engine, for ``str.startswith``
SCOPE_PREFIXES = tuple(f"{p}-" for p in SCOPE_PREFIX.values())
#: a cgroup path component that names a container: ``<prefix>-<64 hex>.scope`` or a bare ``<64 hex>``
#: (the cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>``, ``/docker/<id>``, ``libpod-<id>``)
CONTAINER_IN_CGROUP = re.compile(r"^(?:(?:" + "|".join(map(re.escape, SCOPE_PREFIX.values()))
                                 + r")-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
#: the top directories of every engine's run-time state (containerd's and k3s's state dirs, the runc roots,
#: containers/storage's run root): a root that holds none of them, and no /proc, runs no container
RUN_DIRS = tuple(sorted({"/".join(p.split("/")[:3]) for p in (*containerd.STATE_DIRS, *runc.DEFAULT_ROOTS,
                                                                *STORAGE_RUNROOTS)}))
#: the spec annotations that name an engine; kept whole in a redacted spec (forensics/redact.py)
MARKER_ANNOTATIONS = tuple(e.marker[0] for e in ENGINES.values() if e.marker)


def title(name: str | None) -> str:
    """How a sentence names engine ``name``: ``"CRI-O"``; the name itself for one not in the table."""
    e = ENGINES.get(name or "")
    return e.title if e else str(name)


def engine_of_spec(annotations) -> str | None:
    """The engine whose :attr:`Engine.marker` the spec's ``annotations`` carry (``{"io.container.manager":
    "libpod"}`` -> ``"podman"``), or None: no annotation decides."""
    if not isinstance(annotations, dict):
        return None
    return next((n for n, e in ENGINES.items() if e.marker and annotations.get(e.marker[0]) == e.marker[1]), None)


def engine_of_labels(labels) -> str | None:
    """:func:`engine_of_spec` for runc's state.json ``config.labels`` (``["key=value", ...]``: runc copies
    the spec's annotations there), for a container whose spec could not be read."""
    if not isinstance(labels, list):
        return None
    return engine_of_spec(dict(x.split("=", 1) for x in labels if isinstance(x, str) and "=" in x))


def namespace_owner(ns) -> str | None:
    """The engine that owns containerd namespace ``ns`` (:attr:`Engine.namespace`: Docker's ``moby``, the CRI
    plugin's ``k8s.io``), or None."""
    return next((n for n, e in ENGINES.items() if e.namespace and e.namespace == ns), None)


def engine_of_record(c: dict) -> str | None:
    """The engine that runs container record ``c`` (collectors/containers): its ``engine`` key, else, in a
    record of an older version, its cgroup scope where the scope decides (:attr:`Engine.scope_decides`), a
    ``/docker/<id>`` cgroupfs path, the containerd namespace an engine owns (:attr:`Engine.namespace`) or,
    for a record with no ``engine`` key at all, containerd for any other namespace but ``runc`` (the flat
    /run/runc root's: plain runc or CRI-O); ``None`` when unknown."""
    if c.get("engine"):
        return c["engine"]
    path = str((c.get("cgroup") or {}).get("path") or "") if isinstance(c.get("cgroup"), dict) else ""
    by_scope = engine_of_scope(path.rsplit("/", 1)[-1])
    if by_scope and ENGINES[by_scope].scope_decides:
        return by_scope
    if "/docker/" in path:
        return "docker"
    ns = c.get("namespace")
    owner = namespace_owner(ns)
    if owner or "engine" in c or ns in (None, "runc"):
        return owner
    return "containerd"


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
