"""Making matplotlib's SVG document fit inside report.html (reports/chart.py draws it): no prolog, doctype
or metadata, ids prefixed with the picture's id, the stroke style scoped to it, clip ids numbered, and a
width that follows the container.

The document is rewritten as UTF-8 bytes, never as a ``str``: a picture that holds one character outside
Latin-1 (the zoomed panels' quotes, a ``×`` count) would be a ``str`` of two bytes a character, and each
rewrite below makes a copy (issue 30: a busy node's picture is a megabyte).
"""
from __future__ import annotations

import html
import io
import re


def inline(svg: bytes, element_id: str, title: str) -> bytes:
    """``svg`` (matplotlib's SVG document, UTF-8) as an ``<svg id=element_id role="img">`` element titled
    ``title`` (escaped), its ids prefixed with ``element_id`` (its characters outside ``[A-Za-z0-9_-]``
    dropped), in UTF-8. Raises ``ValueError`` when ``svg`` holds no ``<svg`` element. Each step writes a new
    document from slices of the last one (:func:`_spliced`), so that no more than two are held at once."""
    start = svg.index(b"<svg")
    meta = re.compile(rb"<metadata>.*?</metadata>\s*", flags=re.S).search(svg, start)
    svg = _spliced(svg, [(0, start, b"")] + ([(meta.start(), meta.end(), b"")] if meta else []))
    p = (re.sub(r"[^A-Za-z0-9_-]", "", element_id) or "chart").encode("ascii")
    svg = _prefix_ids(svg, p)
    svg = svg.replace(b'xlink:href="#', b'xlink:href="#' + p + b"-")
    svg = svg.replace(b"url(#", b"url(#" + p + b"-")
    svg = svg.replace(b"*{stroke-linejoin", b"#" + p + b" *{stroke-linejoin", 1)
    # clip ids hash unrounded bounds, which the layout moves in the last bits between runs: number them
    svg = _number_clips(svg, p)
    m = re.match(rb'<svg ([^>]*?)width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    max_px = round(float(m.group(2)) * 4 / 3) if m else 1000
    size = re.compile(rb'width="[\d.]+pt" height="[\d.]+pt"').search(svg)
    head = svg.index(b">") + 1
    if size and size.end() > head:  # only the root element's own size
        size = None
    label = html.escape(title).encode("utf-8")
    end = len(svg)
    while end > head and svg[end - 1] in b" \t\r\n\x0b\x0c":  # the text's own end, as bytes.strip() found it
        end -= 1
    cuts = [(4, 4, b' id="' + p + b'" role="img" aria-label="' + label + b'"')]
    if size:
        cuts.append((size.start(), size.end(), f'width="100%" style="max-width:{max_px}px;height:auto;'
                                               'display:block"'.encode("ascii")))
    cuts += [(head, head, b"\n <title>" + label + b"</title>"), (end, len(svg), b"\n")]
    return _spliced(svg, cuts)


def _spliced(svg: bytes, cuts) -> bytes:
    """``svg`` with each ``(start, end, text)`` of ``cuts`` (an iterable, in order, not overlapping) put in place
    of its bytes ``start:end``; written into one buffer from slices of ``svg`` (through a memoryview: no copy of
    each), so that a rewrite holds the picture twice at most, not four times (issue 30)."""
    out, view, pos = io.BytesIO(), memoryview(svg), 0
    for start, end, text in cuts:
        out.write(view[pos:start])
        out.write(text)
        pos = end
    out.write(view[pos:])
    view.release()
    return out.getvalue()


# The two rewrites below do what re.sub(r'\bid="', ...) and re.sub(rf"\b{p}-p[0-9a-f]{{10}}\b", ...) did on
# the text, with bytes.find instead of a pattern tried at each of the ~1.4 million positions of a busy node's
# picture (0.3 s of the L bench's 1 s chart). \b is re's word boundary in text: a word character
# (str.isalnum or "_") on exactly one side; a character outside ASCII is decoded to be asked.

def _word(s: bytes, i: int) -> bool:
    """Whether the character whose UTF-8 encoding holds byte ``i`` of ``s`` is a word character."""
    if not 0 <= i < len(s):
        return False
    if s[i] < 0x80:
        return chr(s[i]).isalnum() or s[i] == 0x5F
    start = i
    while start > 0 and 0x80 <= s[start] < 0xC0 and i - start < 3:  # back to the character's lead byte
        start -= 1
    ch = s[start:start + 4].decode("utf-8", "ignore")[:1]
    return bool(ch) and (ch.isalnum() or ch == "_")


def _boundary(s: bytes, i: int) -> bool:
    return _word(s, i - 1) != _word(s, i)


def _prefix_ids(svg: bytes, p: bytes) -> bytes:
    """Every ``id="`` that starts a word gets ``p-`` after its quote (:func:`_spliced`)."""
    def cuts():
        mark = b'id="'
        i = svg.find(mark)
        while i >= 0:
            j = i + len(mark)
            if not _word(svg, i - 1):  # the id=" is not inside a longer word (``data-id="``, ``xid="``)
                yield j, j, p + b"-"
            i = svg.find(mark, j)
    return _spliced(svg, cuts())


_HEX = frozenset(b"0123456789abcdef")


def _number_clips(svg: bytes, p: bytes) -> bytes:
    """Each ``p-p`` + 10 hex digits (a whole word) becomes ``p-clipN``, N in order of first appearance
    (:func:`_spliced`)."""
    def cuts():
        key, clips = p + b"-p", {}
        i = svg.find(key)
        while i >= 0:
            j = i + len(key) + 10
            if _boundary(svg, i) and _boundary(svg, j) and len(svg) >= j and _HEX.issuperset(svg[i + len(key):j]):
                yield i, j, clips.setdefault(svg[i:j], p + b"-clip" + str(len(clips)).encode("ascii"))
                i = svg.find(key, j)
            else:
                i = svg.find(key, i + 1)
    return _spliced(svg, cuts())
