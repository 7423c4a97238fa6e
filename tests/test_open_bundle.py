"""Opening a hostile bundle (issue 15, items 0-5): real ``.tar.gz`` archives built here with tarfile
(symlink chains, links, a tar bomb, a GNU sparse member), hostile manifests, a directory bundle holding
a real FIFO or symlink, and the manifest hash that ``collect``, ``verify`` and ``analyze`` agree on.

Each refusal is one ``invalid bundle: ...`` line and exit code 3, in ``verify``, ``analyze``,
``timeline`` and ``fleet``, and nothing is created outside the extraction folder.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from forensics import bundle_open
from forensics.bundle import Bundle, BundleError, canonical_sha256, verify
from forensics.ops.cli import SAMPLE_ROOT, main

PROJECT = Path(__file__).resolve().parent.parent
COMMANDS = ("verify", "analyze", "timeline", "fleet")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A real bundle of the sample node (a directory) and the manifest SHA-256 ``collect`` printed."""
    sys.path.insert(0, str(PROJECT / "samples"))
    import build
    build.ensure_journal()
    out = tmp_path_factory.mktemp("good") / "node3"
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["-q", "collect", "--root", str(SAMPLE_ROOT), "--out", str(out)]) == 0
    digest = next(x.split()[-1] for x in buf.getvalue().splitlines() if x.startswith("manifest.json sha256:"))
    return out, digest


def _copy(good, tmp_path, name="b") -> Path:
    dst = tmp_path / name
    shutil.copytree(good[0], dst)
    return dst


@pytest.fixture
def private_tmp(tmp_path):
    """Bundles are unpacked under this folder (tempfile.tempdir); returns it, to check nothing stays."""
    t = tmp_path / "unpack"
    t.mkdir()
    saved, tempfile.tempdir = tempfile.tempdir, str(t)
    yield t
    tempfile.tempdir = saved


