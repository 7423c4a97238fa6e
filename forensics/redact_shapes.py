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

import contextlib
import functools
import importlib
import re
import sys
import types
from typing import Callable


@contextlib.contextmanager
def _requests_on_use():
    """While the plugins are imported, ``requests`` is a stand-in module that imports the real one on
    its first attribute read (PEP 562 ``__getattr__``). detect-secrets' plugin modules import requests
    at their top for their verification step (a network request), which this rule never runs; the real
    import (requests, urllib3, idna, charset_normalizer, certifi) costs ~8 MB and ~0.1 s in every
    process that redacts (collect, analyze; the chart's child imports only reports.chart and redacts
    nothing). The stand-in leaves ``sys.modules`` at the end of the block, so any later ``import requests``
    gets the real module; a plugin that did use it would get the real one's attribute. Nothing changes
    when requests is already imported."""
    if "requests" in sys.modules:
        yield
        return
    stand_in = types.ModuleType("requests", "stands for requests until one of its attributes is read")

    def _real(name: str):
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]
        return getattr(importlib.import_module("requests"), name)

    stand_in.__getattr__ = _real
    sys.modules["requests"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]


_CRED = r"(?:token|secret|passw|key|auth|credential)"
#: shapes detect-secrets 1.5 lacks: the value is the last group
PAT, FLAG, AUTHZ, NAME_VALUE = (
    re.compile(r"github_pat_[A-Za-z0-9_]{22,255}"),
    re.compile(rf"(?i)(?<!\S)--?(?P<n>[\w.\-]*{_CRED}[\w.\-]*)[ \t]+(?![\-<])(\S+)"),
    re.compile(r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?!bearer\b|basic\b|<)"
               r"(?:[A-Za-z][\w\-]*[ \t]+)?(?!<)([^\s\"',;]+)"),
    re.compile(rf"(?i)(?<![\w\-])[\"']?(?P<n>[\w.\-]*{_CRED}[\w.\-]*)[\"']?[ \t]*(?::=|=|:(?=[\s\"']))[ \t]*"
               r"[\"']?(?!<|bearer\b|basic\b)([^\s\"',;}<]+)"),
)
EXTRA = (PAT, FLAG, AUTHZ, NAME_VALUE)
#: per family: the marker (a regex, any case) each of its shapes needs; its expressions are :func:`_expressions`
#: (a plugin's ``denylist``, the keyword tables, or ours); the detect-secrets plugins not here (high-entropy
#: strings, public IPs, ...) are left out on purpose: container ids, digests and node addresses are evidence
FAMILIES = {
    "aws": r"akia|asia|abia|acca|a3t|aws",
    "github": r"gh[pousr]_",
    "github_pat": r"github_pat_",
    "gitlab": r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|gr1348941",
    "jwt": r"eyj",
    "slack": r"xox|hooks\.slack\.com",
    "stripe": r"k_live_",
    "openai": r"t3blbkfj",
    "pypi": r"pypi-",
    "npm": r"_authtoken",
    "sendgrid": r"sg\.",
    "square": r"sq0csp-",
    "azure": r"accountkey",
    "flag": rf"(?<!\S)--?[\w.\-]*?{_CRED}",
    "authz": r"authorization",
    # an assignment to a credential name (``password: X``, ``"api_key": "X"``, ``key = X``; a colon
    # only before a space or quote: ``libsecret-1-0:amd64`` in apt's history is a package)
    "keyword": r"(?:pass|secret|key|token|auth|credential|contrase)[\w.\-]*[\"'\]]{0,2}[ \t]*(?:=|:(?=[\s\"']))",
}


@functools.cache
def _expressions() -> tuple[dict, tuple]:
    """``({family: its expressions}, the private-key headers' expressions)``, from detect-secrets' plugins,
    imported at the first text that has a family's marker, not with this module: a process that redacts
    nothing (``analyze`` of a bundle, whose text was redacted when it was collected) never holds the
    plugins (~9 MB, issue 30)."""
    with _requests_on_use():
        from detect_secrets.plugins import keyword as kw
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
    keyword = tuple({**kw.CONFIG_DENYLIST_REGEX_TO_GROUP, **kw.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP}.items())
    return {
        "aws": AWSKeyDetector.denylist, "github": GitHubTokenDetector.denylist, "github_pat": (PAT,),
        "gitlab": GitLabTokenDetector.denylist, "jwt": JwtTokenDetector.denylist, "slack": SlackDetector.denylist,
        "stripe": StripeDetector.denylist, "openai": OpenAIDetector.denylist, "pypi": PypiTokenDetector.denylist,
        "npm": NpmDetector.denylist, "sendgrid": SendGridDetector.denylist, "square": SquareOAuthDetector.denylist,
        "azure": AzureStorageKeyDetector.denylist, "flag": (FLAG,), "authz": (AUTHZ,),
        "keyword": keyword + ((NAME_VALUE, None),),
    }, tuple(PrivateKeyDetector.denylist)


#: names whose values are paths, not secrets (``--key-file``, ``tls.key_file``)
_FILE_NAME = re.compile(r"(?i)[_\-](?:file|path|dir)$")
_PEM_MARK = re.compile(r"private key|putty-user-key")  # in the lower-cased text
#: where a shape may be, lower-cased: the literal start of a token (``akia``, ``ghp_``, ``eyj``...) or a
#: credential word; one regex pass over the lower-cased text, then each window around a hit is tested
#: for the families (:func:`_families`)
MARKERS = ("akia", "asia", "abia", "acca", "a3t", "aws", "gh", "gl", "gr1348941", "eyj", "xox", "hooks.slack.com",
           "k_live_", "t3blbkfj", "pypi-", "_authtoken", "sg.", "sq0csp-", "accountkey", "private key",
           "putty-user-key", "token", "secret", "pass", "key", "auth", "credential", "contrase")
