"""Where the reports and the suggested alert rules go when the paths given are not plain files of a folder:
``--html /dev/stdout`` into a pipe or a file, reports thrown away to /dev/null, a rules file that cannot be
written, a folder that is a file; and an interrupt while the tool loads. Each through the real CLI, with its
exact line and exit code."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.ops.cli import PROJECT, main

RULES = "gpu-alerts.rules.yml"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's bundle (collected with its Prometheus answer, so the alert audit runs and suggests rules)."""
    out = tmp_path_factory.mktemp("demo")
    assert main(["-q", "demo", "--out", str(out)]) == 0
    return next(p for p in out.iterdir() if p.name.startswith("bundle-") and p.is_dir())


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "forensics.ops.cli", *args], cwd=PROJECT, text=True, timeout=300,
                          **kw)


def test_html_into_a_pipe_is_the_page_alone_and_the_rules_go_beside_the_next_report(demo, tmp_path):
    """``--html /dev/stdout`` with stdout a pipe was refused ("the output is under /proc": /dev/stdout resolves
    to /proc/<pid>/fd/pipe:[…]); the verdicts and ``wrote`` lines were printed into the page's stream, and the
    rules went beside /dev/stdout, into /dev."""
    p = _cli("analyze", str(demo), "--html", "/dev/stdout", "--markdown", str(tmp_path / "r.md"), "--json",
             str(tmp_path / "a.json"), capture_output=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("<!DOCTYPE html>") and p.stdout.rstrip().endswith("</html>")
    assert "Incident I2" not in p.stdout.split("<body", 1)[0]  # nothing of the person's before the page
    err = p.stderr.splitlines()
    assert err[0].startswith("Incident I2 (2026-09-02T04:04:58Z .. 2026-09-02T04:05:27Z): a systemd daemon-reload "
                             "is CONFIRMED")
    assert err[-4:] == ["wrote /dev/stdout", f"wrote {tmp_path}/r.md", f"wrote {tmp_path}/a.json",
                        f"wrote {tmp_path}/{RULES}"]
    audit = json.loads((tmp_path / "a.json").read_text())["metrics"]["alert_audit"]
    assert (tmp_path / RULES).read_text() == audit["suggested_rules_yaml"]
    assert not Path("/dev", RULES).exists()


def test_reports_through_links_only_write_no_rules_file(demo, tmp_path):
    """Every report through a link or to a device (stdout a file, the others /dev/null): the page is whole in
    the file stdout points at, and no rules file is made anywhere (report.html holds the rules)."""
    page = tmp_path / "page.html"
    with open(page, "w") as out:
        p = _cli("analyze", str(demo), "--html", "/dev/stdout", "--markdown", "/dev/null", "--json", "/dev/null",
                 stdout=out, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "promtool check rules" in html and "alert: " in html
    assert p.stderr.splitlines()[-3:] == ["wrote /dev/stdout", "wrote /dev/null", "wrote /dev/null"]
    assert sorted(q.name for q in tmp_path.iterdir()) == ["page.html"] and not Path("/dev", RULES).exists()


def test_rules_that_cannot_be_written_come_after_every_report_in_their_own_line(demo, tmp_path, capsys):
    """A rules file that cannot be written was reported as the HTML's error ("give --html (--html, --markdown,
    --json) ...") and stopped the reports; now they are all written first, and said."""
    (tmp_path / RULES).mkdir()
    (tmp_path / RULES / "kept").write_text("someone's")
    rc = main(["analyze", str(demo), "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md"),
               "--json", str(tmp_path / "a.json")])
    assert rc == 5
    cap = capsys.readouterr()
    assert cap.err.splitlines() == [f"gpu-forensics: error: cannot write the suggested alert rules {tmp_path}/{RULES}: "
                                    f"Is a directory (EISDIR); the reports are written, and {tmp_path}/r.html holds "
                                    "the rules too"]
    assert cap.out.splitlines()[-3:] == [f"wrote {tmp_path}/r.html", f"wrote {tmp_path}/r.md",
                                         f"wrote {tmp_path}/a.json"]
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a.json", RULES, "r.html", "r.md"]
    assert (tmp_path / RULES / "kept").read_text() == "someone's"


def test_ctrl_c_while_the_tool_loads_is_one_line_not_a_traceback(tmp_path):
    """SIGINT in the first ~0.05 s (while Python imports the command line) printed Python's KeyboardInterrupt
    traceback: the console script's module imports nothing, and loads the rest inside its handler. The signal
    is real: sent by the process to itself as the command line's module is looked up."""
    script = ("import importlib.abc, os, signal, sys\n"
              "class Hook(importlib.abc.MetaPathFinder):\n"
              "    def find_spec(self, name, path, target=None):\n"
              "        if name == 'forensics.ops.cli':\n"
              "            os.kill(os.getpid(), signal.SIGINT)\n"
              "        return None\n"
              "sys.meta_path.insert(0, Hook())\n"
              "sys.argv = ['gpu-forensics', 'collect', '--root', sys.argv[1], '--out', sys.argv[2]]\n"
              "from forensics.ops.entry import entry\n"
              "entry()\n")
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(tmp_path / "b")], cwd=PROJECT,
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (130, "", "gpu-forensics: interrupted by SIGINT while starting; "
                                                            "nothing was written\n")
    assert not (tmp_path / "b").exists()


