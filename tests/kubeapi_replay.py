"""A loopback Kubernetes API server that replays answers, for kubectl gpu-forensics' tests.

Plain HTTP on 127.0.0.1 (the official client is pointed at it with a kubeconfig written by
:func:`kubeconfig`), or HTTPS with ``tls=`` a folder made by :func:`tls_files` (a throw-away CA and a
server certificate for 127.0.0.1, as an API server's serving certificate has its service IP as a SAN). Each route is ``"METHOD /path"`` (no query) with a list of answers served in
turn, the last one repeated; an answer is ``(HTTP status, body)`` where the body is a dict (JSON), a
path of a fixture file (tests/fixtures/kubectl/, JSON in the API's shapes: Node, Job, PodList,
``Status``), bytes (``text/plain``, as ``pods/log`` answers) or a callable of the request giving
such a pair. A route not listed is a 404 ``Status``, as the API server's. Every request is kept in
``requests`` (method, path, query as a dict of lists, parsed JSON body, the ``Authorization`` header).

``pods/exec`` is the websocket upgrade the API server speaks (RFC 6455 handshake; subprotocol
``v4.channel.k8s.io`` chosen from the client's offer by default): frames of one channel byte then data,
server frames unmasked (``v5.channel.k8s.io``, what API servers 1.30+ choose, with ``protocol=``;
the server side frames the same); first an empty frame per channel (1, 2, 3) as the API server's stream
opens them, then stdout (1) and stderr (2) in frames of at most 32 KiB, then the exec's ``Status``
on channel 3 (``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the exit code in
``details.causes``; k8s.io/apimachinery remotecommand), then a close frame. What the command
prints comes from ``exec_handler(command list) -> (stdout, stderr, exit code)`` (stdout and stderr
bytes, or iterables of bytes: a flood that is never held whole); the commands of execs the client
cut short (it closed the socket while they were sent) are in ``cut``; an ``exec`` route
in ``routes`` refuses the upgrade with its answer instead (e.g. a 403 ``Status``).
"""
from __future__ import annotations

import base64
import hashlib
import http.server
import json
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kubectl"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
FRAME = 32 << 10


def fixture(name: str) -> dict:
    """A fixture file (tests/fixtures/kubectl/NAME) parsed."""
    return json.loads((FIXTURES / name).read_text())


def not_found(path: str) -> tuple[int, dict]:
    """The API server's 404 ``Status`` for a path it does not serve."""
    return 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": "the server could not find the requested resource", "reason": "NotFound",
                 "details": {}, "code": 404}


