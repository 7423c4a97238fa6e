"""Shortening a log line for a summary without cutting its error clause (issue 26 item 5: an incident's
summary must keep ``lstat ... no such file or directory``, ``cuInit failed``, the NVML text whole).

:func:`excerpt` keeps a line whole when it fits; else it keeps the span around the first error clause it
finds (a signature of :mod:`forensics.neighbours`, an NVML/CUDA error of the EPERM family, a kernel
``NVRM:`` text, or a generic ``error``/``failed`` clause), through the end of that clause, and marks each
cut with ``…``.
"""
from __future__ import annotations

import re

from . import neighbours

#: what an error clause starts with, checked after the neighbours' signatures
_GPU_CLAUSE = r"Failed to initialize NVML[^\"]*|cuInit failed[^\"]*|NVML_ERROR_\w+|CUDA_ERROR_\w+|NVRM: [^\"]*"
_SPECIFIC = re.compile(_GPU_CLAUSE)
_CLAUSE = re.compile(_GPU_CLAUSE + r"|[^\s\"=]*(?:[Ee]rror|[Ff]ailed|no such file or directory|[Pp]ermission denied)[^\"]*")
#: characters kept by default
LIMIT = 300


def excerpt(text: str, limit: int = LIMIT) -> str:
    """``text`` when it has at most ``limit`` characters, else at most about ``limit`` characters holding its
    first error clause whole (a GPU one before a generic ``failed``; the clause is kept whole even when it
    alone is longer), after as much of the line's start as fits, with ``…`` where text was cut; every cut
    falls between words (at a space), never inside one. Raises nothing."""
    text = str(text)
    if len(text) <= limit:
        return text
    m = neighbours.ANY.search(text) or _SPECIFIC.search(text) or _CLAUSE.search(text)
    if m is None:
        return cut(text, limit)
    end = m.end()
    tail = _CLAUSE.match(text, m.start())  # a signature's match may stop short of its clause's end
    if tail:
        end = max(end, tail.end())
    if end <= limit:
        return cut(text, max(limit, _word_end(text, end)))
    start = m.start()
    while start > 0 and not text[start - 1].isspace():  # the clause's whole first word (output="Failed ...)
        start -= 1
    stop = _word_end(text, end)
    clause = text[start:stop].strip() + ("…" if stop < len(text) else "")
    room = limit - len(clause) - 3
    head = cut(text[:start].rstrip(), room).rstrip("…") if room >= 20 else ""
    return (head.rstrip() + " … " if head else "…") + clause


def _is_word(c: str) -> bool:
    return not c.isspace()


def _word_end(text: str, i: int) -> int:
    """``i``, moved on to the end of the word it falls inside (a whole word is kept, not cut)."""
    while 0 < i < len(text) and _is_word(text[i - 1]) and _is_word(text[i]):
        i += 1
    return i


def cut(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its start up to the last word boundary
    within ``limit - 1`` characters (a space: ``openssh-server:amd64`` is one word) and
    ``…``. A first word longer than the limit is kept up to the limit (nothing else can be shown); a
    later one is left out whole, however little is shown before it."""
    text = str(text)
    if len(text) <= limit:
        return text
    n = max(1, limit - 1)
    i = n
    while i > 0 and _is_word(text[i - 1]) and _is_word(text[i]):
        i -= 1
    if not text[:i].strip(" ,;="):  # one very long first word: cut it rather than show nothing
        i = n
    return text[:i].rstrip(" ,;=") + "…"
