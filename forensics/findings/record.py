"""A container's record (collectors/containers ``record.json``) as the findings read it: :class:`Record`, typed
fields instead of ``.get()`` on a dict whose values may be of any type. Nothing here reads the bundle.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the record's key saying whether the container mounts the kubelet's device-plugin directory
SOCKET_MOUNT = "device_plugin_socket_mount"


@dataclass(frozen=True)
class Record:
    """A container's record (collectors/containers ``record.json``) as the exposure reads it, each field of
    its type: a value that is missing or of another type (a record of an older version, or of a bundle that
    was tampered with) is its field's empty default, and the lists keep only their objects. ``raw`` is the
    record itself, for the cgroup-driver decision and the reload inference, which read it as it is.
    ``linux_devices``, ``hooks`` and ``dev_entries`` are None when the record does not hold them (the spec
    or /dev not read), which is not the same as empty; so is ``memory`` (its memory controller's counters,
    collectors/containers/memory.py) and ``socket_mount`` (whether it mounts the kubelet's device-plugin
    directory: None when the record is older than that check). ``engine``, ``namespace`` and ``image`` are
    as the record holds them."""

    raw: dict
    id: object
    pod: object
    pod_namespace: object
    created: object
    container_name: object
    pid: object
    config: dict | None
    probe: dict
    systemd_unit: object            #: as the record holds it (the row shows it so)
    linux_devices: list | None
    hooks: dict | None
    resources_devices: list
    dev_entries: list | None
    env: dict
    annotations: dict
    cgroup: dict
    runc_log: list
    engine: object = None
    namespace: object = None
    image: object = None
    memory: dict | None = None
    socket_mount: bool | None = None

    @classmethod
    def of(cls, c: dict) -> "Record":
        def kind(key, t, empty):
            v = c.get(key)
            return v if isinstance(v, t) else empty

        def objects(key, empty):
            v = c.get(key)
            return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else empty
        return cls(c, c.get("id"), c.get("pod"), c.get("pod_namespace"), c.get("created"), c.get("container_name"),
                   c.get("pid"), kind("config", dict, None), kind("probe", dict, {}), c.get("systemd_unit"),
                   objects("linux_devices", None), kind("hooks", dict, None), objects("resources_devices", []),
                   objects("dev_entries", None), kind("env", dict, {}), kind("annotations", dict, {}),
                   kind("cgroup", dict, {}), [x for x in c.get("runc_log") or [] if isinstance(x, dict)]
                   if isinstance(c.get("runc_log"), list) else [], c.get("engine"), c.get("namespace"), c.get("image"),
                   kind("memory", dict, None), (c[SOCKET_MOUNT] is True) if SOCKET_MOUNT in c else None)

    def text(self, field: str) -> str:
        """A field's value as text (``""`` for None): a name, a pod, an image, whatever type it came in."""
        v = getattr(self, field)
        return "" if v is None else str(v)

    @property
    def label(self) -> str:
        """``ns/pod (container)``, or its id in place of the pod."""
        pod = f"{self.pod_namespace or '?'}/{self.pod}" if self.pod else str(self.id)
        return f"{pod} ({self.container_name})" if self.container_name else pod

    @property
    def unit(self) -> dict | None:
        """systemd's view of the scope (``systemctl show``) when the record holds one."""
        return self.systemd_unit if isinstance(self.systemd_unit, dict) else None
