"""Upload the evidence bundle archive and the report to a ticket or file drop (``--upload-url``).

Semantics follow sos report's ``--upload-url`` for HTTP(S) (sos/policies/distros/__init__.py,
``upload_https``): each file goes in its own request, either

- ``PUT``  (default): the raw bytes to ``URL/<file name>``, ``Content-Type: application/octet-stream``;
- ``POST``: a ``multipart/form-data`` body to ``URL`` itself, with one part named ``file`` that carries
  the file name, as sos does for its POST method.

A ``2xx`` answer is success. Connection errors, timeouts, ``5xx``, ``408`` and ``429`` are retried
with exponential backoff; any other answer (``3xx``, ``4xx``) is final. Of an answer's body only the
first :data:`ANSWER_BYTES` are read. Every request has a timeout per connect and per read, and the
whole upload an overall deadline. Redirects are not followed, so
neither the bytes nor the credentials go anywhere but the URL given.

The value of the ``Authorization`` header comes from an environment variable or a file. It is sent,
and never logged, returned, or put into an exception's text; the URL recorded has its user info and
its query values replaced by ``REDACTED`` (a presigned URL's signature is a credential too): the
URL policy of :mod:`forensics.redact` (:func:`forensics.redact.redact_url`, ``keep_names=True``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from .. import redact as rd
from ..neterror import network_error

log = logging.getLogger(__name__)

REDACTED = rd.WORD_MARK
#: answers worth another try: the server or a proxy is busy or failing, not refusing
RETRY_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))
ANSWER_BYTES = 4096  #: bytes of an answer's body read (its start is the error's text); the rest is not read


class UploadError(ValueError):
    """The upload cannot start: a bad URL or method, a missing file, or an auth header source that is
    unset, unreadable, or holds more than one line. The message never holds the secret."""


def upload(url: str, files: list[Path], *, method: str = "PUT", auth_header_env: str | None = None,
           auth_header_file: Path | None = None, auth_header_name: str = "Authorization", retries: int = 3,
           backoff: float = 1.0, timeout: float = 30, ca_bundle: Path | None = None,
           deadline_s: float | None = None) -> list[dict]:
    """Send each of ``files`` to ``url`` and return one record per file, in order:

    ``{"file": name, "url": destination with credentials redacted, "method": "PUT"|"POST",
    "size": bytes, "sha256": hex digest of the file as the upload began, "status": last HTTP status or None,
    "attempts": requests made, "ok": bool, "error": one line or None}``

    ``method``: ``PUT`` sends to ``url + "/" + name``; ``POST`` sends multipart to ``url``.
    ``auth_header_env`` names an environment variable, ``auth_header_file`` a file (its first line,
    stripped), whose value is sent as the ``auth_header_name`` header (e.g. ``Bearer abc``); give at
    most one. ``retries``: further tries after the first (so at most ``retries + 1`` requests per
    file), waiting ``backoff * 2**(n-1)`` seconds before try ``n + 1``. ``timeout``: seconds per
    connect and per read. ``ca_bundle``: a PEM file to verify the server's certificate with.
    ``deadline_s``: seconds for the whole upload, every file and retry together (``--upload-timeout``):
    a server that trickles one byte a second never trips the per-read ``timeout``, so the whole is
    bounded by a timer (``SIGALRM``, setitimer(2); in the main thread) that ends the request under
    way; that file and those not yet sent are recorded as failed with the reason.

    A file that fails is recorded (``ok`` false, ``error`` set) and the others are still sent.
    Raises :class:`UploadError` before sending anything when the arguments cannot work.
    """
    method = method.upper()
    if method not in ("PUT", "POST"):
        raise UploadError(f"upload method must be PUT or POST, not {method!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = rd.redact_url(url, keep_names=True, mark=REDACTED)
        raise UploadError(f"upload URL must be http:// or https:// with a host: {shown}")
    paths = [Path(f) for f in files]
    for p in paths:
        if not p.is_file():
            raise UploadError(f"file to upload not found: {p}")
    secret = _auth_value(auth_header_env, auth_header_file)
    headers = {auth_header_name: secret} if secret else {}
    secrets = _secrets_of(url, secret)
    verify = str(ca_bundle) if ca_bundle else True
    out = []
    with requests.Session() as s, _overall(deadline_s):
        s.trust_env = False  # no ~/.netrc credentials or proxy settings picked up behind the user's back
        late = None
        for p in paths:
            dest = _put_url(parts, p.name) if method == "PUT" else url
            rec = {"file": p.name, "url": rd.redact_url(dest, keep_names=True, mark=REDACTED), "method": method,
                   "size": p.stat().st_size, "sha256": _sha256(p), "status": None, "attempts": 0, "ok": False, "error": None}
            out.append(rec)
            if late is None:
                try:
                    _send(s, rec, p, dest, headers, verify, retries, backoff, timeout, secrets)
                    continue
                except DeadlinePassed as e:
                    late = str(e)
            rec["error"] = late if rec["attempts"] else f"not sent: {late}"
    return out


class DeadlinePassed(Exception):
    """The upload's overall deadline (``deadline_s``) passed; raised by the timer inside a request."""


