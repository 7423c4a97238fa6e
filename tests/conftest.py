"""Shared test set-up.

Tests marked ``corpus`` read real files in place from ``../shared/real-inputs`` (never copied into
the project). When that folder is absent they are deselected, and the run says so and why.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
REAL_INPUTS = Path(os.environ.get("GPU_FORENSICS_REAL_INPUTS", PROJECT.parent / "shared" / "real-inputs"))


def pytest_collection_modifyitems(config, items):
    if REAL_INPUTS.is_dir():
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("corpus") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        config._corpus_deselected = len(drop)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = getattr(config, "_corpus_deselected", 0)
    if n:
        terminalreporter.write_line(
            f"{n} corpus tests deselected: {REAL_INPUTS} is absent (real inputs live in ../shared/real-inputs)")


@pytest.fixture(scope="session")
def real_inputs() -> Path:
    return REAL_INPUTS


import sys as _sys
_sys.path.insert(0, str(PROJECT / "samples"))  # samples/journalbuild.py builds real .journal files


# Property tests draw their examples from a seed fixed per test (hypothesis's derandomize), so a CI run
# checks exactly the examples the last run here checked; a new example found is kept as an @example.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("gpu-forensics", derandomize=True, database=None)
_hypothesis_settings.load_profile("gpu-forensics")


#: the sample node's reload incident (samples/node3-gpu), local time
SAMPLE_INCIDENT = "2026-09-02T13:04:58+09:00..2026-09-02T13:05:27+09:00"


@pytest.fixture(scope="session")
def sample_bundle(tmp_path_factory) -> Path:
    """The sample node collected once with :data:`SAMPLE_INCIDENT` (read, never changed, by the tests that take it)."""
    import sys
    sys.path.insert(0, str(PROJECT / "samples"))
    import build
    from forensics.ops.cli import SAMPLE_ROOT, main
    build.ensure_journal()
    out = tmp_path_factory.mktemp("sample") / "node3"
    assert main(["-q", "collect", "--root", str(SAMPLE_ROOT), "--out", str(out), "--incident", SAMPLE_INCIDENT]) == 0
    return out
