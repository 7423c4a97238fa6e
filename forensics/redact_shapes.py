"""The ``shapes`` rule of the redaction policy (:mod:`forensics.redact`): secrets recognised by their
shape, wherever they are pasted (pod logs, journal fields, spec values, command lines).

The shapes are Yelp's detect-secrets plugins (``detect_secrets.plugins``, version 1.5: AWS access key
IDs and secret keys, GitHub and GitLab tokens, JWTs, Slack, Stripe, OpenAI, PyPI, npm, SendGrid, Square
tokens, Azure storage keys, private-key headers, and the ``KeywordDetector``'s ``password: X``,
``"password": "X"``, ``db_pass = X`` assignments; not its ``pwd``: sudo's ``PWD=/root`` is evidence).
Their regular expressions are run directly
(``plugin.denylist`` and the keyword module's regex tables), so that no settings, filter or
verification (a network request) of the library is involved. :data:`EXTRA` holds the shapes that
version lacks and users paste all the same: GitHub fine-grained tokens (``github_pat_``), a
credential-named flag's value (``--token X``), ``Authorization: <scheme> X`` (``token X``: GitHub's
scheme), and ``key = X`` / ``token: X`` assignments.

Cost. A text is first searched for :data:`MARKERS` (one compiled regex, literal words each shape
needs: ``akia``, ``ghp_``, ``private key``, ``pass``, ...); only a window around each marker, within
its line, goes through the plugins' expressions, so megabytes of logs without a marker cost one scan.

A private key (``-----BEGIN ... PRIVATE KEY-----``) is found by the plugin's header and removed with
its whole body up to ``-----END`` (at most :data:`PEM_LIMIT` characters; without an END, that much).
"""
from __future__ import annotations

import re
from typing import Callable

from detect_secrets.plugins import keyword as _kw
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector

#: the detect-secrets plugins whose expressions are run (high-entropy strings and public IPs are not:
#: container ids, digests and node addresses are evidence)
PLUGINS = (AWSKeyDetector, GitHubTokenDetector, GitLabTokenDetector, JwtTokenDetector, SlackDetector,
           StripeDetector, OpenAIDetector, PypiTokenDetector, NpmDetector, SendGridDetector,
           SquareOAuthDetector, AzureStorageKeyDetector)
_CRED = r"(?:token|secret|passw|key|auth|credential)"
#: shapes detect-secrets 1.5 lacks: the value is the last group
EXTRA = (
    re.compile(r"github_pat_[A-Za-z0-9_]{22,255}"),
    re.compile(rf"(?i)(?<!\S)--?(?P<n>[\w.\-]*{_CRED}[\w.\-]*)[ \t]+(?![\-<])(\S+)"),
    re.compile(r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?!bearer\b|basic\b|<)"
               r"(?:[A-Za-z][\w\-]*[ \t]+)?(?!<)([^\s\"',;]+)"),
    re.compile(rf"(?i)(?<![\w\-])[\"']?(?P<n>[\w.\-]*{_CRED}[\w.\-]*)[\"']?[ \t]*(?::=|[:=])[ \t]*"
               r"[\"']?(?!<|bearer\b|basic\b)([^\s\"',;}<]+)"),
)
#: names whose values are paths, not secrets (``--key-file``, ``tls.key_file``)
_FILE_NAME = re.compile(r"(?i)[_\-](?:file|path|dir)$")
#: a literal word each shape above needs (lowercase); a text without one is not searched further
MARKERS = ("akia", "asia", "abia", "acca", "a3t", "aws", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
           "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941", "glcbt-", "glimt-", "glptt-", "glagent-",
           "gloas-", "eyj", "xox", "hooks.slack.com", "k_live_", "t3blbkfj", "pypi-", "_authtoken", "sg.",
           "sq0csp-", "accountkey", "private key", "putty-user-key", "token", "secret", "pass", "key",
           "auth", "credential", "contrase")
