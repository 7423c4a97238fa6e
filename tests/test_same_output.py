"""The same evidence gives the same analysis: the sample node's analysis.json, collected and analysed afresh, equals
the copy kept in tests/golden/ once what must differ between two runs is taken out (the collection's clock, the
output paths, the hashes of the files that record them). A refactoring that moves code (issue 29) must leave
this test green; a change that means to alter the analysis renews the copy, and its diff is read in review:

    .venv/bin/python tests/test_same_output.py update
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
GOLDEN = PROJECT / "tests" / "golden" / "node3-gpu.analysis.json"
#: what two runs of the same demo differ in: when it ran and where it wrote
VOLATILE = ("collected_at",)
VOLATILE_BUNDLE = ("command_line", "collection", "path", "manifest_sha256", "tool_version")


def normalised(a: dict) -> dict:
    """``a`` without its run's clock and paths: the collection times (also as the end of the gaps that run to
    the collection), the bundle's path and command line, the manifest's hash and the artifacts' hashes and
    sizes (files that record the collection's times or durations differ in both), and the checkout's place
    (``<project>``)."""
    a = copy.deepcopy(a)
    now = a.get("collected_at")
    for k in VOLATILE:
        a.pop(k, None)
    for k in VOLATILE_BUNDLE:
        a["bundle"].pop(k, None)
    a.pop("integrity", None)
    for art in a["bundle"].get("artifacts") or []:
        art.pop("sha256", None)
        art.pop("size", None)
    for g in a.get("gaps") or []:
        if (g.get("covers") or {}).get("end") == now:
            g["covers"]["end"] = "<collection>"
    # where the checkout is (the sample root and its recorded answers are read in place)
    return json.loads(json.dumps(a).replace(str(PROJECT), "<project>"))


def _demo(out: Path) -> dict:
    sys.path.insert(0, str(PROJECT))
    from forensics.ops.cli import main
    assert main(["demo", "--out", str(out)]) == 0
    return json.loads((out / "analysis.json").read_text())


def test_the_sample_gives_the_analysis_kept_in_tests_golden(tmp_path):
    got = normalised(_demo(tmp_path / "demo"))
    want = json.loads(GOLDEN.read_text())
    diffs = list(_differences(want, got))   # the differing places named, not a whole-file diff
    assert not diffs, f"analysis.json differs from {GOLDEN.name} in {len(diffs)} places, first: " + "; ".join(diffs[:5])


def _differences(want, got, path: str = ""):
    """``"path: want != got"`` for each place the two JSON values differ (a list by index, a dict by key)."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            yield from _differences(want.get(k, "<absent>"), got.get(k, "<absent>"), f"{path}/{k}")
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (w, g) in enumerate(zip(want, got)):
            yield from _differences(w, g, f"{path}[{i}]")
    elif want != got:
        yield f"{path or '/'}: {str(want)[:120]!r} != {str(got)[:120]!r}"


if __name__ == "__main__" and sys.argv[1:] == ["update"]:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(normalised(_demo(Path(d) / "demo")), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
