"""Faults during collection (issue 15, items 7-12): a full disk, a read-only or /proc output, two
collections on one --out, a leftover .incomplete, SIGINT/SIGTERM, an invalid TZ. Real tmpfs mounts,
real bind mounts, real subprocesses and real signals (tests run as root)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.ops.cli import SAMPLE_ROOT

PY = sys.executable
CLI = [PY, "-m", "forensics.ops.cli"]


@pytest.fixture(scope="module", autouse=True)
def sample_journal():
    sys.path.insert(0, "samples")
    import build
    build.ensure_journal()


def _cli(*args, env=None, **kw):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, env=env, timeout=300, **kw)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real tmpfs of 200 KiB (the sample bundle takes about 700 KiB)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def _marker(d: Path) -> dict:
    text = (d / "INCOMPLETE").read_text()
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def test_a_full_disk_gives_one_line_exit_5_and_a_marked_partial_bundle(small_tmpfs):
    p = _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(small_tmpfs / "b"))
    assert p.returncode == 5, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device (ENOSPC)" in lines[0], p.stderr
    assert "Traceback" not in p.stderr
    kept = small_tmpfs / "b.incomplete"
    assert str(kept) in lines[0] and not (small_tmpfs / "b").exists()
    assert "No space left on device" in _marker(kept)["reason"]
    # analyze refuses it, saying what it is
    a = _cli("analyze", str(kept))
    assert a.returncode == 3 and "INCOMPLETE" in a.stderr


def test_a_tar_gz_that_runs_out_of_space_while_archiving_leaves_no_part_and_no_unmarked_dir(tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        # room for the bundle directory, not for the directory and its archive (about 45 KiB) together
        assert _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(mnt / "probe")).returncode == 0
        st = os.statvfs(mnt)
        used_k = (st.f_blocks - st.f_bfree) * st.f_frsize // 1024
        subprocess.run(["rm", "-rf", str(mnt / "probe")], check=True)
        subprocess.run(["mount", "-o", f"remount,size={used_k + 16}k", str(mnt)], check=True)
        p = _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(mnt / "b.tar.gz"))
        assert p.returncode == 5, p.stderr
        assert "archive" in p.stderr or "No space" in p.stderr
        assert not (mnt / "b.tar.gz").exists() and not (mnt / "b.tar.gz.part").exists()
        kept = mnt / "b.incomplete"
        assert (kept / "INCOMPLETE").exists() and "ENOSPC" in _marker(kept)["reason"]
        assert _cli("analyze", str(kept)).returncode == 3
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_analyze_refuses_a_leftover_part(tmp_path):
    out = tmp_path / "b.tar.gz"
    assert _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(out)).returncode == 0
    part = tmp_path / "b.tar.gz.part"
    part.write_bytes(out.read_bytes()[: out.stat().st_size // 2])  # what a kill while archiving leaves
    a = _cli("analyze", str(part))
    assert a.returncode == 3 and "partial archive" in a.stderr and "Traceback" not in a.stderr


def test_a_read_only_output_gives_exit_5_in_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(ro), str(ro)], check=True)
    try:
        p = _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(ro / "b"))
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=True)
    assert p.returncode == 5 and "Read-only file system (EROFS)" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("out", ["/proc/gpu-forensics-out", "/sys/fs/cgroup/gpu-forensics-out"])
def test_a_proc_or_sys_output_is_refused_before_writing(out):
    p = _cli("collect", "--root", str(SAMPLE_ROOT), "--out", out)
    assert p.returncode == 5 and "kernel file system" in p.stderr
    assert not os.path.exists(out) and not os.path.exists(out + ".incomplete")


def test_two_collections_racing_on_one_out_one_wins_the_other_says_so(tmp_path):
    out = tmp_path / "b.tar.gz"
    procs = [subprocess.Popen(CLI + ["collect", "--root", str(SAMPLE_ROOT), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(300), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _o, _e in results)
    assert codes == [0, 2], results
    winner = next(o for rc, o, _e in results if rc == 0)
    loser = next(e for rc, _o, e in results if rc == 2)
    assert "another collection" in loser or "already exists" in loser
    # the hash the winner printed is the archive's manifest: nothing replaced it
    printed = winner.split("manifest.json sha256: ")[1].split()[0]
    import tarfile
    import hashlib
    with tarfile.open(out) as tf:
        data = tf.extractfile("b/manifest.json").read()
    assert hashlib.sha256(data).hexdigest() == printed


def test_a_leftover_incomplete_is_explained(tmp_path):
    left = tmp_path / "b.incomplete"
    left.mkdir()
    (left / "INCOMPLETE").write_text("collection did not finish; this bundle is not complete\npid: 999999999\n"
                                     "reason: interrupted by SIGTERM while collecting\n")
    p = _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(tmp_path / "b"))
    assert p.returncode == 2
    assert "left from a collection that did not finish (interrupted by SIGTERM while collecting)" in p.stderr
    assert "move it away" in p.stderr and "Errno" not in p.stderr


def test_a_claim_gone_while_it_is_looked_at_is_the_other_collection_finishing(tmp_path):
    """Two collections racing on one --out (a fresh clone's CI): the loser found ``b.incomplete``, and the winner
    had archived and removed it before its marker was read, so the loser said "left from a collection that did
    not finish" of a collection that had finished."""
    import threading
    from forensics.output import leftover
    claimed = tmp_path / "b.incomplete"
    claimed.mkdir()  # claimed (mkdir), its marker not written yet; then archived and removed
    threading.Timer(0.3, claimed.rmdir).start()
    assert leftover(claimed) == (f"{claimed} was being written by another collection, which finished meanwhile "
                                 "(its bundle is at this --out); choose another --out")
    claimed.mkdir()  # a claim that stays without a marker is a leftover, as before
    assert leftover(claimed).startswith(f"{claimed} is left from a collection that did not finish: ")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_gives_one_line_and_keeps_the_partial_bundle_marked(tmp_path, sig):
    out = tmp_path / "b"
    # a slow source to be interrupted in: a metrics URL that never answers
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    p = subprocess.Popen(CLI + ["collect", "--root", str(SAMPLE_ROOT), "--out", str(out), "--prometheus", url],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        srv.settimeout(120)
        conn, _ = srv.accept()  # the collection is now inside the metrics collector
        time.sleep(0.3)
        p.send_signal(sig)
        _out, err = p.communicate(timeout=60)
    finally:
        srv.close()
    assert p.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu-forensics: interrupted by {sig.name}"), err
    kept = tmp_path / "b.incomplete"
    assert str(kept) in lines[0] and not out.exists()
    assert _marker(kept)["reason"] == f"interrupted by {sig.name} while collecting"
    m = json.loads((kept / "manifest.json").read_text())
    assert m["complete"] is False and m["incomplete_reason"] == f"interrupted by {sig.name} while collecting"
    assert any(a["path"] == "journal/entries.jsonl" for a in m["artifacts"])  # what was collected is listed


@pytest.mark.parametrize("tz", ["UTC+24", "UTC-24"])
def test_an_invalid_tz_is_ignored_not_a_crash(tmp_path, tz):
    env = {**os.environ, "TZ": tz}
    p = _cli("collect", "--root", str(SAMPLE_ROOT), "--out", str(tmp_path / "b"), env=env)
    assert p.returncode == 0, p.stderr
    assert f"TZ={tz!r} is not a valid time zone" in p.stderr
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["timezone"]["name"]  # the node's zone, from the sample node itself


# -- item 20: a copied root's /proc/<pid>/root is a link resolving on this machine ---------------------
@pytest.mark.parametrize("target", ["/", "elsewhere"])
def test_a_copied_roots_proc_pid_root_link_is_never_followed(tmp_path, target):
    import stat as st_
    from collectors.containers import probe
    outside = tmp_path / "elsewhere"
    (outside / "dev").mkdir(parents=True)
    os.mknod(outside / "dev/nvidia0", 0o666 | st_.S_IFCHR, os.makedev(195, 0))  # a GPU node outside --root
    (tmp_path / "root/proc/4242").mkdir(parents=True)
    link = str(outside) if target == "elsewhere" else "/"
    os.symlink(link, tmp_path / "root/proc/4242/root")  # as a copy of a live /proc holds it
    entries, raw, problems = probe.list_dev(tmp_path / "root", 4242)
    assert entries == [] and raw == []
    assert [(a.source, a.status.value) for a in problems] == [("/proc/4242/root", "error")]
    assert f"a symlink to {link!r}" in problems[0].message and "was not read" in problems[0].message


def test_a_copied_roots_proc_pid_root_directory_is_read_and_a_dev_link_outside_is_not_followed(tmp_path):
    import stat as st_
    from collectors.containers import probe
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.mknod(outside / "nvidia0", 0o666 | st_.S_IFCHR, os.makedev(195, 0))
    croot = tmp_path / "root/proc/4242/root"
    (croot / "dev").mkdir(parents=True)
    os.mknod(croot / "dev/nvidiactl", 0o666 | st_.S_IFCHR, os.makedev(195, 255))
    os.symlink(outside / "nvidia0", croot / "dev/nvidia0")  # resolves outside --root: kept as a link only
    entries, _raw, problems = probe.list_dev(tmp_path / "root", 4242)
    found = {e["path"]: (e["kind"], e["major"]) for e in entries}
    assert found == {"/dev/nvidiactl": ("c", 195), "/dev/nvidia0": ("symlink", None)} and problems == []


# -- item 15: an upload's overall deadline, against a server that trickles one byte a second --------
@pytest.fixture
def trickler():
    """A real loopback HTTP server that reads the request, then answers one byte per second."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    def one(conn):
        conn.settimeout(5)
        try:
            conn.recv(1 << 20)
            for b in b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n":
                if stop.wait(1.0):
                    break
                conn.sendall(bytes([b]))
        except OSError:
            pass
        finally:
            conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/drop"
    stop.set()
    t.join(5)
    srv.close()


def test_an_upload_to_a_trickling_server_ends_at_its_deadline(tmp_path, trickler):
    from forensics.ops.upload import upload
    files = []
    for name in ("a.tar.gz", "b.html"):
        (tmp_path / name).write_bytes(b"x" * 100)
        files.append(tmp_path / name)
    recs = upload(trickler, files, timeout=30, retries=0, deadline_s=2)
    assert [r["ok"] for r in recs] == [False, False]
    assert recs[0]["attempts"] == 1 and "overall deadline of 2 s passed" in recs[0]["error"]
    assert recs[1]["attempts"] == 0 and recs[1]["error"].startswith("not sent: the upload's overall deadline")


def test_run_with_a_trickling_upload_server_ends_with_a_clear_line_and_keeps_the_bundle(tmp_path, trickler):
    out = tmp_path / "b.tar.gz"
    p = _cli("run", "--root", str(SAMPLE_ROOT), "--out", str(out), "--upload-url", trickler, "--upload-timeout", "3")
    assert p.returncode == 1, p.stderr
    assert "upload b.tar.gz: FAILED" in p.stdout and "overall deadline of 3 s passed (--upload-timeout)" in p.stdout
    assert _cli("verify", str(out)).returncode == 0  # the bundle is kept whole
    recs = json.loads((tmp_path / "b.tar.gz.upload.json").read_text())
    assert not any(r["ok"] for r in recs)


# -- item 6: a journal file truncated under libsystemd's mmap (SIGBUS) costs that file only -----------
def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
                out += [int(k) for k in kids]
                todo += [int(k) for k in kids]
        except OSError:
            continue
    return out


def _journals(tmp_path: Path, n: int) -> tuple[Path, Path]:
    sys.path.insert(0, "tests")
    from datetime import timedelta
    from journalbuild import build_journal
    from test_journal import T0, pid1
    jdir = tmp_path / "journals"
    big = build_journal(b"".join(pid1(T0 + timedelta(seconds=i), "Reloading." if i % 2 else f"Started u{i}.service.")
                                 for i in range(n)), jdir / "big.journal")
    build_journal(pid1(T0 - timedelta(days=2), "Reloading."), jdir / "good.journal")
    return jdir, big


def test_a_journal_file_truncated_while_read_costs_that_file_only(tmp_path):
    jdir, big = _journals(tmp_path, 20_000)
    size = big.stat().st_size
    (tmp_path / "root").mkdir()
    out = tmp_path / "b"
    p = subprocess.Popen(CLI + ["collect", "--root", str(tmp_path / "root"), "--journal-dir", str(jdir),
                                "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cut = False
    deadline = time.monotonic() + 120
    mapped_since: dict[int, float] = {}  # the probe maps the file for a few ms only, then a pass reads it
    while not cut and p.poll() is None and time.monotonic() < deadline:
        for kid in [p.pid, *_descendants(p.pid)]:
            try:
                maps = Path(f"/proc/{kid}/maps").read_text()
            except OSError:
                continue
            if str(big) not in maps:
                mapped_since.pop(kid, None)
                continue
            # mapped by one process for 30 ms: a pass is reading it; cut it as journald's vacuum would
            if time.monotonic() - mapped_since.setdefault(kid, time.monotonic()) >= 0.03:
                os.truncate(big, 8192)
                cut = True
                break
        time.sleep(0.002)
    _o, err = p.communicate(timeout=300)
    assert cut, "the reader never mapped the file"
    assert p.returncode in (0, 1), err
    assert "Traceback" not in err
    recs = {Path(r["source"]).name: r for r in json.loads((out / "journal/files.json").read_text())}
    assert recs["big.journal"]["truncated"] is True and recs["big.journal"]["opened"] is False
    assert f"shrank from {size} to 8192 bytes" in recs["big.journal"]["error"] and "SIGBUS" in recs["big.journal"]["error"]
    assert recs["good.journal"]["opened"] is True
    m = json.loads((out / "manifest.json").read_text())
    [a] = [a for a in m["artifacts"] if a["source"].endswith("big.journal")]
    assert a["status"] == "error" and "truncated while it was read" in a["message"]
    entries = [json.loads(line) for line in (out / "journal/entries.jsonl").read_text().splitlines()]
    assert [e["MESSAGE"] for e in entries if "pid1" in e["_GF_SELECTED_BY"]] == ["Reloading."]  # good.journal's
    assert _cli("verify", str(out)).returncode == 0


# -- item 14: many journal files against a small time budget -------------------------------------------
def test_journal_files_beyond_the_time_budget_are_recorded_not_read(tmp_path):
    import shutil
    from collectors import journal
    from forensics.bundle import BundleWriter
    from forensics.source import CollectContext
    jdir, big = _journals(tmp_path, 50)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(300):  # real journal files, each its own inode
        shutil.copyfile(big, many / f"system@{i:04d}.journal")
    (tmp_path / "root").mkdir()
    writer = BundleWriter(tmp_path / "b")
    ctx = CollectContext(root=tmp_path / "root", writer=writer, options={"since": None, "journal_dirs": [str(many)]},
                         deadline=time.monotonic() + 0.01)
    journal.acquire(ctx)
    recs = json.loads((writer.dir / "journal/files.json").read_text())
    assert len(recs) == 300
    skipped = [r for r in recs if r["error"] == "not read: time budget"]
    assert skipped and all(r["opened"] or r in skipped for r in recs)
    assert not recs[-1]["opened"]  # the last files are never reached within 0.01 s
    cut = [a for a in writer.artifacts if a.message == "not read: the time budget (--time-budget) was spent"]
    assert len(cut) == len(skipped) and {a.status.value for a in cut} == {"truncated"}
    assert {a.source for a in cut} == {r["source"] for r in skipped}


# -- item 13: package logs are bounded in size and stop at the time budget ------------------------------
def _sparse_logs(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    for rel, line in (("var/log/dpkg.log", b"2026-07-01 10:00:00 status installed nvidia-container-toolkit:amd64 1.17.8-1\n"),
                      ("var/log/apt/history.log", b"\nStart-Date: 2026-07-01  10:00:00\nCommandline: apt upgrade\n")):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(line)
        os.truncate(p, 200 << 20)  # sparse: 200 MiB that take no disk
    return root


def test_a_huge_sparse_package_log_is_cut_at_the_bound_and_recorded_truncated(tmp_path):
    from collectors import packages
    from forensics.bundle import BundleWriter
    from forensics.source import CollectContext
    root = _sparse_logs(tmp_path)
    writer = BundleWriter(tmp_path / "b")
    packages.acquire(CollectContext(root=root, writer=writer))
    recs = {a.source: a for a in writer.artifacts}
    from forensics.tailcopy import head_cut
    for src in ("/var/log/dpkg.log", "/var/log/apt/history.log"):  # apt's is redacted: read whole up to the bound
        a = recs[src]
        # the log keeps its end (forensics.tailcopy): here the last LOG_LIMIT bytes are all hole, no line starts
        # in them, so nothing is kept, and the note says the whole 200 MiB was skipped
        assert (a.status.value, a.size, head_cut(a.notes)) == ("truncated", 0, (200 << 20, packages.LOG_LIMIT)), src
    assert (writer.dir / "packages/dpkg/dpkg.log").read_bytes() == b""


def test_package_logs_stop_at_a_spent_time_budget(tmp_path):
    from collectors import packages
    from forensics.bundle import BundleWriter
    from forensics.source import CollectContext
    root = _sparse_logs(tmp_path)
    writer = BundleWriter(tmp_path / "b")
    packages.acquire(CollectContext(root=root, writer=writer, deadline=time.monotonic() - 1))
    recs = {a.source: a for a in writer.artifacts}
    assert sum(a.source == "/var/log/dpkg.log" for a in writer.artifacts) == 1
    for src in ("/var/log/dpkg.log", "/var/log/apt/history.log"):
        assert (recs[src].status.value, recs[src].message) == (
            "truncated", "not copied: the time budget (--time-budget) was spent")
    assert not (writer.dir / "packages/dpkg/dpkg.log").exists()


def test_a_report_is_written_whole_or_not_at_all_and_never_through_a_link(tmp_path):
    """A report stopped while it is written (Ctrl-C, a full disk) leaves no half page that reads as the
    whole one, nor its ``.part``; an old report stays as it was, and keeps its mode when replaced; a link put
    where the ``.part`` goes is replaced, never written through; a link named as the report is written through
    (a helper's ``--html /dev/stdout`` replaced /dev/stdout with a file), a dangling one to the target it names."""
    from reports.files import put as _put

    def pieces(stop: BaseException | None):
        yield "<html>first half"
        if stop is not None:
            raise stop
        yield b" and the second</html>"

    page, outside = tmp_path / "report.html", tmp_path / "outside.txt"
    with pytest.raises(KeyboardInterrupt):
        _put(page, pieces(KeyboardInterrupt()))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    page.write_text("the old report")
    with pytest.raises(OSError) as e:
        _put(page, pieces(OSError(28, "No space left on device")))
    assert page.read_text() == "the old report" and not (tmp_path / "report.html.part").exists()
    assert e.value.errno == 28
    outside.write_text("not the tool's")
    (tmp_path / "report.html.part").symlink_to(outside)
    page.chmod(0o600)
    _put(page, pieces(None))
    assert page.read_text() == "<html>first half and the second</html>" and not page.is_symlink()
    assert outside.read_text() == "not the tool's" and not (tmp_path / "report.html.part").exists()
    assert page.stat().st_mode & 0o777 == 0o600  # a private report stays private
    # a link the user named as the report (``--html /dev/stdout``) is written through, never replaced
    named, through = tmp_path / "stdout", tmp_path / "redirected.html"
    through.write_text("")
    named.symlink_to(through)
    _put(named, pieces(None))
    assert named.is_symlink() and through.read_text() == "<html>first half and the second</html>"
    assert not (tmp_path / "stdout.part").exists()
    # a dangling link named as the report: its target is made through it, as open(path, "w") made it
    dangling, target = tmp_path / "latest.html", tmp_path / "reports-of-today.html"
    dangling.symlink_to(target.name)
    _put(dangling, pieces(None))
    assert dangling.is_symlink() and target.read_text() == "<html>first half and the second</html>"
    # interrupted through a link: the target it names keeps its old report, replaced whole or not at all
    with pytest.raises(KeyboardInterrupt):
        _put(dangling, pieces(KeyboardInterrupt()))
    assert dangling.is_symlink() and target.read_text() == "<html>first half and the second</html>"
    assert not list(tmp_path.glob("*.part"))
    # a name of 254 bytes, the most but one a file system takes: its .part is cut to fit
    long = tmp_path / ("r" * 249 + ".html")
    _put(long, pieces(None))
    assert long.read_text() == "<html>first half and the second</html>" and not list(tmp_path.glob("*.part"))
