"""The pod side of ``kubectl gpu-forensics``: collect, say where the bundle is, wait for the copy.

Run by the Job of ``forensics/ops/jobs/job-node.yaml`` as ``python3 -m forensics.ops.kubectl_pod``
(exec form, no shell), with the ``gpu-forensics`` arguments after ``--``::

    python3 -m forensics.ops.kubectl_pod [--bundles /bundles] [--wait-copy 600] -- collect --root /host ...

1. runs ``gpu-forensics collect`` (``--out /bundles/gpu-forensics-<node>-<UTC stamp>.tar.gz`` added when
   the arguments name no ``--out``); its exit codes 0 and 1 (done, done with gaps) go on, any other
   ends the container with that code, as deploy/collect-once.py does;
2. prints one line on stdout that the plugin reads from the pod's log::

       gpu-forensics-pod: bundle-ready path=/bundles/X.tar.gz size=48064 sha256=<file> manifest_sha256=<m> rc=0

3. waits until ``<path>.fetched`` exists (the plugin writes it through ``done`` once the copy verified)
   or ``--wait-copy`` seconds pass, then exits 0. The bundle stays on the node either way (hostPath).

The plugin reaches the bundle through the ``pods/exec`` subresource with two more entry points of
this module: ``send PATH OFFSET LENGTH`` writes that byte range of the bundle to stdout (the copy goes
in bounded chunks, so neither side holds more than one chunk), ``done PATH`` writes the marker.
Only the node's python3 and this package are needed in the image, no tar, cat or shell.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

READY = "gpu-forensics-pod: bundle-ready"
READY_RE = re.compile(r"^gpu-forensics-pod: bundle-ready path=(?P<path>\S+) size=(?P<size>\d+) "
                      r"sha256=(?P<sha256>[0-9a-f]{64}) manifest_sha256=(?P<manifest>[0-9a-f]{64}) rc=(?P<rc>\d+)$")
MARKER = ".fetched"
MAX_CHUNK = 64 << 20       #: the largest range ``send`` writes in one exec
POLL = 1.0                 #: seconds between looks for the marker


def parse_ready(log: str) -> dict | None:
    """The last ``bundle-ready`` line of a pod log as ``{"path", "size" (bytes), "sha256" (of the
    file), "manifest" (manifest.json's SHA-256), "rc" (collect's exit code)}``, else ``None``."""
    found = None
    for line in log.splitlines():
        m = READY_RE.match(line.strip())
        if m:
            found = {**m.groupdict(), "size": int(m["size"]), "rc": int(m["rc"])}
    return found


def _file_sha256(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _default_out(bundles: Path) -> Path:
    node = re.sub(r"[^A-Za-z0-9._-]", "_", os.environ.get("NODE_NAME") or os.uname().nodename)[:100]
    return bundles / f"gpu-forensics-{node}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.tar.gz"


def run_collect(argv: list[str], bundles: Path, wait_copy: float) -> int:
    """Steps 1-3 of the module docstring; returns the container's exit code."""
    from . import cli
    argv = list(argv)
    if "--out" not in argv and not any(a.startswith("--out=") for a in argv):
        argv += ["--out", str(_default_out(bundles))]
    out = Path(next(a.split("=", 1)[1] for a in argv if a.startswith("--out=")) if "--out" not in argv
               else argv[argv.index("--out") + 1])
    rc = cli.main(argv)
    sys.stdout.flush()
    if rc not in (0, 1):
        print(f"gpu-forensics-pod: collect exited {rc}; no bundle to copy", file=sys.stderr)
        return rc
    from ..bundle import Bundle
    b = Bundle.open(out)
    b.close()
    size, digest = _file_sha256(out)
    print(f"{READY} path={out} size={size} sha256={digest} manifest_sha256={b.manifest_sha256} rc={rc}", flush=True)
    marker = Path(str(out) + MARKER)
    deadline = time.monotonic() + wait_copy
    while time.monotonic() < deadline:
        if marker.exists():
            print("gpu-forensics-pod: copy confirmed; exiting", flush=True)
            return 0
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    print(f"gpu-forensics-pod: no copy within {wait_copy:g} s; the bundle stays on the node at {out}", flush=True)
    return 0


def send(path: str, offset: int, length: int) -> int:
    """Write ``length`` bytes of the regular file ``path`` from ``offset`` to stdout (fewer at its end).
    Exit 2 for a range over :data:`MAX_CHUNK` or a path that is not a regular file."""
    if length < 0 or offset < 0 or length > MAX_CHUNK:
        print(f"gpu-forensics-pod: send: range {offset}+{length} refused (at most {MAX_CHUNK} bytes)", file=sys.stderr)
        return 2
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        print(f"gpu-forensics-pod: send: {path}: {e.strerror}", file=sys.stderr)
        return 2
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            print(f"gpu-forensics-pod: send: {path}: not a regular file", file=sys.stderr)
            return 2
        f.seek(offset)
        left = length
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            sys.stdout.buffer.write(chunk)
            left -= len(chunk)
    sys.stdout.buffer.flush()
    return 0


def done(path: str) -> int:
    """Write ``<path>.fetched``, which ends :func:`run_collect`'s wait."""
    Path(path + MARKER).write_text("fetched\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python3 -m forensics.ops.kubectl_pod``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["send"] and len(argv) == 4:
        return send(argv[1], int(argv[2]), int(argv[3]))
    if argv[:1] == ["done"] and len(argv) == 2:
        return done(argv[1])
    p = argparse.ArgumentParser(prog="python3 -m forensics.ops.kubectl_pod")
    p.add_argument("--bundles", default="/bundles", help="folder for the bundle when no --out is given")
    p.add_argument("--wait-copy", type=float, default=600, metavar="SECONDS",
                   help="how long to wait for the plugin's copy after collecting")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then the gpu-forensics arguments")
    ns = p.parse_args(argv)
    rest = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    return run_collect(rest, Path(ns.bundles), ns.wait_copy)


if __name__ == "__main__":
    sys.exit(main())
