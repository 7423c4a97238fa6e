"""containers/storage, the library CRI-O and Podman keep their containers with (not an engine of its own).

Its config is containers-storage.conf(5) ``[storage] runroot`` and ``graphroot``; a container's run-time
directory is ``<runroot>/<driver>-containers/<id>/userdata`` (containers/storage store.go), the bundle CRI-O
runs; Podman runs the same place under the graph root (forensics/engines/podman.py)."""
from __future__ import annotations

import re

CONF = "/etc/containers/storage.conf"
RUNROOTS = ("/run/containers/storage",)
GRAPHROOTS = ("/var/lib/containers/storage",)
#: a bundle path in a containers/storage root: ``<root>/<driver>-containers/<id>/userdata``
USERDATA_PATH = re.compile(r"\A(?P<runroot>/.*)/[^/]+-containers/(?P<id>[^/]+)/userdata/?\Z")


def roots_in(path: str, doc: dict) -> list[tuple[str, object, str]]:
    """The run root (kind ``"crio"``) and graph root (``"graph"``) storage.conf ``doc`` names, as
    :class:`forensics.engines.engine.Discovery` roots; none for another file."""
    storage = doc.get("storage") if path == CONF else None
    if not isinstance(storage, dict):
        return []
    return [("crio", storage.get("runroot"), f"{CONF} [storage] runroot"),
            ("graph", storage.get("graphroot"), f"{CONF} [storage] graphroot")]
