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
from forensics.redact import kept_annotation

NAMESPACE = "moby"
DATA_ROOT = "/var/lib/docker"
DAEMON_JSON = "/etc/docker/daemon.json"
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
    for data_root in data_roots:
        src = f"{data_root}/containers/{cid}/config.v2.json"
        try:
            with hostfs.open_regular(ctx.root, src) as f:
                data = hostfs.read_upto(f, CONFIG_LIMIT + 1)
            doc = json.loads(data.decode("utf-8", "replace")) if len(data) <= CONFIG_LIMIT else None
        except OSError as e:
            if e.errno != errno.ENOENT:
                ctx.writer.record(from_oserror(src, "extract", e))
            continue
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            ctx.writer.record(Artifact(None, src, Status.ERROR, "extract",
                                       message=f"not a JSON object within {CONFIG_LIMIT} bytes; name not read"))
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
    ctx.writer.record(Artifact(None, f"{(list(data_roots) or [DATA_ROOT])[0]}/containers/{cid}/config.v2.json",
                               Status.ABSENT, "extract", notes=("Docker's name and image of the container not known",)))
    return None
