"""One module per evidence source. Each knows how to *acquire* its source into the bundle and how
to *read* the bundle's copy back into events; nothing else in the project knows the source's format.

``COLLECTORS`` is the one place where sources are listed, in acquisition order (node facts first,
because the readers of zone-less logs need the node's time zone).
"""
from . import (node, nvidia_host, runtime_config, journal, kernlog, packages, containers, kubelet, podlogs, metrics,
               kube)

#: nvidia_host right after node: the host's driver state is read before anything else runs (and before the
#: journal's child starts)
#: podlogs after containers: it takes the GPU containers from ctx.gpu_containers, which containers fills
#: kernlog after journal: the kernel's lines of the syslog files and /dev/kmsg, beside the journal's own
COLLECTORS = [node, nvidia_host, runtime_config, journal, kernlog, packages, containers, kubelet, podlogs, metrics,
              kube]
