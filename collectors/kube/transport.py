"""How :mod:`collectors.kube` asks the Kubernetes API server: with the standard library in a pod, with
the official client (``kubernetes``) from a kubeconfig.

In a pod (the kubelet sets ``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT`` and mounts the
ServiceAccount's projected volume at :data:`SERVICEACCOUNT`), :class:`InCluster` makes the GETs with
``http.client`` and ``ssl`` alone, because the node image (Debian's python3, scripts/build-image.sh)
and the single-file collector (scripts/build-collector.py) have no ``kubernetes`` package. It follows
the client's in-cluster loader (kubernetes/config/incluster_config.py: host
``https://<host>:<port>``, an IPv6 host in brackets, the volume's ``token`` and ``ca.crt``):

- TLS verified against ``ca.crt``, the server's certificate checked for the service host (an IP SAN);
- ``Authorization: Bearer <token>``, the token read from its file at every request (the kubelet
  rotates a projected token; the client re-reads it every minute) and never written anywhere;
- a connect timeout, a read timeout per receive and a deadline for the whole answer; at most
  ``limit`` bytes of an answer are read;
- redirects are not followed (``http.client`` follows none), so the token goes to no other host;
- the query is encoded as the client encodes it (``k=quote(v)`` joined by ``&``).

``http.client`` rather than ``urllib.request``: separate connect and read timeouts, as the client's
``(connect, read)`` pair, and no redirect handler that would forward the header.

Out of a pod, :class:`Client` wraps the client's ``ApiClient`` loaded from a kubeconfig. Both have
``host`` (the API server's URL, recorded in the bundle), ``secrets()`` (the credentials they send, to
be scrubbed from messages), ``get(path, query, timeout, limit)`` -> ``(HTTP status, reason, body
bytes)`` (raising for an API server not reached) and ``close()``.
"""
from __future__ import annotations

import http.client
import os
import ssl
import time
from pathlib import Path
from urllib.parse import quote

#: where the kubelet mounts the pod's ServiceAccount token, CA bundle and namespace
SERVICEACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
HOST_ENV, PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
TOKEN_MAX = 64 << 10              #: bytes of the token file read at most (a projected JWT is ~1 KiB)
CHUNK = 64 << 10
USER_AGENT = "gpu-forensics-collect (read-only)"


class ConfigError(Exception):
    """No usable way to the API server; the message says what is missing and what to do."""


def query_string(query: dict) -> str:
    """``k=quote(str(v))`` joined by ``&`` (as kubernetes ``ApiClient.parameters_to_url_query``);
    ``""`` for no query."""
    return "&".join(f"{k}={quote(str(v))}" for k, v in query.items())


def in_cluster_env(environ=os.environ) -> bool:
    """Whether the kubelet's service variables are set (non-empty): this process runs in a pod."""
    return bool(environ.get(HOST_ENV) and environ.get(PORT_ENV))


def connect(kubeconfig: str | None, environ=os.environ):
    """The transport for ``--kube``: :class:`InCluster` when no kubeconfig is named and this is a pod
    with its ServiceAccount token mounted; else :class:`Client` from ``kubeconfig`` (``None``: the
    client's default, ``$KUBECONFIG`` or ``~/.kube/config``). Raises :class:`ConfigError` when the
    client is needed and not installed, or a pod has no usable ServiceAccount files; the client's own
    ``ConfigException`` / ``OSError`` / YAML errors for a kubeconfig it cannot load."""
    pod = not kubeconfig and in_cluster_env(environ)
    missing = [n for n in ("token", "ca.crt") if not (SERVICEACCOUNT / n).is_file()] if pod else []
    if pod and not missing:
        return InCluster(environ[HOST_ENV], environ[PORT_ENV], SERVICEACCOUNT)
    try:
        from kubernetes import client
    except ImportError:
        if pod:
            raise ConfigError(f"in a pod ({HOST_ENV} is set) but {' and '.join(missing)} missing in {SERVICEACCOUNT} "
                              "(automountServiceAccountToken: false?): --kube needs the ServiceAccount "
                              "token mounted") from None
        what = f"--kubeconfig {kubeconfig}" if kubeconfig else f"not in a pod ({HOST_ENV} is not set)"
        raise ConfigError(f"no Kubernetes configuration: {what}; --kube needs in-cluster ServiceAccount "
                          "credentials (run in a pod), or the kubernetes Python client for a kubeconfig, "
                          "which is not installed (pip install 'gpu-forensics[kube]')") from None
    if not hasattr(client.ApiClient, "param_serialize"):  # Debian 12's python3-kubernetes is 22.6
        raise ConfigError(f"the kubernetes Python client here ({getattr(client, '__version__', '?')}) is older "
                          "than 29 (no ApiClient.param_serialize): pip install 'kubernetes>=29', or run in a pod")
    return Client(kubeconfig)


