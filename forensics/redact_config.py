"""The ``config`` rule of the redaction policy (:mod:`forensics.redact`): configuration files as a bundle
stores them, one function per format, and the one call collectors use to store such a file
(:func:`store_config`).

Formats (:data:`FORMATS`) and what is done (values become :func:`forensics.redact.redacted` hashes,
names and keys are kept):

- ``toml`` (containerd, CRI-O ``crio.conf(.d)``, the NVIDIA toolkit's ``config.toml``; TOML v1.0.0),
  ``json`` (Docker's ``daemon.json``, OCI ``hooks.d`` files, CDI specs, containerd's ``options.json``;
  RFC 8259) and ``yaml`` (CDI specs, the device plugin's ``settings.yaml``, KubeletConfiguration and
  k3s ``config.yaml``; YAML 1.1 as PyYAML reads it, JSON included): the file is parsed and
  :func:`redact_doc` applied to the values (a key named by :func:`forensics.redact.secret_key` has its
  values hashed, booleans aside; a table under a key holding :data:`STRONG` has all of them; argument
  lists (:data:`ARGS_KEYS`) take the ``args`` rule, every other string :func:`env_entry`: a
  ``NAME=value`` string (an env list's entry, CRI-O's ``default_env``) by its name, the ``text`` rule).
  The stored text is the file's own (layout kept; for TOML after the line rule :func:`redact_toml`), with
  the ``text`` rule on every comment (:func:`_comments`), when that text parses to exactly the redacted
  values and the file has no duplicate keys or YAML merge keys (which hide values from the parsed
  document); otherwise the redacted values are written back in the same format (``tomli_w``, ``json``,
  ``yaml.safe_dump``). A file that does not parse gets the line and text rules, noted.
- ``env`` (``KEY=value`` lines: the GPU Operator's ``driver-ready``, ``os-release``, systemd
  EnvironmentFiles, Fabric Manager's ``fabricmanager.cfg``; systemd.exec(5) "EnvironmentFile="): a
  secret-named key's value is hashed (quoted, so the line still parses), any other value is taken as
  words (quotes as systemd and sh read them) and goes through the ``args`` rule (``--token X``).
- ``unit`` (systemd unit files and drop-ins; systemd.syntax(7), continuation lines joined):
  ``Environment=`` assignments by the env entry rule, ``Exec*=`` command lines by the ``args`` rule,
  every other line by the ``text`` rule.
- ``text``: the ``text`` rule (``-p`` excepted).

A word or value that changes is written back quoted (``"..."``, ``\\`` and ``"`` escaped), so that a hash
(which holds a space) stays one word. Every function here is linear in the input and raises nothing
(``RecursionError`` is caught: a document nested deeper than the interpreter goes is written back through
the line rules).
"""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass

import tomli_w
import yaml

from .redact import redact_args, redact_text, redact_url_credentials, redacted, secret_key

FORMATS = ("toml", "json", "yaml", "env", "unit", "text")
#: keys whose string lists are argument vectors (and any key ending in ``args``, ``-arg``, ``_arg``)
ARGS_KEYS = ("args", "command", "cmd", "entrypoint", "argv")
#: a table under a key holding one of these has every value hashed (``secrets: {db: X}``)
STRONG = ("password", "passwd", "secret", "token", "credential")
KEPT_VALUES = ("true", "false", "")  #: values kept under a secret name: a switch is not a secret
MAX_PARSED = 1 << 20  #: bytes of a TOML, JSON or YAML file parsed for redaction; a larger one goes line by line
MAX_NODES = 100000  #: values of one parsed file walked at most (a YAML alias bomb expands past it)
#: ``key = value`` with a bare, quoted or dotted key (TOML v1.0.0 "Keys")
_TOML_KEY_PART = r"""(?:[\w\-]+|"[^"\n]*"|'[^'\n]*')"""
_TOML_CRED = re.compile(rf"^(?P<k>[ \t]*{_TOML_KEY_PART}(?:[ \t]*\.[ \t]*{_TOML_KEY_PART})*[ \t]*=[ \t]*)(?P<v>.*)$")
_BARE = re.compile(r"[\w:.+\-]+")  #: a TOML bool, number or date, unquoted
_TOML_PLAIN = re.compile(r'"([^"\\]*)"|\'([^\']*)\'')
#: a word as systemd and sh split them: double-quoted (with escapes), single-quoted, escaped or bare parts
_WORD = re.compile(r"""(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|\\[^\n]|[^\s"'\\])+""")
_PART = re.compile(r""""((?:[^"\\\n]|\\.)*)"|'([^'\n]*)'|\\([^\n])|([^"'\\]+)""")
_ESCAPE = re.compile(r"\\(.)", re.S)
_ENV_LINE = re.compile(r"^(?P<pre>[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][\w.\-]*)[ \t]*=[ \t]*)(?P<v>.*)\Z", re.S)
_UNIT_LINE = re.compile(r"^(?P<pre>[ \t]*(?P<key>[A-Za-z][\w\-]*)[ \t]*=)(?P<v>.*)\Z", re.S)


