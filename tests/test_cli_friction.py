"""The CLI under pressure (issue 16 item 5, issue 18's verdict order): each friction point through the
real CLI, with its exact line and exit code."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from collectors import COLLECTORS
from forensics.ops import cli
from forensics.ops.cli import SAMPLE_ROOT, main

INCIDENT = "2026-09-02T13:04:58+09:00..2026-09-02T13:05:27+09:00"


@pytest.fixture
def bundle(sample_bundle):
    return sample_bundle


def _err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("value", ["-5", "nan"])
def test_a_negative_time_budget_is_one_usage_line(tmp_path, capsys, value):
    assert main(["collect", "--root", str(tmp_path), "--out", str(tmp_path / "b"), f"--time-budget={value}"]) == 2
    assert _err_lines(capsys) == [f"gpu-forensics: error: --time-budget {float(value):g}: give the seconds the "
                                  "collection may take, or 0 for no limit"]


def test_time_budget_zero_means_no_limit_and_says_so(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    assert "(default 600; 0: no limit)" in " ".join(capsys.readouterr().out.split())
    assert main(["collect", "--root", str(tmp_path), "--out", str(tmp_path / "b"), "--time-budget", "0"]) == 0
    assert "gpu-forensics: --time-budget 0: no time limit; every source is read to its end" in _err_lines(capsys)
    assert json.loads((tmp_path / "b/manifest.json").read_text())["options"]["time_budget_s"] == 0


def test_a_spent_budget_names_each_cut_source_and_exits_1(tmp_path, capsys):
    rc = main(["-q", "collect", "--root", str(SAMPLE_ROOT), "--out", str(tmp_path / "b"), "--time-budget", "1e-9"])
    err = _err_lines(capsys)
    assert rc == 1  # "done with gaps": deploy/collect-once.py ends such a run with 0
    cut = [x for x in err if x.startswith("  cut: ")]
    # the budget is spent before the first collector starts: none is run, each is named
    names = [m.NAME for m in COLLECTORS]
    assert cut == [f"  cut: collector:{n}: not run: the 1e-09 s time budget was spent" for n in names]
    assert err[-1] == (f"gpu-forensics: done with gaps (exit 1): {len(names)} sources cut by the 1e-09 s time budget; "
                       "the manifest records each; a larger --time-budget (0: no limit) reads the rest")
    once = subprocess.run([sys.executable, "deploy/collect-once.py", "-q", "collect", "--root", str(SAMPLE_ROOT),
                           "--out", str(tmp_path / "c"), "--time-budget", "1e-9"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})  # this checkout's forensics
    assert once.returncode == 0 and once.stderr.splitlines()[-1] == "gpu-forensics exited 1"


@pytest.mark.parametrize("out, under", [("/sys/kernel/x.tar.gz", "/sys"), ("/proc/nope/x", "/proc")])
def test_an_output_under_proc_or_sys_is_one_line_exit_5(tmp_path, capsys, out, under):
    assert main(["collect", "--root", str(tmp_path), "--out", out]) == 5
    assert _err_lines(capsys) == [f"gpu-forensics: error: {out}: the output is under {under}, a kernel file system; "
                                  "give --out on a real disk (e.g. /var/tmp/...)"]


def test_a_report_that_cannot_be_written_is_one_line_exit_5(bundle, tmp_path, capsys):
    assert main(["analyze", str(bundle), "--html", "/sys/x.html"]) == 5
    assert _err_lines(capsys) == ["gpu-forensics: error: /sys/x.html: the output is under /sys, a kernel file "
                                  "system; give --html on a real disk (e.g. /var/tmp/...)"]
    (tmp_path / "f").write_text("a file, not a directory")
    rc = main(["analyze", str(bundle), "--markdown", str(tmp_path / "f/r.md"), "--html", str(tmp_path / "r.html"),
               "--json", str(tmp_path / "a.json")])
    assert rc == 5
    assert _err_lines(capsys) == [f"gpu-forensics: error: cannot write the report {tmp_path}/f/r.md: {tmp_path}/f "
                                  "is a file, not a folder; give --markdown a writable place, e.g. --markdown "
                                  "/var/tmp/report.md"]
    rc = main(["analyze", str(bundle), "--json", str(tmp_path / "f/deeper/a.json"), "--html", str(tmp_path / "r.html"),
               "--markdown", str(tmp_path / "r.md")])  # mkdir says ENOTDIR a folder below the file
    assert rc == 5
    assert _err_lines(capsys) == [f"gpu-forensics: error: cannot write the report {tmp_path}/f/deeper/a.json: "
                                  f"{tmp_path}/f is a file, not a folder; give --json a writable place, e.g. --json "
                                  "/var/tmp/analysis.json"]


def test_timeline_to_a_full_disk_is_one_line_exit_5(bundle):
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "forensics.ops.cli", "timeline", str(bundle)], stdout=full,
                           stderr=subprocess.PIPE, text=True)
    assert p.returncode == 5
    assert p.stderr.splitlines() == ["gpu-forensics: error: cannot write the timeline to standard output: No space "
                                     "left on device (ENOSPC); redirect it to a file on a disk with room "
                                     "(> timeline.txt)"]


def test_quiet_run_prints_the_verdicts_before_the_reports_and_each_thing_once(tmp_path, capsys, monkeypatch):
    from reports import render
    real, seen = render.write_all, []

    def write(*a, **kw):  # what stdout held when the reports began to render
        seen.append(capsys.readouterr().out)
        return real(*a, **kw)
    monkeypatch.setattr(render, "write_all", write)
    out = tmp_path / "n"
    rc = main(["--quiet", "run", "--root", str(SAMPLE_ROOT), "--out", str(out), "--incident", INCIDENT])
    assert rc == 0
    a = json.loads((tmp_path / "n-report/analysis.json").read_text())
    assert len(a["verdicts"]) == 1 and a["verdicts"][0].startswith("Incident I1 (2026-09-02T04:04:58Z .. ")
    before = seen[0].splitlines()
    assert before == a["verdicts"]  # the verdict lines, and nothing else, before the HTML and its chart
    after = capsys.readouterr().out.splitlines()
    digest = a["bundle"]["manifest_sha256"]
    assert after == ["", f"report: {tmp_path}/n-report/report.html", f"ticket text: {tmp_path}/n-report/report.md",
                     f"analysis: {tmp_path}/n-report/analysis.json", f"bundle: {out}",
                     f"manifest.json sha256: {digest}"]


def test_fleet_names_an_unreadable_bundle(bundle, tmp_path, capsys):
    bad = tmp_path / "in/broken.tar.gz"
    bad.parent.mkdir()
    bad.write_bytes(b"not a gzip file")
    rc = main(["fleet", str(bundle), str(bad), "--out", str(tmp_path / "f")])
    assert rc == 3
    err = json.loads((tmp_path / "f/fleet.json").read_text())["errors"]
    assert err == [{"bundle": str(bad), "error": f"{bad}: not a bundle directory or .tar.gz archive"}]
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("; 1 bundle unreadable or skipped")
    assert out[1] == f"  unreadable: {bad}: not a bundle directory or .tar.gz archive"  # the path once


@pytest.mark.parametrize("flag, url, source, line", [
    ("--prometheus", "not a url", "--prometheus",
     "--prometheus wants a URL like http://prometheus:9090 (or file://DIR of recorded answers)"),
    # issue 28: no scheme, as people type it: the corrected form, the host kept, the password not
    ("--prometheus", "localhost:9090", "--prometheus",
     "--prometheus wants a URL with its scheme: did you mean --prometheus http://localhost:9090 (https:// for TLS)?"),
    ("--prometheus", "bob:s3cret@prom.monitoring:9090", "--prometheus",
     "--prometheus wants a URL with its scheme: did you mean --prometheus http://bob:<redacted>@prom.monitoring:9090 "
     "(https:// for TLS)?"),
    ("--prometheus", "ftp://prom", "ftp://prom",
     "--prometheus wants a URL like http://prometheus:9090 (or file://DIR of recorded answers); got ftp://prom"),
    # the password stays redacted in the line
    ("--prometheus", "ftp://bob:s3cret@prom/", "ftp://prom/", "--prometheus wants a URL like http://prometheus:9090 "
                                                              "(or file://DIR of recorded answers); got "
                                                              "ftp://bob:<redacted>@prom/"),
    ("--dcgm-url", "dcgm:9400", "--dcgm-url",
     "--dcgm-url wants a URL with its scheme: did you mean --dcgm-url http://dcgm:9400 (https:// for TLS)?"),
])
def test_a_metrics_url_that_is_not_one_is_one_line_with_advice(tmp_path, capsys, flag, url, source, line):
    """The other sources are still collected (a typo must not cost the bundle: test_metrics), and the
    metrics source's gap is the advice, not the HTTP library's text."""
    assert main(["collect", "--root", str(tmp_path), "--out", str(tmp_path / "b"), flag, url]) == 1
    assert _err_lines(capsys) == [f"  error: {source}: {line}", "gpu-forensics: done with gaps (exit 1): 1 artifact "
                                  "failed or unreadable; the manifest records each"]
    m = json.loads((tmp_path / "b/manifest.json").read_text())
    assert [(a["source"], a["message"]) for a in m["artifacts"] if a["status"] == "error"] == [(source, line)]
    assert "s3cret" not in (tmp_path / "b/manifest.json").read_text()


def test_the_exit_codes_are_documented_where_they_are_given():
    assert "1 done with gaps" in cli.__doc__ and "5 an output could not be written" in cli.__doc__
