"""dpkg's status database (``/var/lib/dpkg/status``), read as stanzas.

Format: deb822 paragraphs separated by blank lines (deb-control(5)); dpkg writes each installed or known
package's control fields plus ``Status: <want> <flag> <state>`` (``install ok installed``, ``install ok
half-configured``, ``deinstall ok config-files``; dpkg-query(1) ``${Status}``, dpkg(1) "package states").
A field's continuation lines start with a space or a tab. Stanzas are streamed: the file of a busy host is
megabytes long.
"""
from __future__ import annotations

import re
import time
from typing import BinaryIO, Callable

CHUNK = 1 << 20  #: bytes read at a time
PATH = "/var/lib/dpkg/status"  #: where dpkg keeps it on a node
LIMIT = 64 << 20               #: bytes of it any collector reads (a busy host's is a few MB)
COPY = "node/dpkg-status"      #: the node collector's whole copy of it in a bundle (collectors/node.py)
#: the end of a stanza: its last newline and the blank lines after it (a line of only whitespace is blank)
_SEP = re.compile(rb"\n(?:[ \t\r\x0b\x0c]*\n)+")
_BLANK_END = re.compile(rb"\n[ \t\r\x0b\x0c]*\Z")
_BLANKS = re.compile(rb"[ \t\r\x0b\x0c]*\Z")


def stanzas(f: BinaryIO, limit: int, keep: Callable[[bytes], bool],
            deadline: float | None = None) -> tuple[list[bytes], str | None]:
    """``(kept, cut)``: the stanzas of the open binary file ``f`` for which ``keep(stanza)`` is true, each as
    its bytes (its lines, each with its newline, without the blank lines around it), from at most ``limit``
    bytes of the file and until ``deadline`` (a ``time.monotonic()`` value; None: none), and ``None``, or why
    the file was cut (the bound or the deadline; the stanza it cut is not kept). The file is read in
    :data:`CHUNK` pieces and split at blank lines with one regular expression (a 64 MiB file in about a second,
    not line by line in Python). Raises ``OSError`` from the read."""
    kept: list[bytes] = []
    buf, start, read = bytearray(b"\n"), 1, 0  # a newline in front: a first line that is blank ends nothing
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return kept, f"the time budget (--time-budget) was spent after {read} bytes of the file"
        piece = f.read(min(CHUNK, limit + 1 - read))
        read += len(piece)
        over = read > limit  # the stanzas ended within the bound are kept, the one it cuts is not
        if not piece:
            break
        # where a separator may start: its newline before the last piece's end, when only blanks follow it
        nl = buf.rfind(b"\n", start - 1)
        scan = nl if _BLANKS.match(buf, nl + 1) else len(buf)
        buf += piece[:len(piece) - 1] if over else piece
        for m in _SEP.finditer(buf, scan):
            stanza = bytes(buf[start:m.start() + 1])
            if stanza.strip() and keep(stanza):
                kept.append(stanza)
            start = m.end()
        if over:
            return kept, f"only the first {limit} bytes of the file were read"
        if start > CHUNK:
            del buf[:start - 1]
            start = 1
    tail = bytes(buf[start:])
    m = _BLANK_END.search(tail)
    tail = tail[:m.start() + 1] if m else tail
    if tail.strip() and keep(tail):
        kept.append(tail)
    return kept, None


def fields(stanza: bytes, names: tuple[str, ...]) -> dict[str, str]:
    """The one-line values of the fields ``names`` in ``stanza`` (``{"Package": "nvidia-utils-550", ...}``);
    a field that is absent is left out. Bytes that are not UTF-8 are replaced."""
    out: dict[str, str] = {}
    for raw in stanza.splitlines():
        if raw[:1] in (b" ", b"\t"):
            continue
        name, sep, value = raw.decode("utf-8", "replace").partition(":")
        if sep and name in names and name not in out:
            out[name] = value.strip()
    return out


#: dpkg(1)'s package states of a package whose files are partly or wholly on disk while its install or upgrade did
#: not finish (a maintainer script failed, dpkg was killed): ``half-installed``, ``unpacked``, ``half-configured``
UNFINISHED = ("half-installed", "unpacked", "half-configured")


def unfinished(f: BinaryIO, names: set[str], limit: int) -> dict[str, dict]:
    """``{package: {"version", "state"}}`` of the packages in ``names`` that the status file ``f`` (open, binary)
    lists in a state of :data:`UNFINISHED` (``Status: install ok half-configured``), from at most ``limit``
    bytes of it. Raises ``OSError`` from the read."""
    def keep(stanza: bytes) -> bool:
        return fields(stanza, ("Package",)).get("Package") in names
    out: dict[str, dict] = {}
    for stanza in stanzas(f, limit, keep)[0]:
        got = fields(stanza, ("Package", "Status", "Version"))
        state = (got.get("Status") or "").rpartition(" ")[2]
        if state in UNFINISHED:
            out.setdefault(got["Package"], {"version": got.get("Version"), "state": state})
    return out
