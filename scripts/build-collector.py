#!/usr/bin/env python3
"""Build the single-file collector: a zipapp (stdlib ``zipapp``, PEP 441) that runs ``gpu-forensics
collect`` on a node's own python3 with nothing installed: ``python3 gpu-forensics-collect.pyz collect ...``.

It holds the project's packages (forensics, collectors, reports) and, vendored from the interpreter
that runs this script, the pure-python libraries collect imports: detect-secrets (the redaction
shapes), tomli-w, python-dateutil (2.9 needs no six), PyYAML
(its pure-python loader; the C ``_yaml`` is left out), requests with urllib3, idna, certifi and
charset_normalizer (its mypyc ``.so`` left out, the ``.py`` sources kept), and for ``watch``
prometheus_client and jeepney (both pure python). The journal is read through the project's own binding
of the node's ``libsystemd.so.0`` (collectors/journal/sdjournal.py, ctypes), as in the installed tool.

usage: build-collector.py [OUT]   (default dist/gpu-forensics-collect.pyz; prints the path and size)
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PACKAGES = ("forensics", "collectors", "reports")
VENDORED = ("detect_secrets", "tomli_w", "dateutil", "yaml", "requests", "urllib3", "idna", "certifi",
            "charset_normalizer", "prometheus_client", "jeepney")
MAIN = '''from forensics.ops.entry import entry
entry()
'''


def _skip(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith((".so", ".pyc")) or n == "cli"
            and _dir.endswith("charset_normalizer")}


def build(out: Path) -> Path:
    """Write the zipapp to ``out`` (parents created) and return it. Raises ``ModuleNotFoundError``
    when a vendored library is not importable by this interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        for name in PACKAGES:
            shutil.copytree(PROJECT / name, stage / name, ignore=_skip)
        for name in VENDORED:
            spec = importlib.util.find_spec(name)
            if spec is None:
                raise ModuleNotFoundError(f"{name} is not importable here: run this with the project's venv")
            if spec.submodule_search_locations:
                shutil.copytree(list(spec.submodule_search_locations)[0], stage / name, ignore=_skip)
            else:
                shutil.copy2(spec.origin, stage / Path(spec.origin).name)
        (stage / "__main__.py").write_text(MAIN)
        out.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(stage, out, interpreter="/usr/bin/env python3", compressed=True)
    return out


if __name__ == "__main__":
    path = build(Path(sys.argv[1]) if len(sys.argv) > 1 else PROJECT / "dist" / "gpu-forensics-collect.pyz")
    print(f"{path} {path.stat().st_size} bytes")
