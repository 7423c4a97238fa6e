"""The one redaction policy: what is kept, hashed or scrubbed in bundles, reports and messages.

Every collector, the manifest's command line and the reports use these functions; no module keeps
a redaction rule of its own.

Redaction policy (:func:`redact_spec`, unless ``--no-redact``); names are always kept, values become
``<redacted hmac:XXXXXXXX>`` (a keyed hash prefix, so equal values in one bundle still match):

- env: a value is kept only when its name is in :data:`ENV_ALLOW` (matched whole: ``PATH\n`` is not
  ``PATH``) and does not look like a credential (:data:`CRED_WORDS`: ``NVIDIA_API_KEY``,
  ``CUDA_AUTH_TOKEN`` are hashed although NVIDIA_*/CUDA_* are otherwise kept);
- annotations (and runc's ``labels``, which hold them as ``key=value``): values are kept only for
  :data:`K8S_ANNOTATIONS` and ``cdi.k8s.io/*`` (and runc's ``bundle`` label); every other value is
  hashed (``kubectl.kubernetes.io/last-applied-configuration`` holds whole manifests, secrets included);
- args (process and hooks): the value after a credential-looking flag (``--password X``,
  ``--token=X``), after ``-p`` (``-p X`` and ``-pX``, mysql's password flag; a port or ``mkdir -p``'s
  path is hashed too) and after ``Bearer``/``Basic``; and in every string (``sh -c "..."`` included)
  by :func:`redact_text`: URL credentials, ``Bearer X`` / ``Basic X``, ``NAME=X`` where NAME holds
  token, secret, passw*, key, auth* or credential, and ``-p X``;
- every other string: URL credentials, ``Bearer X`` and credential ``NAME=X`` (:func:`redact_text`
  without the ``-p`` rule).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re

CRED_WORDS = ("token", "secret", "password", "passwd", "key", "auth", "credential")
#: env names whose values are kept (issue 6 item 3); everything else becomes a hash prefix
#: plus the NVIDIA device plugin's and HAMi's own settings, which are evidence and hold no secret.
#: The whole name must match (``\Z``: ``"PATH\n"`` is not ``PATH``), and a name holding a credential
#: word is never kept (``NVIDIA_API_KEY``, ``CUDA_AUTH_TOKEN``), so ``ENV_ALLOW.match`` is the whole test
ENV_ALLOW = re.compile(r"^(?!(?s:.*)(?i:" + "|".join(CRED_WORDS) + r"))"
                       r"(NVIDIA_\w*|CUDA_\w*|PATH|HOSTNAME|HOME|KUBERNETES_SERVICE_HOST|"
                       r"KUBERNETES_SERVICE_PORT\w*|DEVICE_LIST_STRATEGY|PASS_DEVICE_SPECS|DEVICE_ID_STRATEGY|"
                       r"DEVICE_DISCOVERY_STRATEGY|MIG_STRATEGY|CDI_ANNOTATION_PREFIX|FAIL_ON_INIT_ERROR|"
                       r"NVIDIA_CDI_HOOK_PATH|NVIDIA_CTK_PATH|CONTAINER_DRIVER_ROOT|DRIVER_ROOT_CTR_PATH)\Z")
#: free-text rules of :func:`redact_text` (each linear in the text's length)
#: the scheme word stands alone (not ``monitoring-plugins-basic``) and its value is on the same line
_AUTH_SCHEME = re.compile(r"(?i)(?<![\w.\-])(?P<name>bearer|basic)(?P<sp>[ \t]+)(?!<redacted)(?P<v>\S+)")
_AUTH_SCHEME_LAST = re.compile(r"(?i)\b(?:bearer|basic)\s*\Z")
_ASSIGN = re.compile(r"(?<![\w.\-])(?P<name>[\w.\-]++)=(?!<redacted)(?P<v>\S+)")
_ASSIGN_WORDS = re.compile(r"(?i)token|secret|passw|key|auth|credential")
_ASSIGN_HINTS = ("token", "secret", "passw", "key", "auth", "credential")  #: the same words, for ``in``
_P_FLAG = re.compile(r"(?<!\S)-p(?P<sp>[ \t]*)(?![\-\s]|<redacted)(?P<v>\S+)")
#: ``scheme://user:pass@``: anchored on ``://`` after a scheme character (a scheme run before it is
#: kept as text), so that the match is linear in the text's length (hostile args can be megabytes)
_URL_CRED = re.compile(r"(?<=[A-Za-z0-9+.\-])://(?P<cred>[^/?#@\s]+(?:@[^/?#@\s]*)*)@")
_FLAG_NAME = re.compile(r"-{1,2}[\w.\-]*")
#: annotations kept in the record (values already redacted)
K8S_ANNOTATIONS = ("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.container-name", "io.kubernetes.cri.container-type",
                   "io.kubernetes.cri.sandbox-id", "io.kubernetes.cri.sandbox-uid",
                   "io.kubernetes.cri.image-name", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace",
                   "io.kubernetes.pod.uid", "io.kubernetes.container.name")


#: drawn once per process (one collection) and never stored: the hash prefixes of one bundle can be
#: matched with each other, but not tried against a list of likely passwords
_KEY = os.urandom(32)


def redacted(value: str) -> str:
    """``"<redacted hmac:XXXXXXXX>"``: the first 8 hex digits of HMAC-SHA256(value) under a key drawn
    for this collection (RFC 2104), so that two containers sharing a value can still be matched
    within a bundle without the value being stored, and a weak password cannot be guessed from it."""
    digest = hmac.new(_KEY, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
    return f"<redacted hmac:{digest}>"


def redact_url_credentials(text: str) -> str:
    """``scheme://user:pass@host`` -> ``scheme://<redacted>@host`` anywhere in ``text``."""
    return _URL_CRED.sub("://<redacted>@", text)


