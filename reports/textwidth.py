"""How wide a label of the timeline picture (reports/chart.py) is drawn, in points: the ink of its glyphs
in DejaVu Sans at the chart's SMALL size, measured without drawing, so that the reload labels can be
placed before the figure exists.
"""
from __future__ import annotations

import numpy as np
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path as MplPath
from matplotlib.textpath import TextPath

SMALL = 10.5  # points: reports.chart.SMALL, the size of the labels measured here


def width_pt(text: str) -> float:
    """The width of ``text`` drawn at :data:`SMALL` points, in points."""
    return ink_width(TextPath((0, 0), text.replace("$", "S"), size=SMALL, prop=FontProperties(family="DejaVu Sans")))


_PLAIN_CODES = (MplPath.MOVETO, MplPath.LINETO, MplPath.CURVE3, MplPath.CLOSEPOLY)


def ink_width(path) -> float:
    """``path.get_extents().width``, computed for all segments at once: the same points (segment ends,
    and each quadratic's x extremum), without a Python object per Bézier segment (a label's glyphs hold
    hundreds). Paths of another shape (cubic curves, a stray CLOSEPOLY) go to ``get_extents``."""
    v, c = path.vertices, path.codes
    n = len(v)
    if (c is None or n == 0 or c[0] != MplPath.MOVETO or not np.isin(c, _PLAIN_CODES).all()
            or not np.isfinite(v).all()):
        return path.get_extents().width
    close = np.flatnonzero(c == MplPath.CLOSEPOLY)
    if (c[np.minimum(close + 1, n - 1)][close + 1 < n] != MplPath.MOVETO).any():
        return path.get_extents().width  # a segment starting at a CLOSEPOLY vertex
    x = v[:, 0]
    quad = c == MplPath.CURVE3  # two vertices per segment: control point, end point
    at = np.arange(n)
    run = np.maximum.accumulate(np.where(quad & ~np.r_[False, quad[:-1]], at, 0))
    ctrl = quad & ((at - run) % 2 == 0)
    i = np.flatnonzero(ctrl)
    if len(i) and (i[-1] + 1 >= n or not quad[i + 1].all()):
        return path.get_extents().width
    p0, p1, p2 = x[i - 1], x[i], x[i + 1]
    d = p0 - 2 * p1 + p2
    p0, p1, p2, d = (a[np.abs(2 * d) >= 1e-12] for a in (p0, p1, p2, d))  # as bezier._real_roots_in_01
    t = (p0 - p1) / d
    inside = (t >= 0) & (t <= 1)
    p0, p1, p2, t = p0[inside], p1[inside], p2[inside], t[inside]
    xs = np.concatenate([x[(c == MplPath.MOVETO) | (c == MplPath.LINETO) | (quad & ~ctrl)],
                         (1 - t) ** 2 * p0 + 2 * t * (1 - t) * p1 + t ** 2 * p2])
    return float(xs.max() - xs.min())