def _read_bounded(resp, limit: int, deadline: float) -> bytes:
    """At most ``limit + 1`` bytes of ``resp`` (one more says it was longer), by chunks; raises
    ``TimeoutError`` once ``deadline`` (``time.monotonic()``) passes."""
    parts, n = [], 0
    while n <= limit:
        if time.monotonic() > deadline:
            raise TimeoutError(f"answer not complete after {n} bytes (deadline passed)")
        chunk = resp.read(min(CHUNK, limit + 1 - n))
        if not chunk:
            break
        parts.append(chunk)
        n += len(chunk)
    return b"".join(parts)


class InCluster:
    """GETs with the pod's ServiceAccount over ``http.client`` (see the module's text).

    ``InCluster(host, port, sa_dir)``: ``ca.crt`` is loaded here (``ssl.SSLError`` / ``OSError``
    when it is not a PEM CA bundle); the token is read at each :meth:`get`."""

    def __init__(self, host: str, port: str, sa_dir: Path):
        self._addr, self._token_file = (host, int(port)), sa_dir / "token"
        self.host = "https://" + (f"[{host}]" if ":" in host or "%" in host else host) + f":{port}"
        self._tls = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
        self._tokens: list[str] = []

    def secrets(self) -> list[str]:
        """The tokens sent so far (to scrub from messages)."""
        return list(self._tokens)

    def _token(self) -> str:
        with open(self._token_file, "rb") as f:
            token = f.read(TOKEN_MAX).decode("ascii", "replace").strip()
        if not token:
            raise ConfigError(f"{self._token_file} is empty")
        if not (token.isascii() and token.isprintable()) or " " in token:  # never shown: it is the secret
            raise ConfigError(f"{self._token_file} holds characters a bearer token cannot have")
        if token not in self._tokens:
            self._tokens.append(token)
        return token

    def get(self, path: str, query: dict, timeout: tuple[float, float], limit: int) -> tuple[int, str, bytes]:
        """``GET path?query`` -> ``(status, reason, at most limit + 1 bytes of the body)``.
        ``timeout`` is ``(connect, read)`` seconds; the whole answer must arrive within
        ``connect + 3 * read``. Raises ``OSError`` (refused, TLS, timeouts), ``http.client.HTTPException``."""
        token = self._token()
        started = time.monotonic()
        conn = http.client.HTTPSConnection(*self._addr, timeout=timeout[0], context=self._tls)
        try:
            conn.connect()
            conn.sock.settimeout(timeout[1])
            url = path + ("?" + query_string(query) if query else "")
            conn.request("GET", url, headers={"Accept": "application/json", "User-Agent": USER_AGENT,
                                              "Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            data = _read_bounded(resp, limit, started + timeout[0] + 3 * timeout[1])
            return resp.status, resp.reason, data
        finally:
            conn.close()

    def close(self) -> None:
        """Nothing held between requests (one connection per request)."""


class Client:
    """GETs with the official client's ``ApiClient`` from ``kubeconfig`` (``None``: its default
    kubeconfig). Raises the client's ``ConfigException`` (or ``OSError``) when it cannot be loaded."""

    def __init__(self, kubeconfig: str | None):
        from kubernetes import client, config
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, client_configuration=cfg)
        cfg.retries = 1
        self.api, self.host = client.ApiClient(cfg), cfg.host

    def secrets(self) -> list[str]:
        """The credentials of the loaded configuration (``api_key`` values and their words)."""
        words = [w for v in self.api.configuration.api_key.values() if isinstance(v, str) for w in v.split()]
        return [w for w in words if w.lower() not in ("bearer", "basic")]

    def get(self, path: str, query: dict, timeout: tuple[float, float], limit: int) -> tuple[int, str, bytes]:
        """As :meth:`InCluster.get`, through ``param_serialize`` / ``call_api`` (urllib3; kubernetes>=29)."""
        method, url, headers, _, _ = self.api.param_serialize(
            "GET", path, query_params=list(query.items()), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"])
        resp = self.api.call_api(method, url, header_params=headers, _request_timeout=timeout)
        raw = resp.response  # urllib3's response, asked with preload_content=False
        data = raw.read(limit + 1)
        if len(data) > limit:
            raw.close()  # the rest is not read: the connection cannot go back to the pool
        else:
            raw.release_conn()
        return resp.status, resp.reason, data

    def close(self) -> None:
        """The client's connection pool closed."""
        self.api.close()
