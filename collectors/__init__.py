"""One module per evidence source. Each knows how to *acquire* its source into the bundle and how
to *read* the bundle's copy back into events; nothing else in the project knows the source's format.

``COLLECTORS`` is the one place where sources are listed, in acquisition order (node facts first,
because the readers of zone-less logs need the node's time zone).
"""
from . import node, runtime_config, journal, packages, containers, podlogs, metrics, kube

#: podlogs after containers: it takes the GPU containers from ctx.gpu_containers, which containers fills
COLLECTORS = [node, runtime_config, journal, packages, containers, podlogs, metrics, kube]
