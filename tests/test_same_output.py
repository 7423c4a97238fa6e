"""The same evidence gives the same analysis: the sample node's analysis.json, and bench S's (bench/gen.py: 100k
journal entries, 5k dpkg.log lines, 50 containers; a digest of it, its timeline and artifact list hashed and
counted), collected and analysed afresh, equal the copies kept in tests/golden/ once what must differ between two
runs is taken out (the collection's clock, the output paths, the hashes of the files that record them). A
refactoring that moves code (issue 29) must leave this test green; a change that means to alter the analysis
renews the copies, and their diff is read in review:

    .venv/bin/python tests/test_same_output.py update
"""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
GOLDEN = PROJECT / "tests" / "golden" / "node3-gpu.analysis.json"
GOLDEN_S = PROJECT / "tests" / "golden" / "bench-S.analysis-digest.json"
#: what two runs of the same demo differ in: when it ran and where it wrote
VOLATILE = ("collected_at",)
VOLATILE_BUNDLE = ("command_line", "collection", "path", "manifest_sha256", "tool_version")
_ELAPSED = re.compile(r"^\d+(?:\.\d+)? s$")
_SEQNUM_ID = re.compile(r"\bs=[0-9a-f]{32}\b")


def normalised(a: dict) -> dict:
    """``a`` without its run's clock and paths: the collection times (also as the end of the gaps that run to
    the collection), the bundle's path and command line, the manifest's hash and the artifacts' hashes and
    sizes (files that record the collection's times or durations differ in both), how long each stored
    Prometheus answer took to read, the checkout's place (``<project>``) and the journal files' sequence
    number ids (drawn anew each time systemd-journal-remote writes a file: the sample's journal is built at
    set-up, bench S's here)."""
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
    for art in a["bundle"].get("artifacts") or []:   # how long a stored answer took to read
        art["notes"] = [_ELAPSED.sub("<elapsed>", n) if isinstance(n, str) else n for n in art.get("notes") or []]
    # where the checkout is (the sample root and its recorded answers are read in place), and the sequence
    # number id journal-remote draws for each journal file it writes (a cursor's "s=")
    text = json.dumps(a).replace(str(PROJECT), "<project>")
    return json.loads(_SEQNUM_ID.sub("s=<seqnum-id>", text))


def digest(a: dict) -> dict:
    """:func:`normalised` ``a`` with its two long lists made short: the timeline as its count per kind and the
    SHA-256 of its JSON, the manifest's artifacts as their count per status and the SHA-256 of their
    (path, status, source) list. Everything else whole."""
    import hashlib
    from collections import Counter
    a = normalised(a)

    def sha(x) -> str:
        return hashlib.sha256(json.dumps(x, sort_keys=True).encode()).hexdigest()
    tl = a.get("timeline") or []
    a["timeline"] = {"events": len(tl), "by_kind": dict(sorted(Counter(e.get("kind") for e in tl).items())),
                     "sha256": sha(tl)}
    arts = a["bundle"].get("artifacts") or []
    a["bundle"]["artifacts"] = {"count": len(arts), "by_status": dict(sorted(Counter(x.get("status") for x in arts).items())),
                                "sha256": sha([[x.get("path"), x.get("status"), x.get("source")] for x in arts])}
    return a


def _bench_s(tmp: Path) -> dict:
    """Build bench S's root (bench/gen.py, seeded) and ``run`` the tool on it with the bench's incident."""
    sys.path[:0] = [str(PROJECT / "bench"), str(PROJECT)]
    import gen
    from forensics.ops.cli import main
    size = gen.SIZES["S"]
    gen.build_root(size, tmp / "root", log=lambda *a: None)
    assert main(["-q", "run", "--root", str(tmp / "root"), "--out", str(tmp / "b"), "--incident", gen.incident(size)]) == 0
    return json.loads((tmp / "b-report" / "analysis.json").read_text())


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


def test_bench_s_gives_the_analysis_kept_in_tests_golden(tmp_path):
    got = digest(_bench_s(tmp_path))
    diffs = list(_differences(json.loads(GOLDEN_S.read_text()), got))
    assert not diffs, f"bench S's analysis differs from {GOLDEN_S.name} in {len(diffs)} places, first: " + "; ".join(diffs[:5])


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
        GOLDEN_S.write_text(json.dumps(digest(_bench_s(Path(d))), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} and {GOLDEN_S}")


def test_analysis_json_written_in_pieces_is_the_text_of_one_dump_per_key():
    """reports/render.py writes a long list (the timeline, the bundle's artifacts) a few hundred items at a
    time: the text is the one ``json.dumps`` gives for each top-level key whole. The golden analysis of the
    sample, its timeline made longer than a batch."""
    from reports import render
    a = json.loads(GOLDEN.read_text())
    a["timeline"] = (a["timeline"] * (2 * render.JSON_BATCH // max(1, len(a["timeline"])) + 2))[:2 * render.JSON_BATCH + 7]
    a["bundle"]["artifacts"] = a["bundle"]["artifacts"] * 3
    whole = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, default=str, separators=(',', ':'))}"
                               for k, v in a.items()) + "\n}\n"
    assert len(a["timeline"]) > 2 * render.JSON_BATCH and render.to_json(a) == whole
    assert json.loads(render.to_json(a))["timeline"][-1] == a["timeline"][-1]
