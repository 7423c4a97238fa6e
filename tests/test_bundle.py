"""The evidence bundle: statuses, hashes, verify, tar.gz, atomic writing, unreadable vs absent."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from forensics.artifact import Artifact, Status
from forensics.bundle import Bundle, BundleError, BundleWriter, verify
from forensics.ops.cli import main
from privdrop import run_as_nobody


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/dpkg.log").write_text("2026-06-11 06:32:09 startup archives unpack\n")
    (root / "etc").mkdir()
    (root / "etc/hostname").write_text("gpu-7\n")
    return root


def _write(tmp_path, out_name="b"):
    root = _root(tmp_path)
    w = BundleWriter(tmp_path / out_name)
    a1 = w.copy(root, "/var/log/dpkg.log", "packages/dpkg/dpkg.log")
    a2 = w.copy(root, "/var/log/apt/history.log", "packages/apt/history.log")
    with w.create("journal/entries.jsonl", "/var/log/journal", "journal-reader") as fh:
        fh.write('{"MESSAGE": "Reloading."}\n')
    path, digest = w.finish()
    return path, digest, a1, a2


def test_statuses_and_hashes(tmp_path):
    path, digest, a1, a2 = _write(tmp_path)
    assert a1.status is Status.COLLECTED and a1.size == 44
    assert a2.status is Status.ABSENT and a2.errno == errno.ENOENT and a2.path is None
    m = json.loads((path / "manifest.json").read_text())
    recs = {r["source"]: r for r in m["artifacts"]}
    assert recs["/var/log/apt/history.log"]["status"] == "absent"
    import hashlib
    assert recs["/var/log/dpkg.log"]["sha256"] == hashlib.sha256(b"2026-06-11 06:32:09 startup archives unpack\n").hexdigest()
    assert digest == hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    assert verify(path) == []
    assert not (tmp_path / "b.incomplete").exists()


@pytest.mark.parametrize("tamper, expected", [
    (lambda p: (p / "packages/dpkg/dpkg.log").write_text("edited\n"), "changed: packages/dpkg/dpkg.log"),
    (lambda p: (p / "packages/dpkg/dpkg.log").unlink(), "removed: packages/dpkg/dpkg.log"),
    (lambda p: (p / "journal/extra.jsonl").write_text("{}\n"), "added: journal/extra.jsonl"),
])
def test_verify_names_the_artifact_and_exits_3(tmp_path, capsys, tamper, expected):
    path, *_ = _write(tmp_path)
    tamper(path)
    assert expected in verify(path)
    assert main(["verify", str(path)]) == 3
    assert expected in capsys.readouterr().out


def test_verify_detects_an_edited_manifest(tmp_path):
    path, *_ = _write(tmp_path)
    m = json.loads((path / "manifest.json").read_text())
    m["node"] = "someone-else"
    (path / "manifest.json").write_text(json.dumps(m))
    assert any(p.startswith("manifest:") for p in verify(path))


def test_tar_gz_bundle_round_trip(tmp_path):
    path, *_ = _write(tmp_path, "b.tar.gz")
    assert path.name == "b.tar.gz" and tarfile.is_tarfile(path)
    assert verify(path) == []
    b = Bundle.open(path)
    assert (b.path("packages/dpkg/dpkg.log").read_text()).startswith("2026-06-11")


def test_interrupted_collection_is_marked_incomplete(tmp_path):
    w = BundleWriter(tmp_path / "b")
    w.copy(_root(tmp_path), "/var/log/dpkg.log", "packages/dpkg/dpkg.log")
    # no finish(): the process was killed
    assert (tmp_path / "b.incomplete" / "INCOMPLETE").exists() and not (tmp_path / "b").exists()
    with pytest.raises(BundleError, match="INCOMPLETE"):
        Bundle.open(tmp_path / "b.incomplete")


def test_not_a_bundle(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    assert main(["verify", str(tmp_path / "plain")]) == 3
    assert "no manifest.json" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "missing")]) == 3


def test_out_is_never_overwritten(tmp_path):
    (tmp_path / "b").mkdir()
    with pytest.raises(FileExistsError):
        BundleWriter(tmp_path / "b")


def test_unprivileged_run_records_unreadable_with_errno_13(tmp_path):
    """Mistake 1: 'permission denied' must never read as 'absent'."""
    from forensics.ops.pipeline import collect
    import collectors  # noqa: F401  (import before dropping privileges)
    import tempfile
    tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path sits under a 0700 folder
    os.chmod(tmp_path, 0o755)
    root = _root(tmp_path)
    (root / "var/log/apt").mkdir()
    (root / "var/log/apt/history.log").write_text("Start-Date: 2026-06-11  06:32:07\n")
    os.chmod(root / "var/log/apt/history.log", 0o600)
    outdir = tmp_path / "out"
    outdir.mkdir()
    os.chmod(outdir, 0o777)

    def child():
        path, _digest, arts = collect(root, outdir / "bundle", argv=["test"])
        return [a.to_json() for a in arts]

    arts = {a["source"]: a for a in run_as_nobody(child)}
    rec = arts["/var/log/apt/history.log"]
    assert rec["status"] == "unreadable" and rec["errno"] == 13
    assert arts["/var/log/dpkg.log"]["status"] == "collected"
    assert verify(outdir / "bundle") == []


def test_copy_keeps_what_it_stored_and_paths_stay_inside(tmp_path):
    root = _root(tmp_path)
    w = BundleWriter(tmp_path / "b")
    kept: list[bytes] = []
    a = w.copy(root, "/var/log/dpkg.log", "packages/dpkg/dpkg.log", limit=10, keep=kept)
    assert a.status is Status.TRUNCATED and b"".join(kept) == (w.dir / a.path).read_bytes() == b"2026-06-11"
    kept = []
    assert w.copy(root, "/var/log/missing.log", "packages/dpkg/missing.log", keep=kept).status is Status.ABSENT
    assert kept == []
    # a second file in an already created directory, a generated one beside it, and rel paths that
    # leave the bundle
    assert w.copy(root, "/etc/hostname", "packages/dpkg/hostname").status is Status.COLLECTED
    a = w.write_bytes("packages/dpkg/x.json", b"{}\n", "generated", "test")
    assert (a.size, (w.dir / "packages/dpkg/x.json").read_bytes()) == (3, b"{}\n")
    for bad in ("../x", "/etc/x", "a/../../x", "", "."):
        with pytest.raises(ValueError):
            w.write_bytes(bad, b"", "generated", "test")
    path, _ = w.finish()
    assert verify(path) == []


def test_manifest_is_written_in_pieces_that_equal_the_whole(tmp_path):
    # finish() never holds the manifest text whole (7,000 records on a big node); the pieces it hashes
    # must be exactly the canonical JSON verify() recomputes, and the file one record per line
    from forensics.bundle_write import _canonical_pieces, canonical_sha256
    w = BundleWriter(tmp_path / "b")
    w.write_json("x/é.json", {"k": "\u2028"}, source="/x", method="generated")
    w.record(Artifact(None, "/etc/ünreadable", Status.UNREADABLE, "copy", errno=13, message="Permission denied",
                      notes=("root would read it",)))
    w.meta.update({"node": "gpu-nödé", "node_facts": {"tz": "Asia/Seoul", "boots": [{"a": None}]}, "incidents": []})
    out, sha = w.finish()
    text = (out / "manifest.json").read_text()
    m = json.loads(text)
    assert m["self_sha256"] == canonical_sha256(m)
    head = {k: v for k, v in m.items() if k not in ("artifacts", "self_sha256")}
    arts = [Artifact.from_json(a) for a in m["artifacts"]]
    assert "".join(_canonical_pieces(head, arts)) == json.dumps(
        {**head, "artifacts": m["artifacts"]}, sort_keys=True, separators=(",", ":"))
    assert sha == hashlib.sha256(text.encode()).hexdigest()
    lines = text.splitlines()
    assert sum(line.startswith('    {"errno": ') for line in lines) == 2  # one record per line
    assert verify(out) == []


def test_artifact_record_names_every_field():
    # to_json is written out by hand (asdict is slow on 7,000 records): it must not miss a field
    from dataclasses import fields
    a = Artifact("p", "/s", Status.TRUNCATED, "m", 1, "0" * 64, 27, "msg", ("n",))
    d = a.to_json()
    assert list(d) == [f.name for f in fields(Artifact)] and d["status"] == "truncated" and d["notes"] == ["n"]
    assert Artifact.from_json(d) == a


def test_copy_with_a_transform_writes_only_what_it_returns_and_keeps_the_bound(tmp_path):
    root = tmp_path / "host"
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/a.log").write_bytes(b"secret=1\nok\n")
    w = BundleWriter(tmp_path / "b")
    seen = []

    def upper(data):
        seen.append(data)
        return data.upper(), ("upper-cased",)
    full = w.copy(root, "/var/log/a.log", "x/full.log", transform=upper)
    cut = w.copy(root, "/var/log/a.log", "x/cut.log", limit=4, transform=upper)
    gone = w.copy(root, "/var/log/none.log", "x/none.log", transform=upper)
    out, _ = w.finish()
    assert seen == [b"secret=1\nok\n", b"secr"]  # the bound applies before the transform
    assert (out / "x/full.log").read_bytes() == b"SECRET=1\nOK\n" and full.status is Status.COLLECTED
    assert full.notes == ("upper-cased",) and full.sha256 == hashlib.sha256(b"SECRET=1\nOK\n").hexdigest()
    assert (out / "x/cut.log").read_bytes() == b"SECR" and cut.status is Status.TRUNCATED
    assert cut.notes == ("upper-cased", "only the first 4 bytes were copied")
    assert gone.status is Status.ABSENT and not (out / "x/none.log").exists()
    assert verify(out) == []


def test_shared_json_is_equal_and_keeps_one_copy_of_each_short_string(tmp_path):
    """Bundle.json(shared=True), as the container records are read: the same value, each key and each string
    of up to SHARED_MAX characters one object across files (a busy node's thousand records: half the memory,
    bench/RESULTS.md), a longer string left as it is."""
    from forensics.bundle import SHARED_MAX, Bundle, BundleWriter
    long = "x" * (SHARED_MAX + 1)
    w = BundleWriter(tmp_path / "b")
    for i in (1, 2):
        w.write_json(f"c/{i}.json", {"engine": "containerd", "linux_devices": [{"path": "/dev/nvidia0"}], "m": long},
                     source="test", method="write")
    w.finish()
    b = Bundle.open(tmp_path / "b")
    one, two = b.json("c/1.json", shared=True), b.json("c/2.json", shared=True)
    assert one == two == b.json("c/1.json") == {"engine": "containerd", "linux_devices": [{"path": "/dev/nvidia0"}],
                                                "m": long}
    assert one["linux_devices"][0]["path"] is two["linux_devices"][0]["path"]
    assert next(k for k in one if k == "engine") is next(k for k in two if k == "engine")
    assert one["m"] is not two["m"]


def test_the_artifact_records_are_the_manifests_own_and_an_older_record_is_rebuilt(tmp_path):
    """Bundle.artifact_records (the analysis's ``bundle.artifacts``): each record of this version's manifest
    is the manifest's own dict (one copy of a busy node's thousands), equal to Artifact.to_json; a record
    that lacks a key (an older version's) becomes a new dict holding every key, sorted as manifest.json
    sorts them."""
    path, *_ = _write(tmp_path)
    b = Bundle.open(path)
    records = b.artifact_records()
    assert [r["source"] for r in records] == ["/var/log/dpkg.log", "/var/log/apt/history.log", "/var/log/journal"]
    assert all(r is m for r, m in zip(records, b.manifest["artifacts"]))
    assert records == [a.to_json() for a in b.artifacts()]
    older = dict(b.manifest["artifacts"][1])
    del older["notes"]
    b.manifest["artifacts"][1], b._arts = older, None
    again = b.artifact_records()
    assert again[1] is not older and again[1] == {**older, "notes": []}
    assert list(again[1]) == sorted(again[1]) and again[1]["status"] == "absent" and again[1]["errno"] == errno.ENOENT
    assert again[0] is b.manifest["artifacts"][0]