def _cli(cmd: str, bundle: Path, tmp_path: Path, capsys, *extra) -> tuple[int, str, str]:
    """Run one reader on ``bundle`` in this process; ``(exit code, stdout, stderr)``."""
    capsys.readouterr()
    if cmd == "fleet":
        rc = main(["fleet", str(bundle), "--out", str(tmp_path / "fleet-out"), "--jobs", "1", *extra])
    elif cmd == "analyze":
        rc = main(["analyze", str(bundle), "--html", str(tmp_path / "r/r.html"), "--markdown",
                   str(tmp_path / "r/r.md"), "--json", str(tmp_path / "r/a.json"), *extra])
    else:
        rc = main([cmd, str(bundle), *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def _fleet_error(tmp_path) -> str:
    r = json.loads((tmp_path / "fleet-out/fleet.json").read_text())
    assert len(r["errors"]) == 1 and not r["nodes"]
    return r["errors"][0]["error"]


def _tree(p: Path) -> list[str]:
    return sorted(str(x.relative_to(p)) for x in p.rglob("*"))


# -- 0/1: links in an archive ----------------------------------------------------------------------
def _add(tf: tarfile.TarFile, name: str, type_=tarfile.REGTYPE, data: bytes = b"", link: str = "") -> None:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode = type_, link, 0o777 if type_ in (tarfile.DIRTYPE, tarfile.SYMTYPE) else 0o644
    ti.size = len(data) if type_ == tarfile.REGTYPE else 0
    tf.addfile(ti, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)


def _realpath_limit_attack(tf: tarfile.TarFile, dest_len: int) -> None:
    """The symlink chain of CVE-2025-4517 (CPython's test_realpath_limit_attack): links that
    os.path.realpath stops expanding once the path passes PATH_MAX, so tarfile's ``data`` filter
    (3.11.4-3.11.12) checks the unexpanded path, while the kernel follows them out of the
    destination: ``escape`` becomes the destination's parent."""
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf("/", "PC_PATH_MAX") - dest_len) // (len(steps) + 1))
    path = ""
    for s in steps:
        _add(tf, os.path.join(path, component), tarfile.DIRTYPE)
        _add(tf, os.path.join(path, s), tarfile.SYMTYPE, link=component)
        path = os.path.join(path, component)
    linkpath = os.path.join(*steps, "l" * 254)
    _add(tf, linkpath, tarfile.SYMTYPE, link=os.path.join(*[".."] * len(steps)))
    _add(tf, "escape", tarfile.SYMTYPE, link=os.path.join(linkpath, ".."))
    _add(tf, "flaglink", tarfile.LNKTYPE, link="escape/flag")      # a hard link to a file outside
    _add(tf, "flaglink", data=b"overwritten through the hard link")  # then written through it
    _add(tf, "escape/newfile", data=b"created outside")              # a file through the link chain


def _simple_links(tf: tarfile.TarFile, outside: Path) -> None:
    _add(tf, "b/l1", tarfile.SYMTYPE, link="l2")                      # a chain: l1 -> l2 -> outside
    _add(tf, "b/l2", tarfile.SYMTYPE, link=str(outside))
    _add(tf, "b/l1/through-chain", data=b"x")
    _add(tf, "b/up", tarfile.SYMTYPE, link="../../..")
    _add(tf, "b/up/through-dotdot", data=b"x")
    _add(tf, "b/hard", tarfile.LNKTYPE, link=str(outside / "flag"))
    _add(tf, "b/hard", data=b"overwritten")


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("attack", ["realpath-limit", "simple"])
def test_a_symlink_chain_archive_creates_nothing_outside_and_exits_3(good, tmp_path, private_tmp, capsys, cmd, attack):
    outside = private_tmp  # the attack aims at the extraction folder's parent: tempfile.tempdir
    (outside / "flag").write_text("original\n")
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(good[0], arcname="b")  # a whole, valid bundle first: nothing in it is wrong
        if attack == "simple":
            _simple_links(tf, outside)
        else:
            # the folder tempfile.TemporaryDirectory(prefix="gpu-forensics-") makes: prefix + 8 characters
            _realpath_limit_attack(tf, len(str(outside)) + 1 + len("gpu-forensics-") + 8 + 1)
    before = _tree(tmp_path)
    rc, out, err = _cli(cmd, archive, tmp_path, capsys)
    assert rc == 3
    assert (outside / "flag").read_text() == "original\n"
    assert _tree(outside) == ["flag"]  # no file appeared beside the extraction folder, and it is gone
    assert [x for x in _tree(tmp_path) if x not in before and not x.startswith(("fleet-out", "r"))] == []
    msg = _fleet_error(tmp_path) if cmd == "fleet" else err
    assert "invalid bundle:" in msg and ("symlink" in msg or "hard link" in msg) and "Traceback" not in err + out


def test_a_plain_bundle_archive_still_opens_and_verifies(good, tmp_path, private_tmp):
    archive = tmp_path / "ok.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(good[0], arcname="node3")
    b = Bundle.open(archive)
    assert b.manifest_sha256 == good[1] and verify(b) == []
    assert b.path("node/hostname").read_text().strip() == "node3-gpu"
    assert oct(os.stat(b.path("node/hostname")).st_mode & 0o777) == "0o600"  # made by us, not by the member's mode
    b.close()
    assert _tree(private_tmp) == []


@pytest.mark.parametrize("members, what", [
    ([("b/manifest.json", b"{}"), ("c/x", b"")], "outside the top folder"),
    ([("manifest.json", b"{}")], "a file where the top folder should be"),
    ([("b/../x", b"")], "not a normal relative name"),
    ([("/abs/b/x", b"")], "not a normal relative name"),
    ([("b/./x", b"")], "not a normal relative name"),
    ([("b/x", b"1"), ("b/x", b"2")], "appears twice"),
    ([("b/x", b"1"), ("b/x/y", b"2")], "below a file"),
])
def test_names_that_are_not_plain_and_inside_one_top_folder_are_refused(tmp_path, private_tmp, members, what):
    archive = tmp_path / "n.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, data in members:
            _add(tf, name, data=data)
    with pytest.raises(BundleError, match="invalid bundle:") as e:
        Bundle.open(archive)
    assert what in str(e.value) and "\n" not in str(e.value)
    assert _tree(private_tmp) == []


@pytest.mark.parametrize("type_, what", [(tarfile.FIFOTYPE, "a FIFO"), (tarfile.CHRTYPE, "a device"),
                                         (tarfile.BLKTYPE, "a device")])
def test_fifo_and_device_members_are_refused(tmp_path, private_tmp, type_, what):
    archive = tmp_path / "d.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        _add(tf, "b/dev", type_)
    with pytest.raises(BundleError, match=f"invalid bundle: .*is {what}"):
        Bundle.open(archive)


# -- 2: size bounds --------------------------------------------------------------------------------
def _bomb(path: Path, header: bytes, data_mib: int, tail: bytes = b"") -> None:
    """A .tar.gz of ``header`` then ``data_mib`` MiB of zeros: gzip members of 1 MiB of zeros each
    (about 1 KB apiece), so that 2 GiB of data takes 2 MB on disk and no time to write."""
    zero = gzip.compress(b"\0" * (1 << 20), 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(header))
        for _ in range(data_mib):
            f.write(zero)
        f.write(gzip.compress(tail + b"\0" * 1024))


def _run_bounded(args: list[str], timeout: float = 120) -> tuple[int, str, int]:
    """The CLI in a child process (at most 3 GiB of address space); ``(exit code, stderr, peak RSS MiB)``."""
    code = ("import resource, sys\nfrom forensics.ops.cli import main\nrc = main(sys.argv[1:])\n"
            # VmHWM: ru_maxrss survives execve(2), so it would be the forking pytest's peak
            "hwm = [int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')][0]\n"
            "print('PEAK_RSS_KIB', hwm, file=sys.stderr)\n"
            "sys.exit(rc)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=PROJECT, env=env, capture_output=True, text=True,
                       timeout=timeout, preexec_fn=limit)
    peak = next((int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("PEAK_RSS_KIB")), 1 << 30)
    return p.returncode, p.stderr, peak // 1024


def _assert_one_line_refusal(rc, err, peak, what):
    lines = [x for x in err.splitlines() if not x.startswith("PEAK_RSS_KIB")]
    assert rc == 3 and len(lines) == 1 and lines[0].startswith("gpu-forensics: error: invalid bundle:"), err[-2000:]
    assert what in lines[0]
    assert peak < 400, f"{peak} MiB"


@pytest.mark.parametrize("cmd", ["verify", "analyze", "timeline"])
def test_a_tar_bomb_is_refused_from_its_header(good, tmp_path, cmd):
    ti = tarfile.TarInfo("b/journal/big.jsonl")
    ti.size = 2 << 30  # 2 GiB of zeros in 2 MB
    archive = tmp_path / "bomb.tar.gz"
    _bomb(archive, ti.tobuf(tarfile.GNU_FORMAT), 2048)
    assert archive.stat().st_size < 4 << 20
    rc, err, peak = _run_bounded([cmd, str(archive)])
    _assert_one_line_refusal(rc, err, peak, f"is {2 << 30} bytes (at most {bundle_open.MAX_MEMBER})")


def test_many_members_each_within_the_bound_are_refused_before_anything_is_written(tmp_path, private_tmp):
    archive = tmp_path / "bombs.tar.gz"
    each = bundle_open.MAX_MEMBER
    zero = gzip.compress(b"\0" * (1 << 20), 9)
    n = bundle_open.MAX_TOTAL // each + 1
    with open(archive, "wb") as f:
        for i in range(n):
            ti = tarfile.TarInfo(f"b/part{i}")
            ti.size = each
            f.write(gzip.compress(ti.tobuf(tarfile.GNU_FORMAT)))
            for _ in range(each >> 20):
                f.write(zero)
        f.write(gzip.compress(b"\0" * 1024))
    with pytest.raises(BundleError, match=f"exceed {bundle_open.MAX_TOTAL} bytes in all"):
        Bundle.open(archive)
    assert _tree(private_tmp) == []  # the first pass refused it: not one byte was unpacked


def _gnu_sparse_member(name: str, realsize: int, data: bytes) -> bytes:
    """A real old-GNU sparse member (type ``S``, GNU tar's --sparse): one data region of ``data`` at
    the end of ``realsize`` bytes of holes; its header says 512 bytes, its file ``realsize``."""
    ti = tarfile.TarInfo(name)
    ti.type, ti.size = tarfile.GNUTYPE_SPARSE, len(data)
    buf = bytearray(ti.tobuf(tarfile.GNU_FORMAT))
    buf[386:398] = tarfile.itn(realsize - len(data), 12, tarfile.GNU_FORMAT)  # sparse[0].offset
    buf[398:410] = tarfile.itn(len(data), 12, tarfile.GNU_FORMAT)             # sparse[0].numbytes
    buf[483:495] = tarfile.itn(realsize, 12, tarfile.GNU_FORMAT)              # realsize
    buf[148:156] = b" " * 8
    buf[148:156] = b"%06o\0 " % sum(buf)
    return bytes(buf) + data + b"\0" * (-len(data) % 512)


@pytest.mark.parametrize("cmd", ["verify", "analyze"])
def test_a_sparse_member_is_refused(good, tmp_path, cmd):
    archive = tmp_path / "sparse.tar.gz"
    with open(archive, "wb") as f:
        f.write(gzip.compress(_gnu_sparse_member("b/manifest.json", 3 << 30, b"x" * 512) + b"\0" * 1024))
    with tarfile.open(archive) as tf:  # tarfile itself reads it as a 3 GiB sparse file
        m = tf.getmembers()[0]
        assert m.issparse() and m.size == 3 << 30
    rc, err, peak = _run_bounded([cmd, str(archive)])
    _assert_one_line_refusal(rc, err, peak, "is a sparse file")


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_a_huge_manifest_is_refused_without_reading_it_whole(good, tmp_path, form):
    b = _copy(good, tmp_path)
    m = (b / "manifest.json").read_bytes()
    if form == "directory":
        with open(b / "manifest.json", "r+b") as f:  # 2 GiB: a valid manifest, then a sparse run of spaces
            f.truncate(2 << 30)
        target = b
    else:
        target = tmp_path / "big.tar.gz"
        head = tarfile.TarInfo("b/manifest.json")
        head.size = len(m) + (bundle_open.MAX_MANIFEST + (1 << 20) - len(m))
        _bomb(target, head.tobuf(tarfile.GNU_FORMAT) + m, (bundle_open.MAX_MANIFEST >> 20) + 1)
    rc, err, peak = _run_bounded(["verify", str(target)])
    _assert_one_line_refusal(rc, err, peak, "manifest.json is larger than" if form == "archive" else "is larger than")


# -- 3: hostile manifests --------------------------------------------------------------------------
def _nest(depth: int):
    return json.loads("[" * depth + "]" * depth)


HOSTILE = {
    "artifacts not a list": lambda m: m.update(artifacts={"a": 1}),
    "an artifact not an object": lambda m: m["artifacts"].append(7),
    "a path with ..": lambda m: m["artifacts"][0].update(path="../../etc/passwd"),
    "an absolute path": lambda m: m["artifacts"][0].update(path="/etc/passwd"),
    "a size that is text": lambda m: m["artifacts"][0].update(size="big"),
    "an unknown status": lambda m: m["artifacts"][0].update(status="fine"),
    "a status that is a list": lambda m: m["artifacts"][0].update(status=[]),  # issue 27: was a TypeError traceback
    "a status that is an object": lambda m: m["artifacts"][0].update(status={}),
    "notes not a list": lambda m: m["artifacts"][0].update(notes=5),
    "a sha256 that is not one": lambda m: m["artifacts"][0].update(sha256=["x"]),
    "deep nesting": lambda m: m.update(extra=_nest(50)),
    "incidents not a list": lambda m: m.update(incidents="2026"),
    "an incident without times": lambda m: m.update(incidents=[{"start": 1}]),
    "a collection time that is not one": lambda m: m["collection"].update(start="yesterday"),
    "node_facts a list": lambda m: m.update(node_facts=[1, 2]),
    "a package version that is an object": lambda m: m["node_facts"]["package_versions"].update(runc={"a": 1}),
    "node an integer": lambda m: m.update(node=7),
}


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_manifest_is_an_invalid_bundle_in_every_reader(good, tmp_path, capsys, cmd, name):
    b = _copy(good, tmp_path, "hostile")
    m = json.loads((b / "manifest.json").read_text())
    HOSTILE[name](m)
    m["self_sha256"] = canonical_sha256(m)  # resealed: only the checks of the manifest's shape catch it
    (b / "manifest.json").write_text(json.dumps(m))
    rc, out, err = _cli(cmd, b, tmp_path, capsys)
    assert rc == 3
    msg = _fleet_error(tmp_path) if cmd == "fleet" else err
    assert "invalid bundle:" in msg and "manifest.json" in msg and "Traceback" not in out + err


def test_json_nested_beyond_the_parser_is_an_invalid_bundle(good, tmp_path, capsys):
    b = _copy(good, tmp_path)
    (b / "manifest.json").write_text('{"schema": "gpu-forensics/manifest/v1", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    rc, _out, err = _cli("analyze", b, tmp_path, capsys)
    assert rc == 3 and "invalid bundle:" in err and "not valid JSON" in err


def test_fleet_reports_the_bad_bundle_by_name_and_goes_on(good, tmp_path, capsys):
    folder = tmp_path / "many"
    folder.mkdir()
    _copy(good, folder, "a-good")
    bad = _copy(good, folder, "b-bad")
    m = json.loads((bad / "manifest.json").read_text())
    m["artifacts"] = "none"
    (bad / "manifest.json").write_text(json.dumps(m))
    _copy(good, folder, "c-good")
    rc = main(["fleet", str(folder), "--out", str(tmp_path / "fo"), "--jobs", "1"])
    r = json.loads((tmp_path / "fo/fleet.json").read_text())
    assert rc == 3 and len(r["nodes"]) == 2 and [e["bundle"] for e in r["errors"]] == [str(bad)]
    assert r["errors"][0]["error"].startswith(f"invalid bundle: {bad}: manifest.json: artifacts is str")


# -- 4: FIFOs and symlinks in a directory bundle ---------------------------------------------------
def test_a_fifo_in_a_directory_bundle_is_never_opened(good, tmp_path):
    b = _copy(good, tmp_path)
    entries = "node/localtime"  # read by node facts before anything else: main's analyze hung on it
    (b / entries).unlink()
    os.mkfifo(b / entries)  # no writer ever comes: an open() without O_NONBLOCK would wait forever
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cli = [sys.executable, "-m", "forensics.ops.cli"]
    p = subprocess.run([*cli, "analyze", str(b), "--json", str(tmp_path / "a.json")], cwd=PROJECT, env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and f"invalid bundle: {b}: not a regular file: {entries} (a FIFO)" in p.stderr
    assert not (tmp_path / "a.json").exists()
    p = subprocess.run([*cli, "verify", str(b)], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and f"not a regular file: {entries} (a FIFO)" in p.stdout.splitlines()
    p = subprocess.run([*cli, "timeline", str(b)], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 3


def test_a_symlink_in_a_directory_bundle_is_never_followed(good, tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t-on-the-laptop\n")
    b = _copy(good, tmp_path)
    (b / "node/hostname").unlink()
    (b / "node/hostname").symlink_to(secret)
    (b / "node/linked-dir").symlink_to(tmp_path, target_is_directory=True)
    rc, out, err = _cli("verify", b, tmp_path, capsys)
    assert rc == 3
    assert "not a regular file: node/hostname (a symlink)" in out.splitlines()
    assert sum("node/hostname" in x for x in out.splitlines()) == 1  # once, never read through the link
    assert "not a regular file: node/linked-dir (a symlink)" in out.splitlines()
    assert not any("secret" in x for x in out.splitlines())  # the linked folder was not walked
    rc, out, err = _cli("analyze", b, tmp_path, capsys)
    assert rc == 3 and "invalid bundle:" in err and "symlink" in err and not (tmp_path / "r").exists()


def test_a_symlinked_folder_on_the_way_to_an_artifact_is_not_followed(good, tmp_path):
    b = _copy(good, tmp_path)
    shutil.move(b / "node", tmp_path / "node-elsewhere")
    (b / "node").symlink_to(tmp_path / "node-elsewhere", target_is_directory=True)
    problems = verify(b)
    assert "not a regular file: node (a symlink)" in problems
    assert any(p.startswith("removed: node/") for p in problems)  # not read through the link


# -- 5: the manifest hash: printed, expected, and the analysis that verifies first ----------------
def test_verify_prints_the_hash_collect_printed_and_checks_expect(good, tmp_path, capsys):
    rc, out, _ = _cli("verify", good[0], tmp_path, capsys)
    assert rc == 0 and out.splitlines()[0] == f"manifest.json sha256: {good[1]}"
    assert _cli("verify", good[0], tmp_path, capsys, "--expect", good[1].upper())[0] == 0
    other = "0" * 64
    rc, out, _ = _cli("verify", good[0], tmp_path, capsys, "--expect", other)
    assert rc == 3 and good[1] in out and other in out


def test_a_resealed_bundle_verifies_and_only_the_ticket_hash_tells(good, tmp_path, capsys):
    import hashlib
    b = _copy(good, tmp_path)
    (b / "node/hostname").write_text("innocent-node\n")
    m = json.loads((b / "manifest.json").read_text())
    rec = next(a for a in m["artifacts"] if a["path"] == "node/hostname")
    rec["sha256"], rec["size"] = hashlib.sha256(b"innocent-node\n").hexdigest(), 14
    m["self_sha256"] = canonical_sha256(m)
    (b / "manifest.json").write_text(json.dumps(m, indent=2))
    rc, out, _ = _cli("verify", b, tmp_path, capsys)
    assert rc == 0 and good[1] not in out  # every hash matches: the resealed manifest is consistent
    rc, out, _ = _cli("verify", b, tmp_path, capsys, "--expect", good[1])
    assert rc == 3 and f"the ticket says {good[1]}" in out
    rc, _, err = _cli("analyze", b, tmp_path, capsys, "--expect", good[1])
    assert rc == 3 and "not analysed" in err


def test_analyze_verifies_first_and_marks_a_tampered_bundle_in_every_report(good, tmp_path, capsys):
    b = _copy(good, tmp_path)
    (b / "node/hostname").write_text("edited\n")
    rc, out, err = _cli("analyze", b, tmp_path, capsys)
    assert rc == 3 and "changed: node/hostname" in out and "--allow-tampered" in err
    assert not (tmp_path / "r").exists()
    rc, out, err = _cli("analyze", b, tmp_path, capsys, "--allow-tampered")
    assert rc == 3
    a = json.loads((tmp_path / "r/a.json").read_text())
    assert a["integrity"]["verified"] is False and a["integrity"]["analysed_anyway"] is True
    assert a["integrity"]["problems"] == ["changed: node/hostname"]
    html, md = (tmp_path / "r/r.html").read_text(), (tmp_path / "r/r.md").read_text()
    assert 'role="alert" id="integrity"' in html.split("<h1>")[0]  # before everything else in the body
    assert "changed: node/hostname" in html and "--allow-tampered" in html
    assert md.startswith("**TAMPERED OR DAMAGED BUNDLE: it does not match its manifest (1 problem: "
                         "changed: node/hostname). Analysed anyway (--allow-tampered)")


def test_an_intact_bundle_has_no_banner_and_its_integrity_in_the_json(good, tmp_path, capsys):
    rc, _, _ = _cli("analyze", good[0], tmp_path, capsys)
    assert rc in (0, 1)
    a = json.loads((tmp_path / "r/a.json").read_text())
    assert a["integrity"] == {"verified": True, "problems": [], "manifest_sha256": good[1], "expected_sha256": None}
    assert a["bundle"]["manifest_sha256"] == good[1]
    assert "TAMPERED" not in (tmp_path / "r/r.html").read_text() + (tmp_path / "r/r.md").read_text()


def test_run_prints_the_manifest_hash_for_an_archive_too(tmp_path, capsys):
    out = tmp_path / "n.tar.gz"
    rc = main(["-q", "run", "--root", str(SAMPLE_ROOT), "--out", str(out), "--json", str(tmp_path / "a.json"),
               "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md")])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    printed = [x for x in lines if "sha256:" in x]
    assert len(set(x.split()[-1] for x in printed)) == 1 and all(x.startswith("manifest.json sha256: ") for x in printed)
    capsys.readouterr()
    assert main(["verify", str(out), "--expect", printed[0].split()[-1]]) == 0


def test_a_manifest_without_artifacts_opens_with_none(tmp_path):
    """A manifest that lists no artifacts (the key left out, as a hand-made or damaged one may) opens with
    none; sharing the records' repeated text (issue 30) must not make it a KeyError."""
    import json
    from forensics.bundle import SCHEMA, Bundle
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": SCHEMA, "complete": True}))
    b = Bundle.open(tmp_path)
    assert b.artifacts() == [] and b.manifest_sha256
