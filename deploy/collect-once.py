#!/usr/bin/env python3
"""Run ``gpu-forensics`` once as a Kubernetes init container or Job and exit 0 when a bundle was made.

``gpu-forensics run`` exits 1 when it finished but some evidence was unreadable (that is recorded in
the bundle's manifest). In a DaemonSet's init container or a Job, a non-zero exit would make Kubernetes
run the collection again and again, each time into a new bundle; so 0 and 1 both end with 0 here, and
a usage error (2: an output that exists or that another collection is writing, too), an invalid bundle
(3), a bundle that could not be written (5: full disk, read-only or /proc, /sys output; the partial
bundle is kept as ``<out>.incomplete``) and an interruption (130 SIGINT, 143 SIGTERM) fail the
container. The real exit code is printed.
Arguments are those of ``gpu-forensics`` itself.

In the node image (scripts/build-image.sh: the zipapp on Debian's python3, no jinja2 or matplotlib)
``run`` collects, uploads when ``--upload-url`` asks, and says where to analyze (forensics/ops/cli.py).
"""
import sys

from forensics.ops import cli


def main(argv: list) -> int:
    """The exit code of ``gpu-forensics argv``."""
    return cli.main(argv)


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    print(f"gpu-forensics exited {rc}", file=sys.stderr)
    sys.exit(0 if rc in (0, 1) else rc)
