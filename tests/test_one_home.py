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
    written = {}
    for path, text in _product_strings():
        if path == "forensics/versions.py" or path.startswith("forensics/engines/"):
            continue
        if "(?:\\d+:)?v?" in text:
            written.setdefault("a version regex", []).append(path)
        if text in SCOPE_PREFIXES or text.startswith(("cri-containerd|", "(?:(?:cri-containerd")):
            written.setdefault("a scope prefix", []).append(path)
        if text in ENGINE_FACTS:
            written.setdefault(f"an engine's {text}", []).append(path)
    assert written == {}


#: what an engine's module alone writes (forensics/engines/*.py): its config files, its state dirs, the
#: namespaces and the spec marker that name it
ENGINE_FACTS = {"/etc/docker/daemon.json", "/etc/crio/crio.conf", "/etc/crio/crio.conf.d", "/run/containerd",
                "/etc/containers/containers.conf", "/var/lib/containers/storage", "/run/containers/storage",
                "io.container.manager", "moby", "k8s.io", "/var/lib/docker"}


def test_an_engine_is_one_module_in_one_registry():
    """Every engine the registry lists is a module of forensics/engines holding one Engine; every floor
    names engines from that registry (the cgroup-driver decision's engines are the registry's)."""
    import forensics.engines as E
    from forensics.findings import cgroup_driver
    mods = sorted(p.stem for p in (PROJECT / "forensics" / "engines").glob("*.py") if p.stem not in ("__init__", "engine", "storage"))
    assert mods == sorted(E.ENGINES) == ["containerd", "crio", "docker", "podman", "runc"]
    assert cgroup_driver.ENGINES == tuple(E.ENGINES)
    assert E.engine_of_spec({"io.container.manager": "libpod", "io.kubernetes.cri-o.TTY": "false"}) == "podman"
    assert E.engine_of_spec({"io.kubernetes.cri-o.TTY": "false"}) is None      # no CRI-O sign by itself
    assert E.engine_of_labels(["bundle=/x", "io.container.manager=libpod"]) == "podman"
    for name, e in E.ENGINES.items():
        assert e.name == name and e.title and e.scope_prefix and e.cgroup_default and e.cgroup_setting


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


def test_bundle_json_is_the_one_way_readers_take_json_out_of_a_bundle(tmp_path):
    """Bundle.json on real files written by BundleWriter: an object, an array, bytes that do not parse,
    a nesting deeper than the parser takes, a file the manifest lists but that is gone, and one never
    written; each reader module that had its own helper now calls it (no json.loads of a bundle path)."""
    import re

    from forensics.bundle import Bundle, BundleWriter
    w = BundleWriter(tmp_path / "b")
    w.write_json("x/obj.json", {"a": 1}, source="test", method="write")
    w.write_json("x/list.json", [1, 2], source="test", method="write")
    w.write_bytes("x/bad.json", b'{"a": ', source="test", method="write")
    w.write_bytes("x/deep.json", b"[" * 200_000 + b"]" * 200_000, source="test", method="write")
    w.write_json("x/gone.json", {}, source="test", method="write")
    w.finish()
    b = Bundle.open(tmp_path / "b")
    (b.root / "x/gone.json").unlink()
    problems = []
    assert b.json("x/obj.json", problems) == {"a": 1}
    assert b.json("x/list.json", problems, list) == [1, 2] and b.json("x/list.json", None, None) == [1, 2]
    assert b.json("x/list.json", problems) is None                    # an array where an object is wanted
    assert b.json("x/bad.json", problems) is None
    assert b.json("x/deep.json", problems, None) is None              # RecursionError: unparsable, no crash
    assert b.json("x/gone.json", problems) is None and b.json("never.json", problems) is None
    assert [(p["artifact"], p["message"].split(":")[0]) for p in problems] == [
        ("x/list.json", "not a JSON object"), ("x/bad.json", "cannot read"), ("x/deep.json", "cannot read")]
    loose = re.compile(r"json\.loads?\((?:self\.)?bundle\.path\(")
    offenders = [str(p.relative_to(PROJECT)) for p in sorted((PROJECT / "collectors").rglob("*.py"))
                 if loose.search(p.read_text())]
    # the engines' settings files (JSON or TOML, forensics/engines Settings.fmt) go through one parser of
    # their own, runtime_config.engines._doc, which reads an empty daemon.json as no settings, as dockerd does
    assert offenders == []


