"""setuptools ``build_py`` that packs the sample node into the wheel (named in pyproject.toml's
``[tool.setuptools.cmdclass]``): see forensics/ops/demo.py for why a tar and not package data."""
from __future__ import annotations

import sys
from pathlib import Path

from setuptools.command.build_py import build_py as _build_py

HERE = Path(__file__).resolve().parent


class BuildPy(_build_py):
    """The usual build_py, then ``forensics/ops/sample-node.tar.gz`` in the build folder."""

    def run(self):
        super().run()
        sys.path.insert(0, str(HERE.parent))
        from forensics.ops.demo import pack
        pack(HERE, Path(self.build_lib) / "forensics" / "ops" / "sample-node.tar.gz")