@dataclass(frozen=True)
class Redacted:
    """What :func:`redact_config` made of a file: ``data`` (the bytes to store), ``notes`` (how, for the
    manifest record) and ``values`` (how many values were replaced)."""

    data: bytes
    notes: tuple[str, ...]
    values: int


def format_of(path: str) -> str:
    """The format of a file by its name: ``.toml`` and CRI-O's ``.conf`` TOML, ``.json`` JSON, ``.yaml``/``.yml``
    YAML, ``.service``/``.scope`` unit, anything else ``text``."""
    name = path.rsplit("/", 1)[-1].lower()
    for suffixes, fmt in (((".toml", ".toml.tmpl"), "toml"), ((".json",), "json"), ((".yaml", ".yml"), "yaml"),
                          ((".service", ".scope", ".slice", ".socket", ".timer"), "unit")):
        if name.endswith(suffixes):
            return fmt
    return "toml" if "/crio/" in path and name.endswith(".conf") else "text"


def store_config(ctx, source: str, rel: str, fmt: str, limit: int, kept: list | None = None):
    """Copy the host file ``source`` to the bundle's ``rel`` through :func:`redact_config` in format ``fmt``
    (unless ``--no-redact``: ``ctx.redact`` false), at most ``limit`` bytes (``BundleWriter.copy``: a
    longer file is recorded truncated), while the time budget lasts (:meth:`CollectContext.copy`: once
    it is spent the file is not read and recorded as cut). ``kept``, when given, gets the bytes stored.
    Returns the manifest record (absent / unreadable / error for a file that cannot be read)."""
    def transform(data: bytes):
        if ctx.redact:
            r = redact_config(data, fmt)
            data, notes = r.data, r.notes
        else:
            notes = ()
        if kept is not None:
            kept.append(data)
        return data, notes
    return ctx.copy(source, rel, "copy-redacted" if ctx.redact else "copy", limit=limit, transform=transform)


def redact_config(data: bytes, fmt: str) -> Redacted:
    """``data`` (a configuration file's bytes, any encoding: non-UTF-8 bytes are kept) with the ``config``
    rule of format ``fmt`` (one of :data:`FORMATS`; module docstring) applied. Raises nothing."""
    text = data.decode("utf-8", "surrogateescape")
    if fmt in ("toml", "json", "yaml") and len(data) > MAX_PARSED:  # a pure-Python YAML parse of MBs: minutes
        out = _toml_lines(redact_toml(text)) if fmt == "toml" else _text(text)
        how = f"over {MAX_PARSED >> 20} MiB, not parsed: redacted line by line"
    elif fmt in ("toml", "json", "yaml"):
        out, how = _structured(text, fmt)
    else:
        out = {"env": redact_env_file, "unit": redact_unit}.get(fmt, _text)(text)
        how = "every other line as on the node"
    n = max(0, out.count("<redacted") - text.count("<redacted"))
    if out == text:
        return Redacted(data, (f"config rule ({fmt}): nothing to redact, stored as on the node",), 0)
    return Redacted(_encode(out), (f"config rule ({fmt}): {n} value{'s' * (n != 1)} redacted; {how}",), n)


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate a JSON escape made, not one decoding made
        return text.encode("utf-8", "backslashreplace")


def _text(text: str) -> str:
    return redact_text(text, p_flag=False)


# -- parsed documents ------------------------------------------------------------------------------
def redact_doc(doc):
    """A parsed TOML, JSON or YAML document with the ``config`` rule applied to its values (module
    docstring); keys are kept (less URL credentials and the like: the ``text`` rule). Returns a new object;
    raises nothing (``RecursionError`` aside)."""
    return _value("", doc, False)


def _args_key(key) -> bool:
    low = key.lower() if isinstance(key, str) else ""
    return low in ARGS_KEYS or low.endswith(("args", "-arg", "_arg"))


