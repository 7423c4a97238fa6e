#!/usr/bin/env python3
"""Analyse bundles with two checkouts' code and compare the outputs: analysis.json, report.md and
report.html must be the same but for the times of the analysis itself.

    python3 bench/samecheck.py [--base /work/main] BUNDLE [BUNDLE ...]

Each bundle is analysed by ``python -m forensics.ops.cli -q analyze`` run from the base checkout and
from this one (the current directory comes first on sys.path, so each runs its own code), with the
same interpreter. Before comparing, the stamps of today's date (the "generated" / "analysed" times)
are blanked, as /tmp/samecheck.sh does for the demo. Prints ``same`` or ``DIFF`` (with the first
differing line) per file; exits 1 when any differs.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("analysis.json", "report.md", "report.html")


def normalised(text: str, day: str) -> str:
    """``text`` without the times of the analysis (any stamp of ``day``, ``YYYY-MM-DD``)."""
    text = re.sub(r"Analysed [^<]*", "", text)
    text = re.sub(rf"{day}T[0-9:.]+Z", "", text)
    return re.sub(rf"{day} [0-9:]+( UTC)?", "", text)


def analyse(checkout: Path, bundle: Path, out: Path) -> None:
    out.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "forensics.ops.cli", "-q", "analyze", str(bundle), "--json",
                    str(out / "analysis.json"), "--markdown", str(out / "report.md"), "--html", str(out / "report.html")],
                   cwd=checkout, check=False, stdout=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="/work/main", help="the checkout to compare with (default /work/main)")
    ap.add_argument("bundles", nargs="+")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="samecheck-") as tmp:
        for n, b in enumerate(args.bundles):
            bundle = Path(b).resolve()
            day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
            base, mine = Path(tmp, f"{n}-base"), Path(tmp, f"{n}-this")
            analyse(Path(args.base), bundle, base)
            analyse(HERE.parent, bundle, mine)
            for f in FILES:
                try:
                    a, c = (normalised((d / f).read_text(encoding="utf-8"), day) for d in (base, mine))
                except OSError as e:
                    print(f"{bundle}: {f} MISSING ({e})")
                    ok = False
                    continue
                if a == c:
                    print(f"{bundle}: {f} same")
                    continue
                ok = False
                la, lc = a.splitlines(), c.splitlines()
                i = next((i for i, (x, y) in enumerate(zip(la, lc)) if x != y), min(len(la), len(lc)))
                print(f"{bundle}: {f} DIFF at line {i + 1}:\n  base: {(la[i] if i < len(la) else '<end>')[:300]}\n"
                      f"  this: {(lc[i] if i < len(lc) else '<end>')[:300]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
