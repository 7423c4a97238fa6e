"""Secrets of issue 15 (items 17-19), planted in a real host root and looked for, byte for byte, in
what one ``gpu-forensics --verbose run`` leaves: the ``.tar.gz`` (compressed and not), every file of the
bundle, report.html, report.md, analysis.json, stdout, stderr, the log records and ``upload.json``.

17: containerd's config.toml with a password in an inline table, a multi-line ``Authorization = [...]``
header array and an ``X-JFrog-Art-Api`` header; the stored copy must parse and still give
``SystemdCgroup``. 18: a token in ``--prometheus`` / ``--dcgm-url`` query strings (both unreachable:
their errors embed the URL) and an OCI pre-authenticated upload URL (``/p/<token>/``, ``?sig=``) to a
loopback server that echoes the auth header lower-cased. 19: shapes users paste into pod logs and the
journal (AWS key ids, GitHub tokens, a PEM private key, JSON passwords, ``--token X``,
``Authorization: token X``, ``_CMDLINE``, ``password: X``, ``key = X``).
"""
from __future__ import annotations

import gzip
import json
import logging
import secrets
import string
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from journalbuild import build_journal, export_entry
from test_secrets import BOOT, MACHINE, T0, every_file, host, planted, unpack

from forensics.ops.cli import main

UP = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def ours(caplog) -> bytes:
    """The tool's own log records (urllib3's DEBUG request lines are the host application's to enable)."""
    return "\n".join(r.getMessage() for r in caplog.records
                     if r.name.split(".")[0] in ("forensics", "collectors", "reports")).encode()


def leaks_of(secret: dict, tmp_path, archive, reports, out, caplog, extra=()) -> list:
    places = {"archive (gzip bytes)": archive.read_bytes(), "archive (tar stream)": gzip.decompress(archive.read_bytes()),
              "stdout": out.out.encode(), "stderr": out.err.encode(), "log records": ours(caplog)}
    bundle = unpack(archive, tmp_path / "unpacked")
    places.update({f"bundle/{rel}": data for rel, data in every_file(bundle).items()})
    places.update({name: (reports / name).read_bytes() for name in ("report.html", "report.md", "analysis.json")})
    places.update({p.name: p.read_bytes() for p in extra})
    return bundle, [(name, what) for name, value in secret.items() for what, data in places.items()
                    if value.encode() in data]


def collect(tmp_path, root, *extra):
    out = tmp_path / "node.tar.gz"
    reports = tmp_path / "reports"
    rc = main(["--verbose", "run", "--root", str(root), "--out", str(out), *extra,
               "--html", str(reports / "report.html"), "--markdown", str(reports / "report.md"),
               "--json", str(reports / "analysis.json")])
    return rc, out, reports