def ws_frame(payload: bytes, opcode: int = 2) -> bytes:
    """One final, unmasked websocket frame (RFC 6455 5.2)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + n.to_bytes(2, "big")
    else:
        head += bytes([127]) + n.to_bytes(8, "big")
    return head + payload


def _pieces(data):
    """``data`` (bytes, or an iterable of bytes for an output too big to hold) in frames of at most FRAME bytes."""
    for block in ([data] if isinstance(data, bytes) else data):
        for i in range(0, len(block), FRAME):
            yield block[i:i + FRAME]


def exec_status(command: list[str], code: int) -> dict:
    """The ``Status`` the API server sends on channel 3 when an exec ends."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command {command}, exit code {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class Replay:
    """The server; use as a context manager. ``url`` is its base URL."""

    def __init__(self, routes: dict, exec_handler=None, protocol: str = "v4.channel.k8s.io", tls: Path | None = None):
        self.routes, self.protocol = {k: list(v) for k, v in routes.items()}, protocol
        self.exec_handler, self.requests, self.hits, self.cut = exec_handler, [], {}, []
        replay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _serve(self, method):
                u = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                req = {"method": method, "path": u.path, "query": parse_qs(u.query), "body": json.loads(raw) if raw else None,
                       "authorization": self.headers.get("Authorization")}
                replay.requests.append(req)
                key = f"{method} {u.path}"
                if self.headers.get("Upgrade", "").lower() == "websocket" and key not in replay.routes:
                    return self._exec(req)
                status, body = replay.answer(key, req)
                data, ctype = (body, "text/plain") if isinstance(body, bytes) else (json.dumps(body).encode(), "application/json")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _exec(self, req):
                offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
                key = self.headers["Sec-WebSocket-Key"]
                accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
                self.send_response(101, "Switching Protocols")
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                if replay.protocol in offered:
                    self.send_header("Sec-WebSocket-Protocol", replay.protocol)
                self.end_headers()
                self.close_connection = True
                command = req["query"].get("command") or []
                out, err, code = replay.exec_handler(command)
                w = self.wfile
                try:
                    for ch in (1, 2, 3):
                        w.write(ws_frame(bytes([ch])))
                    for ch, data in ((1, out), (2, err)):
                        for piece in _pieces(data):
                            w.write(ws_frame(bytes([ch]) + piece))
                    w.write(ws_frame(b"\x03" + json.dumps(exec_status(command, code)).encode()))
                    w.write(ws_frame((1000).to_bytes(2, "big"), opcode=8))
                    w.flush()
                except OSError:  # the client went away (it refused what came)
                    replay.cut.append(command)
                    return
                self.connection.settimeout(2)
                try:  # the client's close frame, then the end
                    self.connection.recv(64)
                except OSError:
                    pass

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_DELETE(self):
                self._serve("DELETE")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        if tls:
            self.url = "https" + self.url[4:]
            serve_tls(self.server, tls)

    def answer(self, key: str, req: dict) -> tuple[int, object]:
        """The next answer of route ``key`` (the last one repeats), fixture files read, callables called."""
        answers = self.routes.get(key)
        if not answers:
            return not_found(req["path"])
        i = self.hits.get(key, 0)
        self.hits[key] = i + 1
        status, body = answers[min(i, len(answers) - 1)]
        if callable(body):
            status, body = body(req)
        if isinstance(body, str):
            body = fixture(body)
        return status, body

    def seen(self, method: str, path: str) -> list[dict]:
        """The requests made with ``method`` to ``path``."""
        return [r for r in self.requests if r["method"] == method and r["path"] == path]

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def kubeconfig(path: Path, url: str, user: str = "alice@example.com") -> Path:
    """A kubeconfig for ``url`` with a bearer token (the client sends it; the server ignores it)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "replay",
        "clusters": [{"name": "replay", "cluster": {"server": url}}],
        "users": [{"name": user, "user": {"token": "replay-token"}}],
        "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": user}}]}))
    return path


def free_port_closed() -> int:
    """A loopback port nobody listens on (for the unreachable-API case)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


CA_EXT = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\n"
SERVER_EXT = ("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
              "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")


def tls_files(folder: Path) -> Path:
    """``folder`` with a throw-away CA (``ca.crt``, ``ca.key``) and a serving certificate for IP
    127.0.0.1 signed by it (``server.crt``, ``server.key``), P-256 keys, valid two days, made by the
    ``openssl`` command (``req`` and ``x509 -req``; extensions as a CA and a TLS server need them for
    Python's and urllib3's verification). Raises ``subprocess.CalledProcessError``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.ext").write_text(CA_EXT)
    (folder / "server.ext").write_text(SERVER_EXT)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", *key, "-keyout", "ca.key", "-out", "ca.csr", "-subj", "/CN=replay-ca")
    openssl("x509", "-req", "-in", "ca.csr", "-signkey", "ca.key", "-days", "2", "-extfile", "ca.ext", "-out", "ca.crt")
    openssl("req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "server.ext", "-out", "server.crt")
    return folder


def serve_tls(server: http.server.HTTPServer, folder: Path) -> None:
    """Make ``server`` (bound, not yet serving) answer TLS with ``folder``'s ``server.crt`` / ``server.key``
    (:func:`tls_files`)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(folder / "server.crt", folder / "server.key")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)


def service_account(folder: Path, ca: Path, token: str, namespace: str = "gpu-forensics") -> Path:
    """``folder`` laid out as the kubelet mounts a pod's ServiceAccount volume
    (/var/run/secrets/kubernetes.io/serviceaccount: ``token``, ``ca.crt``, ``namespace``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_bytes(ca.read_bytes())
    (folder / "namespace").write_text(namespace)
    return folder