def _cred_name(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in CRED_WORDS)


def _cred_flag(arg: str) -> bool:
    """``--password``, ``-api-key``: a flag whose name holds a credential word."""
    return bool(_FLAG_NAME.fullmatch(arg)) and _cred_name(arg)


def redact_text(text: str, p_flag: bool = True) -> str:
    """Credentials inside free text (a shell command line, a log line): URL credentials,
    ``Bearer X`` / ``Basic X``, ``NAME=X`` where NAME holds token, secret, passw*, key, auth* or
    credential (the name is kept), and with ``p_flag`` ``-p X`` / ``-pX``; each value becomes a
    :func:`redacted` hash. Already redacted values are left as they are."""
    if "://" in text:  # each rule runs only when its marker is present: megabytes of junk stay cheap
        text = redact_url_credentials(text)
    low = text.lower()
    if "bearer" in low or "basic" in low:
        text = _AUTH_SCHEME.sub(lambda m: m.group("name") + m.group("sp") + redacted(m.group("v")), text)
    if "=" in text and any(w in low for w in _ASSIGN_HINTS):
        text = _ASSIGN.sub(lambda m: (f"{m.group('name')}={redacted(m.group('v'))}"
                                      if _ASSIGN_WORDS.search(m.group("name")) else m.group(0)), text)
    if p_flag and "-p" in text:
        text = _P_FLAG.sub(lambda m: "-p" + m.group("sp") + redacted(m.group("v")), text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """Log bytes with the credentials :func:`redact_text` recognises (without the ``-p`` rule)
    replaced: URL credentials, ``Bearer``/``Basic`` values, credential ``NAME=X``; every other byte,
    valid UTF-8 or not, is kept as it was. Linear in ``len(data)``; raises nothing."""
    text = data.decode("utf-8", "surrogateescape")
    return redact_text(text, p_flag=False).encode("utf-8", "surrogateescape")


def kept_annotation(name) -> bool:
    """Whether an annotation's value is kept: :data:`K8S_ANNOTATIONS` and ``cdi.k8s.io/*``."""
    return isinstance(name, str) and (name in K8S_ANNOTATIONS or name.startswith("cdi.k8s.io/"))


def redact_env(entries: list) -> list:
    """Redact a ``["NAME=value", ...]`` list: names are kept, values of names outside
    :data:`ENV_ALLOW` become :func:`redacted` hashes."""
    out = []
    for e in entries:
        if not isinstance(e, str):
            out.append(e)
            continue
        name, eq, value = e.partition("=")
        value = redacted(value) if eq and not ENV_ALLOW.match(name) else redact_text(value, p_flag=False)
        out.append(f"{name}{eq}{value}")
    return out


def redact_args(args: list) -> list:
    """Redact an argv: values of credential-looking flags (``--token=X``, ``--password X``), the value
    after ``-p`` and after a trailing ``Bearer``/``Basic``, and in every string :func:`redact_text`."""
    out, hide_next = [], False
    for a in args:
        if not isinstance(a, str):
            out.append(a)
            hide_next = False
            continue
        if hide_next and not a.startswith("-"):
            out.append(redacted(a))
            hide_next = False
            continue
        flag, eq, value = a.partition("=")
        if eq and _cred_flag(flag):
            out.append(f"{flag}={redacted(value)}")
        else:
            out.append(redact_text(a))
        hide_next = _cred_flag(a) or a == "-p" or bool(_AUTH_SCHEME_LAST.search(a))
    return out


def _redact_label(label):
    """runc keeps the spec's annotations as ``key=value`` strings in ``config.labels``."""
    if not isinstance(label, str):
        return redact_spec(label)
    key, eq, value = label.partition("=")
    if eq and not (key == "bundle" or kept_annotation(key)):
        return f"{key}={redacted(value)}"
    return redact_text(label, p_flag=False)


def _plain(text: str) -> bool:
    """True when :func:`redact_text` (without the ``-p`` rule) certainly leaves ``text`` as it is: it has
    no ``://`` (URL rule), no ``=`` (``NAME=X`` rule) and no ``b``/``B`` (``Bearer``/``Basic``: no other
    character lowercases to ``b``). Most strings of a spec (paths, capabilities, mount types) are plain,
    and this costs four substring scans instead of a lowercased copy."""
    return "://" not in text and "=" not in text and "b" not in text and "B" not in text


def _text_unchanged(text: str) -> bool:
    """True when ``redact_text(text, p_flag=False)`` returns ``text`` as it is: none of its rules'
    markers is present (the same tests :func:`redact_text` makes before running a rule)."""
    if "://" in text:
        return False
    low = text.lower()
    return not ("bearer" in low or "basic" in low or ("=" in text and any(w in low for w in _ASSIGN_HINTS)))


def redact_spec(obj):
    """Return a redacted deep copy of an OCI ``config.json`` or runc ``state.json`` object.

    Every ``env`` list (process, hooks; runc's ``Hooks``) goes through :func:`redact_env`, every
    ``args`` list through :func:`redact_args`, ``annotations`` values (and runc's ``labels``, which
    hold the annotations as ``key=value``) other than :func:`kept_annotation` ones become hashes, and
    every other string goes through :func:`redact_text` (without the ``-p`` rule). Never raises
    (except ``RecursionError`` for JSON nested deeper than the interpreter's recursion limit).
    """
    # strings are handled in place (no call for the many plain ones): this walk visits every value of
    # every config.json and state.json, hundreds each
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(v, str):
                out[k] = v if _plain(v) else redact_text(v, p_flag=False)
            elif not isinstance(v, (dict, list)):
                out[k] = v
            elif k == "env" and isinstance(v, list):
                out[k] = redact_env(v)
            elif k == "args" and isinstance(v, list):
                out[k] = redact_args(v)
            elif k in ("annotations", "labels") and isinstance(v, dict):
                out[k] = {ak: (redact_spec(av) if kept_annotation(ak) else  # (a non-string: its JSON)
                               redacted(av if isinstance(av, str) else json.dumps(av, sort_keys=True)))
                          for ak, av in v.items()}
            elif k == "labels" and isinstance(v, list):
                out[k] = [_redact_label(x) for x in v]
            else:
                out[k] = redact_spec(v)
        return out
    if isinstance(obj, list):
        try:  # a list of strings (seccomp syscall names, capabilities, mount options): one test, in C
            if _text_unchanged("\0".join(obj)):  # (no marker spans the NUL between two items)
                return list(obj)
        except TypeError:  # an item that is not a string
            pass
        return [(v if _plain(v) else redact_text(v, p_flag=False)) if isinstance(v, str)
                else redact_spec(v) if isinstance(v, (dict, list)) else v for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, p_flag=False)
    return obj


#: a URL's query values (presigned upload URLs carry their signature there) and the whole URL shape
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_QUERY_VALUE = re.compile(r"(?P<k>[?&][^=&#\s]+=)[^&#\s]+")


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as the manifest records it when redaction is on: credentials inside each
    argument removed (:func:`redact_text`: URL credentials, Bearer/Basic
    values, credential ``NAME=X``), and every query value of a URL argument (``--upload-url``'s
    presigned signature, a ``?token=``) replaced by ``<redacted>``. Raises nothing."""
    out = []
    for a in argv:
        a = redact_text(a, p_flag=False)
        out.append(_QUERY_VALUE.sub(r"\g<k><redacted>", a) if _URL.match(a) else a)
    return out
