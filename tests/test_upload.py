"""Ticket upload against a real HTTP server on 127.0.0.1 that stores what it receives.

The server is http.server in a thread; the client is forensics.ops.upload over real sockets. What the
server stored is compared by SHA-256 with the files on disk, and the auth header is checked to reach
the server but no record, log line or exception text.
"""
from __future__ import annotations

import email.parser
import email.policy
import hashlib
import logging
import socket
import tarfile
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from forensics.ops.upload import UploadError, upload
from forensics.redact import WORD_MARK, redact_url
from loopback import RawServer

SECRET = "Bearer s3cr3t-T0KEN-4f9a2c"


class Drop(ThreadingHTTPServer):
    """A file drop: PUT /<dir>/<name> and multipart POST store bytes; ``fail_first`` answers 503."""
    daemon_threads = True

    def __init__(self, fail_first: int = 0, status: int = 201):
        super().__init__(("127.0.0.1", 0), Handler)
        self.stored: dict[str, bytes] = {}
        self.requests: list[dict] = []
        self.fail_first, self.status = fail_first, status

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self, body: bytes, store) -> None:
        srv: Drop = self.server
        srv.requests.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization")})
        if len(srv.requests) <= srv.fail_first:
            code = 503
        else:
            store()
            code = srv.status
        # echo the auth header back, as some debugging endpoints do: it must still not be recorded
        reply = f"auth was {self.headers.get('Authorization')}".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def do_PUT(self):
        body = self._body()
        self._answer(body, lambda: self.server.stored.__setitem__(self.path, body))

    def do_POST(self):
        body = self._body()
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)

        def store():
            for part in msg.iter_parts():
                self.server.stored[part.get_filename()] = part.get_payload(decode=True)
        self._answer(body, store)

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def drop(request):
    srv = Drop(**getattr(request, "param", {}))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def outputs(tmp_path) -> list[Path]:
    """A bundle archive (real tar.gz) and a report, as `run --upload-url` would send them."""
    bundle = tmp_path / "bundle-20260902T041000Z"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"node": "node3-gpu"}\n')
    (bundle / "journal.jsonl").write_bytes(bytes(range(256)) * 512)
    tgz = tmp_path / "bundle-20260902T041000Z.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(bundle, arcname=bundle.name)
    report = tmp_path / "report.html"
    report.write_text("<!DOCTYPE html><title>r</title><p>verdicts</p>\n", encoding="utf-8")
    return [tgz, report]


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_put_stores_each_file_under_the_url_and_the_hashes_match(drop, outputs, monkeypatch, caplog):
    monkeypatch.setenv("TICKET_AUTH", SECRET)
    caplog.set_level(logging.DEBUG)
    recs = upload(drop.url + "/case/4711", outputs, auth_header_env="TICKET_AUTH", backoff=0.01)
    assert [r["file"] for r in recs] == [p.name for p in outputs]
    for p, r in zip(outputs, recs):
        stored = drop.stored[f"/case/4711/{p.name}"]
        assert sha(stored) == sha(p.read_bytes()) == r["sha256"]
        assert (r["status"], r["attempts"], r["ok"], r["error"]) == (201, 1, True, None)
        assert r["url"] == f"{drop.url}/case/4711/{p.name}" and r["size"] == p.stat().st_size
    assert {q["auth"] for q in drop.requests} == {SECRET}  # it did arrive
    assert SECRET not in repr(recs) and "s3cr3t" not in caplog.text


def test_post_sends_multipart_like_sos(drop, outputs, tmp_path):
    auth = tmp_path / "auth"
    auth.write_text(SECRET + "\n")
    recs = upload(drop.url + "/upload", outputs, method="post", auth_header_file=auth, backoff=0.01)
    assert all(r["ok"] and r["url"] == drop.url + "/upload" for r in recs)
    for p in outputs:
        assert sha(drop.stored[p.name]) == sha(p.read_bytes())
    assert [q["auth"] for q in drop.requests] == [SECRET, SECRET]


