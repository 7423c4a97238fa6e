"""The one redaction policy: what is kept, hashed or scrubbed in bundles, reports and messages.

Every collector, the manifest, the upload records and the findings use these functions and constants;
no other module keeps a redaction rule of its own. A caller decides only WHAT goes through the policy
(which file, which field, whether ``--no-redact`` was given).

The hash. A value that is removed becomes ``<redacted hmac:XXXXXXXX>`` (:func:`redacted`): the first
8 hex digits of HMAC-SHA256 under a key of 32 random bytes drawn once per collection (per process) and
never stored, so equal values in one bundle still match each other, but a weak password cannot be
guessed by hashing a list of candidates. Names (env names, flags, keys) are always kept.

The rules (:data:`RULES` says the same in one line each; :func:`description` is the manifest's sentence):

- ``env`` (container specs and runc state, :func:`redact_env`; Kubernetes API answers, through
  :func:`env_kept`): a value is kept only when its name is one of :data:`ENV_KEPT` (whole name, ``*``
  = any name characters: ``PATH\\n`` is not ``PATH``) and holds none of :data:`CRED_WORDS`
  (``NVIDIA_API_KEY``, ``CUDA_AUTH_TOKEN`` are hashed); a kept value still gets the ``text`` rule.
- ``annotations``: in container specs (and runc's ``labels``, which hold them as ``key=value``) values
  are kept only for :data:`K8S_ANNOTATIONS`, :data:`CDI_PREFIX` ``*`` and runc's ``bundle`` label
  (:func:`kept_annotation`); in Kubernetes API answers a value is hashed when the name is
  :data:`LAST_APPLIED` (whole manifests, secrets included) or holds a credential word
  (:func:`api_annotation_hashed`).
- ``args`` (process, hook and Kubernetes container ``args``/``command``, :func:`redact_args`): the
  value of a flag whose name holds a credential word (``--password X``, ``--token=X``), the value after
  ``-p`` (``-p X``, ``-pX``: mysql's password; a port or ``mkdir -p``'s path is hashed too) and after
  :data:`AUTH_SCHEMES`; every arg also gets the ``text`` rule with ``-p X``.
- ``text`` (every other string: spec values, pod logs, journal fields, package logs, API answers, the
  command line; :func:`redact_text`, :func:`redact_bytes`): URL credentials (``scheme://user:pass@``
  becomes ``scheme://<redacted>@``), ``Bearer X`` / ``Basic X`` (:data:`AUTH_SCHEMES`), and ``NAME=X``
  where NAME holds one of :data:`ASSIGN_WORDS` (the name is kept); everything else as written.
- ``shapes`` (inside the ``text`` rule, :mod:`forensics.redact_shapes`): values of a known secret shape,
  found by Yelp's detect-secrets plugins (AWS access key ids, GitHub/GitLab/Slack/... tokens, JWTs,
  private keys with their body, ``password: X`` / ``"password": "X"``) and the few shapes it lacks
  (``github_pat_``, ``--token X``, ``Authorization: token X``, ``key = X``); a cheap marker scan first,
  so logs without a marker cost one regex search.
- ``urls`` (:mod:`forensics.redact_url`: :func:`redact_url`, one function, two forms): a source recorded in a bundle
  (``--prometheus``, ``--dcgm-url``) loses its user info and its whole query (``?<redacted>``); with
  ``keep_names=True`` (the command line's URL arguments, upload destinations) the user name and query
  names stay, the password and every query value become the mark. Upload records use the mark
  :data:`WORD_MARK` (the URL stays pasteable); bundles :data:`MARK`. An object-store path token (OCI's
  ``/p/<token>/``) is hidden in both. Messages (exception texts: requests and urllib3 embed the URL, or its
  path and query) go through :func:`redact_message`.
- ``toml`` (containerd's config.toml and its imports, :func:`redact_containerd_toml`): on the parsed
  file, values under keys holding a credential word or named in :data:`TOML_CRED_KEYS` (registry
  ``auth`` inline tables, ``Authorization = [...]`` header arrays, ``X-JFrog-Art-Api``) are hashed,
  except keys ending in :data:`TOML_FILE_KEYS`, and every other string gets the ``text`` rule; the copy
  keeps its lines when the line rule (:func:`redact_toml`) gives the same values, else it is rewritten
  with tomli_w; a file with nothing to redact is stored byte for byte; one that does not parse gets the
  line rule, noted.
- ``known secrets`` (:func:`scrub`, :func:`secret_parts`, :func:`url_secrets`): a value the tool
  itself holds (an upload's auth header, its URL's password, path token and query values) is replaced
  wherever it shows up in a message, in any case (a server's error body echoing the header lower-cased).

:func:`is_redacted` tells the findings a value was removed (ours, or another tool's ``***``).

Adding a rule: write its constant and function here (linear in the input: hostile strings can be
megabytes), add a line to :data:`RULES` built from that constant (the manifest then states it), list
it above, call it from the collector that meets the data, and test it in tests/test_redact.py.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import tomllib

import tomli_w
from .redact_shapes import has_marker, redact_shapes
from .redact_url import MARK, SCRUB_MIN, WORD_MARK, redact_message, redact_url, scrub, secret_parts, url_secrets

CRED_WORDS = ("token", "secret", "password", "passwd", "key", "auth", "credential")
#: env names whose values are kept (issue 6 item 3; ``*``: any name characters), plus the NVIDIA device
#: plugin's and HAMi's own settings, which are evidence and hold no secret
ENV_KEPT = ("NVIDIA_*", "CUDA_*", "PATH", "HOSTNAME", "HOME", "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT*", "DEVICE_LIST_STRATEGY", "PASS_DEVICE_SPECS", "DEVICE_ID_STRATEGY",
            "DEVICE_DISCOVERY_STRATEGY", "MIG_STRATEGY", "CDI_ANNOTATION_PREFIX", "FAIL_ON_INIT_ERROR",
            "CONTAINER_DRIVER_ROOT", "DRIVER_ROOT_CTR_PATH")
#: :data:`ENV_KEPT` as one test: the whole name must match (``\Z``: ``"PATH\n"`` is not ``PATH``), and a
#: name holding a credential word never does, so ``ENV_ALLOW.match`` is the whole test
ENV_ALLOW = re.compile(r"^(?!(?s:.*)(?i:" + "|".join(CRED_WORDS) + r"))("
                       + "|".join(re.escape(n).replace(r"\*", r"\w*") for n in ENV_KEPT) + r")\Z")
#: ``Bearer X`` / ``Basic X``: the scheme word stands alone (not ``monitoring-plugins-basic``) and its
#: value is on the same line. :func:`_plain` relies on both starting with ``b``.
AUTH_SCHEMES = ("Bearer", "Basic")
_SCHEMES = "|".join(AUTH_SCHEMES)
_AUTH_SCHEME = re.compile(rf"(?i)(?<![\w.\-])(?P<name>{_SCHEMES})(?P<sp>[ \t]+)(?!<redacted)(?P<v>\S+)")
_AUTH_SCHEME_LAST = re.compile(rf"(?i)\b(?:{_SCHEMES})\s*\Z")
_AUTH_LOW = tuple(s.lower() for s in AUTH_SCHEMES)
#: ``NAME=X`` is redacted when NAME holds one of these (``passw``: password, passwd)
ASSIGN_WORDS = ("token", "secret", "passw", "key", "auth", "credential")
_ASSIGN = re.compile(r"(?<![\w.\-])(?P<name>[\w.\-]++)=(?!<redacted)(?P<v>\S+)")
_ASSIGN_WORDS = re.compile("(?i)" + "|".join(ASSIGN_WORDS))
_P_FLAG = re.compile(r"(?<!\S)-p(?P<sp>[ \t]*)(?![\-\s]|<redacted)(?P<v>\S+)")
#: ``scheme://user:pass@``: anchored on ``://`` after a scheme character (a scheme run before it is
#: kept as text), so that the match is linear in the text's length (hostile args can be megabytes)
_URL_CRED = re.compile(r"(?<=[A-Za-z0-9+.\-])://(?P<cred>[^/?#@\s]+(?:@[^/?#@\s]*)*)@")
_FLAG_NAME = re.compile(r"-{1,2}[\w.\-]*")
#: annotations whose values are kept in container specs (the pod identity), and the CDI prefix
K8S_ANNOTATIONS = ("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.container-name", "io.kubernetes.cri.container-type",
                   "io.kubernetes.cri.sandbox-id", "io.kubernetes.cri.sandbox-uid",
                   "io.kubernetes.cri.image-name", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace",
                   "io.kubernetes.pod.uid", "io.kubernetes.container.name")
CDI_PREFIX = "cdi.k8s.io/"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  #: hashed in Kubernetes API answers
TOML_FILE_KEYS = ("_file", "_path", "_dir")  #: TOML keys naming a file are kept (``tls.key_file``)
#: ``key = value`` with a bare, quoted or dotted key (TOML v1.0.0 "Keys")
_TOML_KEY_PART = r"""(?:[\w\-]+|"[^"\n]*"|'[^'\n]*')"""
_TOML_CRED = re.compile(rf"^(?P<k>\s*{_TOML_KEY_PART}(?:\s*\.\s*{_TOML_KEY_PART})*\s*=\s*)(?P<v>.*?)\s*$")
_TOML_PLAIN = re.compile(r'"([^"\\]*)"|\'([^\']*)\'')
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
#: the ``text`` rule in a manifest note (pod logs, journal fields, package logs)
TEXT_NOTE = (f"URL credentials, {'/'.join(AUTH_SCHEMES)} values, NAME=X for credential names, secret shapes "
             f"(detect-secrets: cloud and forge tokens, private keys, password/key/token assignments)")
