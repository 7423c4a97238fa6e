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
  are kept only for :data:`K8S_ANNOTATIONS`, the engines' markers (``io.container.manager``),
  :data:`CDI_PREFIX` ``*`` and runc's ``bundle`` label
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
  path and query) go through :func:`redact_message`. In every free text, bundles' logs included, one
  rule (:func:`hide_url_secrets`, called by :func:`redact_text` and :func:`redact_message`): a URL's
  object-store path token and the value of a query parameter named with a credential word (``?token=``,
  ``&X-Amz-Signature=``, ``&sig=``), hashed in bundles and marked in messages.
- ``config`` (every configuration file a collector stores: containerd, CRI-O and toolkit TOML, Docker's
  daemon.json, OCI hook files, CDI specs, the device plugin's settings, kubelet and k3s configs, unit and
  environment files; :mod:`forensics.redact_config`, which holds the rule's code): per format, on the
  parsed file where the format has a parser, values of keys named by :func:`secret_key` (a credential
  word, :data:`TOML_CRED_KEYS`, :data:`CONFIG_PASS_WORDS`; not keys ending in :data:`TOML_FILE_KEYS`)
  hashed, argument lists through the ``args`` rule, ``NAME=X`` env entries by their name, and the
  ``text`` rule in every other string; the copy keeps its layout where its text parses to the redacted
  values, else it is written back from them; the manifest record says how and how many values.
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

from .engines import MARKER_ANNOTATIONS
from .redact_shapes import has_marker, redact_shapes
from .redact_url import (MARK, SCRUB_MIN, WORD_MARK, hide_url_secrets, redact_message, redact_url, scrub, secret_parts,
                         url_secrets)

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
#: ``NAME=X``: X is a quoted string (its quotes kept) or runs to the next space (a quote just before it
#: kept: ``Environment="token=X"``; the lazy run tests two characters ahead at each step: linear); or the
#: rest of that run, or of that quoted string, after a value the shapes rule replaced (``password=:;x``,
#: ``password="a b"``: the shapes stop at ``;`` and at a space); a quote never closed is kept and the run
#: after it is the value (``password=';x``)
_RUN = r"[^\s\"']\S*?(?=[\"']?(?:\s|\Z))"
_TAIL = r"(?![\"']?(?:\s|\Z))\S+?(?=[\"']?(?:\s|\Z))"  #: the same, from any character but a closing quote
_ASSIGN = re.compile(r"(?<![\w.\-])(?P<name>[\w.\-]++)=(?:(?![\"']?<redacted)(?:(?P<q>[\"'])(?P<qv>[^\"'\n]*)(?P=q)|"
                     rf"(?P<v>{_RUN})|(?P<oq>[\"'])(?P<ov>{_RUN}))|(?P<h><redacted hmac:[0-9a-f]{{8}}>)(?P<t>{_TAIL})|"
                     r"(?P<hq>[\"'])(?P<h2><redacted hmac:[0-9a-f]{8}>)(?P<tq>[^\"'\n]+)(?P=hq))")
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
TOML_FILE_KEYS = ("_file", "_path", "_dir")  #: config keys naming a file are kept (``tls.key_file``)
#: config key parts that name a password without a :data:`CRED_WORDS` word (``DB_PASS``, ``passphrase``)
CONFIG_PASS_WORDS = ("pass", "passphrase", "cookie", "private")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_FILE_KEY = re.compile(r"(?:[_\-.](?i:file|path|dir)|[a-z0-9](?:File|Path|Dir))\Z")  #: ``tlsKeyFile``, ``key-file``
_KEY_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")  #: ``DB_PASS`` -> DB, PASS; ``sslPass`` -> ssl, Pass
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
           "CONFIG_PASS_WORDS", "LAST_APPLIED", "MARK", "RULES", "SCRUB_MIN", "TEXT_NOTE", "TOML_CRED_KEYS", "TOML_FILE_KEYS",
           "WORD_MARK", "api_annotation_hashed", "cred_name", "description", "env_kept", "is_redacted",
           "kept_annotation", "redact_args", "redact_argv", "redact_bytes",
           "redact_env", "redact_message", "redact_spec", "redact_text", "redact_url", "secret_key",
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
             "object-store path tokens (/p/<token>/); in every string (logs in bundles too), object-store path "
             "tokens of URLs and the values of query parameters named with a credential word (?token=, "
             "&X-Amz-Signature=, &sig=), URL or not"),
    ("config", f"in the configuration files stored (containerd, CRI-O and toolkit TOML, daemon.json, OCI hooks, "
               f"CDI specs, device plugin settings, kubelet and k3s configs, unit and environment files), per format "
               f"and on the parsed file where it parses: values of keys holding {_names(CRED_WORDS)} or a part "
               f"{_names(CONFIG_PASS_WORDS)} (registry auth, HF_TOKEN=, password:), except keys ending in "
               f"{_names(TOML_FILE_KEYS)}, header values of {_names(TOML_CRED_KEYS)}, argument lists by the args "
               f"rule, and the text and shapes rules in every other string, comments included"),
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


