"""Where ``gpu-forensics demo`` finds the sample node (``samples/`` in the checkout, or the copy in the wheel).

In a checkout the sample is ``samples/node3-gpu`` (its binary journal built by ``samples/build.py``
from the export text with systemd-journal-remote). A wheel cannot hold that tree as it is: wheels
have no symbolic links (PEP 427 archives hold regular files only) and the sample's ``/etc/localtime``
and ``/etc/os-release`` are links whose text the collectors read. So the wheel build
(``samples/wheel.py``, the ``build_py`` command named in pyproject.toml) packs the sample, with its
built journal and the recorded Prometheus answers, into :data:`ARCHIVE` as a tar (links kept), and an
installed ``demo`` unpacks it into a temporary folder and collects from there.
"""
from __future__ import annotations

import contextlib
import json
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
#: the sample packed by the wheel build: node3-gpu/ (host root), node3-gpu-prometheus/, sample.json
ARCHIVE = Path(__file__).resolve().parent / "sample-node.tar.gz"


@dataclass(frozen=True)
class Sample:
    """The demo's inputs: the host root, the folder of recorded Prometheus answers (replayed through
    ``file://``) and the ``--incident`` windows the demo passes (ISO ``START..END`` strings)."""
    root: Path
    prometheus: Path
    incidents: list[str]


@contextlib.contextmanager
def sample() -> Iterator[Sample]:
    """Yield the sample node. From a checkout: ``samples/`` (building its journal when missing or
    stale; ``FileNotFoundError`` when systemd-journal-remote is not installed). From a wheel: the
    packed :data:`ARCHIVE` unpacked into a temporary folder, removed on exit. Raises
    ``FileNotFoundError`` naming the archive when neither is there (a wheel built without the sample)."""
    checkout = PROJECT / "samples" / "build.py"
    if checkout.is_file():
        sys.path.insert(0, str(checkout.parent))
        import build as sample_build  # samples/build.py
        sample_build.ensure_journal()
        yield Sample(sample_build.ROOT, sample_build.PROMETHEUS, list(sample_build.INCIDENTS))
        return
    if not ARCHIVE.is_file():
        raise FileNotFoundError(f"{ARCHIVE}: the sample node is not in this installation "
                                "(build the wheel from a checkout: pip wheel . --no-deps --no-build-isolation)")
    with tempfile.TemporaryDirectory(prefix="gpu-forensics-sample-") as tmp:
        with tarfile.open(ARCHIVE) as tar:
            # our own archive; its absolute link /etc/localtime -> /usr/share/zoneinfo/... is read
            # inside the root, which the "data" filter would refuse
            tar.extractall(tmp, **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))
        meta = json.loads((Path(tmp) / "sample.json").read_text())
        yield Sample(Path(tmp) / "node3-gpu", Path(tmp) / "node3-gpu-prometheus", list(meta["incidents"]))


def pack(samples: Path, out: Path) -> Path:
    """Write the tar :func:`sample` unpacks: ``samples/node3-gpu`` (journal included, links kept),
    ``samples/node3-gpu-prometheus`` and ``sample.json`` (the demo's incidents). Builds the journal
    first (``FileNotFoundError`` without systemd-journal-remote). Returns ``out``."""
    sys.path.insert(0, str(samples))
    import build as sample_build  # samples/build.py
    sample_build.ensure_journal()
    meta = out.parent / "sample.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"incidents": list(sample_build.INCIDENTS)}))
    skip = {"__pycache__"}
    with tarfile.open(out, "w:gz") as tar:
        for name in ("node3-gpu", "node3-gpu-prometheus"):
            tar.add(samples / name, name, filter=lambda ti: None if Path(ti.name).name in skip else ti)
        tar.add(meta, "sample.json")
    meta.unlink()
    return out