#: TOML keys whose values are credentials whatever they hold (containerd registry ``headers``,
#: hosts.toml ``[host."...".header]``), in addition to :func:`cred_name` ones; compared lower-cased
TOML_CRED_KEYS = ("authorization", "proxy-authorization", "x-jfrog-art-api", "x-api-key", "private-token",
                  "cookie")
_REDACTED_VALUE = re.compile(r"^\W*redacted\b|^\*{3,}$", re.I)
#: the policy's names, those of :mod:`forensics.redact_url` included
__all__ = ["ASSIGN_WORDS", "AUTH_SCHEMES", "CDI_PREFIX", "CRED_WORDS", "ENV_ALLOW", "ENV_KEPT",
           "LAST_APPLIED", "MARK", "RULES", "SCRUB_MIN", "TEXT_NOTE", "TOML_CRED_KEYS", "TOML_FILE_KEYS",
           "WORD_MARK", "api_annotation_hashed", "cred_name", "description", "env_kept", "is_redacted",
           "kept_annotation", "redact_args", "redact_argv", "redact_bytes", "redact_containerd_toml",
           "redact_env", "redact_message", "redact_spec", "redact_text", "redact_toml", "redact_url",
           "redact_url_credentials", "redacted", "scrub", "secret_parts", "url_secrets"]


