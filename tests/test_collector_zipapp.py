"""The single-file collector (scripts/build-collector.py) run by Debian 12's own ``/usr/bin/python3 -I -S``
(isolated: no user site, no PYTHONPATH; -S: not even Debian's dist-packages, where this host has
python3-yaml: the standard library alone, which the test checks) on the sample node: its bundle verifies and analyses,
with the checkout's code, to the verdicts of a collection by the venv's code; its journal, read through
the node's libsystemd.so.0 with the project's one binding (collectors/journal/sdjournal.py, ctypes) from
inside the zip, is byte for byte the installed tool's. (The binding against the node's own ``journalctl``:
tests/test_sdjournal.py and tests/test_journal.py::test_journalctl_source_selects_the_same_entries.) ``collect --kube`` in a pod
(the kubelet's service variables, a ServiceAccount folder) reads a loopback API server over HTTPS
with the standard library alone (collectors/kube/transport.py), as the node image's Job runs it.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
from datetime import timedelta
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kubeapi_replay as kr
from collectors import kube
from forensics.bundle import Bundle, verify
from forensics.ops.cli import main

PROJECT = Path(__file__).resolve().parents[1]
NODE_PYTHON = "/usr/bin/python3"
sys.path.insert(0, str(PROJECT / "samples"))
import build as sample_build  # noqa: E402  samples/build.py


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """(zipapp path, bundle collected by the zipapp, bundle collected by the venv's code)."""
    tmp = tmp_path_factory.mktemp("zipapp")
    sample_build.ensure_journal()
    pyz = tmp / "gpu-forensics-collect.pyz"
    r = subprocess.run([sys.executable, str(PROJECT / "scripts" / "build-collector.py"), str(pyz)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    args = ["-q", "collect", "--root", str(sample_build.ROOT), "--prometheus", f"file://{sample_build.PROMETHEUS}"]
    r = subprocess.run([NODE_PYTHON, "-I", "-S", str(pyz), *args, "--out", str(tmp / "z")], cwd=tmp,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert main([*args, "--out", str(tmp / "v")]) == 0
    return pyz, tmp / "z", tmp / "v"


def test_the_node_python_has_none_of_the_libraries(bundles):
    r = subprocess.run([NODE_PYTHON, "-I", "-S", "-c", "import importlib.util as u; print([m for m in "
                        "('systemd', 'yaml', 'dateutil', 'requests', 'jinja2', 'matplotlib', 'kubernetes') if u.find_spec(m)])"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
    pyz = bundles[0]
    with zipfile.ZipFile(pyz) as z:
        names = z.namelist()
    assert "collectors/journal/sdjournal.py" in names and "systemd/journal.py" not in names and "yaml/loader.py" in names and "__main__.py" in names
    assert not [n for n in names if n.endswith(".so") or n.startswith(("matplotlib/", "jinja2/", "pandas/", "kubernetes/"))]
    assert pyz.stat().st_size < 2_000_000


def test_the_xid_catalog_is_read_from_inside_the_zipapp(bundles):
    """forensics/xid_catalog.csv travels in the zipapp and is read through importlib.resources from the
    zip itself (no file on disk), with the node's python and the standard library alone."""
    pyz = bundles[0]
    with zipfile.ZipFile(pyz) as z:
        assert "forensics/xid_catalog.csv" in z.namelist()
    r = subprocess.run([NODE_PYTHON, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "from forensics import xid; e = xid.lookup(79); print(len(xid.catalog()), e.scope, e.mnemonic, "
                        "xid.lookup(46).scope, xid.__file__.startswith(sys.argv[1]))", str(pyz)],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["26", "node", "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "unknown", "True"], r.stderr


def test_zipapp_bundle_verifies_and_gives_the_venvs_verdicts(bundles, tmp_path):
    _, z, v = bundles
    assert verify(z) == []
    assert main(["-q", "analyze", str(z), "--json", str(tmp_path / "z.json")]) == 0
    assert main(["-q", "analyze", str(v), "--json", str(tmp_path / "v.json")]) == 0
    za, va = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("z", "v"))
    assert za["verdicts"] == va["verdicts"] and len(za["incidents"]) == 2
    sept = [i for i in za["incidents"] if i["window"]["end"].startswith("2026-09-02")][0]
    reload = [c for c in sept["causes"] if c["kind"] == "daemon-reload"][0]
    assert reload["verdict"] == "confirmed" and reload["at"].startswith("2026-09-02T04:05:13")
    assert reload["requested_by"]["unit"] == "snapd.service"


def test_zipapp_reads_the_journal_as_the_installed_tool_does(bundles):
    _, z, v = bundles
    for name in ("entries.jsonl", "files.json", "boots.json", "coverage.json"):
        assert (z / "journal" / name).read_bytes() == (v / "journal" / name).read_bytes(), name
    entries = [json.loads(line) for line in (z / "journal" / "entries.jsonl").read_text().splitlines()]
    assert len(entries) == 16
    caller = [e for e in entries if e.get("MESSAGE", "").startswith("Reloading requested from client PID 48211")]
    assert len(caller) == 1 and caller[0]["_BOOT_ID"] == "8c2e4f6a1b3d4e5f9a7c6b5d4e3f2a10"


def test_zipapp_run_on_the_node_collects_and_says_where_to_analyze(bundles, tmp_path):
    """``run`` where the report libraries are absent (the node's python, the node image): the bundle is
    made and verifies, no report is attempted, and the line says where the analysis is to be done."""
    pyz = bundles[0]
    out = tmp_path / "r"
    r = subprocess.run([NODE_PYTHON, "-I", "-S", str(pyz), "-q", "run", "--root", str(sample_build.ROOT),
                        "--out", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (f"gpu-forensics: not analysed here: no report libraries (jinja2, matplotlib); analyze the bundle "
            f"elsewhere: gpu-forensics analyze {out}") in r.stderr
    assert "Traceback" not in r.stderr and f"bundle: {out}\nmanifest.json sha256: " in r.stdout
    assert verify(out) == [] and not list(tmp_path.glob("*.html"))


def _without_libsystemd(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``argv`` where this machine's libsystemd.so.0 is unusable: in a mount namespace of its own
    (unshare(1)) with the library's file covered by /dev/null, so that dlopen fails as on a node whose
    library is broken ("file too short"); the host keeps its own."""
    lib = os.path.realpath("/usr/lib/x86_64-linux-gnu/libsystemd.so.0")
    script = f"mount --bind /dev/null {shlex.quote(lib)} && exec " + " ".join(map(shlex.quote, argv))
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_zipapp_without_a_usable_libsystemd_reads_the_journal_through_the_nodes_journalctl(bundles, tmp_path):
    """Issue 27 B: the zipapp loaded libsystemd as it started, and where the library was unusable it
    collected nothing (a traceback, no bundle). Now it collects, the journal through the node's own
    journalctl (chroot into --root), the same entries as libsystemd gives, with a note saying which reader
    and why; ``analyze``, ``fleet`` and ``demo``, which need the report libraries, end in one line and exit 6."""
    from test_journal import _install_journalctl
    pyz, _, v = bundles
    root = tmp_path / "node"
    shutil.copytree(sample_build.ROOT, root, symlinks=True)
    _install_journalctl(root)  # its journalctl links libsystemd-shared, not libsystemd.so.0
    r = _without_libsystemd([NODE_PYTHON, "-I", "-S", str(pyz), "-q", "collect", "--root", str(root),
                             "--out", str(tmp_path / "z")], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    z = tmp_path / "z"
    assert verify(z) == []
    assert (z / "journal" / "entries.jsonl").read_text().splitlines() == \
        (v / "journal" / "entries.jsonl").read_text().splitlines()
    entry = Bundle.open(z).find("journal/entries.jsonl")[0]
    assert entry.method == "journalctl" and entry.notes[0] == (
        "read by the node's journalctl: this collector cannot load libsystemd (OSError: "
        "/lib/x86_64-linux-gnu/libsystemd.so.0: file too short)")
    for cmd in (["analyze", str(z)], ["fleet", str(z)], ["demo", "--out", str(tmp_path / "d")]):
        r = _without_libsystemd([NODE_PYTHON, "-I", "-S", str(pyz), *cmd], tmp_path)
        assert r.returncode == 6 and r.stdout == "", (cmd, r.stderr[-3000:])
        assert r.stderr == (f"gpu-forensics: error: {cmd[0]} is not available in this installation (no jinja2, "
                            "matplotlib: the single-file collector and the node image only collect); copy the "
                            "bundle to a machine with 'pip install gpu-forensics[report]' and run it there\n")


def test_zipapp_reads_a_damaged_journal_as_systemd_python_does(bundles, tmp_path):
    """Issue 27 A through the ctypes reader: a journal whose entries of seconds 1400 to 1450 are overwritten.
    libsystemd closes the descriptor of a file it drops from a walk; the stand-in closed it again when the
    reader closed, by then another reader's descriptor of the same number, and libsystemd aborted
    (SIGABRT: "the journal reader died", no entry collected). Now the zipapp keeps what the venv keeps."""
    from test_journal import MACHINE
    from test_journal_damage import _damage_entries, _kubelet_journal
    root = tmp_path / "node"
    _damage_entries(_kubelet_journal(root / "var/log/journal" / MACHINE / "system.journal"), 1401, 1451)
    r = subprocess.run([NODE_PYTHON, "-I", "-S", str(bundles[0]), "-q", "collect", "--root", str(root), "--out",
                        str(tmp_path / "z")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr and "Assertion" not in r.stderr, r.stderr[-3000:]
    main(["-q", "collect", "--root", str(root), "--out", str(tmp_path / "v")])
    z, v = (tmp_path / n / "journal" for n in ("z", "v"))
    assert (z / "entries.jsonl").read_bytes() == (v / "entries.jsonl").read_bytes()
    assert (z / "coverage.json").read_bytes() == (v / "coverage.json").read_bytes()
    assert json.loads((z / "coverage.json").read_text())["damaged"][0]["lost"] == 51
    assert sum('"nvml"' in line for line in (z / "entries.jsonl").read_text().splitlines()) == 983


def test_zipapp_watch_follows_pid1s_reload_lines_through_the_nodes_libsystemd(bundles, tmp_path):
    """``watch``'s journal trigger in the zipapp (no systemd-python): the ctypes reader opens the root's
    journal directory with SD_JOURNAL_OS_ROOT and wakes on sd_journal_get_fd when a new journal file
    appears; PID 1's ``Reloading.`` (trusted _PID=1) is one trigger, dated by its own realtime stamp, and a
    ``logger -t systemd`` look-alike (another _PID) is none."""
    from journalbuild import build_journal
    from test_journal import T0, entry, pid1
    pyz, root = bundles[0], tmp_path / "root"
    jdir = root / "var/log/journal/0123456789abcdef0123456789abcdef"
    build_journal(entry(T0, 812, "kubelet", "started"), jdir / "system.journal")
    script = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
              "from forensics.ops.watch.triggers import JournalReloads; "
              "t = JournalReloads(sys.argv[2], lambda *a: print('NOTIFY', *a, flush=True), "
              "lambda m: print('LOG', m, flush=True)); t.start(); time.sleep(30)")
    p = subprocess.Popen([NODE_PYTHON, "-I", "-S", "-c", script, str(pyz), str(root)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        first = p.stdout.readline()
        assert "following PID 1's lines (sd_journal_get_fd + poll)" in first, first
        at = T0 + timedelta(minutes=5)
        build_journal(entry(at, 4242, "systemd", "Reloading.", _COMM="logger") + pid1(at, "Reloading."),
                      jdir / "user-1000@0000000000000001-0000000000000002.journal")
        line = p.stdout.readline()
    finally:
        p.kill()
        rest = p.communicate()[0]
    assert line.split() == ["NOTIFY", "journal-reload", "journal", str(at.timestamp())], line + rest
    assert "NOTIFY" not in rest


#: the zipapp's collect, run as a pod would run it, the ServiceAccount folder (argv[2]) in place of
#: /var/run/secrets/kubernetes.io/serviceaccount (a test cannot write there)
POD_MAIN = """import sys
sys.path.insert(0, sys.argv[1])
import collectors.kube.transport as kt
from pathlib import Path
kt.SERVICEACCOUNT = Path(sys.argv[2])
from forensics.ops.cli import main
sys.exit(main(sys.argv[3:]))
"""


def test_zipapp_collects_kube_in_a_pod_with_the_standard_library_alone(bundles, tmp_path):
    pyz = bundles[0]
    token = "eyJhbGciOiJSUzI1NiJ9.zipapp-planted-90c4.c2ln"
    tls = kr.tls_files(tmp_path / "tls")
    sa = kr.service_account(tmp_path / "serviceaccount", tls / "ca.crt", token)
    events = {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "48213392"}, "items": []}
    routes = {"GET /api/v1/nodes/gpu-a100-007": [(200, "node.json")], "GET /api/v1/pods": [(200, "pods-running.json")],
              "GET /api/v1/events": [(200, events)]}
    with kr.Replay(routes, tls=tls) as srv:
        env = {"PATH": "/usr/bin:/bin", "KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT": srv.url.rpartition(":")[2]}
        r = subprocess.run([NODE_PYTHON, "-I", "-S", "-c", POD_MAIN, str(pyz), str(sa), "-q", "collect", "--root",
                            str(sample_build.ROOT), "--kube", "--node", "gpu-a100-007", "--out", str(tmp_path / "k")],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [(q["method"], q["path"], q["authorization"]) for q in srv.requests] == [
        ("GET", p, f"Bearer {token}") for p in ("/api/v1/nodes/gpu-a100-007", "/api/v1/pods", "/api/v1/events")]
    b = Bundle.open(tmp_path / "k")
    assert verify(b) == []
    assert json.loads(b.path("kube/node.json").read_text()) == kube.redact(kr.fixture("node.json"))
    assert json.loads(b.path("kube/pods.json").read_text()) == kube.redact(kr.fixture("pods-running.json"))
    reqs = json.loads(b.path("kube/requests.json").read_text())
    assert [(q["status"], q["error"]) for q in reqs] == [(200, None)] * 3
    assert [a.source for a in b.find("kube/requests.json")] == [srv.url]
    s = kube.summary(b)
    assert s["node"]["gpu"] == {"capacity": 8, "allocatable": 8} and s["errors"] == []
    raw = b"".join(p.read_bytes() for p in b.root.rglob("*") if p.is_file())
    assert b"zipapp-planted-90c4" not in raw and "zipapp-planted-90c4" not in r.stdout + r.stderr


def test_zipapp_help_offers_only_what_it_can_run_and_says_where_the_rest_runs(bundles):
    """issue 28 item 4: the single-file collector's --help offered analyze, fleet and demo, which it cannot
    run (no jinja2, matplotlib); now its command list holds only what runs here, and the help says where
    the others do."""
    pyz = bundles[0]
    r = subprocess.run([NODE_PYTHON, "-I", "-S", str(pyz), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "{collect,run,timeline,verify,drill,watch}" in r.stdout
    listed = [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("    ") and ln.split()]
    assert not {"analyze", "fleet", "demo"} & set(listed), listed
    assert {"collect", "run", "verify"} <= set(listed), listed
    assert ("analyze, fleet and demo are not in this installation (no jinja2, matplotlib): run them where "
            "'pip install gpu-forensics[report]' is") in " ".join(r.stdout.split())
