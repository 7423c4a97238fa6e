"""Issue 29, "one home for each piece of knowledge": a version parser and the engines' scope names are
written once, in the core, and every floor reads them from there."""
from __future__ import annotations

import ast
from pathlib import Path

from forensics.engines import CONTAINER_IN_CGROUP, SCOPE_PREFIXES, engine_of_scope, scope_names
from forensics.kmsg import container_id
from forensics.versions import version_tuple

PROJECT = Path(__file__).resolve().parent.parent
CID = "0123456789abcdef" * 4


def _product_strings():
    """(path, string constant) for every string literal of the product's modules."""
    for pkg in ("forensics", "collectors", "reports"):
        for p in sorted((PROJECT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(), str(p))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    yield p.relative_to(PROJECT).as_posix(), node.value


def test_versions_as_packages_and_binaries_write_them():
    assert version_tuple("1:1.7.24-1") == (1, 7, 24)                # a Debian epoch and revision
    assert version_tuple("v1.1.12") == (1, 1, 12)                   # runc --version, Go tags
    assert version_tuple("550.54.15") == (550, 54, 15)              # /proc/driver/nvidia/version
    assert version_tuple("252.22-1~deb12u1") == (252, 22)           # systemd's package
    assert version_tuple("1.17.8+ds1-0ubuntu1") == (1, 17, 8)
    assert version_tuple(" 2.0.0-rc.1 ") == (2, 0, 0)
    for unknown in (None, "", "unknown", "v", "~1.2", 1.7):
        assert version_tuple(unknown) == ()
    assert version_tuple(None) < (1, 7) and version_tuple("1.6.28") < (1, 7) <= version_tuple("1.7.0")


def test_scope_names_of_every_engine():
    assert scope_names(CID)[:3] == [f"cri-containerd-{CID}.scope", f"docker-{CID}.scope", f"crio-{CID}.scope"]
    assert {"libpod-", "runc-"} <= set(SCOPE_PREFIXES)
    assert engine_of_scope(f"crio-{CID}.scope") == "crio"
    assert engine_of_scope(f"libpod-{CID}.scope") == "podman"
    assert engine_of_scope(f"cri-containerd-{CID}.scope") == "containerd"
    assert engine_of_scope(f"crio-conmon-{CID}.scope") is None     # CRI-O's monitor, no container
    assert engine_of_scope(f"docker-{CID[:12]}.scope") is None      # not a full id
    assert engine_of_scope("kubelet.service") is None and engine_of_scope(CID) is None
    # the kernel-line reader takes the id out of an OOM line's cgroup with the same table
    assert container_id(f"/kubepods.slice/kubepods-pod1.slice/libpod-{CID}.scope") == CID
    assert container_id(f"/kubepods/burstable/pod1/{CID}") == CID
    assert container_id(f"/system.slice/crio-conmon-{CID}.scope") is None
    assert CONTAINER_IN_CGROUP.match(f"runc-{CID}.scope")


def test_each_piece_is_written_once():
    homes = {"forensics/versions.py", "forensics/engines.py"}
    written = {}
    for path, text in _product_strings():
        if path in homes:
            continue
        if "(?:\\d+:)?v?" in text:
            written.setdefault("a version regex", []).append(path)
        if text in SCOPE_PREFIXES or text.startswith(("cri-containerd|", "(?:(?:cri-containerd")):
            written.setdefault("a scope prefix", []).append(path)
    assert written == {}


def test_one_url_in_text_rule_for_bundles_and_messages():
    """A URL in a log line and the same URL in an error message lose the same secrets: an object-store
    path token and the values of credential-named query parameters (hashed in bundles, marked in
    messages); a plain query value and a path that only looks like a token's stay in bundles."""
    from forensics.redact import redact_message, redact_text
    line = ("GET https://bucket.s3.amazonaws.com/model?X-Amz-Signature=5f1e9a0b7c&X-Amz-Credential=AKIDEXAMPLE"
            " then https://objectstorage.eu.example.com/p/Qx7Rk2Lm9Pz/n/ns/b/bk/o/w.bin and /api?sig=77aa&x=1")
    for out, mark in ((redact_text(line), "<redacted hmac:"), (redact_message(line), "<redacted>")):
        for secret in ("5f1e9a0b7c", "AKIDEXAMPLE", "Qx7Rk2Lm9Pz", "77aa"):
            assert secret not in out, (secret, out)
        assert f"X-Amz-Signature={mark}" in out and f"/p/{mark}" in out and f"?sig={mark}" in out
    kept = redact_text("kubelet: GET /api/v1/pods?watch=true&resourceVersion=42 from /var/lib/p/abc/x")
    assert kept == "kubelet: GET /api/v1/pods?watch=true&resourceVersion=42 from /var/lib/p/abc/x"