def _names(words) -> str:
    return ", ".join(words)


#: one line per rule, built from the constants the code uses; :func:`description` joins them
RULES = (
    ("env", f"env values of containers and pods, except for {_names(ENV_KEPT)} (names holding none of "
            f"{_names(CRED_WORDS)})"),
    ("annotations", f"annotation values in container specs other than the pod identity "
                    f"({_names(K8S_ANNOTATIONS)}) and {CDI_PREFIX}*; in Kubernetes API answers "
                    f"{LAST_APPLIED} and annotations named with a credential word"),
    ("args", f"in args and commands: the value of a credential-named flag (--password X, --token=X), "
             f"after -p (-p X, -pX) and after {'/'.join(AUTH_SCHEMES)}"),
    ("text", f"in every other string (spec values, pod logs, journal entries, package logs, Kubernetes API "
             f"answers, this command line): URL credentials, {'/'.join(AUTH_SCHEMES)} values and NAME=X "
             f"values where NAME holds {_names(ASSIGN_WORDS)} (logs are otherwise kept as written)"),
    ("shapes", "in the same strings, values of a known secret shape (detect-secrets plugins: AWS access keys, "
               "GitHub/GitLab/Slack/Stripe/PyPI/npm tokens, JWTs, private keys whole, password/key/token "
               "assignments and flags, Authorization: <scheme> X)"),
    ("urls", "URLs of sources (--prometheus, --dcgm-url): user info and the query; URL arguments of "
             "this command line, upload destinations and URLs in messages: passwords, every query value and "
             "object-store path tokens (/p/<token>/); in a query shown without its URL, values of credential "
             "names"),
    ("toml", f"in containerd's config.toml and its imports, on the parsed file: values of keys holding a "
             f"credential word (registry auth), except keys ending in {_names(TOML_FILE_KEYS)}, header "
             f"values of {_names(TOML_CRED_KEYS)}, and the text and shapes rules in every other string"),
    ("known secrets", "the upload's auth header and URL secrets wherever a message repeats them"),
)


