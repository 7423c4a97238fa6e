"""The ``urls`` and ``known secrets`` rules of the redaction policy (:mod:`forensics.redact`, which
re-exports these names): how a URL is stored or printed, and how a value the tool itself holds (an
upload's auth header, its URL's secrets) is kept out of messages.

Pre-authenticated object-store URLs carry their credential in the query (S3 presigned
``X-Amz-Signature``, GCS ``X-Goog-Signature``, Azure SAS ``sig=``: every query value is hidden) or in
the path (OCI pre-authenticated requests, ``/p/<token>/n/...``: :data:`PATH_TOKEN`). Messages from
requests and urllib3 embed the URL, or only its path and query (``Max retries exceeded with url:
/api/v1/query?token=x``): :func:`redact_message` hides both forms.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import unquote_plus, urlsplit

MARK = "<redacted>"        #: what replaces URL credentials and query values in bundles and the manifest
WORD_MARK = "REDACTED"     #: the same in upload records and their log lines (``<>`` are not URL characters)
SCRUB_MIN = 4  #: a known secret's words and query values shorter than this are not scrubbed from text
#: ``scheme://authority path ?query #fragment`` as written (RFC 3986 section 3; the last ``@`` ends the
#: user info, as urlsplit takes it)
_URL_PARTS = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://(?P<auth>[^/?#]*)(?P<path>[^?#]*)"
                        r"(?:\?(?P<query>[^#]*))?(?:#(?P<frag>.*))?\Z", re.S)
#: a path segment that is a credential: OCI Object Storage pre-authenticated requests (``/p/<token>/``)
PATH_TOKEN = re.compile(r"(?<=/p/)[^/?#]+(?=/)")
#: query parameter names whose values are credentials, in a message that shows a query without its URL
QUERY_CRED_WORDS = ("token", "key", "sig", "password", "passwd", "secret", "auth", "credential", "x-amz-",
                    "x-goog-", "code")
_QUERY_CRED = re.compile(r"(?i)(?P<n>[?&;][\w.\-]*(?:" + "|".join(map(re.escape, QUERY_CRED_WORDS))
                         + r")[\w.\-]*=)(?!<redacted|REDACTED)(?P<v>[^&#\s'\"()]*)")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>()]+")


def redact_url(url: str, *, keep_names: bool = False, mark: str = MARK) -> str:
    """The one URL policy: ``url`` with its secrets replaced by ``mark``, everything else as written.

    ``keep_names=False`` (a source recorded in a bundle: ``--prometheus``, ``--dcgm-url``): the user info
    and the fragment are dropped and a query is replaced whole, ``https://bob:pw@prom:9090/p?token=x``
    -> ``https://prom:9090/p?<redacted>``. ``keep_names=True`` (the command line's URL arguments, an
    upload destination): the user name and the query names stay, the password, a user given without a
    password, every query value (and a query part without ``=``) and the fragment become ``mark``,
    ``https://u:p@h/a?X-Amz-Signature=zz`` -> ``https://u:<redacted>@h/a?X-Amz-Signature=<redacted>``.
    In both, a path token (:data:`PATH_TOKEN`, OCI's ``/p/<token>/``) becomes ``mark``.
    Text that is not ``scheme://...``, or whose port or IPv6 host urlsplit cannot read, comes back as
    ``mark``. Raises nothing."""
    m = _URL_PARTS.match(url) if isinstance(url, str) else None
    try:
        if m is None:
            return mark
        urlsplit(url).port  # a bad port or IPv6 literal: ValueError
    except ValueError:
        return mark
    scheme = url[:url.index("://") + 3]
    user, _, host = m["auth"].rpartition("@")
    path = PATH_TOKEN.sub(mark, m["path"])
    if not keep_names:
        return scheme + host + path + (f"?{mark}" if m["query"] else "")
    name, colon, _ = user.partition(":")
    userinfo = (f"{name}:{mark}@" if colon else f"{mark}@") if user else ""
    query = "&".join(p and (p.partition("=")[0] + "=" + mark if "=" in p else mark)
                     for p in m["query"].split("&")) if m["query"] is not None else None
    return (scheme + userinfo + host + path + ("" if query is None else "?" + query)
            + ("" if m["frag"] is None else "#" + mark))


def redact_message(text: str, mark: str = MARK) -> str:
    """A message (an exception's text, a log line) as it may be stored or printed: every
    ``scheme://...`` in it through :func:`redact_url` with ``keep_names=True``, and in a query shown
    without its URL the value of a parameter named with one of :data:`QUERY_CRED_WORDS`
    (``?token=``, ``&X-Amz-Signature=``, ``&sig=``). Linear in ``len(text)``; raises nothing."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0), keep_names=True, mark=mark), text)
    return hide_url_secrets(text, lambda _: mark)


def hide_url_secrets(text: str, hide: Callable[[str], str]) -> str:
    """The URL-in-text rule, the one every redaction of free text applies (bundles' logs and command
    lines through :func:`forensics.redact.redact_text`, which hides with a keyed hash; messages through
    :func:`redact_message`, which hides with the mark): an object-store path token
    (:data:`PATH_TOKEN`) of a URL, and anywhere the value of a query parameter named with one of
    :data:`QUERY_CRED_WORDS` written after ``?``, ``&`` or ``;`` (``?token=``, ``&X-Amz-Signature=``,
    ``&sig=``), URL or not. ``hide`` maps a secret to its replacement. A value already redacted is
    left. Linear in ``len(text)``; raises nothing."""
    if "/p/" in text and "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: PATH_TOKEN.sub(lambda t: hide(t.group(0)), m.group(0)), text)
    if "=" in text and ("?" in text or "&" in text or ";" in text):
        text = _QUERY_CRED.sub(lambda m: m.group("n") + hide(m.group("v")), text)
    return text


def url_secrets(url: str) -> list[str]:
    """What :func:`redact_url` with ``keep_names=True`` hides in ``url``, to :func:`scrub` it from
    messages: the password (or a user without one), a path token, and the query values and fragment of at
    least :data:`SCRUB_MIN` characters, each as written and percent-decoded. ``[]`` for text that is not a
    URL. Raises nothing."""
    m = _URL_PARTS.match(url) if isinstance(url, str) else None
    if m is None:
        return []
    user = m["auth"].rpartition("@")[0]
    name, colon, password = user.partition(":")
    out = [password if colon else name] if user else []
    parts = [p.partition("=")[2] if "=" in p else p for p in (m["query"] or "").split("&")] + [m["frag"] or ""]
    parts += PATH_TOKEN.findall(m["path"])
    return [v for v in out if v] + [v for p in parts for v in {p, unquote_plus(p)} if len(v) >= SCRUB_MIN]


def secret_parts(value: str) -> list[str]:
    """A known secret (an auth header's value) and its words of at least :data:`SCRUB_MIN`
    characters: ``"Bearer abc123"`` -> ``["Bearer abc123", "Bearer", "abc123"]``."""
    return [value, *(w for w in value.split() if len(w) >= SCRUB_MIN)] if value else []


def scrub(text: str, secrets: list[str], mark: str = MARK) -> str:
    """``text`` with every one of ``secrets`` (known values, e.g. from :func:`secret_parts` and
    :func:`url_secrets`) replaced by ``mark``, in any case (a server echoing ``authorization: bearer
    abc`` lower-cased), longest first so a whole goes before its parts; then :func:`redact_message`."""
    found = sorted(set(filter(None, secrets)), key=len, reverse=True)
    if found:
        text = re.sub("|".join(re.escape(s) for s in found), lambda m: mark, text, flags=re.I)
    return redact_message(text, mark)