_MARKER = re.compile("|".join(map(re.escape, MARKERS)))
_MARKER_ANY_CASE = re.compile(_MARKER.pattern, re.I)  # for the rare text whose lower-casing changes its length
_FAMILY_RX = {n: re.compile(m) for n, m in FAMILIES.items()}  # run on the lower-cased window
_WORD_FAMILIES = ("flag", "authz", "keyword")
#: the token literals as issued (case kept): a window without one has none of the token families
_LITERAL = re.compile(r"AKIA|ASIA|ABIA|ACCA|A3T|aws|AWS|gh[pousr]_|github_pat_|gl[a-z]+-|GR1348941|eyJ|xox|"
                      r"hooks\.slack\.com|k_live_|T3BlbkFJ|pypi-|_authToken|SG\.|sq0csp-|AccountKey")


def _families(window: str, low: str) -> list[str]:
    """The families whose markers are in ``window`` (``low``: it lower-cased, the same length): cheap
    gates first (a token literal as issued; a dash; the word authorization; an assignment character),
    then each family's marker in ``low``."""
    names = [n for n in FAMILIES if n not in _WORD_FAMILIES] if _LITERAL.search(window) else []
    if "-" in window:
        names.append("flag")
    if "authoriz" in low:
        names.append("authz")
    if ":" in window or "=" in window:
        names.append("keyword")
    return [n for n in names if _FAMILY_RX[n].search(low)]


PEM_LIMIT = 65536   #: characters of a private key's body removed at most
BEFORE, AFTER = 160, 2048  #: the window around a marker, in characters, clipped to its line
WINDOW_MAX = 8192  #: merged windows are cut at this length, so a line of markers costs linear time


def _any_marker(low: str) -> bool:
    """Whether the lower-cased ``low`` holds one of :data:`MARKERS`: what ``_MARKER.search`` says,
    by one substring search per marker (str's search skips ahead; the alternation tries six markers
    at each ``a``, ~0.7 s a megabyte of ``aaaa``)."""
    for m in MARKERS:
        if m in low:
            return True
    return False


def has_marker(text: str) -> bool:
    """Whether ``text`` holds one of :data:`MARKERS` (any case): without one, :func:`redact_shapes`
    returns it as it is."""
    return _any_marker(text.lower())


def _regex_spans(window: str, families: set):
    """``(start, end)`` of each secret value the expressions of ``families`` find in ``window``."""
    for family in families:
        for item in _expressions()[0][family]:
            rx, group = item if isinstance(item, tuple) else (item, None)
            for m in rx.finditer(window):
                if family == "keyword" and group is not None:  # detect-secrets' KeywordDetector tables
                    if m.group(group) and "<redacted" not in m.group(0) and m.group(1).lower() != "pwd":
                        yield m.span(group)
                    continue
                name = m.groupdict().get("n")
                if name and (_FILE_NAME.search(name) or (rx is NAME_VALUE and name.lower().endswith("authorization"))):
                    continue
                if rx in EXTRA:
                    yield m.span(rx.groups)
                    continue
                groups = [i for i in range(1, rx.groups + 1) if m.group(i)]
                i = max(groups, key=lambda g: len(m.group(g)), default=0)  # a value group, not a prefix
                yield m.span(i if i and len(m.group(i)) >= 8 else 0)


def _windows(text: str, low: str):
    """Merged ``[start, end)`` windows around each marker, each within its line."""
    start = end = -1
    for m in (_MARKER.finditer(low) if len(low) == len(text) else _MARKER_ANY_CASE.finditer(text)):
        p = m.start()
        line0 = text.rfind("\n", 0, p) + 1 if p >= end else start
        line1 = text.find("\n", p)
        a, b = max(line0, p - BEFORE), min(len(text) if line1 < 0 else line1, p + AFTER)
        if a <= end and b - start <= WINDOW_MAX:
            end = max(end, b)
            continue
        a = max(a, end)  # a window is at most WINDOW_MAX long: the next starts where it ended
        if end > start:
            yield start, end
        start, end = a, b
    if end > start:
        yield start, end


def redact_shapes(text: str, hashed: Callable[[str], str], low: str | None = None) -> str:
    """``text`` with every secret value of a known shape replaced by ``hashed(value)`` (the policy's
    ``<redacted hmac:XXXXXXXX>``), names and everything else kept; a private key loses its body.
    ``low``: ``text.lower()`` when the caller has it. Linear in ``len(text)`` (bounded windows);
    raises nothing."""
    low = text.lower() if low is None else low
    if not _any_marker(low):
        return text
    if _PEM_MARK.search(low):
        text = _redact_pem(text, hashed)
        low = text.lower()
    out, last = [], 0
    for a, b in _windows(text, low):
        window = text[a:b]
        families = _families(window, low[a:b] if len(low) == len(text) else window.lower())
        spans = sorted(set(_regex_spans(window, families))) if families else ()
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
    if not last:  # nothing replaced (beyond a private key): the same object, as the caller may test
        return text
    out.append(text[last:])
    return "".join(out)


def _redact_pem(text: str, hashed: Callable[[str], str]) -> str:
    out, pos = [], 0
    while True:
        hits = [m for rx in _expressions()[1] for m in [rx.search(text, pos)] if m]
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