def description(enabled: bool) -> str:
    """The manifest's ``redaction.what``: every line of :data:`RULES`, or that nothing was redacted
    (``--no-redact``)."""
    if not enabled:
        return "nothing: --no-redact was given"
    return ("values replaced by <redacted hmac:XXXXXXXX> (a keyed hash, equal values match within this "
            "bundle) or <redacted>, names kept: " + "; ".join(f"{what}" for _, what in RULES))


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
    return _URL_CRED.sub(f"://{MARK}@", text)


def cred_name(name: str) -> bool:
    """Whether a name (env, flag, annotation, TOML key) holds one of :data:`CRED_WORDS`, any case."""
    low = name.lower()
    return any(w in low for w in CRED_WORDS)


def env_kept(name) -> bool:
    """Whether an env variable's value is kept: its name is one of :data:`ENV_KEPT` and holds no
    credential word (:data:`ENV_ALLOW`)."""
    return isinstance(name, str) and bool(ENV_ALLOW.match(name))


def api_annotation_hashed(name) -> bool:
    """Whether an annotation's value is hashed in a Kubernetes API answer: :data:`LAST_APPLIED` (it
    holds whole manifests) or a name holding a credential word."""
    return isinstance(name, str) and (name == LAST_APPLIED or cred_name(name))


def _cred_flag(arg: str) -> bool:
    """``--password``, ``-api-key``: a flag whose name holds a credential word."""
    return bool(_FLAG_NAME.fullmatch(arg)) and cred_name(arg)


def redact_text(text: str, p_flag: bool = True) -> str:
    """Credentials inside free text (a shell command line, a log line): URL credentials,
    ``Bearer X`` / ``Basic X``, ``NAME=X`` where NAME holds token, secret, passw*, key, auth* or
    credential (the name is kept), and with ``p_flag`` ``-p X`` / ``-pX``; each value becomes a
    :func:`redacted` hash. Already redacted values are left as they are."""
    low = text.lower()
    shaped = redact_shapes(text, redacted, low)  # the ``shapes`` rule (detect-secrets): first, so the same
    if shaped is not text:                       # value gets the same hash
        text, low = shaped, shaped.lower()
    if "://" in text:  # each rule runs only when its marker is present: megabytes of junk stay cheap
        text = redact_url_credentials(text)
    if any(s in low for s in _AUTH_LOW):
        text = _AUTH_SCHEME.sub(lambda m: m.group("name") + m.group("sp") + redacted(m.group("v")), text)
    if "=" in text and any(w in low for w in ASSIGN_WORDS):
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
    """Whether an annotation's value is kept in a container spec: :data:`K8S_ANNOTATIONS` and
    :data:`CDI_PREFIX` ``*``."""
    return isinstance(name, str) and (name in K8S_ANNOTATIONS or name.startswith(CDI_PREFIX))


def redact_env(entries: list) -> list:
    """Redact a ``["NAME=value", ...]`` list: names are kept, values of names outside
    :data:`ENV_ALLOW` become :func:`redacted` hashes."""
    out = []
    for e in entries:
        if not isinstance(e, str):
            out.append(e)
            continue
        name, eq, value = e.partition("=")
        value = redacted(value) if eq and not env_kept(name) else redact_text(value, p_flag=False)
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
    return "://" not in text and "=" not in text and "b" not in text and "B" not in text and not has_marker(text)