_MARKER = re.compile("|".join(map(re.escape, MARKERS)), re.I)
_KEYWORD = tuple({**_kw.CONFIG_DENYLIST_REGEX_TO_GROUP, **_kw.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP}.items())
_PEM = tuple(PrivateKeyDetector.denylist)
PEM_LIMIT = 65536   #: characters of a private key's body removed at most
BEFORE, AFTER = 160, 4096  #: the window around a marker, in characters, clipped to its line


def has_marker(text: str) -> bool:
    """Whether ``text`` holds one of :data:`MARKERS` (any case): without one, :func:`redact_shapes`
    returns it as it is."""
    return _MARKER.search(text) is not None


def _regex_spans(window: str):
    """``(start, end)`` of each secret value the plugins' and :data:`EXTRA`'s expressions find."""
    for plugin in PLUGINS:
        for rx in plugin.denylist:
            for m in rx.finditer(window):
                groups = [i for i in range(1, (rx.groups or 0) + 1) if m.group(i)]
                i = max(groups, key=lambda g: len(m.group(g)), default=0)  # a value group, not a prefix
                yield m.span(i if i and len(m.group(i)) >= 8 else 0)
    for rx, group in _KEYWORD:
        for m in rx.finditer(window):
            if m.group(group) and "<redacted" not in m.group(0) and m.group(1).lower() != "pwd":
                yield m.span(group)
    for rx in EXTRA:
        for m in rx.finditer(window):
            name = m.groupdict().get("n")
            if not (name and (_FILE_NAME.search(name) or name.lower().endswith("authorization"))):
                yield m.span(rx.groups)


def _windows(text: str):
    """Merged ``[start, end)`` windows around each marker, each within its line."""
    start = end = -1
    for m in _MARKER.finditer(text):
        p = m.start()
        if p < end:
            continue
        line0 = text.rfind("\n", 0, p) + 1
        line1 = text.find("\n", p)
        a, b = max(line0, p - BEFORE), min(len(text) if line1 < 0 else line1, p + AFTER)
        if a <= end:
            end = max(end, b)
            continue
        if end > start:
            yield start, end
        start, end = a, b
    if end > start:
        yield start, end


def redact_shapes(text: str, hashed: Callable[[str], str]) -> str:
    """``text`` with every secret value of a known shape replaced by ``hashed(value)`` (the policy's
    ``<redacted hmac:XXXXXXXX>``), names and everything else kept; a private key loses its body.
    Linear in ``len(text)`` (bounded windows); raises nothing."""
    if _MARKER.search(text) is None:
        return text
    text = _redact_pem(text, hashed)
    out, last = [], 0
    for a, b in _windows(text):
        window = text[a:b]
        spans = sorted(set(_regex_spans(window)))
        if not spans:
            continue
        out.append(text[last:a])
        pos = 0
        for s, e in spans:
            if s < pos or e <= s:  # inside (or overlapping) a value already replaced
                continue
            out.append(window[pos:s])
            out.append(hashed(window[s:e]))
            pos = e
        out.append(window[pos:])
        last = b
    out.append(text[last:])
    return "".join(out)


def _redact_pem(text: str, hashed: Callable[[str], str]) -> str:
    low = text.lower()
    if "private key" not in low and "putty-user-key" not in low:
        return text
    out, pos = [], 0
    while True:
        hits = [m for rx in _PEM for m in [rx.search(text, pos)] if m]
        if not hits:
            break
        m = min(hits, key=lambda h: h.start())
        body = m.end() + (5 if text.startswith("-----", m.end()) else 0)
        end = text.find("-----END", body, body + PEM_LIMIT)
        end = min(len(text), body + PEM_LIMIT) if end < 0 else end
        out.append(text[pos:body])
        out.append(hashed(text[body:end]) + ("\n" if end < len(text) else ""))
        pos = end
    out.append(text[pos:])
    return "".join(out)
