"""Making matplotlib's SVG document fit inside report.html (reports/chart.py draws it): no prolog, doctype
or metadata, ids prefixed with the picture's id, the stroke style scoped to it, clip ids numbered, and a
width that follows the container.
"""
from __future__ import annotations

import html
import re


def inline(svg: str, element_id: str, title: str) -> str:
    """``svg`` (matplotlib's SVG document) as an ``<svg id=element_id role="img">`` element titled ``title``
    (escaped), its ids prefixed with ``element_id`` (its characters outside ``[A-Za-z0-9_-]`` dropped).
    Raises ``ValueError`` when ``svg`` holds no ``<svg`` element."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    p = re.sub(r"[^A-Za-z0-9_-]", "", element_id) or "chart"
    svg = _prefix_ids(svg, p)
    svg = svg.replace('xlink:href="#', f'xlink:href="#{p}-').replace("url(#", f"url(#{p}-")
    svg = svg.replace("*{stroke-linejoin", f"#{p} *{{stroke-linejoin", 1)
    # clip ids hash unrounded bounds, which the layout moves in the last bits between runs: number them
    svg = _number_clips(svg, p)
    m = re.match(r'<svg ([^>]*?)width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    max_px = round(float(m.group(2)) * 4 / 3) if m else 1000
    svg = re.sub(r'width="[\d.]+pt" height="[\d.]+pt"', f'width="100%" style="max-width:{max_px}px;height:auto;'
                 'display:block"', svg, count=1)
    head = svg.index(">") + 1
    return (svg[:4] + f' id="{p}" role="img" aria-label="{html.escape(title)}"' + svg[4:head]
            + f"\n <title>{html.escape(title)}</title>" + svg[head:]).strip() + "\n"


# The two rewrites below do what re.sub(r'\bid="', ...) and re.sub(rf"\b{p}-p[0-9a-f]{{10}}\b", ...) did,
# with str.find instead of a pattern tried at each of the ~1.4 million positions of a busy node's picture
# (0.3 s of the L bench's 1 s chart). \b is re's word boundary: a word character (str.isalnum or "_") on
# exactly one side.

def _word(s: str, i: int) -> bool:
    return 0 <= i < len(s) and (s[i].isalnum() or s[i] == "_")


def _boundary(s: str, i: int) -> bool:
    return _word(s, i - 1) != _word(s, i)


def _prefix_ids(svg: str, p: str) -> str:
    """Every ``id="`` that starts a word gets ``p-`` after its quote."""
    parts = svg.split('id="')
    out = [parts[0]]
    for prev, part in zip(parts, parts[1:]):  # an empty ``prev`` follows the quote of the id=" before it
        out.append(('id="' if prev[-1:] and _word(prev, len(prev) - 1) else f'id="{p}-') + part)
    return "".join(out)


_HEX = frozenset("0123456789abcdef")


def _number_clips(svg: str, p: str) -> str:
    """Each ``p-p`` + 10 hex digits (a whole word) becomes ``p-clipN``, N in order of first appearance."""
    key, clips, out, pos = f"{p}-p", {}, [], 0
    i = svg.find(key)
    while i >= 0:
        j = i + len(key) + 10
        if _boundary(svg, i) and _boundary(svg, j) and len(svg) >= j and _HEX.issuperset(svg[i + len(key):j]):
            out += [svg[pos:i], clips.setdefault(svg[i:j], f"{p}-clip{len(clips)}")]
            pos, i = j, svg.find(key, j)
        else:
            i = svg.find(key, i + 1)
    out.append(svg[pos:])
    return "".join(out)
