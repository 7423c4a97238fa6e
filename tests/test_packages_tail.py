"""Package logs over the size bound keep their END, the newest lines (issue 15 item 13).

Real files throughout: sparse logs made with ``os.truncate`` (``truncate -s``) with real lines appended,
a child process for the time and memory of a whole collection, and the bundle read back into coverage,
analysis.json's gaps and the daemon-reload requester's gaps.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from collectors import packages
from forensics import tailcopy
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.findings import verdicts
from forensics.findings.verdicts import Evidence, Window
from test_verdicts import judge
from forensics.redact import redact_bytes
from forensics.source import CollectContext
from forensics.timeutil import iso_z, parse_iso
from forensics.events import Coverage, Event

REPO = Path(__file__).resolve().parents[1]
NODE = NodeFacts()
NEW = [f"2026-07-01 10:{m:02d}:00 status installed nvidia-container-toolkit:amd64 1.17.8-1\n" for m in range(3)]
STANZA = ("\nStart-Date: 2026-07-01  10:00:00\nCommandline: apt-get install -y nvidia-container-toolkit\n"
          "Upgrade: nvidia-container-toolkit:amd64 (1.17.7-1, 1.17.8-1)\nEnd-Date: 2026-07-01  10:00:30\n")


def _sparse(path: Path, head: str, size: int, tail: str) -> None:
    """``head``, then a hole up to ``size`` bytes (truncate -s), then ``tail`` appended: real lines at the end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head)
    os.truncate(path, size)
    with open(path, "a") as f:
        f.write(tail)


def _collect(root: Path, out: Path) -> Bundle:
    w = BundleWriter(out)
    packages.acquire(CollectContext(root=root, writer=w))
    w.finish()
    return Bundle.open(out)


CHILD = """
import json, resource, sys, time
from forensics.ops.pipeline import collect
t = time.monotonic()
path, _, arts = collect(sys.argv[1], sys.argv[2], time_budget=float(sys.argv[3]), argv=["test"])
# VmHWM, this process's own peak: ru_maxrss survives execve(2) (getrusage(2)), so in a full suite it is
# the forking pytest's peak (385 MiB seen), not the collection's
hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0]
print(json.dumps({"wall": time.monotonic() - t, "maxrss_kib": max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
                  "not_run": [a.source for a in arts if a.source.startswith("collector:")]}))
"""