@contextmanager
def _overall(deadline_s: float | None):
    """Raise :class:`DeadlinePassed` wherever the upload stands once ``deadline_s`` seconds have gone."""
    if not deadline_s or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(_signum, _frame):
        raise DeadlinePassed(f"the upload's overall deadline of {deadline_s:g} s passed (--upload-timeout)")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, deadline_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _send(s, rec, path, dest, headers, verify, retries, backoff, timeout, secrets) -> None:
    # Not urllib3's Retry mounted on the session: it waits 0 s before the first retry (get_backoff_time),
    # obeys a server's Retry-After, and a final connection failure (MaxRetryError) no longer says how many
    # requests were made, nor each attempt's error: the record's "attempts" and the log need this loop.
    for attempt in range(1, retries + 2):
        rec["attempts"] = attempt
        retry = False
        try:
            with path.open("rb") as fh:
                if rec["method"] == "PUT":
                    r = s.put(dest, data=fh, timeout=timeout, verify=verify, allow_redirects=False, stream=True,
                              headers={**headers, "Content-Type": "application/octet-stream"})
                else:
                    r = s.post(dest, files={"file": (path.name, fh, "application/octet-stream")}, stream=True,
                               timeout=timeout, verify=verify, allow_redirects=False, headers=headers)
            rec["status"], text = r.status_code, _start_of(r)
            if 200 <= r.status_code < 300:
                rec["ok"], rec["error"] = True, None
                log.info("uploaded %s to %s: HTTP %s after %d attempt(s)", rec["file"], rec["url"],
                         r.status_code, attempt)
                return
            rec["error"] = _scrub(f"HTTP {r.status_code} {r.reason or ''}".strip() + (f": {text[:200]}" if text else ""),
                                  secrets)
            retry = r.status_code in RETRY_STATUS
        except (requests.ConnectionError, requests.Timeout) as e:
            rec["status"], rec["error"], retry = None, _scrub(network_error(e, dest, timeout), secrets), True
        except (requests.RequestException, OSError) as e:
            rec["status"], rec["error"] = None, _scrub(network_error(e, dest, timeout), secrets)
        log.warning("upload of %s to %s, attempt %d: %s", rec["file"], rec["url"], attempt, rec["error"])
        if not retry or attempt > retries:
            return
        time.sleep(backoff * 2 ** (attempt - 1))


def _start_of(r) -> str:
    """The first :data:`ANSWER_BYTES` of the answer ``r`` (``stream=True``) as text, the connection
    closed after: a server that answers with an endless body costs no memory and no time (before,
    ``r.text`` read it all, until the overall deadline)."""
    got = b""
    try:
        for piece in r.iter_content(1024):
            got += piece
            if len(got) >= ANSWER_BYTES:
                break
    except (requests.RequestException, OSError):
        pass
    finally:
        r.close()
    return got[:ANSWER_BYTES].decode(r.encoding or "utf-8", "replace")


def _put_url(parts, name: str) -> str:
    """``URL/<name>``: the name joins the path; any query (a signed URL's) stays at the end."""
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + quote(name), fragment=""))


def _auth_value(env: str | None, file: Path | None) -> str | None:
    if env and file:
        raise UploadError("give the auth header either from an environment variable or from a file, not both")
    if env:
        value = os.environ.get(env, "")
        if not value.strip():
            raise UploadError(f"environment variable {env} (auth header for the upload) is unset or empty")
        where = f"environment variable {env}"
    elif file:
        try:
            value = Path(file).read_text(encoding="utf-8").split("\n", 1)[0]
        except (OSError, UnicodeDecodeError) as e:
            raise UploadError(f"cannot read the auth header file {file}: {type(e).__name__}") from None
        where = f"auth header file {file}"
    else:
        return None
    value = value.strip()
    if not value or not value.isascii() or not value.isprintable():
        raise UploadError(f"{where} must hold one non-empty line of printable ASCII")
    return value


def _secrets_of(url: str, secret: str | None) -> list[str]:
    """Every string that must not appear in a record: the header value and its words, and what the
    URL policy hides in the URL (:func:`forensics.redact.url_secrets`)."""
    return rd.secret_parts(secret) + rd.url_secrets(url)


def _scrub(text: str, secrets: list[str]) -> str:
    return " ".join(rd.scrub(text, secrets, REDACTED).split())[:300]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