def secret_key(name) -> bool:
    """Whether a config key or env name names a secret (the ``config`` rule): it holds one of
    :data:`CRED_WORDS` or is one of :data:`TOML_CRED_KEYS`, or one of its parts (split at ``_ - .`` and
    camelCase) is one of :data:`CONFIG_PASS_WORDS` (``DB_PASS``, ``sslPassphrase``), and it does not
    end in :data:`TOML_FILE_KEYS` (``tls.key_file``, ``tlsPrivateKeyFile``: a path). Any case."""
    if not isinstance(name, str):
        return False
    low = name.lower()
    if _FILE_KEY.search(name) or low.endswith(TOML_FILE_KEYS):
        return False
    if low in TOML_CRED_KEYS or cred_name(name):
        return True
    return any(p.lower() in CONFIG_PASS_WORDS for p in _KEY_PARTS.findall(name))


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
    text = hide_url_secrets(text, lambda v: redacted(v) if v else v)
    if any(s in low for s in _AUTH_LOW):
        text = _AUTH_SCHEME.sub(lambda m: m.group("name") + m.group("sp") + redacted(m.group("v")), text)
    if "=" in text and any(w in low for w in ASSIGN_WORDS):
        text = _ASSIGN.sub(_assigned, text)
    if p_flag and "-p" in text:
        text = _P_FLAG.sub(lambda m: "-p" + m.group("sp") + redacted(m.group("v")), text)
    return text


def _assigned(m) -> str:
    if not _ASSIGN_WORDS.search(m.group("name")):
        return m.group(0)
    if m.group("h"):
        return f"{m.group('name')}={m.group('h')}{redacted(m.group('t'))}"
    if m.group("hq"):
        q = m.group("hq")
        return f"{m.group('name')}={q}{m.group('h2')}{redacted(m.group('tq'))}{q}"
    if m.group("q"):
        return f"{m.group('name')}={m.group('q')}{redacted(m.group('qv'))}{m.group('q')}"
    if m.group("oq"):  # a quote never closed (password=';x): the run after it
        return f"{m.group('name')}={m.group('oq')}{redacted(m.group('ov'))}"
    return f"{m.group('name')}={redacted(m.group('v'))}"


def redact_bytes(data: bytes) -> bytes:
    """Log bytes with the credentials :func:`redact_text` recognises (without the ``-p`` rule)
    replaced: URL credentials, ``Bearer``/``Basic`` values, credential ``NAME=X``; every other byte,
    valid UTF-8 or not, is kept as it was. Linear in ``len(data)``; raises nothing."""
    text = data.decode("utf-8", "surrogateescape")
    return redact_text(text, p_flag=False).encode("utf-8", "surrogateescape")


def kept_annotation(name) -> bool:
    """Whether an annotation's value is kept in a container spec: :data:`K8S_ANNOTATIONS`, the engines'
    own markers (:data:`forensics.engines.MARKER_ANNOTATIONS`: ``io.container.manager``) and
    :data:`CDI_PREFIX` ``*``."""
    return isinstance(name, str) and (name in K8S_ANNOTATIONS or name in MARKER_ANNOTATIONS
                                      or name.startswith(CDI_PREFIX))


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


def redact_args(args: list, p_flag: bool = True) -> list:
    """Redact an argv: values of credential-looking flags (``--token=X``, ``--password X``), with
    ``p_flag`` the value after ``-p``, the value after a trailing ``Bearer``/``Basic``, and in every
    string :func:`redact_text` (with ``p_flag``)."""
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
            out.append(redact_text(a, p_flag))
        hide_next = _cred_flag(a) or (p_flag and a == "-p") or bool(_AUTH_SCHEME_LAST.search(a))
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
    ``?token=``), also one typed without its scheme (``bob:pw@prom:9090``). Raises nothing."""
    out = []
    for a in argv:
        a = redact_text(a, p_flag=False)
        if not _URL.match(a) and _BARE_USERINFO.match(a):  # bob:pw@prom:9090, a URL typed without its scheme
            a = redact_url("http://" + a, keep_names=True)[len("http://"):]
        out.append(redact_url(a, keep_names=True) if _URL.match(a) else a)
    return out


#: ``user:password@host`` at the start of an argument with no ``scheme://`` (``--prometheus bob:pw@prom:9090``)
_BARE_USERINFO = re.compile(r"[^\s/@:]+:[^\s/@]*@[^\s/@]")


def is_redacted(value) -> bool:
    """Whether a recorded value was removed by a redaction: ``<redacted hmac:...>``, ``<redacted>``,
    ``REDACTED`` (this module) or another tool's ``***``."""
    return bool(_REDACTED_VALUE.match(str(value)))
