#!/usr/bin/env python3
"""The two helpers of scripts/build-image.sh that are easier in Python than in shell.

``layer.py app PYZ COLLECT_ONCE OUT.tar``: the collector's layer, an uncompressed tar (what
``umoci raw add-layer`` takes) of /usr/local/bin/gpu-forensics.pyz (the zipapp re-dated),
gpu-forensics (a link to it) and gpu-forensics-collect-once. Every time in it, the tar's and the
zip entries', is ``$SOURCE_DATE_EPOCH``, owners are root, entries sorted: the same tree gives the
same bytes (the layer digest), whenever and wherever it is built.

``layer.py sizes LAYOUT TAG``: prints the manifest digest and the compressed size of each layer,
read from the OCI image layout (image-spec image-layout.md: index.json, blobs/sha256/...).
"""
from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
import zipfile
from pathlib import Path

BIN = "usr/local/bin/"
ZIP_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold


def redated_zipapp(src: Path, epoch: int) -> bytes:
    """The zipapp ``src`` (its ``#!`` line kept) with entries sorted by name and dated ``epoch``."""
    stamp = time.gmtime(max(epoch, ZIP_EPOCH))[:6]
    with open(src, "rb") as f:
        first = f.readline()
    buf = io.BytesIO()
    buf.write(first if first.startswith(b"#!") else b"")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(buf, "a", zipfile.ZIP_DEFLATED) as zout:
        for info in sorted(zin.infolist(), key=lambda i: i.filename):
            zi = zipfile.ZipInfo(info.filename, stamp)
            zi.external_attr, zi.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
            zout.writestr(zi, zin.read(info))
    return buf.getvalue()


def app_layer(pyz: Path, collect_once: Path, out: Path, epoch: int) -> None:
    """Write the collector's layer tar to ``out`` (PAX format, see the module docstring)."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, link in ((BIN + "gpu-forensics", None, "gpu-forensics.pyz"),
                                 (BIN + "gpu-forensics-collect-once", collect_once.read_bytes(), None),
                                 (BIN + "gpu-forensics.pyz", redated_zipapp(pyz, epoch), None)):
            ti = tarfile.TarInfo(name)
            ti.mtime, ti.uname, ti.gname = epoch, "root", "root"
            if link:
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, link, 0o777
                tf.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o755
                tf.addfile(ti, io.BytesIO(data))


def sizes(layout: Path, tag: str) -> tuple[str, list[int]]:
    """(manifest digest, compressed layer sizes in bytes) of ``tag`` in the OCI layout ``layout``.
    Raises ``IndexError`` when no manifest carries that ref name."""
    idx = json.loads((layout / "index.json").read_text())
    m = [d for d in idx["manifests"] if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag][0]
    man = json.loads((layout / "blobs" / m["digest"].replace(":", "/")).read_text())
    return m["digest"], [layer["size"] for layer in man["layers"]]


if __name__ == "__main__":
    if sys.argv[1] == "app":
        app_layer(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(os.environ["SOURCE_DATE_EPOCH"]))
    else:
        digest, layers = sizes(Path(sys.argv[2]), sys.argv[3])
        print(digest, " + ".join(str(n) for n in layers))