def test_the_page_on_stdout_keeps_its_place_and_a_folder_gets_the_default_names(demo, tmp_path):
    """``--html -`` is standard output (it wrote a file named ``-``); stdout opened for appending (``>> log``)
    keeps what it held (/dev/stdout was reopened and truncated); a folder given with its ``/`` gets the
    format's default name in it (pathlib made ``o/`` a file named ``o``)."""
    log = tmp_path / "log.txt"
    log.write_text("an earlier line\n")
    with open(log, "a") as out:
        p = _cli("analyze", str(demo), "--html", "-", "--markdown", f"{tmp_path}/o/", "--json",
                 str(tmp_path / "a.json"), stdout=out, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    text = log.read_text()
    assert text.startswith("an earlier line\n<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert p.stderr.splitlines()[-4:] == ["wrote /dev/stdout", f"wrote {tmp_path}/o/report.md",
                                          f"wrote {tmp_path}/a.json", f"wrote {tmp_path}/o/{RULES}"]
    assert (tmp_path / "o/report.md").read_text().startswith("## ")


def test_a_reader_that_closes_the_page_early_costs_only_the_page(tmp_path):
    """``run ... --html /dev/stdout | head -c 10``: the reader's close (EPIPE) ended the run quietly before
    the Markdown, the JSON and the summary with the bundle's place and its manifest's SHA-256."""
    from forensics.ops.cli import SAMPLE_ROOT
    from forensics.bundle import verify
    sys.path.insert(0, str(PROJECT / "samples"))
    import build
    build.ensure_journal()
    p = subprocess.Popen([sys.executable, "-m", "forensics.ops.cli", "run", "--root", str(SAMPLE_ROOT), "--out",
                          str(tmp_path / "b"), "--html", "/dev/stdout", "--markdown", str(tmp_path / "m.md"), "--json",
                          str(tmp_path / "a.json")], cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        head = p.stdout.read(10)
        p.stdout.close()
        err = p.stderr.read()
        p.wait(timeout=120)
    finally:
        p.kill()
    assert head == "<!DOCTYPE " and p.returncode == 0
    lines = err.splitlines()
    assert lines[-5:-1] == ["report: /dev/stdout", f"ticket text: {tmp_path}/m.md", f"analysis: {tmp_path}/a.json",
                            f"bundle: {tmp_path}/b"]
    assert lines[-1].startswith("manifest.json sha256: ") and verify(tmp_path / "b") == []
    assert json.loads((tmp_path / "a.json").read_text())["schema"] == "gpu-forensics/analysis/v1"
    assert (tmp_path / "m.md").read_text().startswith("## ") and not list(tmp_path.glob("*.part"))


def test_report_paths_that_would_clash_or_spoil_the_bundle_are_refused_first(demo, tmp_path, capsys):
    """Two reports on one file (the second left holding the first's place, then ENOENT for the rename), or a
    report written inside the bundle (which then failed ``verify``), are usage errors before anything is
    written; one bad report path no longer stops the others; a closed standard output is said so."""
    rc = main(["analyze", str(demo), "--html", str(tmp_path / "same.out"), "--markdown", f"{tmp_path}/./same.out"])
    assert rc == 2 and capsys.readouterr().err.splitlines() == [
        f"gpu-forensics: error: --html and --markdown name the same file ({tmp_path}/same.out); give each report "
        "its own"]
    rc = main(["analyze", str(demo), "--json", str(demo / "a.json")])
    assert rc == 2 and capsys.readouterr().err.splitlines() == [
        f"gpu-forensics: error: --json {demo}/a.json is inside the bundle {demo}: a file written there makes it no "
        f"longer match its manifest; give a path outside it (the default is {demo}-report/)"]
    assert sorted(q.name for q in tmp_path.iterdir()) == [] and not (demo / "a.json").exists()
    (tmp_path / "f").write_text("a file")
    rc = main(["analyze", str(demo), "--html", str(tmp_path / "f/r.html"), "--markdown", str(tmp_path / "r.md"),
               "--json", str(tmp_path / "a.json")])
    cap = capsys.readouterr()
    assert rc == 5 and cap.err.splitlines() == [
        f"gpu-forensics: error: cannot write the report {tmp_path}/f/r.html: {tmp_path}/f is a file, not a folder; "
        "give --html a writable place, e.g. --html /var/tmp/report.html"]
    assert cap.out.splitlines()[-3:] == [f"wrote {tmp_path}/r.md", f"wrote {tmp_path}/a.json",
                                         f"wrote {tmp_path}/{RULES}"]
    p = subprocess.run(f"exec {sys.executable} -m forensics.ops.cli analyze {demo} --html /dev/stdout --markdown "
                       f"{tmp_path}/x.md --json {tmp_path}/x.json >&-", shell=True, cwd=PROJECT, capture_output=True,
                       text=True, timeout=120)
    assert (p.returncode, p.stderr) == (5, "gpu-forensics: error: /dev/stdout: file descriptor 1 is not open; give "
                                           "--html a file (e.g. /var/tmp/...)\n")


def test_reports_in_a_folder_that_takes_no_new_file_are_written_over_in_place(demo, tmp_path):
    """A folder whose reports exist and may be written, but which takes no new file (mode 0555): no ``.part``
    can be made there, so each report is written over in place (it was exit 5), and the page's end waits in
    memory rather than in a spill file there (which left report.html cut at the picture). As root the
    folder's mode binds only without CAP_DAC_OVERRIDE: the command runs under setpriv without it."""
    import os
    names = ("report.html", "report.md", "analysis.json", RULES)
    ro = tmp_path / "ro"
    ro.mkdir()
    for n in names:
        (ro / n).write_text("the last run's\n")
        (ro / n).chmod(0o666)
    ro.chmod(0o555)
    drop = (["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]
            if os.geteuid() == 0 else [])
    try:
        p = subprocess.run(drop + [sys.executable, "-m", "forensics.ops.cli", "analyze", str(demo), "--html",
                                   str(ro / "report.html"), "--markdown", str(ro / "report.md"), "--json",
                                   str(ro / "analysis.json")], cwd=PROJECT, capture_output=True, text=True,
                           timeout=300)
    finally:
        ro.chmod(0o755)
    assert p.returncode == 0, p.stderr
    assert sorted(q.name for q in ro.iterdir()) == sorted(names)
    assert (ro / "report.html").read_text().rstrip().endswith("</html>")
    a = json.loads((ro / "analysis.json").read_text())
    assert (ro / RULES).read_text() == a["metrics"]["alert_audit"]["suggested_rules_yaml"]


def test_a_report_never_takes_the_place_of_the_bundle_or_is_replaced_by_the_rules(demo, tmp_path, capsys):
    """A second tester: ``--html c.tar.gz`` with ``--out c.tar.gz`` replaced the archive just collected by the
    page (exit 0); ``--html gpu-alerts.rules.yml`` had the page replaced by the rules (``wrote`` twice)."""
    out = tmp_path / "c.tar.gz"
    rc = main(["run", "--root", str(tmp_path), "--out", str(out), "--html", str(out)])
    assert rc == 2 and capsys.readouterr().err.splitlines() == [
        f"gpu-forensics: error: --html {out} is the bundle {out}: the report would take its place; give a path "
        "outside it (the default is beside it, in <bundle>-report/)"]
    assert list(tmp_path.iterdir()) == []
    rc = main(["analyze", str(demo), "--html", str(tmp_path / RULES), "--markdown", str(tmp_path / "r.md"), "--json",
               str(tmp_path / "a.json")])
    assert rc == 0 and capsys.readouterr().out.splitlines()[-3:] == [
        f"wrote {tmp_path}/{RULES}", f"wrote {tmp_path}/r.md", f"wrote {tmp_path}/a.json"]
    assert (tmp_path / RULES).read_text().startswith("<!DOCTYPE html>")


def test_an_html_path_that_cannot_be_looked_at_is_one_line_and_run_still_says_where_the_bundle_is(tmp_path):
    """``--html`` of a name past 255 bytes raised ENAMETOOLONG out of the writer (a traceback, exit 1, no other
    report); ``run`` with a report it could not write left out the bundle's place and its hash."""
    from forensics.ops.cli import SAMPLE_ROOT
    long = tmp_path / ("a" * 251 + ".html")
    p = _cli("run", "--root", str(SAMPLE_ROOT), "--out", str(tmp_path / "b"), "--html", str(long), "--markdown",
             str(tmp_path / "r.md"), "--json", str(tmp_path / "a.json"), capture_output=True)
    err = p.stderr.splitlines()
    assert p.returncode == 5 and "Traceback" not in p.stderr
    assert err[-1] == (f"gpu-forensics: error: cannot write the report {long}: File name too long (ENAMETOOLONG); "
                       "give --html a writable place, e.g. --html /var/tmp/report.html")
    assert f"bundle: {tmp_path}/b" in p.stdout.splitlines() and "manifest.json sha256: " in p.stdout
    assert json.loads((tmp_path / "a.json").read_text())["schema"] == "gpu-forensics/analysis/v1"


def test_a_page_on_stderr_whose_reader_leaves_ends_quietly(demo, tmp_path):
    """``--html /dev/stderr 2>&1 >/dev/null | head -c 30``: the reader's close was an unhandled BrokenPipeError
    ("lost sys.stderr", exit 1)."""
    p = subprocess.run(f"{sys.executable} -m forensics.ops.cli analyze {demo} --html /dev/stderr --markdown "
                       f"{tmp_path}/r.md --json {tmp_path}/a.json 2>&1 >/dev/null | head -c 30; "
                       "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", cwd=PROJECT, capture_output=True,
                       text=True, timeout=300)
    assert (p.returncode, p.stdout) == (0, "<!DOCTYPE html>\n<html lang=\"en")
    assert (tmp_path / "r.md").read_text().startswith("## ") and (tmp_path / "a.json").exists()


def test_a_report_written_over_in_place_keeps_the_old_one_until_the_new_one_is_whole(tmp_path):
    """In a folder that takes no new file the report is written over in place: a stop while it was rendered
    (SIGTERM at 0.6 s, a second tester) left half a page where the old report was. The page is now held until
    whole; a stop before that leaves the old report as it was."""
    import os
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "report.html").write_text("the last run's report\n")
    (ro / "report.html").chmod(0o666)
    ro.chmod(0o555)
    script = ("import sys\n"
              "from pathlib import Path\n"
              "from reports.files import put\n"
              "def pieces(stop):\n"
              "    yield '<html>first half'\n"
              "    if stop:\n"
              "        raise KeyboardInterrupt\n"
              "    yield b' and the second</html>'\n"
              "try:\n"
              "    put(Path(sys.argv[1]), pieces(True))\n"
              "except KeyboardInterrupt:\n"
              "    print('stopped')\n"
              "print(Path(sys.argv[1]).read_text(), end='')\n"
              "put(Path(sys.argv[1]), pieces(False))\n"
              "print(Path(sys.argv[1]).read_text())\n")
    drop = (["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]
            if os.geteuid() == 0 else [])
    try:
        p = subprocess.run(drop + [sys.executable, "-c", script, str(ro / "report.html")], cwd=PROJECT,
                           capture_output=True, text=True, timeout=60)
    finally:
        ro.chmod(0o755)
    assert p.stdout.splitlines() == ["stopped", "the last run's report", "<html>first half and the second</html>"]
    assert sorted(q.name for q in ro.iterdir()) == ["report.html"]