@pytest.mark.parametrize("drop", [{"fail_first": 2}], indirect=True)
def test_a_server_that_fails_twice_with_503_gets_a_third_try(drop, outputs, monkeypatch, caplog):
    monkeypatch.setenv("TICKET_AUTH", SECRET)
    caplog.set_level(logging.DEBUG)
    recs = upload(drop.url, outputs[:1], auth_header_env="TICKET_AUTH", retries=3, backoff=0.01)
    assert (recs[0]["status"], recs[0]["attempts"], recs[0]["ok"], recs[0]["error"]) == (201, 3, True, None)
    assert sha(drop.stored["/" + outputs[0].name]) == recs[0]["sha256"]
    assert "attempt 2: HTTP 503" in caplog.text  # the retries are told, ...
    assert "s3cr3t" not in caplog.text  # ... though the server echoed the header in its 503 body


@pytest.mark.parametrize("drop", [{"fail_first": 99}], indirect=True)
def test_retries_run_out_and_the_error_is_recorded_without_the_secret(drop, outputs, monkeypatch):
    monkeypatch.setenv("TICKET_AUTH", SECRET)
    recs = upload(drop.url, outputs, auth_header_env="TICKET_AUTH", retries=2, backoff=0.01)
    for r in recs:
        assert (r["status"], r["attempts"], r["ok"]) == (503, 3, False)
        assert r["error"].startswith("HTTP 503") and "REDACTED" in r["error"] and "s3cr3t" not in r["error"]
    assert drop.stored == {}


@pytest.mark.parametrize("drop", [{"status": 403}], indirect=True)
def test_a_refusal_is_final(drop, outputs):
    recs = upload(drop.url, outputs[:1], retries=3, backoff=0.01)
    assert (recs[0]["status"], recs[0]["attempts"], recs[0]["ok"]) == (403, 1, False)


def test_connection_refused_is_retried_and_recorded(outputs, monkeypatch):
    with socket.socket() as s:  # a port that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TICKET_AUTH", SECRET)
    recs = upload(f"http://user:pw-{SECRET[-6:]}@127.0.0.1:{port}/x?sig=abcdef123", outputs[:1],
                  auth_header_env="TICKET_AUTH", retries=2, backoff=0.01, timeout=2)
    r = recs[0]
    assert (r["status"], r["attempts"], r["ok"]) == (None, 3, False)
    assert r["error"] == f"connection refused by 127.0.0.1:{port}"  # one plain sentence (issue 28), not urllib3's
    assert r["url"] == f"http://user:REDACTED@127.0.0.1:{port}/x/{outputs[0].name}?sig=REDACTED"
    assert SECRET[-6:] not in repr(r) and "abcdef123" not in repr(r) and "s3cr3t" not in repr(r)