def test_gap_sources_are_one_table_the_chart_reads_by_name():
    """Every coverage source a collector names is in forensics.events.GAP_SOURCES, and the chart's lanes
    and words are keyed by exactly those names (no substring guess: a source named ``apt-mirror`` or
    ``promtail`` limits no lane it does not name)."""
    import collectors.packages as packages
    from forensics.events import GAP_SOURCES
    from reports.styles import GAP_LANES, GAP_WORDING, gap_lanes
    given = {log.source for log in (packages.DPKG, packages.APT, packages.UU)}
    for p in sorted((PROJECT / "collectors").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Coverage" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                given.add(node.args[0].value)
    assert given == set(GAP_SOURCES)
    assert set(GAP_LANES) == set(GAP_SOURCES) and set(GAP_WORDING) <= set(GAP_SOURCES)
    assert gap_lanes("prometheus") == ("DCGM", "GPU capacity") and gap_lanes("kmsg") == ("kernel",)
    assert gap_lanes("boot") == () and gap_lanes("promtail") == () and gap_lanes("apt-mirror") == ()


def test_one_wording_of_the_eperm_class_for_journal_and_pod_logs():
    """The journal's NVML pass and the pod-log reader name the same lines, from forensics.neighbours'
    one table: the home case in both spellings, a bare "Failed to initialize NVML: Insufficient
    Permissions" (the journal counted it, pod logs did not), and never a neighbouring failure's line."""
    from collectors.journal.wording import nvml_error
    from collectors.podlogs import error_signature
    lines = {"Failed to initialize NVML: Unknown Error": "nvml-unknown-error",
             "time=... level=error msg=\"Failed to initialize NVML: ERROR_UNKNOWN\"":
                 "Failed to initialize NVML: ERROR_UNKNOWN",
             "Failed to initialize NVML: Insufficient Permissions": "nvml-init-failed",
             "cuInit failed: Unknown error": "cuinit-failed",
             "nvmlInit: NVML_ERROR_NO_PERMISSION": "NVML_ERROR_NO_PERMISSION",
             "Failed to initialize NVML: Driver/library version mismatch": None,
             "cuInit failed:100": None, "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected": None,
             "all good": None}
    for line, want in lines.items():
        assert error_signature(line.encode()) == want, line
        assert nvml_error(line) is (want is not None), line


def test_a_report_format_is_one_registry_line(tmp_path, monkeypatch):
    """The CLI's report flags, their default files and the ticket flavours come from reports/formats.py, and
    render.write_all writes whatever the registry lists: a format added there (its renderer named, nothing
    else changed) gets its flag and its file from ``analyze``."""
    import json

    from forensics.ops.cli import build_parser, main
    from reports import formats, ticket
    assert [(f.flag, f.file) for f in formats.FORMATS] == [("--html", "report.html"), ("--markdown", "report.md"),
                                                           ("--json", "analysis.json")]
    assert formats.FLAVORS == tuple(ticket._FLAVORS) == ("markdown", "jira")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    bundle = next(out.glob("bundle-*"))
    extra = formats.Format("verdicts", "verdicts.txt", "the verdicts, one a line", "test_one_home:verdict_lines",
                           "verdicts")
    monkeypatch.setattr(formats, "FORMATS", formats.FORMATS + (extra,))
    assert "write the verdicts, one a line here" in " ".join(build_parser().format_help().split()) or \
        "--verdicts" in build_parser()._subparsers._group_actions[0].choices["analyze"].format_help()
    assert main(["analyze", str(bundle), "--verdicts", str(tmp_path / "v.txt"), "--html", str(tmp_path / "r.html"),
                 "--markdown", str(tmp_path / "r.md"), "--json", str(tmp_path / "a.json")]) == 0
    a = json.loads((tmp_path / "a.json").read_text())
    assert (tmp_path / "v.txt").read_text().splitlines() == a["verdicts"]
    assert (bundle.parent / f"{bundle.name}-report").exists() is False   # every path was given: no default used


def verdict_lines(a: dict, flavor: str = "markdown"):
    """The renderer of the format the test above adds: the analysis's verdicts, one a line."""
    return (f"{v}\n" for v in a.get("verdicts") or [])


def required_literals(*patterns):
    """For each alternative of each pattern, its longest run of literal characters (read with CPython's own
    regex parser, ``re._parser``: only this test uses that private module), the texts deduplicated as
    ``collectors.journal.selection.covering`` does; None when an alternative has no run of 3 or more."""
    from re import _parser as sre

    def need(items):
        items = list(items)
        if len(items) == 1 and items[0][0] is sre.BRANCH:
            out = []
            for branch in items[0][1][1]:
                got = need(branch)
                if got is None:
                    return None
                out += got
            return out
        if len(items) == 1 and items[0][0] is sre.SUBPATTERN:
            return need(items[0][1][-1])
        best, run = "", ""
        for op, arg in items:
            run = run + chr(arg) if op is sre.LITERAL else ""
            best = max(best, run, key=len)
        return [best] if len(best) >= 3 else None
    out = []
    for p in patterns:
        got = need(sre.parse(p.pattern, p.flags))
        assert got is not None and not p.flags & __import__("re").IGNORECASE, p.pattern
        out += got
    return tuple(dict.fromkeys(out))


def test_the_wordings_texts_are_declared_beside_their_patterns_and_agree_with_them():
    """The texts a reader tests before a wording's regex are declared with the regexes (no product module
    reads the private regex parser); derived from the patterns again here, they are the same."""
    from collectors.journal import selection
    from forensics import kmsg, neighbours
    assert selection.covering(required_literals(neighbours.ANY)) == neighbours.TEXTS
    derived = selection.covering(required_literals(selection._NVML_PASS, neighbours.ANY))
    assert selection._NVML_TEXTS == derived + tuple(k for k in kmsg.TEXTS if k not in derived)
    for pkg in ("forensics", "collectors", "reports"):
        for p in sorted((PROJECT / pkg).rglob("*.py")):
            text = p.read_text()
            assert "re._parser" not in text and "import _parser" not in text and "sre_parse" not in text, p


def test_podman_the_engine_added_last_is_named_in_code_only_by_its_module():
    """No product code outside forensics/engines names Podman (or libpod) to branch on it: its discovery,
    settings, scope, spec marker, storage layout (Discovery.storage_bundle) and CDI steps are its module's;
    docstrings and comments may name it."""
    import ast
    named = set()
    for pkg in ("forensics", "collectors", "reports"):
        for p in sorted((PROJECT / pkg).rglob("*.py")):
            rel = str(p.relative_to(PROJECT))
            if rel.startswith("forensics/engines/"):
                continue
            tree = ast.parse(p.read_text())
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                    and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            named |= {rel for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in docs
                      and isinstance(n.value, str) and n.value.lower() in ("podman", "libpod")}
    assert named == set()