def test_containerd_toml_inline_tables_and_header_arrays_are_redacted_and_still_parse(tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    s = {n: planted(n) for n in ("inline", "multi", "jfrog", "hosthdr")}
    root = host(tmp_path, {n: planted(n) for n in ("db", "ann", "regurl", "nvurl", "hook", "hookenv", "arg",
                                                   "bearer", "logurl", "jurl", "prom", "registry", "idtoken",
                                                   "mirror")})
    toml = root / "etc/containerd/config.toml"
    toml.write_text(toml.read_text() +
                    '[plugins."io.containerd.grpc.v1.cri".registry.configs."nvcr.io"]\n'
                    f'  auth = {{ username = "$oauthtoken", password = "{s["inline"]}" }}\n'
                    '[plugins."io.containerd.grpc.v1.cri".registry.headers]\n'
                    f'  Authorization = [\n    "Basic {s["multi"]}",\n  ]\n'
                    f'  X-JFrog-Art-Api = ["{s["jfrog"]}"]\n'
                    f'  X-Trace = ["kept-as-written"]\n')

    rc, archive, reports = collect(tmp_path, root)

    assert rc in (0, 1)
    bundle, leaks = leaks_of(s, tmp_path, archive, reports, capsys.readouterr(), caplog)
    assert leaks == []
    doc = tomllib.loads((bundle / "runtime/etc/containerd/config.toml").read_text())  # still TOML
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"]["configs"]["nvcr.io"]["auth"]["username"] == "$oauthtoken"
    assert cri["registry"]["configs"]["nvcr.io"]["auth"]["password"].startswith("<redacted hmac:")
    assert [h[:15] for h in cri["registry"]["headers"]["Authorization"]] == ["<redacted hmac:"]
    assert cri["registry"]["headers"]["X-Trace"] == ["kept-as-written"]
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    analysis = json.loads((reports / "analysis.json").read_text())
    assert analysis["exposure"]["systemd_cgroup"] is True  # read from the redacted copy
    manifest = json.loads((bundle / "manifest.json").read_text())
    [rec] = [a for a in manifest["artifacts"] if a.get("path") == "runtime/etc/containerd/config.toml"]
    assert any("written back as TOML" in n for n in rec["notes"])


class EchoDrop(ThreadingHTTPServer):
    """A file drop that refuses with 403 and echoes the request's auth header lower-cased."""

    def __init__(self):
        class H(BaseHTTPRequestHandler):
            def do_PUT(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                body = f"denied: {self.headers.get('Authorization', '')}".lower().encode()
                self.send_response(403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass
        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_url_tokens_stay_out_of_the_bundle_reports_output_and_upload_record(tmp_path, capsys, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    s = {"prom": "tok" + rand(20), "dcgm": "dt" + rand(20), "par": "PAR" + rand(30), "sig": "SIG" + rand(24),
         "auth": "AUTHHDR" + rand(16).upper()}
    root = host(tmp_path, {n: planted(n) for n in ("db", "ann", "regurl", "nvurl", "hook", "hookenv", "arg",
                                                   "bearer", "logurl", "jurl", "prom", "registry", "idtoken",
                                                   "mirror")})
    drop = EchoDrop()
    monkeypatch.setenv("DROP_AUTH", f"Bearer {s['auth']}")
    try:
        rc, archive, reports = collect(
            tmp_path, root, "--prometheus", f"http://127.0.0.1:9/prom?token={s['prom']}&x=1",
            "--dcgm-url", f"http://127.0.0.1:9/metrics?access_token={s['dcgm']}",
            "--upload-url", f"http://127.0.0.1:{drop.server_address[1]}/p/{s['par']}/n/ns/b/bkt/o/?sig={s['sig']}",
            "--upload-auth-env", "DROP_AUTH")
    finally:
        drop.shutdown()
    out = capsys.readouterr()
    assert "upload node.tar.gz: FAILED (HTTP 403" in out.out
    record = tmp_path / "node.tar.gz.upload.json"
    bundle, leaks = leaks_of(s, tmp_path, archive, reports, out, caplog, [record])
    assert leaks == []
    assert rc != 0
    up = json.loads(record.read_text())
    assert up[0]["error"] == "HTTP 403 Forbidden: denied: REDACTED"
    assert up[0]["url"].startswith(f"http://127.0.0.1:{drop.server_address[1]}/p/REDACTED/n/ns/b/bkt/o/")
    assert up[0]["url"].endswith("?sig=REDACTED")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "/p/<redacted>/n/ns/b/bkt/o/?sig=<redacted>" in manifest["command_line"]
    index = json.loads((bundle / "metrics/index.json").read_text())
    assert index["source"] == "http://127.0.0.1:9/prom?<redacted>"
    assert "Connection" in index["aborted"] or "refused" in index["aborted"]  # the error is kept, less the token


def test_pasted_secret_shapes_are_redacted_in_pod_logs_and_the_journal(tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    pem_body = "\n".join(rand(64, ALNUM + "+/") for _ in range(6))
    s = {"aws": "AKIA" + rand(16, UP), "ghp": "ghp_" + rand(36), "pat": "github_pat_11" + rand(20) + "_" + rand(59),
         "pem": pem_body.split("\n")[2], "json": "js" + rand(14), "flag": "fl" + rand(14), "gh_scheme": "gs" + rand(18),
         "colon": "co" + rand(14), "keyeq": "ke" + rand(14), "cmdline": "cm" + rand(14), "jaws": "ASIA" + rand(16, UP)}
    root = host(tmp_path, {n: planted(n) for n in ("db", "ann", "regurl", "nvurl", "hook", "hookenv", "arg",
                                                   "bearer", "logurl", "jurl", "prom", "registry", "idtoken",
                                                   "mirror")})
    log = root / "var/log/pods/ml_trainer-gpu-0_0f3e/main/0.log"
    ts = "2026-07-20T02:58:00Z stdout F "
    log.write_text(log.read_text() + "".join(ts + line + "\n" for line in [
        f"aws configured with {s['aws']}", f"cloning with {s['ghp']}", f"GH_TOKEN {s['pat']}",
        f'config: {{"user": "svc", "password": "{s["json"]}"}}', f"exec: /app --token {s['flag']} --epochs 3",
        f"GET /repos Authorization: token {s['gh_scheme']}", f"password: {s['colon']}", f"key = {s['keyeq']}",
        "-----BEGIN RSA PRIVATE KEY-----\n" + pem_body + "\n-----END RSA PRIVATE KEY-----",
        "training step 10 loss 0.25"]))
    at = int(T0.timestamp()) * 1_000_000 + 6_000_000
    build_journal(export_entry({
        "__REALTIME_TIMESTAMP": at, "__MONOTONIC_TIMESTAMP": 86_406_000_000, "_BOOT_ID": BOOT, "_MACHINE_ID": MACHINE,
        "_PID": 3300, "_COMM": "sync-agent", "SYSLOG_IDENTIFIER": "sync-agent", "_TRANSPORT": "stdout",
        "_CMDLINE": f"/usr/bin/sync-agent --token {s['cmdline']} --interval 30",
        "MESSAGE": f"NVRM: Xid (PCI:0000:3b:00): 79, pid=3300, GPU has fallen off the bus; using key {s['jaws']}"}),
        root / "var/log/journal" / MACHINE / "user-1000.journal")

    rc, archive, reports = collect(tmp_path, root)

    assert rc in (0, 1)
    bundle, leaks = leaks_of(s, tmp_path, archive, reports, capsys.readouterr(), caplog)
    assert leaks == []
    kept = (bundle / "podlogs/ml_trainer-gpu-0_0f3e/main/0.log").read_text()
    assert "training step 10 loss 0.25" in kept and "Failed to initialize NVML" in kept  # evidence kept
    assert "/app --token <redacted hmac:" in kept and "--epochs 3" in kept
    assert "-----BEGIN RSA PRIVATE KEY-----<redacted hmac:" in kept and "-----END RSA PRIVATE KEY-----" in kept
    entries = [json.loads(x) for x in (bundle / "journal/entries.jsonl").read_text().splitlines()]
    [agent] = [e for e in entries if e.get("_COMM") == "sync-agent"]
    assert agent["_CMDLINE"].startswith("/usr/bin/sync-agent --token <redacted hmac:")
    assert agent["_CMDLINE"].endswith("--interval 30")
    assert agent["MESSAGE"].startswith("NVRM: Xid (PCI:0000:3b:00): 79, pid=3300, GPU has fallen off the bus; "
                                       "using key <redacted hmac:")