def _value(key, value, cred: bool):
    """``value`` under ``key``; ``cred``: every scalar under it is a secret (booleans aside)."""
    if isinstance(value, dict):
        strong = cred and isinstance(key, str) and any(w in key.lower() for w in STRONG)
        return {(_text(k) if isinstance(k, str) else k): _value(k, v, strong or secret_key(k))
                for k, v in value.items()}
    if isinstance(value, list):
        if not cred and value and all(isinstance(v, str) for v in value):
            if _args_key(key):
                return redact_args(value, p_flag=False)
        return [_value(key, v, cred) for v in value]
    if isinstance(value, str):
        return redacted(value) if cred and value.lower() not in KEPT_VALUES else env_entry(value)
    if cred and value is not None and not isinstance(value, bool):
        return redacted(str(value))
    return value


def env_entry(entry: str) -> str:
    """One ``NAME=value`` (an env list's entry, a unit's ``Environment=`` word): the value hashed when NAME
    is a secret name (:func:`forensics.redact.secret_key`, not ``true``/``false``/empty), else the
    ``text`` rule."""
    name, eq, value = entry.partition("=")
    if eq and secret_key(name) and value.lower() not in KEPT_VALUES:
        return f"{name}={redacted(value)}"
    return _text(entry)


def small_doc(doc) -> bool:
    """Whether ``doc`` holds at most :data:`MAX_NODES` values, counted as a walk meets them."""
    stack, n = [doc], 0
    while stack:
        v = stack.pop()
        n += 1
        if n > MAX_NODES:
            return False
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return True


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, noting duplicate and merge (``<<``) keys: both hide values from the result."""

    hidden = False

    def construct_mapping(self, node, deep=False):
        seen = set()
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode):
                self.hidden |= (k.tag, k.value) in seen or k.tag == "tag:yaml.org,2002:merge"
                seen.add((k.tag, k.value))
        return super().construct_mapping(node, deep)


def _parse(text: str, fmt: str) -> tuple[object, bool]:
    """``(document, whether it hides values)``; raises ``ValueError``, ``yaml.YAMLError``, ``RecursionError``."""
    if fmt == "toml":
        return tomllib.loads(text), False  # TOML forbids duplicate keys
    if fmt == "json" or (fmt == "yaml" and text.lstrip().startswith("{")):
        dup = []

        def pairs(items):
            if len({k for k, _ in items}) != len(items):
                dup.append(True)
            return dict(items)
        return json.loads(text, object_pairs_hook=pairs), bool(dup)
    loader = _Loader(text)
    try:
        return loader.get_single_data(), loader.hidden
    finally:
        loader.dispose()


def _same(text: str, fmt: str, doc) -> bool:
    """Whether ``text`` parses to ``doc`` and hides nothing (duplicate or merge keys)."""
    try:
        got, hidden = _parse(text, fmt)
    except (ValueError, TypeError, yaml.YAMLError, RecursionError):
        return False
    return not hidden and got == doc


def _dump(doc, fmt: str) -> str:
    if fmt == "toml":
        return tomli_w.dumps(doc)
    if fmt == "yaml":
        try:
            return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False)
        except (yaml.YAMLError, ValueError, TypeError):
            pass
    return json.dumps(doc, indent=2, ensure_ascii=True, default=str) + "\n"  # (JSON is YAML too)


def _structured(text: str, fmt: str) -> tuple[str, str]:
    """``(stored text, how)`` for a TOML, JSON or YAML file (module docstring)."""
    try:
        doc, hidden = _parse(text, fmt)
        if not small_doc(doc):
            raise ValueError(f"more than {MAX_NODES} values once aliases are expanded")
        safe = redact_doc(doc)
        candidates = [] if hidden else [text] if safe == doc else [redact_toml(text)] if fmt == "toml" else []
        for c in map(_comments, candidates):
            if _same(c, fmt, safe):
                return c, "every other line as on the node"
        out = _dump(safe, fmt)
    except (ValueError, TypeError, yaml.YAMLError, RecursionError) as e:
        where = getattr(e, "problem_mark", None)  # a YAML error's context quotes the file: only its line
        why = (f"line {where.line + 1}" if where else "") if isinstance(e, yaml.YAMLError) else str(e)[:120]
        out = _toml_lines(redact_toml(text)) if fmt == "toml" else _text(text)
        return out, f"not valid {fmt.upper()} ({type(e).__name__}{': ' + why if why else ''}): redacted line by line"
    return out, (f"written back as {fmt.upper()} from the parsed, redacted values: values as on the node, comments "
                 f"and layout not kept" + (" (the file has duplicate or merge keys)" if hidden else ""))


def _comments(text: str) -> str:
    """``text`` with the ``text`` rule on what follows the first ``#`` of each line: every comment of TOML
    and YAML, and perhaps a string's tail (a value changed there fails the parse check: written back)."""
    if "#" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        at = line.find("#")
        if at >= 0:
            lines[i] = line[:at] + _text(line[at:])
    return "\n".join(lines)


