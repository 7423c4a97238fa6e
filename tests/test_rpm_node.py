"""A node without dpkg (RHEL, Fedora, SUSE, Amazon Linux): the versioned packages (systemd, the engines, runc,
kubelet) are read from rpm's own database, a real rpmdb.sqlite written by this machine's rpm (``rpm --justdb``)
from packages rpmbuild builds, and each version says which database said it. Before, a mounted RHEL root
without a kubelet report had every engine's version "not seen"."""
from __future__ import annotations

import json

from test_nvidia_host import rpm_db

from forensics.bundle import Bundle
from forensics.ops.cli import main

DB = "/var/lib/rpm/rpmdb.sqlite"


def test_a_rhel_root_gives_its_versions_from_the_rpm_database(tmp_path):
    from test_readonly import snapshot
    root = tmp_path / "root"
    db = rpm_db(root, tmp_path / "rpmbuild", [("systemd", "252", "46.el9_4"), ("containerd.io", "1.7.27", "3.1.el9"),
                                              ("runc", "1.1.12", "4.el9", 4), ("kubelet", "1.30.4", "150500.1.1"),
                                              ("bash", "5.1.8", "9.el9")])
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('NAME="Red Hat Enterprise Linux"\nVERSION_ID="9.4"\n')
    before = snapshot(db)
    out = tmp_path / "b"
    assert main(["-q", "collect", "--root", str(root), "--out", str(out)]) in (0, 1)
    assert snapshot(db) == before
    b = Bundle.open(out)
    nf = b.manifest["node_facts"]
    assert nf["package_versions"] == {"systemd": "252-46.el9_4", "containerd.io": "1.7.27-3.1.el9",
                                      "runc": "4:1.1.12-4.el9", "kubelet": "1.30.4-150500.1.1"}
    assert (nf["package_db"], nf["systemd_version"], nf["systemd_version_basis"]) == (DB, "252-46.el9_4", DB)
    versions = json.loads(b.path("runtime/facts.json").read_text())["versions"]
    assert versions["containerd"] == {"version": "1.7.27-3.1.el9", "basis": f"{DB} (containerd.io)"}
    assert versions["runc"] == {"version": "4:1.1.12-4.el9", "basis": f"{DB} (runc)"}
    assert versions["crio"] == {"version": None, "basis": None}
    kept = [a for a in b.artifacts() if a.path == "node/rpm-packages.json"]
    assert len(kept) == 1 and (kept[0].source, kept[0].method) == (DB, "sqlite-immutable")
    assert "bash" not in {p["name"] for p in json.loads(b.path("node/rpm-packages.json").read_text())}
    assert {a.status.value for a in b.artifacts() if a.source == "/var/lib/dpkg/status"} == {"absent"}
