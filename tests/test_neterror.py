"""What a failed network call is told in (forensics/neterror.py, issue 28): one plain sentence naming
the peer, from real failures of real calls with requests (the library the metrics collector and the
upload use): a closed port, a name that does not resolve (RFC 6761's ``.invalid``), a server that
accepts and never answers, and a TLS server whose certificate no CA here signed."""
from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from forensics.neterror import network_error, peer_of


def _failure(url, **kw):
    with pytest.raises(requests.RequestException) as e:
        requests.get(url, timeout=kw.pop("timeout", 2), **kw)
    return e.value


def test_a_closed_port_a_bad_name_and_a_silent_server_in_one_sentence_without_credentials():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"http://bob:s3cret@127.0.0.1:{port}/api/v1/query?query=up"
    assert network_error(_failure(url), url) == f"connection refused by 127.0.0.1:{port}"
    url = "http://prometheus.monitoring.invalid:9090"
    assert network_error(_failure(url), url).startswith("cannot resolve prometheus.monitoring.invalid (")
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        said = network_error(_failure(url, timeout=0.5), url, 0.5)
    assert said == f"no answer from {url[7:-1]} within 0.5 s"


def test_a_certificate_nobody_here_signed(tmp_path):
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def serve():
        try:
            conn, _ = srv.accept()
            with conn:
                ctx.wrap_socket(conn, server_side=True).close()
        except (OSError, ssl.SSLError):
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    url = f"https://127.0.0.1:{port}/metrics"
    said = network_error(_failure(url), url)
    srv.close()
    assert said == f"TLS with 127.0.0.1:{port} failed: certificate verify failed: self-signed certificate"


def test_the_peer_is_host_and_port_only():
    assert peer_of("https://u:p@[fd00::1]/x") == "[fd00::1]:443"
    assert peer_of("http://prom.monitoring:9090/p?token=x") == "prom.monitoring:9090"
    assert peer_of("http://[::1") == "the server"


def test_reading_a_bundle_imports_no_tls_or_http_library():
    """analyze reads no network: the collectors, this module and the CLI import neither ssl nor http.client
    (~5 MB with their libraries: issue 30); the Kubernetes client imports them where it connects."""
    code = ("import sys, collectors, forensics.neterror, forensics.ops.cli, forensics.ops.pipeline, reports.render; "
            "print(sorted(m for m in ('ssl', 'http.client', 'requests') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.strip()
    assert out == "[]"
