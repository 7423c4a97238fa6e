"""The one home for evidence in a copy-paste command: every name taken from the node that enters a
suggested shell command is checked against its own grammar and shell-quoted; a name that fails is
never put in a command, only shown as data (issue 27).

The reports' commands are pasted by an engineer with cluster-admin rights, and the names come from a
node that may be compromised (or from any local user of it: a pod namespace ``ml;curl x|sh;:``, a
name holding ESC/CSI characters). The grammars are the ones the names must have to be real:

- ``namespace``: a DNS-1123 label (Kubernetes ``IsDNS1123Label``: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at
  most 63 characters);
- ``pod``, ``node``: a DNS-1123 subdomain (``IsDNS1123Subdomain``: such labels joined by ``.``, at most
  253 characters);
- ``release``: a Helm release name (a DNS-1123 subdomain of at most 53 characters, Helm's ``ValidateReleaseName``);
- ``container``: 64 hex digits, or runc's id grammar (libcontainer ``^[\\w+-\\.]+$``, ASCII), here not
  starting with ``-`` or ``.`` so it can never read as an option or a path step;
- ``unit``: a systemd unit name (systemd.unit(5): ASCII letters, digits, ``:-_.\\`` and one ``@``, a
  known type suffix, at most 255 characters), not starting with ``-``;
- ``path``: an absolute, normalised path of ``[A-Za-z0-9._+@-]`` components (no ``..``, no ``//``, no
  comma or ``=`` that a Helm ``--set`` would split on), at most 4096 characters;
- ``pci``: a PCI address ``DDDD:BB:DD.F`` (lower-case hex).
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from forensics.bundle_open import shown

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_SUB = rf"{_LABEL}(?:\.{_LABEL})*"
_UNIT_TYPES = "service|socket|device|mount|automount|swap|target|path|timer|slice|scope"
#: kind -> (full-match pattern, what the value must be, as the held-back note says it)
GRAMMARS: dict[str, tuple[re.Pattern, str]] = {
    "namespace": (re.compile(_LABEL, re.A), "a DNS-1123 label (a Kubernetes namespace)"),
    "pod": (re.compile(rf"(?=[^\n]{{1,253}}\Z){_SUB}", re.A), "a DNS-1123 subdomain (a Kubernetes pod name)"),
    "node": (re.compile(rf"(?=[^\n]{{1,253}}\Z){_SUB}", re.A), "a DNS-1123 subdomain (a Kubernetes node name)"),
    "release": (re.compile(rf"(?=[^\n]{{1,53}}\Z){_SUB}", re.A), "a Helm release name"),
    "container": (re.compile(r"[0-9a-f]{64}|[A-Za-z0-9_+][A-Za-z0-9_+.-]{0,1023}", re.A),
                  "a container ID (64 hex digits, or runc's id grammar)"),
    "unit": (re.compile(rf"(?=[^\n]{{1,255}}\Z)[A-Za-z0-9:_.\\][A-Za-z0-9:_.\\-]*(?:@[A-Za-z0-9:_.\\-]*)?"
                        rf"\.(?:{_UNIT_TYPES})", re.A), "a systemd unit name"),
    "path": (re.compile(r"/|(?:/[A-Za-z0-9._+@-]+){1,512}", re.A), "an absolute path of plain characters"),
    "pci": (re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-7])?", re.A), "a PCI address"),
}


@dataclass(frozen=True)
class Ev:
    """A value from the node for one word of a command: ``kind`` names its grammar (:data:`GRAMMARS`),
    ``prefix`` is authored text glued before it in the same word (``--driver-root=``)."""
    kind: str
    value: object
    prefix: str = ""


def valid(kind: str, value) -> bool:
    """True when ``value`` is a ``str`` that fully matches the grammar of ``kind`` (a path also has to
    be normalised: no ``.`` or ``..`` step, no trailing ``/``). Raises ``KeyError`` for an unknown kind."""
    pattern, _ = GRAMMARS[kind]
    if not isinstance(value, str) or len(value) > 4096 or not pattern.fullmatch(value):
        return False
    return kind != "path" or os.path.normpath(value) == value


def word(w) -> str | None:
    """One word of a command: an authored ``str`` as written (shell text: pipes and quotes kept), an
    :class:`Ev` quoted with ``shlex.quote`` (prefix and value) when valid, else ``None``."""
    if isinstance(w, Ev):
        return shlex.quote(w.prefix + w.value) if valid(w.kind, w.value) else None
    return w


def command(*words) -> str | None:
    """The command line of ``words`` (see :func:`word`), joined by spaces; ``None`` when any value from
    the node fails its grammar: such a value never enters a command (:func:`held` shows it as data)."""
    out = [word(w) for w in words]
    return None if any(w is None for w in out) else " ".join(out)


def held(*words) -> list[str]:
    """A sentence for each :class:`Ev` of ``words`` that fails its grammar, the value shown as data
    (its ``ascii()`` form: quoted, every control or non-ASCII character escaped, cut at 200
    characters): ``namespace 'ml;curl x|sh;:' is not a DNS-1123 label (...): left out of the commands``."""
    return [f"{w.kind} {shown(w.value)} is not {GRAMMARS[w.kind][1]}: left out of the commands"
            for w in words if isinstance(w, Ev) and not valid(w.kind, w.value)]


def lines(specs: list) -> tuple[list[str], list[str]]:
    """``(commands, held)`` from ``specs``: each a ``str`` (an authored line, kept), a ``tuple`` of words
    (:func:`command`; the same line twice is kept once) or a lone :class:`Ev` (a value checked for its
    note only); a tuple with a bad value gives no line, and the sentences (:func:`held`) are returned
    once each, in order."""
    out, bad = [], []
    for s in specs:
        if isinstance(s, Ev):  # checked only: a note when bad, no line
            bad += [h for h in held(s) if h not in bad]
        elif isinstance(s, tuple):
            line = command(*s)
            if line is None:
                bad += [h for h in held(*s) if h not in bad]
            elif line not in out:
                out.append(line)
        else:
            out.append(s)
    return out, bad