def _toml_lines(text: str) -> str:
    """TOML that does not parse, after :func:`redact_toml`: the ``text`` rule on each line except a
    ``key = bare value`` one (``NoNewKeyring = false``: a bool, number or date holds no credential, and
    the ``key = X`` shape would make it a string), so that the copy fails to parse where the file did."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = _TOML_CRED.match(line)
        if not (m and _BARE.fullmatch(m.group("v").rstrip())):
            lines[i] = _text(line)
    return "\n".join(lines)


def redact_toml(text: str) -> str:
    """TOML text with credentials replaced, line by line so that everything else stays as written: the
    value of a ``key = value`` line whose last key part is a secret name (:func:`forensics.redact.
    secret_key`: registry ``password``, ``auth``, ``identitytoken``) becomes ``"<redacted hmac:XXXXXXXX>"``
    (a TOML string, so the file still parses; a plain string's text is what is hashed, so it matches the
    same value in an env), and ``scheme://user:pass@`` becomes ``scheme://<redacted>@`` anywhere. A
    multi-line string value is not followed. Raises nothing."""
    out = []
    for line in text.split("\n"):
        m = _TOML_CRED.match(line)
        key = re.findall(_TOML_KEY_PART, m.group("k"))[-1].strip("\"'") if m else ""
        value = m.group("v").rstrip() if m else ""  # (greedy, then stripped: ``.*?\s*$`` is quadratic in spaces)
        if value and secret_key(key):
            plain = _TOML_PLAIN.match(value)  # a plain string (then perhaps a comment): hash its text
            rest = value[plain.end():] if plain else ""
            if plain and (not rest.strip() or rest.lstrip().startswith("#")):
                value = plain.group(1) if plain.group(1) is not None else plain.group(2)
            else:
                rest = ""
            if value.lower() not in KEPT_VALUES:
                line = f'{m.group("k")}"{redacted(value)}"{rest}'
        out.append(redact_url_credentials(line))
    return "\n".join(out)


# -- words: env files and units ---------------------------------------------------------------------
def _unquote(word: str) -> str:
    out = []
    for m in _PART.finditer(word):
        dq, sq, esc, bare = m.groups()
        out.append(_ESCAPE.sub(r"\1", dq) if dq is not None else sq if sq is not None else
                   esc if esc is not None else bare)
    return "".join(out)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def redact_words(text: str, env: bool = False) -> str:
    """A list of words as systemd and sh split them (``ExecStart=`` arguments, ``Environment=``
    assignments, an env file's value), each word unquoted and then through the ``args`` rule (or with
    ``env`` :func:`env_entry`); a word that changes is written back quoted, the rest as written."""
    words = [(m.start(), m.end(), _unquote(m.group())) for m in _WORD.finditer(text)]
    values = [v for _, _, v in words]
    new = [env_entry(v) for v in values] if env else redact_args(values, p_flag=False)
    out, pos = [], 0
    for (s, e, v), n in zip(words, new):
        if n != v:
            out += [text[pos:s], _quote(n)]
            pos = e
    return "".join(out) + text[pos:] if out else text


def redact_env_file(text: str) -> str:
    """``KEY=value`` lines (module docstring, ``env``); other lines (comments) by the ``text`` rule."""
    out = []
    for line in text.split("\n"):
        m = _ENV_LINE.match(line)
        if not m:
            out.append(_text(line))
            continue
        v = m.group("v").rstrip(" \t\r")
        post = m.group("v")[len(v):]
        words = _WORD.findall(v)
        if secret_key(m.group("name")) and _unquote(v).lower() not in KEPT_VALUES:
            single = len(words) == 1 and words[0] == v and v[:1] in "\"'" and v[-1:] == v[:1]
            q = v[0] if single else '"'
            v = q + redacted(_unquote(v) if single else v) + q
        else:
            v = redact_words(v)
        out.append(m.group("pre") + v + post)
    return "\n".join(out)


def redact_unit(text: str) -> str:
    """A systemd unit file or drop-in (module docstring, ``unit``); a line ending in ``\\`` continues on
    the next (systemd.syntax(7)), and the joined line is redacted as one."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        j = i
        while lines[j].endswith("\\") and j + 1 < len(lines):
            j += 1
        logical = "\n".join(lines[i:j + 1])
        i = j + 1
        m = _UNIT_LINE.match(logical)
        key = m.group("key") if m else ""
        if key == "Environment":
            logical = m.group("pre") + redact_words(m.group("v"), env=True)
        elif key.startswith("Exec"):
            logical = m.group("pre") + redact_words(m.group("v"))
        else:
            logical = _text(logical)
        out.append(logical)
    return "\n".join(out)
