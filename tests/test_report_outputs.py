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
                                    "Is a directory (EISDIR); the reports are written, and report.html holds the "
                                    "rules too"]
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
    assert (p.returncode, p.stdout, p.stderr) == (130, "", "gpu-forensics: interrupted by SIGINT; nothing was "
                                                            "collected\n")
    assert not (tmp_path / "b").exists()
