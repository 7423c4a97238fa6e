"""A container runtime's lines about the CRI calls it served, as the journal holds them: containerd's
``UpdateContainerResources`` (kubelet's CPU manager and in-place resizes issue it; runc then rewrites the
container's device rules, docs/sources.md "CPU manager and container updates"). Nothing here touches the
host or the bundle.
"""
from __future__ import annotations

import re
from datetime import datetime

from forensics.events import Event
from forensics.timeutil import iso_z

#: containerd's CRI service logs every UpdateContainerResources call at info
#: (internal/cri/instrument/instrumented_service.go, pkg/cri/instrument/ before containerd 2.0):
#: ``UpdateContainerResources for %q with Linux: %+v / Windows: %+v`` (older: ``... with %+v``), then
#: ``UpdateContainerResources for %q returns successfully`` or ``UpdateContainerResources for %q failed``
#: (with ``error=``); logrus' text format escapes the quotes (``msg="UpdateContainerResources for
#: \"<id>\" ..."``). CRI-O logs none at its default level (cri-o server/container_update_resources.go).
UPDATE_TEXT = "UpdateContainerResources for "
UPDATE_RE = re.compile(r'UpdateContainerResources for \\?"(?P<id>[^"\\]{1,200})\\?" '
                       r'(?P<what>with |returns successfully|failed)')
UPDATE_RESULTS = {"with ": "requested", "returns successfully": "ok", "failed": "error"}


def update_resources(message: str) -> tuple[str, str] | None:
    """``(container id, result)`` for containerd's UpdateContainerResources line (:data:`UPDATE_RE`):
    result ``requested``, ``ok`` or ``error``; else ``None``."""
    m = UPDATE_RE.search(message) if UPDATE_TEXT in message else None
    return (m.group("id"), UPDATE_RESULTS[m.group("what")]) if m else None


def update_event(at: datetime, msg: str, unit: str | None, evidence: dict) -> Event | None:
    """The ``runtime.update-resources`` event of an UpdateContainerResources line (``unit``: the writing
    unit, else the writer's identifier), or ``None`` when ``msg`` is no such line."""
    u = update_resources(msg)
    if u is None:
        return None
    return Event(at=at, source="journal", kind="runtime.update-resources",
                 summary=f"UpdateContainerResources {u[1]} for {u[0][:12]} ({unit})",
                 attrs={"id": u[0], "result": u[1], "message": msg, "unit": unit}, evidence=evidence,
                 original=iso_z(at))