def _text_unchanged(text: str) -> bool:
    """True when ``redact_text(text, p_flag=False)`` returns ``text`` as it is: none of its rules'
    markers is present (the same tests :func:`redact_text` makes before running a rule)."""
    if "://" in text or has_marker(text):
        return False
    low = text.lower()
    return not (any(s in low for s in _AUTH_LOW) or ("=" in text and any(w in low for w in ASSIGN_WORDS)))


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


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as the manifest records it when redaction is on: the ``text`` rule in each
    argument (URL credentials, Bearer/Basic values, credential ``NAME=X``), and an argument that is a
    URL through :func:`redact_url` with ``keep_names=True`` (``--upload-url``'s presigned signature, a
    ``?token=``). Raises nothing."""
    out = []
    for a in argv:
        a = redact_text(a, p_flag=False)
        out.append(redact_url(a, keep_names=True) if _URL.match(a) else a)
    return out


def redact_toml(text: str) -> str:
    """containerd TOML text with credentials replaced, line by line so that everything else stays as
    written: the value of a ``key = value`` line whose last key part holds a credential word
    (:data:`CRED_WORDS`: registry ``password``, ``auth``, ``identitytoken``) becomes
    ``"<redacted hmac:XXXXXXXX>"`` (a TOML string, so the file still parses; a plain string's text is
    what is hashed, so it matches the same value in an env), and ``scheme://user:pass@`` becomes
    ``scheme://<redacted>@`` anywhere. A multi-line string value is not followed, and keys ending in
    :data:`TOML_FILE_KEYS` (``tls.key_file``) are kept. Raises nothing."""
    out = []
    for line in text.split("\n"):
        m = _TOML_CRED.match(line)
        key = re.findall(_TOML_KEY_PART, m.group("k"))[-1].strip("\"'") if m else ""
        if m and m.group("v") and cred_name(key) and not key.lower().endswith(TOML_FILE_KEYS):
            value = m.group("v")
            plain = _TOML_PLAIN.fullmatch(value)  # a plain string: hash its text
            if plain:
                value = plain.group(1) if plain.group(1) is not None else plain.group(2)
            line = f'{m.group("k")}"{redacted(value)}"'
        out.append(redact_url_credentials(line))
    return "\n".join(out)


def is_redacted(value) -> bool:
    """Whether a recorded value was removed by a redaction: ``<redacted hmac:...>``, ``<redacted>``,
    ``REDACTED`` (this module) or another tool's ``***``."""
    return bool(_REDACTED_VALUE.match(str(value)))


def _toml_value(key: str, value, cred: bool):
    """A parsed TOML value with the ``toml`` rule applied: under a credential key (``cred``) every string
    is hashed; tables are walked (``auth = {username = .., password = ..}`` keeps the user name)."""
    if isinstance(value, dict):
        return {k: _toml_value(k, v, _toml_cred(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_toml_value(key, v, cred) for v in value]
    if isinstance(value, str):
        return redacted(value) if cred else redact_text(value, p_flag=False)
    return redacted(str(value)) if cred and not isinstance(value, bool) else value


def _toml_cred(key: str) -> bool:
    low = key.lower()
    return (low in TOML_CRED_KEYS or cred_name(key)) and not low.endswith(TOML_FILE_KEYS)


def redact_containerd_toml(text: str) -> tuple[str, list[str]]:
    """containerd's ``config.toml`` (or an import, a ``hosts.toml``) as a bundle stores it, and what was
    done, as ``(text, notes)``: the file is parsed (``tomllib``) and the ``toml`` rule applied to the
    parsed values (:func:`_toml_value`: inline tables, header arrays, every string through the text and
    shapes rules). A file with nothing to redact comes back byte for byte; otherwise the line rule
    (:func:`redact_toml`, layout and comments kept) is used when its result parses to the redacted
    values, else the redacted values are written as TOML (``tomli_w``) and the notes say so. A file that
    does not parse gets the line rule, noted. The result parses whenever the input does. Raises
    nothing (``RecursionError`` aside)."""
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as e:
        return redact_toml(text), [f"not valid TOML ({str(e)[:120]}): credentials redacted line by line"]
    safe = _toml_value("", doc, False)
    if safe == doc:
        return text, ["nothing to redact: stored as on the node"]
    lines = redact_toml(text)
    try:
        if tomllib.loads(lines) == safe:
            return lines, ["credential values redacted; every other line as on the node"]
    except (tomllib.TOMLDecodeError, ValueError):
        pass
    return tomli_w.dumps(safe), ["credential values redacted on the parsed file, written back as TOML: "
                                 "values as on the node, comments and layout not kept"]