def test_bad_arguments_fail_before_sending_and_never_show_the_secret(drop, outputs, tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE", raising=False)
    with pytest.raises(UploadError, match="NOPE"):
        upload(drop.url, outputs, auth_header_env="NOPE")
    two = tmp_path / "two-lines"
    two.write_text("Bearer a\x07b\n")
    with pytest.raises(UploadError, match="printable") as e:
        upload(drop.url, outputs, auth_header_file=two)
    assert "a\x07b" not in str(e.value)
    with pytest.raises(UploadError):
        upload("ftp://example.invalid/", outputs)
    with pytest.raises(UploadError):
        upload(drop.url, [tmp_path / "missing.tar.gz"])
    monkeypatch.setenv("TICKET_AUTH", SECRET)
    with pytest.raises(UploadError, match="not both") as e:
        upload(drop.url, outputs, auth_header_env="TICKET_AUTH", auth_header_file=two)
    assert SECRET not in str(e.value)
    assert drop.requests == []


def test_redact_url():
    def upload_form(url):  # the form upload records use
        return redact_url(url, keep_names=True, mark=WORD_MARK)
    assert upload_form("https://u:p@h.example:8443/a/b?X-Amz-Signature=zz&case=1") == \
        "https://u:REDACTED@h.example:8443/a/b?X-Amz-Signature=REDACTED&case=REDACTED"
    assert upload_form("https://tok@h.example/a") == "https://REDACTED@h.example/a"
    assert upload_form("http://h.example/a/b") == "http://h.example/a/b"


def test_run_with_upload_url_sends_the_real_bundle_and_reports(drop, tmp_path, monkeypatch, capsys):
    """`gpu-forensics run --upload-url` on the sample node: the server receives exactly the bytes."""
    import json as _json
    import sys as _sys
    from forensics.ops.cli import SAMPLE_ROOT, main
    _sys.path.insert(0, str(SAMPLE_ROOT.parent))
    import build
    build.ensure_journal()
    monkeypatch.setenv("TICKET_AUTH", "Bearer s3cr3t-upload-token")
    out = tmp_path / "node3.tar.gz"
    rc = main(["run", "--root", str(SAMPLE_ROOT), "--out", str(out), "--upload-url", drop.url + "/INC-42",
               "--upload-auth-env", "TICKET_AUTH"])
    assert rc == 0
    assert drop.stored["/INC-42/node3.tar.gz"] == out.read_bytes()
    report = tmp_path / "node3-report" / "report.html"
    assert drop.stored["/INC-42/report.html"] == report.read_bytes()
    assert {r["auth"] for r in drop.requests} == {"Bearer s3cr3t-upload-token"}
    side = tmp_path / "node3.tar.gz.upload.json"
    recs = _json.loads(side.read_text())
    assert [r["status"] for r in recs] == [201, 201, 201, 201] and all(r["ok"] for r in recs)
    text = side.read_text() + capsys.readouterr().out
    assert "s3cr3t" not in text


# -- hostile servers (issue 27): an endless answer, a server that reads a byte at a time ---------------
def _endless_400(srv, conn):
    """Read the request, then answer 400 with a chunked body that never ends (64 KiB chunks, as fast as
    the client takes them)."""
    conn.recv(1 << 20)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"no such ticket. " * 4096 + b"\r\n"
    while not srv.stop.is_set():
        conn.sendall(chunk)
        srv.bytes_sent[0] += len(chunk)


def test_an_answer_with_an_endless_body_is_read_to_its_start_only(outputs):
    """Before, the error's ``r.text`` read the body until the overall deadline, holding all of it
    (gigabytes at loopback speed); now its first 4 KiB are read, the connection closed, and the error
    says what the server said."""
    srv = RawServer(_endless_400)
    try:
        t0 = time.monotonic()
        recs = upload(srv.url + "/drop", outputs[:1], retries=0, timeout=5, deadline_s=60)
        took = time.monotonic() - t0
    finally:
        srv.close()
    r = recs[0]
    assert (r["status"], r["attempts"], r["ok"]) == (400, 1, False)
    assert r["error"].startswith("HTTP 400 Bad Request: no such ticket. no such ticket.")
    assert took < 10 and srv.bytes_sent[0] < 64 << 20, (took, srv.bytes_sent[0])


def _slow_reader(srv, conn):
    """Take the request a kilobyte a second (its socket buffer kept small): no read or write of the
    client ever waits past its timeout, only the overall deadline ends the upload."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    while not srv.stop.is_set():
        if not conn.recv(1024):
            return
        time.sleep(1)


def test_a_server_that_reads_the_upload_a_kilobyte_a_second_ends_at_the_deadline(tmp_path):
    big = tmp_path / "big.tar.gz"
    big.write_bytes(os.urandom(8 << 20))
    srv = RawServer(_slow_reader)
    try:
        t0 = time.monotonic()
        recs = upload(srv.url + "/drop", [big], retries=0, timeout=5, deadline_s=3)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert recs[0]["ok"] is False and "overall deadline of 3 s passed" in recs[0]["error"]
    assert 2.5 < took < 8
