"""Words for people (issue 28 item 3): a count with its noun in the right number, ``1 problem`` and
``2 problems``, never ``1 problems``. Used by the reports, the CLI's lines and the collectors' notes.
"""
from __future__ import annotations

#: nouns whose plural is not the noun + ``s``
_IRREGULAR = {"entry": "entries", "day": "days", "process": "processes", "match": "matches", "child": "children",
              "this": "these", "was": "were", "is": "are"}


def plural(noun: str) -> str:
    """The plural of ``noun`` (its last word: ``more cause`` -> ``more causes``): English's regular
    rules and :data:`_IRREGULAR`."""
    head, _, last = noun.rpartition(" ")
    if last in _IRREGULAR:
        word = _IRREGULAR[last]
    elif last.endswith(("s", "x", "ch", "sh")):
        word = last + "es"
    elif last.endswith("y") and last[-2:-1] not in "aeiou":
        word = last[:-1] + "ies"
    else:
        word = last + "s"
    return f"{head} {word}" if head else word


def count_of(n: int, noun: str) -> str:
    """``n`` and ``noun`` in the right number: ``1 node``, ``0 nodes``, ``3 more causes``."""
    return f"{n} {noun if n == 1 else plural(noun)}"


def setting(value) -> str:
    """A configuration value as its file spells it: ``true`` / ``false`` (TOML, YAML, env), ``unknown``
    for ``None`` (the node did not show it), anything else as its text; never Python's ``True``."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
