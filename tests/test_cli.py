"""The command line: live collection, exit codes, usage errors, timeline output."""
from __future__ import annotations

import csv
import io
import json

import pytest

from forensics.bundle import verify
from forensics.ops.cli import main, parse_incident, UsageError


def test_run_on_this_machine_gives_a_bundle_that_verifies(tmp_path, capsys):
    out = tmp_path / "live"
    rc = main(["run", "--root", "/", "--out", str(out), "--json", str(tmp_path / "a.json"),
               "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md")])
    assert rc in (0, 1)
    assert verify(out) == []
    m = json.loads((out / "manifest.json").read_text())
    assert m["collection"]["root"] == "/" and m["command_line"].startswith("gpu-forensics run --root /")
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["schema"] == "gpu-forensics/analysis/v1"
    # the node's systemd version comes from systemctl on a live node
    assert m["node_facts"]["systemd_version_basis"] == "systemctl --version"


def test_tar_gz_output_and_timeline_formats(tmp_path, capsys):
    import sys
    sys.path.insert(0, "samples")
    from forensics.ops.cli import SAMPLE_ROOT
    import build
    build.ensure_journal()
    out = tmp_path / "b.tar.gz"
    assert main(["collect", "--root", str(SAMPLE_ROOT), "--out", str(out)]) == 0
    assert verify(out) == []
    capsys.readouterr()
    assert main(["timeline", str(out), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    reloads = [r for r in rows if r["kind"] == "journal.reload"]
    assert [r["at"][:19] for r in reloads] == ["2026-09-02T04:05:13", "2026-10-14T01:22:03"]
    assert reloads[0]["local"].startswith("2026-09-02T13:05:13") and reloads[0]["local"].endswith("+09:00")
    assert main(["timeline", str(out), "--format", "jsonl"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sum(1 for x in lines if x["kind"] == "package.transaction") == 4


@pytest.mark.parametrize("text", ["2026-07-11..2026-08-02", "yesterday..today", "2026-08-02T00:00Z..2026-07-01T00:00Z"])
def test_bad_incident_is_a_usage_error(text):
    with pytest.raises(UsageError):
        parse_incident(text)


def test_usage_errors_exit_2_without_traceback(tmp_path, capsys):
    assert main(["collect", "--root", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-forensics: error: --root") and "Traceback" not in err
    assert main(["collect", "--root", "/", "--incident", "bad"]) == 2


def test_incident_with_offsets_is_stored_in_utc():
    assert parse_incident("2026-07-11T12:34+09:00..2026-08-02T00:00+09:00=july") == {
        "start": "2026-07-11T03:34:00Z", "end": "2026-08-01T15:00:00Z", "label": "july",
        "text": "2026-07-11T12:34+09:00..2026-08-02T00:00+09:00=july"}


def test_probe_without_root_is_a_one_line_error(tmp_path, capsys):
    from privdrop import run_as_nobody
    import tempfile, os
    d = tempfile.mkdtemp(dir="/tmp")
    os.chmod(d, 0o777)

    def child():
        import io, contextlib
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["collect", "--root", "/", "--probe", "--out", d + "/b"])
        return rc, err.getvalue()
    rc, err = run_as_nobody(child)
    assert rc == 2 and err.startswith("gpu-forensics: error: --probe needs root") and "Traceback" not in err


def test_version_and_help_with_example(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("gpu-forensics 0.1.0")
    for cmd in ("collect", "analyze", "run", "timeline", "verify", "demo", "fleet", "drill"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        assert "example:" in capsys.readouterr().out, cmd


def test_demo_never_writes_into_a_folder_that_holds_something_and_analyze_points_into_it(tmp_path, capsys):
    """issue 28: ``demo --out DIR`` where DIR already holds a bundle wrote a second one beside it and
    wrote its reports over the first; ``analyze DIR`` on that folder said only "no manifest.json"."""
    out = tmp_path / "demo-out"
    assert main(["-q", "demo", "--out", str(out)]) == 0
    [bundle] = out.glob("bundle-*")
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["-q", "demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-forensics: error: --out {out}: not empty (it holds analysis.json, {bundle.name}, "
                          "gpu-alerts.rules.yml, ...); give a new or empty folder")
    assert sorted(p.name for p in out.iterdir()) == before and verify(bundle) == []
    assert main(["analyze", str(out)]) == 3
    assert capsys.readouterr().err == f"gpu-forensics: error: {out}: no manifest.json here; it holds a bundle: {bundle}\n"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupt_after_collection_says_where_the_bundle_is(tmp_path, sig):
    """issue 28: ``run`` interrupted while analysing printed only "interrupted by SIGINT"; the bundle
    was complete and its place is what the engineer needs. The signal is sent once ``run`` printed its first
    verdict line (the bundle is collected and analysed, the reports not yet rendered). SIGTERM (``kill``,
    ``timeout``, a pod's deletion) and SIGHUP ended the process where it stood, leaving ``r.html.part``."""
    import signal
    import subprocess
    import sys
    from forensics.ops.cli import PROJECT, SAMPLE_ROOT
    sys.path.insert(0, str(PROJECT / "samples"))
    import build
    build.ensure_journal()
    out = tmp_path / "b"
    p = subprocess.Popen([sys.executable, "-m", "forensics.ops.cli", "run", "--root", str(SAMPLE_ROOT), "--out",
                          str(out), "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md"),
                          "--json", str(tmp_path / "a.json")], cwd=PROJECT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        p.send_signal(signal.Signals[sig])
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert first.startswith("Incident ") or first.startswith("No incident")
    assert p.returncode == 128 + signal.Signals[sig] and not (tmp_path / "r.html").exists()
    assert err.splitlines()[-1] == (f"gpu-forensics: interrupted by {sig}; the bundle was complete and is kept in "
                                    f"{out} (gpu-forensics analyze {out})")
    assert not list(tmp_path.glob("*.part"))
    assert verify(out) == []
