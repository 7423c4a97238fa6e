"""Many journal files against a time budget (issue 15 item 14): 5,000 files took 71-75 s against a
20 s budget and 1.3-1.6 GB, because every file was opened at once (two libsystemd readers each) and
the deadline was looked at only inside one file's scan. Real journal files written by
systemd-journal-remote, copied (sparsely: each is an 8 MiB arena of mostly zeros) into a thousand
files of their own; the collection runs in a child process of its own, which reports its peak RSS (VmHWM) and its
reading children's."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from journalbuild import build_journal

sys.path.insert(0, str(Path(__file__).parent))
from test_journal import T0, pid1, service  # noqa: E402

FILES = 1200
BUDGET = 2.0   #: seconds given to the journal collector
SLACK = 1.0    #: seconds it may run past the budget (the files.json and manifest records, the children)
MAX_RSS_MB = 120  #: the collecting process's peak RSS, children included (it was 1.3-1.6 GB at 5,000 files)

RUN = """
import json, sys, time
from pathlib import Path
from collectors import journal
from forensics.bundle import BundleWriter
from forensics.source import CollectContext
out, jdir, budget = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
(out.parent / "root").mkdir(exist_ok=True)
w = BundleWriter(out)
t0 = time.monotonic()
ctx = CollectContext(root=out.parent / "root", writer=w, options={"since": None, "journal_dirs": [jdir]},
                     deadline=t0 + budget)
journal.acquire(ctx)
took = time.monotonic() - t0
w.meta.update({"node": "n", "node_facts": {}, "incidents": []})
w.finish()
import resource
hwm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print(json.dumps({"took": took, "rss_kb": max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)}))
"""


def _blocks(src: Path) -> tuple[int, list[tuple[int, bytes]]]:
    """``src``'s size and its non-zero 4 KiB blocks ``(offset, bytes)``."""
    data = src.read_bytes()
    return len(data), [(off, data[off:off + 4096]) for off in range(0, len(data), 4096)
                       if data[off:off + 4096].count(0) != len(data[off:off + 4096])]


def _sparse_copy(size: int, blocks: list[tuple[int, bytes]], dest: Path) -> None:
    """A copy holding only ``blocks`` (the rest stays a hole)."""
    with open(dest, "wb") as f:
        f.truncate(size)
        for off, block in blocks:
            os.pwrite(f.fileno(), block, off)


def _many(tmp_path: Path, n: int) -> Path:
    one = build_journal(pid1(T0, "Reloading.") + service(T0 + timedelta(seconds=1), 2210, "kubelet.service", "kubelet",
                                                         "Failed to initialize NVML: Unknown Error"),
                        tmp_path / "one/system.journal")
    many = tmp_path / "many"
    many.mkdir()
    size, blocks = _blocks(one)
    for i in range(n):
        _sparse_copy(size, blocks, many / f"system@{i:05d}.journal")
    return many