def test_a_2_gib_sparse_dpkg_log_keeps_its_newest_lines_within_the_budget_and_memory(tmp_path):
    root = tmp_path / "host"
    _sparse(root / "var/log/dpkg.log", "2026-01-05 08:00:00 status installed old:amd64 1\n", 2 << 30, "".join(NEW))
    _sparse(root / "var/log/apt/history.log", STANZA.replace("07-01", "01-05"), 1 << 30, STANZA)
    budget, slack, rss_bound = 5.0, 2.0, 256 << 10  # KiB: a third of the DaemonSet's 768 Mi limit
    run = subprocess.run([sys.executable, "-c", CHILD, str(root), str(tmp_path / "b"), str(budget)], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    print("child:", got)
    # before: the whole 2 GiB was copied (5 s budget -> 8.7 s, later sources "not run"); 1 GiB history.log: 3.18 GB
    assert got["wall"] < budget + slack, got
    assert got["maxrss_kib"] < rss_bound, got
    assert got["not_run"] == [], got
    b = Bundle.open(tmp_path / "b")
    recs = {a.source: a for a in b.artifacts()}
    assert tailcopy.head_cut(recs["/var/log/dpkg.log"].notes) == (2 << 30, packages.LOG_LIMIT)
    assert tailcopy.head_cut(recs["/var/log/apt/history.log"].notes) == (1 << 30, packages.LOG_LIMIT)
    assert b.path("packages/dpkg/dpkg.log").read_text() == "".join(NEW)  # the hole is skipped, every new line kept
    r = packages.read(b, NODE)
    dpkg = [e for e in r.events if e.source == "dpkg"]
    assert [iso_z(e.at) for e in dpkg] == ["2026-07-01T10:00:00Z", "2026-07-01T10:01:00Z", "2026-07-01T10:02:00Z"]
    [apt] = [e for e in r.events if e.source == "apt"]
    assert iso_z(apt.at) == "2026-07-01T10:00:00Z"
    cov = {c.source: c for c in r.coverage}
    assert iso_z(cov["dpkg"].start) == "2026-07-01T10:00:00Z"
    cut = ("dpkg.log before 2026-07-01T10:00:00Z not kept (the first 2147483648 bytes, over the 64 MiB bound, "
           "were not copied)")
    assert cut in cov["dpkg"].reason
    assert "history.log before 2026-07-01T10:00:00Z not kept (the first 1073741824 bytes" in cov["apt"].reason
    assert "truncated at collection" not in cov["dpkg"].reason  # its end was kept: not cut short
    # the current file's end is stored, so the log still covers up to the collection
    assert cov["dpkg"].end == parse_iso(b.manifest["collection"]["start"])
    from forensics.ops.pipeline import analyze
    gaps = {g["source"]: g for g in analyze(b)["gaps"]}
    assert cut in gaps["dpkg"]["reason"]


def test_a_cut_head_between_rotations_is_a_hole_and_the_requester_cites_it(tmp_path, monkeypatch):
    monkeypatch.setattr(packages, "LOG_LIMIT", 4096)
    old = "".join(f"2026-06-{d:02d} 09:00:00 status installed a:amd64 1\n" for d in (1, 2))
    lost = "".join(f"2026-06-20 09:{m:02d}:00 configure nvidia-container-toolkit:amd64 1.17.8-1 <none>\n"
                   for m in range(60))  # 4.6 KB: the head of dpkg.log, over the 4 KiB bound
    kept = "".join(f"2026-06-21 06:{m:02d}:00 status installed b:amd64 1\n" for m in range(40))
    root = tmp_path / "host"
    for rel, data in (("var/log/dpkg.log.1", old), ("var/log/dpkg.log", lost + kept)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(data)
    b = _collect(root, tmp_path / "b")
    rec = {a.source: a for a in b.artifacts()}["/var/log/dpkg.log"]
    data = (lost + kept).encode()
    skipped = data.index(b"\n", len(data) - 4096) + 1  # the first whole line of the last 4096 bytes
    assert (rec.status.value, tailcopy.head_cut(rec.notes)) == ("truncated", (skipped, 4096))
    stored = b.path("packages/dpkg/dpkg.log").read_text()
    assert stored == data[skipped:].decode() and stored.endswith(kept) and len(stored) <= 4096
    r = packages.read(b, NODE)
    dpkg = next(c for c in r.coverage if c.source == "dpkg")
    first = iso_z(next(e.at for e in r.events if e.evidence["artifact"] == "packages/dpkg/dpkg.log"))
    [hole] = dpkg.holes
    assert (iso_z(hole.start), iso_z(hole.end)) == ("2026-06-02T09:00:00Z", first)
    assert f"dpkg.log before {first} not kept (the first {skipped} bytes, over the 4096 bytes bound" in hole.reason
    # the coverage runs from June 1st, yet a window inside the cut head is not covered: no "excluded"
    lo, hi = parse_iso("2026-06-20T09:00:00Z"), parse_iso("2026-06-20T09:30:00Z")
    assert not verdicts.covers(dpkg, lo, hi)
    pt = judge("package-transaction", Window(lo, hi), Evidence([], {"dpkg": dpkg}))
    assert pt.verdict == "undetermined" and any(f"dpkg.log before {first} not kept" in g for g in pt.gaps)
    # a reload with no caller line there: its requester is read from package history, so the cut is cited
    rl = Event(parse_iso("2026-06-20T09:10:00Z"), "journal", "journal.reload", "reload", {"wording": "Reloading."},
               {"artifact": "journal/entries.jsonl", "line": 1})
    journal = Coverage("journal", parse_iso("2026-06-01T00:00:00Z"), parse_iso("2026-07-01T00:00:00Z"), "journal")
    c = judge("daemon-reload", Window(lo, hi), Evidence([rl], {"journal": journal, "dpkg": dpkg}))
    assert c.verdict == "confirmed" and c.requested_by["basis"] == "unknown"
    assert any(g.startswith("dpkg has a hole in the window: ") and f"dpkg.log before {first} not kept" in g
               for g in c.gaps)


def test_line_boundaries_a_hole_s_end_and_a_line_longer_than_the_bound(tmp_path):
    root = tmp_path / "host"
    cases = {"nl": b"x" * 50 + b"\n" + b"2026-07-01 10:00:00 a\n",           # cut inside a line: from the next one
             "exact": b"y" * 9 + b"\n" + b"z" * 30 + b"\n",                  # cut right after a newline: kept whole
             "hole": b"a\n" + b"\0" * 100 + b"2026-07-01 10:00:00 b\n",      # after a hole: the line after it
             "long": b"q" * 100 + b"\n",                                     # no boundary in the last 40 bytes
             "small": b"fits\n"}
    w = BundleWriter(tmp_path / "b")
    for name, data in cases.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        w.copy(root, f"/{name}", f"t/{name}", limit=31, tail=True)
    w.finish()
    b = Bundle.open(tmp_path / "b")
    got = {a.path[2:]: (b.path(a.path).read_bytes(), a.status.value, tailcopy.head_cut(a.notes)) for a in b.artifacts()}
    assert got["nl"] == (b"2026-07-01 10:00:00 a\n", "truncated", (51, 31))
    assert got["exact"] == (b"z" * 30 + b"\n", "truncated", (10, 31))
    assert got["hole"] == (b"2026-07-01 10:00:00 b\n", "truncated", (102, 31))
    assert got["long"] == (b"", "truncated", (101, 31))
    assert got["small"] == (b"fits\n", "collected", None)


def test_a_redacted_log_keeps_its_end_redacted_and_a_gz_keeps_its_start(tmp_path, monkeypatch):
    monkeypatch.setattr(packages, "LOG_LIMIT", 600)
    proxy = STANZA.replace("apt-get install", "apt-get -o Acquire::http::Proxy=http://bob:hunter2@proxy:3128 install")
    gz = gzip.compress("".join(f"2026-05-01 06:{m:02d}:00 status installed c{os.urandom(16).hex()}:amd64 1\n"
                               for m in range(60)).encode())  # random names: over 600 bytes compressed
    root = tmp_path / "host"
    for rel, data in (("var/log/apt/history.log", (STANZA.replace("07-01", "06-01") * 5 + proxy).encode()),
                      ("var/log/dpkg.log.2.gz", gz), ("var/log/dpkg.log", NEW[0].encode())):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    b = _collect(root, tmp_path / "b")
    recs = {a.source: a for a in b.artifacts()}
    h = recs["/var/log/apt/history.log"]
    assert h.status.value == "truncated" and tailcopy.head_cut(h.notes)[1] == 600
    assert any(n.startswith("credentials redacted in 1 lines") for n in h.notes)
    text = b.path("packages/apt/history.log").read_text()
    assert "hunter2" not in text and text.endswith("End-Date: 2026-07-01  10:00:30\n") and len(text) <= 600
    g = recs["/var/log/dpkg.log.2.gz"]  # a .gz's end cannot be decompressed alone: it keeps its start
    assert tailcopy.head_cut(g.notes) is None and "only the first 600 bytes were copied" in g.notes
    assert b.path("packages/dpkg/dpkg.log.2.gz").read_bytes() == gz[:600]


def test_a_redacted_log_past_the_budget_keeps_its_newest_pieces_and_names_the_cut(tmp_path):
    """Redacting a 64 MiB history.log takes seconds (5.4 s at load 6): it is redacted newest piece first,
    and what the budget did not reach is dropped and becomes a gap, never copied unredacted."""
    import time
    old = STANZA.replace("07-01", "06-01").replace("install -y", "-o Acquire::http::Proxy=http://u:pw@p:3128 install")
    newest = STANZA.replace("10:00:", "11:00:")
    root = tmp_path / "host"
    (root / "var/log/apt").mkdir(parents=True)
    (root / "var/log/apt/history.log").write_text(old * ((20 << 20) // len(old)) + newest)
    w = BundleWriter(tmp_path / "b")
    t = time.monotonic()
    packages.acquire(CollectContext(root=root, writer=w, deadline=t + 0.3))
    wall = time.monotonic() - t
    w.finish()
    assert wall < 0.3 + 2.5, wall  # after the deadline at most one more piece (1 MiB) is redacted; slack for load
    b = Bundle.open(tmp_path / "b")
    rec = {a.source: a for a in b.artifacts()}["/var/log/apt/history.log"]
    [note] = [n for n in rec.notes if n.startswith("truncated: the time budget")]
    dropped = int(note.split("the first ")[1].split()[0])
    text = b.path("packages/apt/history.log").read_text()
    orig = (root / "var/log/apt/history.log").read_bytes()
    assert rec.status.value == "truncated" and 0 < dropped < len(orig) and orig[dropped - 2:dropped] == b"\n\n"
    assert redact_bytes(orig[dropped:]) == text.encode()  # the rest, whole stanzas, redacted as a whole
    assert text.endswith(newest) and text.startswith("Start-Date: ") and "u:pw@" not in text
    cov = next(c for c in packages.read(b, NODE).coverage if c.source == "apt")
    assert (f"history.log before 2026-06-01T10:00:00Z not kept (the first {dropped} bytes were dropped when the "
            "time budget ran out while redacting)") in cov.reason


def test_newest_first_redaction_splits_only_after_blank_lines(monkeypatch):
    monkeypatch.setattr(packages, "PIECE", 100)
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEow" * 40 + "\n-----END RSA PRIVATE KEY-----\n"
    text = ("\nStart-Date: 2026-06-01  10:00:00\nCommandline: apt upgrade\n" * 3 + "\n" + pem).encode()
    out, dropped = packages._newest_first(text, lambda: True)  # budget spent: only the newest piece
    assert text[dropped - 2:dropped] == b"\n\n" and out.startswith(b"-----BEGIN") and b"MIIEow" not in out
    out_all, none = packages._newest_first(text, lambda: False)
    assert none == 0 and out_all.endswith(out) and out_all.count(b"Commandline: apt upgrade") == 3
