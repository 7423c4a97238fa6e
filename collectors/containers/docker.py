"""Docker's own record of a container (moby): the name and image its OCI spec does not carry.

Docker runs its containers in containerd's ``moby`` namespace (moby daemon/config ``DefaultContainersNamespace``;
stacks.md §6) and keeps each container's settings in ``<data-root>/containers/<id>/config.v2.json`` (moby
container/container.go ``Container``), data root /var/lib/docker unless ``dockerd --data-root`` or
``/etc/docker/daemon.json`` ``data-root`` (``graph`` in older releases) says otherwise.
:func:`docker_identity` reads it; the file holds the container's env, so only the few fields kept are stored.
"""
from __future__ import annotations

import errno
import json

from forensics import hostfs
from forensics.artifact import Artifact, Status, from_oserror
from forensics.engines.docker import DAEMON_JSON, DATA_ROOT, NAMESPACE
from forensics.redact import kept_annotation

#: Docker's layout facts are forensics/engines/docker.py's, named here too for the collector's modules
__all__ = ["CONFIG_LIMIT", "DAEMON_JSON", "DATA_ROOT", "NAMESPACE", "docker_identity", "read_json"]

CONFIG_LIMIT = 8 << 20


def read_json(root, path: str, limit: int):
    """A JSON file under root, parsed; ``None`` when it cannot be read, is over ``limit`` or is not JSON."""
    try:
        with hostfs.open_regular(root, path) as f:
            data = hostfs.read_upto(f, limit + 1)
        return json.loads(data.decode("utf-8", "replace")) if len(data) <= limit else None
    except (OSError, ValueError, RecursionError):
        return None


def docker_identity(ctx, data_roots, cid: str, rel: str) -> dict | None:
    """Docker's own name for the container, from ``<data-root>/containers/<id>/config.v2.json`` (moby
    container/container.go ``Container``: ``Name`` "/web", ``Config.Image``, ``Config.Labels``; cri-dockerd
    labels its containers with ``io.kubernetes.pod.name``/``.namespace`` and ``io.kubernetes.container.name``).
    The Docker OCI spec carries only ``--annotation`` values (moby#45025, Docker 24), never the name.

    Only ``{"container_name", "image", "pod", "pod_namespace", "source"}`` is kept, stored as
    ``{rel}/docker-config.json`` (the file itself holds the container's env, so it is not copied);
    ``None`` when no data root holds it. A file that is there but cannot be read or parsed is recorded (with
    its errno); one absent from every data root is recorded as absent."""
    met = False  # the file was there in some data root (then its failure is recorded, not its absence)
    for data_root in data_roots:
        src = f"{data_root}/containers/{cid}/config.v2.json"
        doc, why = _config_v2(ctx, src)
        if why is not None:
            met = met or why != "absent"
            continue
        cfg = doc.get("Config") if isinstance(doc.get("Config"), dict) else {}
        labels = cfg.get("Labels") if isinstance(cfg.get("Labels"), dict) else {}
        labels = {k: v for k, v in labels.items() if isinstance(v, str) and kept_annotation(k)}
        name = doc.get("Name")
        out = {"container_name": labels.get("io.kubernetes.container.name")
               or (name.lstrip("/") if isinstance(name, str) and name.strip("/") else None),
               "image": cfg.get("Image") if isinstance(cfg.get("Image"), str) else None,
               "pod": labels.get("io.kubernetes.pod.name"), "pod_namespace": labels.get("io.kubernetes.pod.namespace"),
               "source": src}
        ctx.writer.write_json(f"{rel}/docker-config.json", out, source=src, method="extract",
                              notes=("Name, Config.Image and the Kubernetes labels of Docker's config.v2.json; "
                                     "the rest (env values among it) is not copied",))
        return out
    if not met:
        ctx.writer.record(Artifact(None, f"{(list(data_roots) or [DATA_ROOT])[0]}/containers/{cid}/config.v2.json",
                                   Status.ABSENT, "extract", notes=("Docker's name and image of the container not known",)))
    return None


def _config_v2(ctx, src: str) -> tuple[dict | None, str | None]:
    """``(document, None)`` for a ``config.v2.json`` read and parsed to a JSON object, else ``(None, why)``:
    ``"absent"`` (ENOENT: nothing recorded), or the failure recorded as an error or unreadable record (a FIFO or
    directory in its place, over :data:`CONFIG_LIMIT`, not JSON, a JSON value that is not an object)."""
    try:
        with hostfs.open_regular(ctx.root, src) as f:
            data = hostfs.read_upto(f, CONFIG_LIMIT + 1)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None, "absent"
        ctx.writer.record(from_oserror(src, "extract", e, ("Docker's name and image of the container not known",)))
        return None, "unreadable"
    why = f"larger than {CONFIG_LIMIT} bytes; not read" if len(data) > CONFIG_LIMIT else None
    if why is None:
        try:
            doc = json.loads(data.decode("utf-8", "replace"))
            why = None if isinstance(doc, dict) else f"not a JSON object ({type(doc).__name__})"
        except (ValueError, RecursionError) as e:
            why = f"not JSON ({str(e)[:200]})"
    if why is not None:
        ctx.writer.record(Artifact(None, src, Status.ERROR, "extract", message=f"{why}; name and image not read"))
        return None, why
    return doc, None