def test_a_thousand_files_keep_the_budget_and_memory_and_say_what_was_not_read(tmp_path):
    many = _many(tmp_path, FILES)
    out = tmp_path / "b"
    p = subprocess.Popen([sys.executable, "-c", RUN, str(out), str(many), str(BUDGET)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    stdout, stderr = p.communicate()
    assert p.returncode == 0, stderr
    took, rss_kb = json.loads(stdout)["took"], json.loads(stdout)["rss_kb"]
    assert took <= BUDGET + SLACK, took
    # the child's own peak (VmHWM) and its reading children's: wait4's ru_maxrss would count the
    # test process's pages too (the child is forked from it before exec)
    assert rss_kb / 1024 <= MAX_RSS_MB, rss_kb
    recs = json.loads((out / "journal/files.json").read_text())
    assert len(recs) == FILES  # every file found has its record
    never = [r for r in recs if r["error"] == "not read: time budget"]
    opened = [r for r in recs if r["opened"]]
    assert len(never) + len(opened) == FILES
    # files are taken in order: those the budget did not reach are the last ones, each in the manifest
    assert [r["source"] for r in recs[len(opened):]] == [r["source"] for r in never]
    manifest = [json.loads(line.rstrip(",\n")) for line in (out / "manifest.json").read_text().splitlines()
                if line.startswith("    {")]
    cut = [a for a in manifest if a.get("message") == "not read: the time budget (--time-budget) was spent"]
    assert {a["source"] for a in cut} == {r["source"] for r in never} and {a["status"] for a in cut} <= {"truncated"}
    # the opened files whose entries a pass did not reach are counted and named in the coverage
    cov = json.loads((out / "journal/coverage.json").read_text())
    assert (cov["files_found"], cov["files_read"]) == (FILES, len(opened))
    stopped = [re.search(r"^(.*): reading stopped early: .*time budget.*: (\d+) of (\d+) files not read to their "
                         r"end, from (\S+) on$", pr) for pr in cov["problems"]]
    assert any(stopped), cov["problems"]  # 1,200 files are more than the budget reads
    sources = [r["source"] for r in opened]
    for m in filter(None, stopped):
        left, of, first = int(m.group(2)), int(m.group(3)), m.group(4)
        assert 1 <= left <= of <= len(opened) and first in sources
    # each pass over all files is shared among the readers: their shares add up to the opened files
    for what in ("PID 1 lines", "NVML/kubelet lines"):
        shares = [int(m.group(3)) for m in filter(None, stopped) if m.group(1) == what]
        assert sum(shares) <= len(opened)
    assert "truncated: the time budget ran out while scanning; entries after that point were not read" in \
        [a for a in manifest if a["path"] == "journal/entries.jsonl"][0]["notes"]


# -- the files one at a time give what one reader over all of them gives ------------------------------
def test_files_read_one_at_a_time_select_what_one_reader_over_all_selects(tmp_path, monkeypatch):
    """collectors.journal.fileset against libsystemd's own reader over all files
    (collectors.journal.reader._ReaderSource with every descriptor): the same kept entries in the
    same order, the same boots and journal edges, with one and with two reading processes. The files:
    two rotated files of one boot, the active file with a second boot, a journal-remote copy of the
    first file (the same entries under other sequence numbers) and a file whose clock went back."""
    from test_journal import BOOT, BOOT2, BOOT_NO_RTC, S, SNAPD_CALLER, caller, entry
    from collectors.journal import fileset, reader, selection
    from datetime import datetime, timezone
    d = tmp_path / "j"
    nv = "Failed to initialize NVML: Unknown Error"
    first = (service(T0 - 10 * S, 48211, "snapd.service", "snapd", "Refreshing") + caller(T0, SNAPD_CALLER) +
             pid1(T0 + S / 50, "Reloading...") + service(T0 + 2 * S, 2210, "kubelet.service", "kubelet", nv))
    files = [
        build_journal(first, d / "system@aa-0000000000000001-0006123456789abc.journal"),
        build_journal(pid1(T0 + timedelta(hours=1), "Started kubelet.service - kubelet.", UNIT="kubelet.service") +
                      service(T0 + timedelta(hours=2), 2210, "kubelet.service", "kubelet",
                              'I0717 "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/t-1"') +
                      entry(T0 + timedelta(hours=3), 7001, "kubelet", nv, _COMM="bash", _UID="1000"),  # forged
                      d / "system@aa-0000000000000002-0006123456789abd.journal"),
        build_journal(pid1(T0 + timedelta(days=1, hours=1), "Reloading.", boot=BOOT2) +
                      service(T0 + timedelta(days=1, hours=1, seconds=3), 2210, "kubelet.service", "kubelet", nv,
                              boot=BOOT2), d / "system.journal"),
        build_journal(first, d / "remote-copy.journal"),
        build_journal(pid1(T0 - timedelta(days=1), "Reloading.") +
                      pid1(datetime(1970, 1, 1, 0, 1, 40, tzinfo=timezone.utc), "Reloading.", boot=BOOT_NO_RTC),
                      d / "system@bb-0000000000000001-0006123456789abe.journal"),
    ]
    fhs = [open(f, "rb") for f in files]
    try:
        fds = [fh.fileno() for fh in fhs]
        spans = []
        for fd, f in zip(fds, files):
            one = reader._ReaderSource([fd])
            spans.append((one.edge()["__REALTIME_TIMESTAMP"], one.edge(last=True)["__REALTIME_TIMESTAMP"],
                          f.name != "system.journal"))
            one.close()
        results = {}
        for name, workers in (("all", 0), ("one process", 1), ("two processes", 2)):
            monkeypatch.setattr(fileset, "WORKERS", max(workers, 1))
            src = reader._ReaderSource(fds, spans) if name == "all" else fileset._FileSet(fds, spans, tmp_path)
            try:
                sel, boots, first_e, last_e = selection.select(src, None, [])
                results[name] = ([e for e in sel.entries()], boots, first_e["__CURSOR"], last_e["__CURSOR"],
                                 src.unique("_BOOT_ID"), src.unique("_SYSTEMD_UNIT"),
                                 [src.edge([("_BOOT_ID", b)], last)["__CURSOR"] for b in (BOOT, BOOT2, BOOT_NO_RTC)
                                  for last in (False, True)])
            finally:
                src.close()
        assert results["one process"] == results["all"] and results["two processes"] == results["all"]
        kept = results["all"][0]
        rules = sorted(r for e in kept for r in e["_GF_SELECTED_BY"])
        assert rules.count("nvml") == 2 and rules.count("forged") == 1 and rules.count("healthy") == 1
        assert [b["boot_id"] for b in results["all"][1]] == [BOOT_NO_RTC, BOOT, BOOT2]
        assert len([e for e in kept if e["MESSAGE"] == SNAPD_CALLER]) == 1  # held by two files, kept once
    finally:
        for fh in fhs:
            fh.close()


# -- the NVML pass against a plain OR-match walk ---------------------------------------------------------
def test_nvml_pass_keeps_what_a_plain_or_match_walk_with_the_regexes_alone_keeps(tmp_path, monkeypatch):
    """collectors.journal.fileset.keep_each with the NVML texts and their anchors (issue 18: one search
    for the anchors, then the ``in`` tests) against libsystemd's reader walking the same OR match
    (collectors.journal.reader._ReaderSource.scan) and the NVML rule with the regexes alone
    (``_NVML_TEXTS`` None): the same kept entries, rules and order, file by file and over all files,
    from the head and from a ``since``. The files (systemd-journal-remote, each its own sequence-number
    source): a kubelet.service line that SYSLOG_IDENTIFIER=kubelet matches too, an entry whose
    _SYSTEMD_UNIT has two values (each order), a line of a unit outside the match, lines that hold an
    anchor and no text, two lines of one microsecond, an entry without MESSAGE, lines before ``since``,
    a second boot, and a copy of the first file."""
    from journalbuild import export_entry
    from test_journal import BOOT2, S, entry, usec
    from collectors.journal import fileset, reader, selection
    from collectors.journal.wording import nvml_unit
    nv, probe = "Failed to initialize NVML: Unknown Error", 'I0717 "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/t-1"'
    kub = lambda at, msg, **kw: service(at, 2210, "kubelet.service", "kubelet", msg, **kw)  # noqa: E731
    first = (kub(T0 - 10 * S, nv) + kub(T0 - 5 * S, probe) +
             kub(T0 + S, nv) + kub(T0 + 2 * S, probe) + kub(T0 + 3 * S, "Failed to pull image: failed (no NVML text)") +
             kub(T0 + 3 * S, "SyncLoop ADD source=api (an anchor, no text)") +
             entry(T0 + 4 * S, 3100, "nv-hostengine", "DCGM: " + nv, _COMM="nv-hostengine",
                   _SYSTEMD_UNIT=["session-3.scope", "nvidia-dcgm.service"]) +
             entry(T0 + 5 * S, 3101, "nv-hostengine", "CUDA_ERROR_NO_DEVICE", _COMM="nv-hostengine",
                   _SYSTEMD_UNIT=["nvidia-dcgm.service", "session-3.scope"]) +
             service(T0 + 6 * S, 880, "containerd.service", "containerd", "nvml error: driver not loaded") +
             entry(T0 + 7 * S, 7001, "kubelet", nv, _COMM="bash", _UID="1000", _SYSTEMD_UNIT="session-2.scope") +
             service(T0 + 8 * S, 900, "cron.service", "cron", nv) +  # no unit of the match, no kubelet
             kub(T0 + 9 * S, nv + " (one µs)") + kub(T0 + 9 * S, probe + " (the same µs)") +
             export_entry({"__REALTIME_TIMESTAMP": usec(T0 + 10 * S), "__MONOTONIC_TIMESTAMP": 1,
                           "_BOOT_ID": "6c7c6013a26343b29e964691ff25d04c", "_PID": 2210, "SYSLOG_IDENTIFIER": "kubelet",
                           "_SYSTEMD_UNIT": "kubelet.service", "CODE_LINE": 7}) +  # no MESSAGE
             kub(T0 + timedelta(days=1, seconds=1), nv, boot=BOOT2) +
             service(T0 + timedelta(days=1, seconds=2), 880, "containerd.service", "containerd", probe, boot=BOOT2))
    d = tmp_path / "j"
    files = [build_journal(first, d / "system@aa-0000000000000001-0006123456789abc.journal"),
             build_journal(kub(T0 + timedelta(hours=2), nv) + kub(T0 - S, nv), d / "system.journal"),
             build_journal(first, d / "remote-copy.journal")]
    fhs = [open(f, "rb") for f in files]
    try:
        fds = [fh.fileno() for fh in fhs]
        src = reader._ReaderSource(fds)
        units = [u for u in src.unique("_SYSTEMD_UNIT") if nvml_unit(u)]
        src.close()
        assert units == ["containerd.service", "kubelet.service", "nvidia-dcgm.service"]
        groups = [[("_SYSTEMD_UNIT", u) for u in units], [("SYSLOG_IDENTIFIER", "kubelet")]]
        texts, anchors = selection._NVML_TEXTS, selection._NVML_ANCHORS
        assert texts and len(anchors) < len(texts)
        got = {}
        for workers in (1, 2):
            monkeypatch.setattr(fileset, "WORKERS", workers)
            for since in (None, usec(T0)):
                for part in [[fd] for fd in fds] + [fds]:
                    fs = fileset._FileSet(part, None, tmp_path)
                    problems = []
                    got[(workers, since, tuple(part))] = list(fs.keep_each(groups, since, selection.nvml_rule,
                                                                           problems, "NVML", texts, anchors))
                    fs.close()
                    assert problems == []
        monkeypatch.setattr(selection, "_NVML_TEXTS", None)  # the reference: the regexes alone
        for (workers, since, part), kept in got.items():
            src = reader._ReaderSource(list(part))
            want = [(rule, src.full()) for e in src.scan(groups, since) if (rule := selection.nvml_rule(e))]
            src.close()
            assert kept == want, (workers, since, part)
        messages = lambda since, part: [(r, e["MESSAGE"], e["__REALTIME_TIMESTAMP"])  # noqa: E731
                                        for r, e in got[(1, since, part)]]
        whole = messages(None, (fds[0],))
        assert whole == [("nvml", nv, usec(T0 - 10 * S)), ("healthy", probe, usec(T0 - 5 * S)),
                         ("nvml", nv, usec(T0 + S)), ("healthy", probe, usec(T0 + 2 * S)),
                         # the rules read one _SYSTEMD_UNIT (sd_journal_get_data: the first of the entry's
                         # items, in the file's order of data objects): the session's, in both orders
                         ("forged", "DCGM: " + nv, usec(T0 + 4 * S)), ("forged", "CUDA_ERROR_NO_DEVICE", usec(T0 + 5 * S)),
                         ("symptom", "nvml error: driver not loaded", usec(T0 + 6 * S)),  # forensics/neighbours.py
                         ("forged", nv, usec(T0 + 7 * S)),
                         ("nvml", nv + " (one µs)", usec(T0 + 9 * S)), ("healthy", probe + " (the same µs)", usec(T0 + 9 * S)),
                         ("nvml", nv, usec(T0 + timedelta(days=1, seconds=1))),
                         ("healthy", probe, usec(T0 + timedelta(days=1, seconds=2)))]
        assert messages(usec(T0), (fds[0],)) == whole[2:]  # the two lines before since are not read
        assert messages(None, (fds[2],)) == whole  # the copy: the same entries under its own sequence numbers
        assert [c for _, e in got[(1, None, (fds[0],))] for c in [e["__CURSOR"]]] != \
            [c for _, e in got[(1, None, (fds[2],))] for c in [e["__CURSOR"]]]
        # the clock went back in this file: from the seek on, the walk reads to the file's end
        assert messages(usec(T0), (fds[1],)) == [("nvml", nv, usec(T0 + timedelta(hours=2))), ("nvml", nv, usec(T0 - S))]
        assert messages(None, tuple(fds)) == whole + messages(None, (fds[1],)) + whole
    finally:
        for fh in fhs:
            fh.close()


def test_anchors_cover_every_text_and_a_text_no_anchor_covers_is_its_own():
    from collectors.journal import selection
    assert all(any(a in t for a in selection._NVML_ANCHORS) for t in selection._NVML_TEXTS)
    assert selection.anchors_for(("cuInit failed", "nvml error: x", "Registered device plugin "), ("ailed", "CUDA-", "nvml")) \
        == ("ailed", "nvml", "Registered device plugin ")  # CUDA- is in no text; the last text holds no anchor
    assert selection.anchors_for(None, ("ailed",)) is None


def _mapped_kb(ino: int) -> int:
    """Resident kB of this process's mappings of inode ``ino`` (/proc/self/smaps, proc(5))."""
    total, ours = 0, False
    for line in open("/proc/self/smaps"):
        parts = line.split()
        if "-" in parts[0] and len(parts) >= 5 and parts[4].isdigit():
            ours = int(parts[4]) == ino
        elif ours and parts[0] == "Rss:":
            total += int(parts[1])
    return total


def test_dropping_pages_finds_every_mapping_of_the_file_in_proc_self_maps(tmp_path):
    """collectors.journal.reader._Pages.check reads only the lines of /proc/self/maps that hold the
    file's inode (issue 18): after a walk over the whole file its mappings hold resident pages, and
    after the check none (smaps' Rss); the lines it picks are those a parse of every line picks."""
    from collectors.journal import reader
    path = build_journal(b"".join(service(T0 + timedelta(seconds=i), 2210, "kubelet.service", "kubelet",
                                          f"I0717 routine line {i} " + "y" * 400) for i in range(3000)),
                         tmp_path / "system.journal")
    with open(path, "rb") as fh:
        src = reader._ReaderSource([fh.fileno()])
        ino = os.fstat(fh.fileno()).st_ino
        n = 0
        while src.r._next():
            n += len(src.r._get("MESSAGE"))
        maps = open("/proc/self/maps", "rb").read()
        every = [line for line in maps.split(b"\n") if len(line.split()) >= 5 and int(line.split()[4]) == ino]
        assert every and [line for line in src.pages._lines_with(maps, src.pages.inodes)
                          if int(line.split()[4]) == ino] == every
        assert _mapped_kb(ino) > 500 and n > 3000 * 400
        src.pages.check(force=True)
        assert _mapped_kb(ino) == 0 and src.pages.dropped == 1
        src.close()


# -- the NVML pass by MESSAGE values (issue 18) -------------------------------------------------------------
def test_nvml_pass_by_message_values_keeps_what_the_walk_over_every_entry_keeps(tmp_path, monkeypatch):
    """collectors.journal.reader._ReaderSource.scan_texts first reads the file's distinct MESSAGE values
    (collectors.journal.unique.holding) and walks only the entries of those that hold a text. Against
    the same pass reading every entry (MAX_VALUES 0), and a plain OR-match walk with the regexes alone:
    the same kept entries, rules and order, with one value per walk (TERMS 1), the default, and too many
    entries found (MAX_FOUND 3: every entry read again). The file: a non-UTF-8 MESSAGE holding a text,
    two entries with two MESSAGE values (the text in the first, then in the second: the rules read the
    first libsystemd gives), one NVML line repeated 40 times (one DATA object, 40 entries) between
    other lines, a kubelet line outside every text, and a unit outside the match."""
    from test_journal import S
    from collectors.journal import fileset, reader, selection, unique
    nv = "Failed to initialize NVML: Unknown Error"
    kub = lambda at, msg, **kw: service(at, 2210, "kubelet.service", "kubelet", msg, **kw)  # noqa: E731
    lines = [kub(T0 + i * S, nv if i % 3 == 0 else f"I0717 routine sync {i}") for i in range(120)]
    lines += [kub(T0 + 200 * S, b"E0717 \xff\xfe " + nv.encode()),
              kub(T0 + 201 * S, [nv + " (first)", "a second value"]),
              kub(T0 + 202 * S, ["a first value", nv + " (second)"]),
              service(T0 + 203 * S, 900, "cron.service", "cron", nv),
              kub(T0 + 204 * S, 'I0717 "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/t-1"')]
    path = build_journal(b"".join(lines), tmp_path / "j" / "system.journal")
    groups = [[("_SYSTEMD_UNIT", "kubelet.service")], [("SYSLOG_IDENTIFIER", "kubelet")]]
    texts, anchors = selection._NVML_TEXTS, selection._NVML_ANCHORS
    calls = []
    real = unique.holding
    monkeypatch.setattr(unique, "holding", lambda *a: calls.append(real(*a)) or calls[-1])
    with open(path, "rb") as fh:
        got = {}
        for limits in ((4096, 16, 20_000), (4096, 1, 20_000), (4096, 16, 3), (0, 16, 20_000)):
            monkeypatch.setattr(reader._ReaderSource, "MAX_VALUES", limits[0])
            monkeypatch.setattr(reader._ReaderSource, "TERMS", limits[1])
            monkeypatch.setattr(reader._ReaderSource, "MAX_FOUND", limits[2])
            fs = fileset._FileSet([fh.fileno()], None, tmp_path)
            problems = []
            got[limits] = list(fs.keep_each(groups, None, selection.nvml_rule, problems, "NVML", texts, anchors))
            fs.close()
            assert problems == []
        values = calls[0]
        monkeypatch.setattr(selection, "_NVML_TEXTS", None)
        src = reader._ReaderSource([fh.fileno()])
        want = [(rule, src.full()) for e in src.scan(groups, None) if (rule := selection.nvml_rule(e))]
        src.close()
    assert all(kept == want for kept in got.values())
    # the values that hold a text, once each: the repeated line is one DATA object
    assert sorted(values) == sorted([b"MESSAGE=" + nv.encode(), b"MESSAGE=E0717 \xff\xfe " + nv.encode(),
                                     f"MESSAGE={nv} (first)".encode(), f"MESSAGE={nv} (second)".encode(),
                                     b'MESSAGE=I0717 "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/t-1"'])
    import base64
    messages = [(r, e["MESSAGE"]) for r, e in want]
    assert messages == [("nvml", nv)] * 40 + [
        ("nvml", {"base64": base64.b64encode(b"E0717 \xff\xfe " + nv.encode()).decode()}),
        ("nvml", [nv + " (first)", "a second value"]),
        ("healthy", 'I0717 "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/t-1"')]
    # the entry whose text is in its second MESSAGE is found by that value, and left by the rule (which
    # reads the first value libsystemd gives), as the walk over every entry leaves it


def test_message_values_are_none_where_they_cannot_be_had_exactly(tmp_path):
    """collectors.journal.unique.holding gives ``None`` (the pass then reads every entry) for a text a
    joined run could hold across two values (``=``, NUL) or inside ``MESSAGE`` itself, for a value that
    may have been cut at the data threshold, and for a file with no MESSAGE; else the values."""
    from test_journal import S
    from collectors.journal import unique
    long = "Failed to initialize NVML " + "x" * 5000
    path = build_journal(service(T0, 2210, "kubelet.service", "kubelet", "Failed to initialize NVML: x") +
                         service(T0 + S, 2210, "kubelet.service", "kubelet", long), tmp_path / "a" / "system.journal")
    with open(path, "rb") as fh:
        fd, tick = fh.fileno(), (lambda: None)
        assert sorted(unique.holding(fd, "MESSAGE", (b"NVML",), tick, 1 << 20)) == \
            [b"MESSAGE=Failed to initialize NVML " + b"x" * 5000, b"MESSAGE=Failed to initialize NVML: x"]
        assert unique.holding(fd, "MESSAGE", (b"NVML: x",), tick, 1 << 20) == [b"MESSAGE=Failed to initialize NVML: x"]
        assert unique.holding(fd, "MESSAGE", (b"NVML",), tick, 4096) is None  # the long one may be cut
        for bad in ((b"a=b",), (b"a\0b",), (b"SAGE",), ()):
            assert unique.holding(fd, "MESSAGE", bad, tick, 1 << 20) is None
        assert unique.holding(fd, "NO_SUCH_FIELD", (b"NVML",), tick, 1 << 20) is None

    def stop():
        raise TimeoutError("budget")
    many = build_journal(b"".join(service(T0 + i * S, 2210, "kubelet.service", "kubelet", f"line {i}")
                                  for i in range(40)), tmp_path / "b" / "system.journal")
    with open(many, "rb") as fh:
        with pytest.raises(TimeoutError):
            unique.holding(fh.fileno(), "MESSAGE", (b"NVML",), stop, 1 << 20)


def test_nvml_pass_by_message_values_on_a_file_still_written_keeps_what_the_walk_over_every_entry_keeps(
        tmp_path, monkeypatch):
    """A file appended to (systemd-journal-remote, as journald appends to its online file) after its
    MESSAGE values were read and before their entries are walked: a new NVML line with a value the
    enumeration did not see, then one with a value it saw. The pass by values keeps both, in order,
    as the walk over every entry started after the append does (MAX_VALUES 0), not the second alone."""
    from test_journal import S, usec
    from journalbuild import journal_remote
    from collectors.journal import fileset, reader, selection, unique
    nv, nv2 = "Failed to initialize NVML: Unknown Error", "Failed to initialize NVML: Driver Not Loaded"
    kub = lambda at, msg: service(at, 2210, "kubelet.service", "kubelet", msg)  # noqa: E731
    path = build_journal(b"".join(kub(T0 + i * S, nv if i % 4 == 0 else f"I0717 routine sync {i}")
                                  for i in range(40)), tmp_path / "j" / "system.journal")
    later = kub(T0 + 100 * S, nv2) + kub(T0 + 101 * S, nv) + kub(T0 + 102 * S, "I0717 routine sync late")
    real, calls = unique.holding, []

    def holding_then_append(*a):
        calls.append(real(*a))
        if len(calls) == 1:
            subprocess.run([journal_remote(), f"--output={path}", "-"], input=later, check=True,
                           capture_output=True)
        return calls[-1]
    groups = [[("_SYSTEMD_UNIT", "kubelet.service")], [("SYSLOG_IDENTIFIER", "kubelet")]]
    texts, anchors = selection._NVML_TEXTS, selection._NVML_ANCHORS
    with open(path, "rb") as fh:
        monkeypatch.setattr(unique, "holding", holding_then_append)
        fs = fileset._FileSet([fh.fileno()], None, tmp_path)
        problems = []
        got = [(rule, e["MESSAGE"], e["__REALTIME_TIMESTAMP"])
               for rule, e in fs.keep_each(groups, None, selection.nvml_rule, problems, "NVML", texts, anchors)]
        assert problems == [] and calls[0] == [b"MESSAGE=" + nv.encode()]
        monkeypatch.setattr(reader._ReaderSource, "MAX_VALUES", 0)
        want = [(rule, e["MESSAGE"], e["__REALTIME_TIMESTAMP"])
                for rule, e in fs.keep_each(groups, None, selection.nvml_rule, problems, "NVML", texts, anchors)]
        fs.close()
    t = lambda s: usec(T0 + s * S)  # noqa: E731
    assert want == [("nvml", nv, t(i)) for i in range(0, 40, 4)] + [("nvml", nv2, t(100)), ("nvml", nv, t(101))]
    assert got == want


def _kept(fs_of, groups, monkeypatch, max_values):
    from collectors.journal import reader, selection
    monkeypatch.setattr(reader._ReaderSource, "MAX_VALUES", max_values)
    fs = fs_of()
    problems = []
    try:
        return [(rule, e["__CURSOR"], e["MESSAGE"]) for rule, e in
                fs.keep_each(groups, None, selection.nvml_rule, problems, "NVML", selection._NVML_TEXTS,
                             selection._NVML_ANCHORS)], problems
    finally:
        fs.close()


def test_nvml_pass_by_message_values_on_odd_files_keeps_what_the_walk_over_every_entry_keeps(tmp_path, monkeypatch):
    """The pass by values against the walk over every entry (MAX_VALUES 0) on: two boots in one file,
    the second's clock behind the first's (no RTC: 1970); MESSAGEs with NUL bytes and newlines; ZSTD
    compressed MESSAGEs (systemd-journal-remote compresses past 512 bytes) longer than a data threshold
    of 4 KiB, the text before and after it (there every entry is read), and under 1 MiB (the values are
    had); the same file deleted while open (read from its copy, collectors.journal.fileset._FileSet._open);
    no descriptor and no copy left after 31 passes."""
    from test_journal import BOOT, BOOT_NO_RTC, BOOTED, S, entry
    import shutil
    from collectors.journal import fileset, reader, unique
    nv = "Failed to initialize NVML: Unknown Error"
    kub = lambda at, msg, boot=None: entry(at, 2210, "kubelet", msg, **({"boot": boot} if boot else {}),  # noqa: E731
                                           _SYSTEMD_UNIT="kubelet.service")
    lines = [kub(T0 + i * S, nv if i % 5 == 0 else f"I0717 routine sync {i}") for i in range(30)]
    lines += [kub(T0 + 40 * S, f"E0717 a\0b {nv}"), kub(T0 + 41 * S, f"E0717 first line\n{nv}\nlast"),
              kub(T0 + 42 * S, nv + " " + "x" * 5000), kub(T0 + 43 * S, "y" * 5000 + " " + nv),
              kub(T0 + 44 * S, nv + " " + "z" * 4050)]
    lines += [kub(BOOTED[BOOT_NO_RTC] + (i + 1) * S, nv if i % 2 else f"I0717 no RTC {i}", boot=BOOT_NO_RTC)
              for i in range(10)]
    path = build_journal(b"".join(lines), tmp_path / "j" / "system.journal")
    groups = [[("_SYSTEMD_UNIT", "kubelet.service")], [("SYSLOG_IDENTIFIER", "kubelet")]]
    real, got = unique.holding, []
    monkeypatch.setattr(unique, "holding", lambda *a: got.append(real(*a)) or got[-1])
    fds = lambda: set(os.listdir("/proc/self/fd"))  # noqa: E731
    copy = tmp_path / "copy.journal"
    shutil.copyfile(path, copy)
    for threshold in (1 << 20, 4096):  # the values had exactly; a value that may be cut: every entry read
        monkeypatch.setattr(reader, "DATA_THRESHOLD", threshold)
        shutil.copyfile(copy, path)
        with open(path, "rb") as fh:
            before, got[:] = fds(), []
            of = lambda: fileset._FileSet([fh.fileno()], None, tmp_path)  # noqa: E731
            for _ in range(15):
                by_values, p1 = _kept(of, groups, monkeypatch, 4096)
            every, p2 = _kept(of, groups, monkeypatch, 0)
            assert by_values == every and p1 == p2 == []
            os.unlink(path)  # journald's vacuum: libsystemd refuses the file now (EIDRM), its copy is read
            for _ in range(15):
                deleted, p3 = _kept(of, groups, monkeypatch, 4096)
            assert deleted == every and p3 == []
            assert fds() == before and not [n for n in os.listdir(tmp_path) if n.startswith(fileset.COPY_PREFIX)]
            assert len(got) == 31 and all((v is None) == (threshold == 4096) for v in got)
    messages = [m for _, _, m in every]
    assert messages[:6] == [nv] * 6 and messages[6:8] == [f"E0717 a\0b {nv}", f"E0717 first line\n{nv}\nlast"]
    assert messages[8:11] == [nv + " " + "x" * 5000, "y" * 5000 + " " + nv, nv + " " + "z" * 4050]
    assert messages[11:] == [nv] * 5  # the boot without RTC, its clock at 1970, after the first in the file
    assert [c.split(";b=")[1][:32] for _, c, _ in every] == [BOOT] * 11 + [BOOT_NO_RTC] * 5


def test_nvml_pass_by_message_values_on_a_damaged_file_keeps_what_the_walk_over_every_entry_keeps(
        tmp_path, monkeypatch):
    """A file with 4 KiB of its middle overwritten (a bad sector, a torn write) where libsystemd still
    opens it and an entry found by its MESSAGE cannot be sought again by its cursor: the pass reads
    every entry then, and keeps what the walk over every entry keeps (before: "reading stopped early",
    and none kept); libsystemd's walk by the kubelet unit's match stops at the damage, and both passes
    read on by walking every entry (before: 39 of the 1,000 NVML lines, issue 27), saying so in the
    source's ``damage``."""
    from test_journal import S
    nv = "Failed to initialize NVML: Unknown Error"
    path = build_journal(b"".join(service(T0 + i * S, 2210, "kubelet.service", "kubelet",
                                          f"{nv} {i % 7}" if i % 3 == 0 else f"I0717 routine sync {i}")
                                  for i in range(3000)), tmp_path / "j" / "system.journal")
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size * 45 // 100 // 8 * 8)
        f.write(b"\xff" * 4096)
    groups = [[("_SYSTEMD_UNIT", "kubelet.service")], [("SYSLOG_IDENTIFIER", "kubelet")]]
    from collectors.journal import fileset
    with open(path, "rb") as fh:
        of = lambda: fileset._FileSet([fh.fileno()], None, tmp_path)  # noqa: E731
        by_values, p1 = _kept(of, groups, monkeypatch, 4096)
        every, p2 = _kept(of, groups, monkeypatch, 0)
    assert p1 == p2 == []
    assert len(every) == 1000 and [m for _, _, m in every[:3]] == [f"{nv} 0", f"{nv} 3", f"{nv} 6"]
    assert by_values == every


def test_the_time_budget_spent_while_the_message_values_are_read_is_noted_and_the_files_before_kept(
        tmp_path, monkeypatch):
    """The budget runs out inside collectors.journal.unique.holding of the second file (its first
    ``tick``): the first file's NVML lines are kept, the pass notes "reading stopped early" naming the
    second file, and no descriptor is left open."""
    from test_journal import S
    from collectors.journal import fileset, reader, unique
    nv = "Failed to initialize NVML: Unknown Error"
    paths = [build_journal(b"".join(service(T0 + (k * 1000 + i) * S, 2210, "kubelet.service", "kubelet",
                                            nv if i % 10 == 0 else f"I0717 routine sync {k} {i}") for i in range(100)),
                           tmp_path / f"j{k}" / "system.journal") for k in range(2)]
    real, ticks = reader._ReaderSource._tick, []
    holding, raised = unique.holding, []

    def holding_raising(*a):
        try:
            return holding(*a)
        except TimeoutError:
            raised.append(True)
            raise
    monkeypatch.setattr(unique, "holding", holding_raising)

    def tick(self):
        ticks.append(self.fd)
        if len(ticks) > 1 and os.fstat(self.fd).st_ino == os.stat(paths[1]).st_ino:
            self.deadline = 0.0  # spent from here on
        return real(self)
    monkeypatch.setattr(reader._ReaderSource, "_tick", tick)
    monkeypatch.setattr(fileset, "WORKERS", 1)
    groups = [[("_SYSTEMD_UNIT", "kubelet.service")], [("SYSLOG_IDENTIFIER", "kubelet")]]
    with open(paths[0], "rb") as a, open(paths[1], "rb") as b:
        before = set(os.listdir("/proc/self/fd"))
        kept, problems = _kept(lambda: fileset._FileSet([a.fileno(), b.fileno()], None, tmp_path, ["first", "second"]),
                               groups, monkeypatch, 4096)
        assert set(os.listdir("/proc/self/fd")) == before
    assert [m for _, _, m in kept] == [nv] * 10 and raised == [True]  # the budget ended the enumeration
    assert problems == ["NVML: reading stopped early: the collection's time budget was spent (--time-budget): "
                        "1 of 2 files not read to their end, from second on"]
