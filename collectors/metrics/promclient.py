"""A small Prometheus HTTP API client for evidence collection: every answer goes into the bundle.

- Each call has a timeout, and all calls together share one time budget (seconds, wall clock); a
  call that would outlive the budget is abandoned and recorded as an ``error`` artifact.
- Credentials: a bearer token or ``Basic user:password`` read from an environment variable or a
  file, or user:password in the URL. They are sent, never written: URLs in the manifest are redacted.
- Every raw answer (JSON or text, also error bodies) is stored under ``metrics/NNN-<slug>.<ext>``
  with the request in the manifest notes; ``metrics/index.json`` lists the calls in order with what
  each was for, so that ``read()`` finds answers without re-deriving any query.
- ``file://DIR`` serves answers recorded earlier (a ``metrics/`` directory, with its ``index.json``)
  through the same code path: the demo needs no server, and ``samples/record_prometheus.py`` records
  them from a real one.

It also holds what both collecting and reading need from stored answers: reading them back
(:func:`stored_result`), retention and durations, and the PromQL text the collector writes
(:func:`stats_expr`); the change-point walk is :mod:`collectors.metrics.changes`.

API reference: prometheus/prometheus docs/querying/api.md (response envelope ``{"status": "success"|
"error", "data": …, "errorType", "error"}``).
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from forensics.artifact import Artifact, Status
from forensics.neterror import network_error
from forensics.redact import redact_message, redact_url, scrub, url_secrets

METHOD = "prometheus-api"
MAX_BYTES = 64 << 20


class PrometheusError(Exception):
    """An answer that is not a successful API response (HTTP error, ``status: error``, bad JSON). Its
    text goes through :func:`forensics.redact.redact_message` (requests and urllib3 put the URL, or its
    path and query, in theirs), so it can be stored and printed."""

    def __init__(self, message: str = ""):
        super().__init__(redact_message(str(message)))


class Unreachable(PrometheusError):
    """No answer at all (connection refused, timeout, budget spent); later calls are not attempted
    when nothing has answered yet."""


class BudgetSpent(Unreachable):
    """The total time budget is spent: no further call is attempted."""


def read_credential(env: str | None, path: str | None) -> str | None:
    """The credential text from environment variable ``env`` or file ``path`` (first wins), stripped.
    Raises ``OSError`` when the file cannot be read and ``KeyError`` when the variable is unset."""
    if env:
        return os.environ[env].strip()
    if path:
        return Path(path).read_text().strip()
    return None


def auth_for(credential: str | None, url: str):
    """``(headers, auth)`` for requests: ``Basic user:password`` -> HTTP basic auth; ``Bearer X`` or a
    bare token -> ``Authorization: Bearer``; none -> user:password from the URL, if any."""
    if credential:
        if credential.lower().startswith("basic "):
            user, _, pw = credential[6:].strip().partition(":")
            return {}, (user, pw)
        token = credential[7:].strip() if credential.lower().startswith("bearer ") else credential
        return {"Authorization": f"Bearer {token}"}, None
    p = urlsplit(url)
    if p.username:
        return {}, (p.username, p.password or "")
    return {}, None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:48] or "call"


def _pairs(params) -> list[tuple[str, str]]:
    """Params as ``(name, value)`` pairs; a list value repeats the name (``match[]``)."""
    out = []
    for k, v in (params.items() if isinstance(params, dict) else params or ()):
        out.extend((k, str(x)) for x in v) if isinstance(v, (list, tuple)) else out.append((k, str(v)))
    return out


def request_key(path: str, params) -> str:
    """The stable text that identifies a call: ``/api/v1/query?query=…&time=…`` (params sorted)."""
    pairs = sorted(_pairs(params))
    return path + ("?" + urlencode(pairs) if pairs else "")


class PromClient:
    """Calls one Prometheus (or a recorded ``file://`` directory) and stores every answer in ``writer``.

    ``timeout`` is per call (seconds); ``budget`` is the total for all calls (seconds). ``ca`` is a CA
    bundle path for TLS verification. Raises ``OSError``/``KeyError`` from :func:`read_credential`.
    """

    def __init__(self, base: str, writer, *, credential: str | None = None, ca: str | None = None,
                 timeout: float = 15.0, budget: float = 60.0, log=lambda m: None):
        self.base, self.writer, self.timeout, self.log = base.rstrip("/"), writer, timeout, log
        parts = urlsplit(self.base)  # user:password travel in session.auth only, never in a URL or message
        self.secrets = url_secrets(self.base)  # and are scrubbed from the messages kept (with the query's)
        self.fetch_base = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self.deadline = time.monotonic() + budget
        self.entries: list[dict] = []
        self.answered = 0
        self.unreachable: str | None = None
        self.recorded: dict | None = None
        if base.startswith("file://"):
            self.dir = Path(base[7:])
            self.recorded = json.loads((self.dir / "index.json").read_text())
            self.by_key = {e["request"]: e for e in self.recorded["calls"] if e.get("file")}
        else:
            import requests  # here, not at the top: analyze reads stored answers through this module
            self.session = requests.Session()
            self.session.headers["Accept-Encoding"] = "identity"
            self.session.headers.update(auth_for(credential, base)[0])
            self.session.auth = auth_for(credential, base)[1]
            self.session.verify = ca or True
            self.session.trust_env = False

    # -- transport ---------------------------------------------------------------------------
    def _fetch_live(self, url: str, params: dict | None) -> tuple[int, bytes, bool]:
        """``(http status, body, truncated)``; raises Unreachable on no answer within the limits."""
        remaining = self.deadline - time.monotonic()
        if remaining < 0.5:
            raise BudgetSpent("the total time budget was spent before this call")
        limit = min(self.timeout, remaining)
        result: dict = {}
        import requests

        def run():
            try:
                with self.session.get(url, params=params, timeout=(min(5.0, limit), limit), stream=True) as r:
                    result["ok"] = (r.status_code, *read_capped(r, time.monotonic() + limit))
            except requests.RequestException as e:
                result["err"] = e

        t = threading.Thread(target=run, daemon=True)  # abandoned when it outlives the limit
        t.start()
        t.join(limit + 0.5)
        if "ok" in result:
            return result["ok"]
        if "err" in result:
            raise Unreachable(scrub(network_error(result["err"], url, limit), self.secrets))
        if limit < self.timeout:
            raise BudgetSpent(f"no complete answer within the {limit:.1f} s left of the time budget")
        raise Unreachable(f"no complete answer within {limit:.1f} s")

    def _fetch_recorded(self, key: str) -> tuple[int, bytes, bool]:
        e = self.by_key.get(key)
        if e is None:
            raise Unreachable(f"not among the recorded answers in {self.dir}: {key}")
        return e.get("http_status") or 200, (self.dir / Path(e["file"]).name).read_bytes(), False

    # -- calls -------------------------------------------------------------------------------
    def call(self, path: str, params=None, purpose: str = "", parse: str = "json", role: str = "",
             args: dict | None = None):
        """GET ``path`` with ``params``, store the raw answer, and return the parsed data.

        ``parse="json"`` returns the API envelope's ``data``; ``parse="text"`` returns the body as str.
        ``role`` and ``args`` are kept in ``metrics/index.json`` so that ``read()`` finds this answer.
        Raises :class:`PrometheusError` for an error answer (stored, with its message) and
        :class:`Unreachable` when there was no answer (recorded as an error artifact without a file).
        """
        key = request_key(path, params)
        entry = {"n": len(self.entries) + 1, "request": key, "purpose": purpose, "role": role,
                 "args": args or {}}
        self.entries.append(entry)
        source = redact_url(self.base) + key
        if self.recorded:
            e = self.by_key.get(key)
            source = f"file://{self.dir / Path(e['file']).name}" if e else f"{self.base} {key}"
        if self.unreachable:
            entry["error"] = f"not attempted: {self.unreachable}"
            return self._fail(entry, source, Unreachable(entry["error"]))
        started = time.monotonic()
        try:
            status, body, truncated = (self._fetch_recorded(key) if self.recorded
                                       else self._fetch_live(self.fetch_base + path, _pairs(params)))
        except Unreachable as e:
            if not self.answered or isinstance(e, BudgetSpent):
                self.unreachable = f"{redact_url(self.base)}: {e}"
            entry["error"] = str(e)
            return self._fail(entry, source, e)
        self.answered += 1
        entry.update(http_status=status, elapsed_s=round(time.monotonic() - started, 3))
        ext = "json" if parse == "json" else "txt"
        entry["file"] = f"metrics/{entry['n']:03d}-{_slug(purpose or path)}.{ext}"
        err = None
        data = None
        try:
            data = self._parse(status, body, parse, truncated)
        except PrometheusError as e:
            err = e
            entry["error"] = str(e)
        self._store(entry, source, body, err, truncated)
        if err:
            raise err
        return data

    @staticmethod
    def _parse(status: int, body: bytes, parse: str, truncated: bool):
        if truncated:
            raise PrometheusError(f"answer larger than {MAX_BYTES} bytes; only the start was kept")
        if parse == "text":
            if status != 200:
                raise PrometheusError(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
            return body.decode("utf-8", "replace")
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(f"HTTP {status}: not JSON: {body[:200].decode('utf-8', 'replace')!r}") from None
        if status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
            et = doc.get("errorType") if isinstance(doc, dict) else None
            msg = doc.get("error") if isinstance(doc, dict) else None
            raise PrometheusError(f"HTTP {status}: {et or 'error'}: {msg or body[:200].decode('utf-8', 'replace')}")
        return doc.get("data")

    def _store(self, entry: dict, source: str, body: bytes, err, truncated: bool) -> None:
        path, _, query = entry["request"].partition("?")
        notes = [f"GET {path}", *(f"{k}={v}" for k, v in parse_qsl(query)),
                 f"for: {entry['purpose']}", f"HTTP {entry['http_status']}", f"{entry['elapsed_s']} s"]
        if self.recorded:
            notes.append(f"recorded answer: {self.recorded.get('recorded_by') or self.recorded.get('source')}")
        if truncated:
            notes.append(f"truncated: only the first {MAX_BYTES} bytes were kept")
        method = METHOD + (" (recorded answers)" if self.recorded else "")
        try:
            with self.writer.create(entry["file"], source, method, notes, text=False) as f:
                f.write(body)
                if err:
                    raise err
        except PrometheusError:
            pass

    def _fail(self, entry: dict, source: str, exc: Exception):
        method = METHOD + (" (recorded answers)" if self.recorded else "")
        path, _, query = entry["request"].partition("?")
        self.writer.record(Artifact(None, source, Status.ERROR, method, message=entry["error"],
                                    notes=(f"GET {path}", *(f"{k}={v}" for k, v in parse_qsl(query)),
                                           f"for: {entry['purpose']}")))
        raise exc

    def now(self) -> float:
        """The server's current time (unix seconds, from ``query=time()``); in ``file://`` mode the time
        recorded with the answers, so that every later call asks exactly what was recorded."""
        data = self.call("/api/v1/query", {"query": "time()"}, "server clock", role="clock")
        return float(data["result"][0])

    def index(self, extra: dict) -> dict:
        """The ``metrics/index.json`` document: ``extra`` (now, node, window, …) plus ``calls``."""
        return {**extra, "source": redact_url(self.base) if not self.recorded else self.recorded.get("source"),
                "calls": self.entries}


def read_capped(r, deadline: float) -> tuple[bytes, bool]:
    """``(body, truncated)`` of the streamed answer ``r``: at most :data:`MAX_BYTES`, whatever the
    server announced; raises ``TimeoutError`` once ``deadline`` (``time.monotonic()``) passes with the
    answer still coming (a server that trickles a byte at a time never ends a read timeout)."""
    body = bytearray()
    while chunk := r.raw.read1(65536, decode_content=True):  # what has come, not 64 KiB of a trickle
        body += chunk
        if len(body) > MAX_BYTES:
            return bytes(body[:MAX_BYTES]), True
        if time.monotonic() > deadline:
            raise TimeoutError(f"answer not complete after {len(body)} bytes")
    return bytes(body), False


def fetch_text(url: str, writer, rel: str, *, ca: str | None = None, timeout: float = 10.0) -> str:
    """GET ``url`` once (dcgm-exporter ``/metrics``, Prometheus text exposition format) and store the
    body at ``rel``; ``file://PATH`` reads a recorded copy. Returns the text. Raises
    :class:`PrometheusError` when there is no 200 answer: recorded as an ``error`` artifact (keeping
    the body when there was one)."""
    import requests
    src = url if url.startswith("file://") else redact_url(url)
    try:
        if url.startswith("file://"):
            body, status = Path(url[7:]).read_bytes(), 200
        else:
            p = urlsplit(url)
            with requests.get(urlunsplit(p._replace(netloc=p.netloc.rpartition("@")[2])), verify=ca or True,
                              auth=(p.username, p.password or "") if p.username else None,
                              timeout=(min(5.0, timeout), timeout), stream=True) as r:
                (body, _), status = read_capped(r, time.monotonic() + timeout), r.status_code
    except (requests.RequestException, OSError) as e:
        said = scrub(network_error(e, url, timeout) if isinstance(e, (requests.RequestException, TimeoutError))
                     else f"{type(e).__name__}: {e}", url_secrets(url))
        writer.record(Artifact(None, src, Status.ERROR, "http-get", message=said))
        raise PrometheusError(said) from None
    with writer.create(rel, src, "http-get", [f"HTTP {status}"], text=False) as f:
        f.write(body)
        if status != 200:  # recorded as an error artifact that keeps the body, and raised
            raise PrometheusError(f"HTTP {status}")
    return body.decode("utf-8", "replace")


# -- reading stored answers back (used while collecting, to decide the next call, and by read()) ---
UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def stored_data(root, entry: dict | None):
    """The ``data`` of a stored JSON answer listed in ``metrics/index.json`` (None when unreadable)."""
    try:
        return json.loads((Path(root) / entry["file"]).read_bytes())["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stored_result(root, entry: dict | None) -> list:
    """The ``data.result`` list (vector or matrix) of a stored answer; ``[]`` when unreadable."""
    d = stored_data(root, entry)
    return d.get("result") or [] if isinstance(d, dict) else []


def lowest_timestamp(text: str | None) -> float | None:
    """``prometheus_tsdb_lowest_timestamp_seconds`` (unix s) from Prometheus' own ``/metrics`` text
    (exposition format), or None. This is the oldest sample in any block, unlike ``/status/tsdb``."""
    m = re.search(r"^prometheus_tsdb_lowest_timestamp_seconds(?:\{[^}]*\})? (\S+)", text or "", re.M)
    try:
        v = float(m.group(1)) if m else None
    except ValueError:
        return None
    return v if v and v < 1e11 else None


def duration_seconds(text: str | None) -> float | None:
    """Seconds of the time part of a Prometheus duration or retention (``15d``, ``10y``, ``2h30m``,
    ``15d or 512MiB``); None when there is no time part or it is ``0s``."""
    m = re.search(r"\b((?:\d+(?:ms|[ywdhms]))+)\b", text or "")
    if not m:
        return None
    return sum(int(n) * UNITS[u] for n, u in re.findall(r"(\d+)(ms|[ywdhms])", m.group(1))) or None


# -- PromQL text and index entries ------------------------------------------------------------
def promql_str(v: str) -> str:
    """``v`` as a double-quoted PromQL string literal."""
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def stats_expr(metrics, selectors, window: int, step: int, stats=("last", "first")) -> str:
    """First/last sample time of each series: ``max|min_over_time(timestamp(M{sel})[window:step])``
    with a plain selector inside ``timestamp()`` (anything else gives the evaluation time), labelled
    with ``stat`` and ``metric`` *after* the subquery so that one answer holds several metrics."""
    fn = {"last": "max_over_time", "first": "min_over_time"}
    return " or ".join(f'label_replace(label_replace({fn[st]}(timestamp({m}{{{sel}}})[{window}s:{step}s]), '
                       f'"stat", "{st}", "", ""), "metric", "{m}", "", "")'
                       for m in metrics for sel in selectors for st in stats)


def last_samples(root, entries) -> dict[tuple, tuple[float, dict]]:
    """``{series: (last sample time in unix s, the index entry that showed it)}`` per DCGM series (its
    labels as sorted pairs, ``stat`` dropped) over every stored coarse and refine answer: each value
    is a real sample time, so the maximum is the last one found."""
    out: dict[tuple, tuple[float, dict]] = {}
    for e in entries:
        if e["role"] in ("dcgm-coarse", "dcgm-last-seen") and answered(e):
            for res in stored_result(root, e):
                if res["metric"].get("stat") == "last":
                    k = tuple(sorted((a, b) for a, b in res["metric"].items() if a != "stat"))
                    if float(res["value"][1]) >= out.get(k, (0.0, None))[0]:  # later (refined) answers win ties
                        out[k] = (float(res["value"][1]), e)
    return out


def selector_matches(matcher: str, labels: dict) -> bool:
    """Whether ``labels`` satisfy one ``name="v"`` or ``name=~`re` `` matcher written by the collector."""
    name, op, val = re.match(r"(\w+)(=~|=)(.*)", matcher).groups()
    if op == "=":
        return labels.get(name) == val[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return re.fullmatch(val.strip("`"), labels.get(name, "")) is not None


def answered(e: dict | None) -> bool:
    """The call got a stored, successful answer."""
    return bool(e and e.get("file") and not e.get("error"))


def evidence(entry) -> dict:
    """Evidence pointer: the stored answer and, for a PromQL call, its query text."""
    q = parse_qs(urlsplit(entry["request"]).query).get("query")
    return {"artifact": entry.get("file"), **({"query": q[0]} if q else {"request": entry["request"]})}
