"""What a failed network call is told in: one plain sentence naming the peer (host and port, never its
credentials), instead of the HTTP library's nested text (``HTTPConnectionPool(host=..., port=1): Max
retries exceeded with url: ... (Caused by NewConnectionError(...))``).

The cause is found by walking the exception's chain (``__cause__``, ``__context__``, and the exceptions
urllib3 keeps in ``args`` / ``reason``) for the operating system's error: ``socket.gaierror`` (name not
resolved), ``ConnectionRefusedError``, ``ConnectionResetError``, ``TimeoutError`` (and the libraries'
``*Timeout*`` classes), ``ssl.SSLError`` / ``ssl.SSLCertVerificationError``, and any other ``OSError``
by its errno. Used by every client the tool has: the metrics collector (Prometheus, dcgm-exporter),
the Kubernetes API reads and the upload.
"""
from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlsplit

#: how deep the chain of wrapped exceptions is followed (requests -> urllib3 -> socket: 4 or 5 levels)
MAX_CHAIN = 12


def peer_of(url: str) -> str:
    """``host:port`` of ``url`` (the scheme's port when none is written), without user info; the text
    ``the server`` when ``url`` cannot be read."""
    try:
        p = urlsplit(url)
        host, port = p.hostname, p.port or {"https": 443, "http": 80}.get(p.scheme)
    except ValueError:
        return "the server"
    if not host:
        return "the server"
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def _chain(exc: BaseException):
    seen, todo = set(), [exc]
    while todo and len(seen) < MAX_CHAIN:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        nxt = [e.__cause__, e.__context__, getattr(e, "reason", None)]
        nxt += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [n for n in nxt if isinstance(n, BaseException)]


def _timed_out(e: BaseException) -> bool:
    return isinstance(e, (TimeoutError, socket.timeout)) or "Timeout" in type(e).__name__


def network_error(exc: BaseException, url: str, timeout_s: float | None = None) -> str:
    """One sentence for ``exc`` raised by a call to ``url``: ``cannot resolve prom.monitoring (name or
    service not known)``, ``connection refused by 127.0.0.1:9090``, ``no answer from 10.0.0.5:9090
    within 10 s``, ``TLS with prom:443 failed: certificate verify failed: self-signed certificate``,
    ``connection to prom:9090 reset``, or ``cannot reach prom:9090: <errno text>``; ``cannot reach
    prom:9090 (<ExceptionName>: <its text>)`` when no cause is found; an exception that is not the
    network's (the tool's own ``ConfigError``) as ``<ExceptionName>: <its text>``. Texts are cut at 300
    characters; the caller scrubs what it sent from them. ``timeout_s`` (seconds) is said when given.
    The URL's credentials never appear (only host and port are named). Raises nothing."""
    peer = peer_of(url)
    host = peer.rsplit(":", 1)[0] if peer.count(":") == 1 or peer.startswith("[") else peer
    within = f" within {timeout_s:g} s" if timeout_s else ""
    found = list(_chain(exc))
    for e in found:
        if isinstance(e, socket.gaierror):
            return f"cannot resolve {host} ({(e.strerror or str(e)).lower()})"
    if any(type(e).__name__ == "NameResolutionError" for e in found):
        return f"cannot resolve {host}"
    # ssl is not imported here (~5 MB with its libraries, in every process that reads a bundle): an SSLError
    # comes only from a client that imported it
    ssl = sys.modules.get("ssl")
    for e in found:
        if ssl is not None and isinstance(e, ssl.SSLCertVerificationError):
            return f"TLS with {peer} failed: certificate verify failed: {e.verify_message or 'not trusted'}"
        if ssl is not None and isinstance(e, ssl.SSLError):
            return f"TLS with {peer} failed: {e.reason or type(e).__name__}"
        if isinstance(e, ConnectionRefusedError):
            return f"connection refused by {peer}"
        if isinstance(e, ConnectionResetError):
            return f"connection to {peer} reset by the peer"
        if _timed_out(e):
            own = str(e) if type(e) is TimeoutError and str(e) not in ("", "timed out") else ""  # ours: its words
            return f"no complete answer from {peer}{within}: {own}" if own else f"no answer from {peer}{within}"
    for e in found:
        if isinstance(e, OSError) and e.errno:
            return f"cannot reach {peer}: {os.strerror(e.errno).lower()}"
    text = " ".join(str(exc).split())[:300]
    if not isinstance(exc, OSError) and not type(exc).__module__.split(".")[0] in ("requests", "urllib3", "http"):
        return f"{type(exc).__name__}: {text}"  # not the network's: the tool's own refusal, as it said it
    return f"cannot reach {peer} ({type(exc).__name__}{': ' + text if text else ''})"
