"""The timeline picture of report.html: an inline SVG drawn with matplotlib from the analysis dict.

One lane per evidence source (journal, packages, containers, DCGM, GPU capacity, and Kubernetes when
it holds an event; which kind goes where, with which marker, is reports/styles.py), incident windows
shaded, evidence gaps hatched and labelled with their reason, each ``journal.reload`` marked and
labelled with its requester, and one zoomed panel per incident window (a reload and its EPERM are
seconds apart on a scale of weeks). The x axis is the node's local time at its fixed UTC offset
(``analysis["timezone"]["utc_offset"]``).

Like the other renderers it computes nothing the JSON does not hold; it only chooses what to draw.
Text from the evidence reaches the SVG only through matplotlib, which draws glyphs as paths and
escapes the text it keeps in comments, with math text off, so a requester named ``<script>`` or
``$x$`` is drawn as those characters.
"""
from __future__ import annotations

import io
import itertools
import re
import warnings
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from forensics.excerpt import cut  # noqa: E402

from .charttime import offset, tzlabel, when  # noqa: E402
from .styles import GAP_WORDING, LANES, LOOKS, OPTIONAL_LANES, RELOAD, gap_lanes, place_rows, style_of  # noqa: E402
from .svginline import inline  # noqa: E402
from .textwidth import SMALL, width_pt  # noqa: E402

FONT = 12          # points at the drawn width; A4 print scales the picture to ~80 %, so ~9.6 pt on paper
WIDTH_IN = 9.6     # inches at 72 pt/in in SVG: 691 pt = ~920 CSS px
#: the phone's picture (issue 28): 403 pt drawn in a 390 px screen's ~358 px keeps SMALL text at >= 9 CSS px
PHONE_WIDTH_IN = 5.6
_AXES_MARGIN_IN = 1.54  # about the lane names and the figure's margins beside a panel's plotting area
MAX_ZOOMS = 8
LANE_IN = 0.36        # inches between lanes
LANE_BOTTOM = -0.95  # y limit below the lowest lane (lanes are at 0, 1, ..; the top one's limit is +0.5)
AXES_PT = (WIDTH_IN - _AXES_MARGIN_IN) * 72  # about the width of a panel's plotting area, in points
LABEL_ROW_PT = SMALL * 1.45  # one row of the (level) reload labels above the journal lane
LABEL_GAP_PT = SMALL * 0.8  # room between two labels of one row
LABEL_SEP_PT = SMALL * 1.9  # reloads closer than this on the page share one label
_SLACK = timedelta(minutes=1)  # a source that ends this close to the last evidence has no gap there
#: a panel's width in columns: markers of one kind and lane in one column (~0.4 pt at the drawn width, under
#: a CSS pixel; a marker is 4-9 pt wide) are drawn once, the first of them, since each would cover the other
COLUMNS = 1500

#: numbers the ``gid`` of the reload labels and markers (unique in a picture; each figure restarts it)
_GIDS = itertools.count()
_RC = {"svg.fonttype": "path", "svg.hashsalt": "gpu-forensics", "text.usetex": False,
       "text.parse_math": False, "font.family": "DejaVu Sans", "font.size": FONT,
       "hatch.linewidth": 0.8, "axes.titlesize": FONT + 1}


@dataclass
class _Ctx:
    tz: timezone
    tzlabel: str
    width_in: float = WIDTH_IN                     # the figure's width, inches
    lanes: tuple = LANES                           # the lanes drawn, top to bottom
    events: list = field(default_factory=list)     # (datetime UTC, lane, styles.Look, {at, attrs} of a reload)
    by_kind: dict = field(default_factory=dict)    # look -> its events, in timeline order
    kind_times: dict = field(default_factory=dict)  # look -> their times, when in time order
    windows: list = field(default_factory=list)    # (id, label, start, end)
    gaps: list = field(default_factory=list)       # (lane, strip, strips, start|None, end|None, source, reason)
    first: datetime | None = None                  # the dated evidence spans first .. last (unpadded)
    last: datetime | None = None
    inferred: list = field(default_factory=list)   # (datetime, requested_by) causes with no reload event
    requesters: dict = field(default_factory=dict)  # reload time -> cause.requested_by


def timeline_svg(a: dict, *, element_id: str = "timeline-chart", width_in: float = WIDTH_IN) -> str:
    """Draw the analysis ``a`` (schema ``gpu-forensics/analysis/v1``) as an inline ``<svg>`` string.

    The root element carries ``id=element_id``, ``role="img"`` and a ``<title>``; it has no XML
    prolog or doctype, no external reference and no script, and its ids are prefixed with
    ``element_id`` so that it can sit inside report.html. It scales to its container's width (at
    most ~920 px; ``width_in`` inches at 96 px each: :data:`PHONE_WIDTH_IN` draws the phone's
    picture, with shorter titles, fewer ticks and a two-column legend). Never raises on a valid analysis
    dict, including one with no incident, no event or a single event; entries whose time does not parse
    are left out. The text of :func:`timeline_svg_utf8`.
    """
    return timeline_svg_utf8(a, element_id=element_id, width_in=width_in).decode("utf-8")


def timeline_svg_utf8(a: dict, *, element_id: str = "timeline-chart", width_in: float = WIDTH_IN,
                      ctx: "_Ctx | None" = None) -> bytes:
    """:func:`timeline_svg` in UTF-8, as matplotlib wrote it: never held as a ``str`` (a busy node's picture
    is a megabyte, and its quotes would make a ``str`` of it two bytes a character). ``ctx``: what
    :func:`_context` made of ``a`` already (then ``a`` needs only its ``node`` and ``collected_at``)."""
    with io.BytesIO() as buf, warnings.catch_warnings():
        # a span its date locator has no interval for (a clock set years off) is drawn with its fallback; the
        # warning would reach the engineer's terminal when the picture is drawn in-process
        warnings.filterwarnings("ignore", "AutoDateLocator was unable", UserWarning)
        with matplotlib.rc_context(_RC):
            _figure(a, width_in, ctx).savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        svg = buf.getvalue()
    return inline(svg, element_id, f"Evidence timeline of {_txt(a.get('node') or 'the node', 80)}")


def figures(a: dict) -> str:
    """The two pictures report.html holds: :func:`timeline_svg` for a desktop or paper (``id``
    ``timeline-chart``) and for a phone (``timeline-chart-phone``, :data:`PHONE_WIDTH_IN` wide); the
    page's CSS shows one of them. The text of :func:`figure_parts` joined."""
    return b"".join(figure_parts(a)).decode("utf-8")


def figure_parts(a: dict):
    """:func:`figures` one picture at a time, in UTF-8 (a generator of two ``bytes``): the second is drawn
    once the first is taken. What both draw is read from ``a`` once, before either is drawn, and the
    generator keeps no other reference to ``a`` (the chart's child hands it the only one: its timeline is
    freed before matplotlib draws)."""
    ctx, head = _context(a), {"node": a.get("node"), "collected_at": a.get("collected_at")}
    del a
    yield timeline_svg_utf8(head, ctx=ctx)
    yield timeline_svg_utf8(head, element_id="timeline-chart-phone", width_in=PHONE_WIDTH_IN, ctx=ctx)


def write_png(a: dict, path: Path | str, dpi: int = 100) -> Path:
    """Draw the same picture as :func:`timeline_svg` into a PNG file at ``path`` (``dpi`` dots per
    inch: 100 gives 960 px wide). Returns the path. Raises ``OSError`` if the file cannot be written."""
    with matplotlib.rc_context(_RC):
        _figure(a).savefig(Path(path), format="png", dpi=dpi)
    return Path(path)


# -- the model: what to draw, from the JSON ---------------------------------------------------------

def _figure(a: dict, width_in: float = WIDTH_IN, ctx: "_Ctx | None" = None) -> Figure:
    global _GIDS
    _GIDS = itertools.count()  # the same analysis gives the same picture, ids too
    ctx = ctx or _context(a)
    ctx.width_in = width_in
    phone = width_in < WIDTH_IN
    times = [t for t, *_ in ctx.events] + [t for _, _, s, e in ctx.windows for t in (s, e)]
    times += [t for g in ctx.gaps for t in g[3:5] if t] + [t for t, _ in ctx.inferred]
    collected = when(a.get("collected_at"))
    if collected:
        times.append(collected)
    if not times:
        fig = Figure(figsize=(width_in, 1.5), layout="constrained")
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, "No dated evidence to draw: the bundle holds no timed event, incident or gap.",
                ha="center", va="center", transform=ax.transAxes)
        return fig
    lo, hi = min(times), max(times)
    if hi - lo < timedelta(hours=2):  # one event, or a few close together: centre them
        mid = lo + (hi - lo) / 2
        lo, hi = mid - timedelta(hours=1), mid + timedelta(hours=1)
    ctx.first, ctx.last = lo, hi
    pad = (hi - lo) * 0.02
    span = f"{_day(lo, ctx)} .. {_day(hi, ctx)}"
    panels = [(lo - pad, _room_right(ctx, lo - pad, hi + pad), f"All evidence, {span}" if phone else
               f"{_txt(a.get('node') or 'node', 60)}: all evidence, {span}", True)]
    for iid, label, s, e in ctx.windows[:MAX_ZOOMS]:
        pad = max((e - s) * 0.2, timedelta(seconds=60))
        name = f"{iid} \u201c{_txt(label, 40)}\u201d" if label else iid
        title = (f"{iid} zoomed: {_stamp(s, ctx)} .. {_stamp(e, ctx, seconds=True)}" if phone else
                 f"Incident {name} window, zoomed: {_stamp(s, ctx)} .. {_stamp(e, ctx)}")
        panels.append((s - pad, _room_right(ctx, s - pad, e + pad), title, False))
    labels = [_reload_labels(ctx, p[0], p[1], p[3]) for p in panels]
    tops = [len(ctx.lanes) - 0.5 + _label_height_pt(lb) / 72 / LANE_IN for lb in labels]
    heights = [(top - LANE_BOTTOM) * LANE_IN for top in tops]
    fig = Figure(figsize=(width_in, sum(heights) + 0.95 * len(panels) + 0.8), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (plo, phi, title, overview), lb, top in zip(axes, panels, labels, tops):
        _panel(ax, ctx, plo, phi, title, overview, lb, top)
    if len(ctx.windows) > MAX_ZOOMS:
        fig.text(0.01, 0.0, f"{len(ctx.windows) - MAX_ZOOMS} more incident windows are not zoomed here; "
                 "the incident tables list them.", fontsize=SMALL)
    _legend(fig, ctx)
    return fig


def _context(a: dict) -> _Ctx:
    tz = offset(((a.get("timezone") or {}).get("utc_offset")))
    ctx = _Ctx(tz=tz, tzlabel=tzlabel(a, tz))
    for inc in a.get("incidents") or []:
        w = inc.get("window") or {}
        s, e = when(w.get("start")), when(w.get("end"))
        if s and e:
            ctx.windows.append((_txt(inc.get("id") or "?", 12), inc.get("label"), min(s, e), max(s, e)))
        for c in inc.get("causes") or []:
            t, rb = when(c.get("at")), c.get("requested_by")
            if t and rb:  # a cause that names who asked for it (a reload's requester)
                ctx.requesters[t] = rb
    for e in a.get("timeline") or []:
        at, kind, attrs = (e.get("at"), e.get("kind"), e.get("attrs")) if isinstance(e, dict) else (*e, None)[:3]
        t, st = when(at), style_of(str(kind or ""), attrs if isinstance(attrs, dict) else None)
        if t and st:  # only a reload's entry is read again (its requester, _requester)
            ctx.events.append((t, *st, {"at": at, "attrs": attrs} if st[1] == RELOAD else None))
    # an optional lane is drawn when an event falls in it, or a source of it left a gap (no kernel log)
    drawn = {lane for _, lane, *_ in ctx.events} | {lane for g in a.get("gaps") or []
                                                    for lane in gap_lanes(str(g.get("source") or ""))}
    ctx.lanes = LANES + tuple(lane for lane in OPTIONAL_LANES if lane in drawn)
    for ev in ctx.events:
        ctx.by_kind.setdefault(ev[2], []).append(ev)
    for kind, evs in ctx.by_kind.items():
        times = [ev[0] for ev in evs]
        if all(a <= b for a, b in zip(times, times[1:])):
            ctx.kind_times[kind] = times
    reloads = {t for t, *_ in ctx.by_kind.get(RELOAD, ())}
    ctx.inferred = [(t, rb) for t, rb in ctx.requesters.items()
                    if rb.get("basis") == "inferred" and not any(abs(t - r) < timedelta(seconds=1) for r in reloads)]
    per_lane: dict[str, list[dict]] = {}
    for g in a.get("gaps") or []:
        for lane in gap_lanes(str(g.get("source") or "")):
            per_lane.setdefault(lane, []).append(g)
    for lane, gs in per_lane.items():
        for i, g in enumerate(gs):
            cov = g.get("covers") or {}
            ctx.gaps.append((lane, i, len(gs), when(cov.get("start")), when(cov.get("end")),
                             str(g.get("source")), str(g.get("reason") or "")))
    return ctx


def _between(ctx: _Ctx, look, lo: datetime, hi: datetime) -> list:
    """The events drawn with ``look`` from ``lo`` to ``hi`` (inclusive), in timeline order."""
    times = ctx.kind_times.get(look)
    if times is None:  # a timeline out of time order: look at each one
        return [ev for ev in ctx.by_kind.get(look, ()) if lo <= ev[0] <= hi]
    return ctx.by_kind[look][bisect_left(times, lo):bisect_right(times, hi)]


# -- drawing ------------------------------------------------------------------------------------------

def _panel(ax, ctx: _Ctx, lo: datetime, hi: datetime, title: str, overview: bool, labels, top: float) -> None:
    y = {lane: len(ctx.lanes) - 1 - i for i, lane in enumerate(ctx.lanes)}
    ax.set_xlim(lo, hi)
    ax.set_ylim(LANE_BOTTOM, top)
    ax.set_yticks([y[n] for n in ctx.lanes], list(ctx.lanes), fontsize=FONT)
    ax.tick_params(axis="y", length=0)
    for v in y.values():
        ax.axhline(v, color="#dddddd", lw=0.8, zorder=0)
    loc = mdates.AutoDateLocator(tz=ctx.tz, minticks=3 if ctx.width_in < WIDTH_IN else 4,
                                 maxticks=6 if ctx.width_in < WIDTH_IN else 9)  # 6: each range finds a step
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=ctx.tz))
    ax.tick_params(axis="x", labelsize=SMALL + 0.5)
    phone = ctx.width_in < WIDTH_IN
    ax.set_xlabel(ctx.tzlabel if phone else f"node time, {ctx.tzlabel}", fontsize=SMALL + 0.5,
                  loc="left" if phone else "center")
    ax.set_title(title, loc="left", fontsize=FONT + 1)
    ax.grid(axis="x", color="#eeeeee", lw=0.8)
    width = hi - lo
    for iid, _label, s, e in ctx.windows:
        if e < lo or s > hi:
            continue
        s2, e2 = s, e
        if e - s < width * 0.004:  # keep a seconds-long window visible on a scale of weeks
            mid = s + (e - s) / 2
            s2, e2 = mid - width * 0.002, mid + width * 0.002
        ax.axvspan(s2, e2, facecolor="#ffe0b2", edgecolor="#c77700", lw=1.0, ls="--", zorder=0.5)
        if overview:
            ax.text(max(s2, lo), LANE_BOTTOM + 0.08, f" {iid}", fontsize=SMALL, va="bottom", color="#8a5300",
                    zorder=4)
        else:
            words = ("last good ", " first bad") if phone else ("last known good ", " first known bad")
            for x, text, ha in ((s2, words[0], "right"), (e2, words[1], "left")):
                if lo <= x <= hi:
                    ax.text(x, LANE_BOTTOM + 0.08, text, fontsize=SMALL, ha=ha, va="bottom", color="#8a5300",
                            zorder=4)
    for lane, strip, strips, cs, ce, source, reason in ctx.gaps:
        _gap(ax, y[lane], strip, strips, cs, ce, source, reason, lo, hi, ctx)
    for look in LOOKS:
        pts = [(t, y[lane]) for t, lane, _, _ in _between(ctx, look, lo, hi)]
        if pts:
            _markers(ax, pts, look, lo, hi)
    for t, _rb in ctx.inferred:
        if lo <= t <= hi:
            ax.plot([t], [y["journal"]], marker="v", ms=11, mfc="white", mec="#b00020", mew=1.6, ls="", zorder=5,
                    gid=f"reload-markers-{next(_GIDS)}")
    _draw_labels(ax, labels, y["journal"])


def _markers(ax, pts, look, lo, hi) -> None:
    marker, colour, size, filled = look.marker, look.colour, look.size, look.filled
    cols = {}
    for t, yy in pts:
        cols.setdefault((round((t - lo) / (hi - lo) * COLUMNS), yy), (t, yy))
    pts = list(cols.values())
    xs, ys = zip(*pts)
    ax.plot(xs, ys, marker=marker, ms=size, ls="", mfc=colour if filled else "white", mec=colour,
            mew=1.4 if marker in "|x" or not filled else 0.8, zorder=5 if look == RELOAD else 3,
            gid=f"reload-markers-{next(_GIDS)}" if look == RELOAD else None)


def _gap(ax, yc, strip, strips, cs, ce, source, reason, lo, hi, ctx) -> None:
    h = 0.84 / strips
    y0 = yc - 0.42 + (strips - 1 - strip) * h
    parts = []
    if cs is None and ce is None:
        parts.append((lo, hi, f"{source}: {_first_clause(reason)}"))
    else:
        if cs and cs > max(lo, ctx.first + _SLACK):
            parts.append((lo, cs, GAP_WORDING.get(source, source + ": no evidence before {d}")
                          .format(d=_day(cs, ctx))))
        if ce and ce < min(hi, ctx.last - _SLACK):
            parts.append((ce, hi, f"{source}: no evidence after {_day(ce, ctx)}"))
    for s, e, text in parts:
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        ax.add_patch(Rectangle((mdates.date2num(s), y0), mdates.date2num(e) - mdates.date2num(s), h,
                               facecolor="#f2f2f2", edgecolor="#666666", hatch="///", lw=0.4, zorder=1))
        if (e - s) >= (hi - lo) * 0.03:
            ax.text(s + (hi - lo) * 0.004, y0 + h / 2, _txt(text, 70), fontsize=SMALL, va="center", ha="left",
                    zorder=2, clip_on=True,
                    bbox={"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.9})


def _axes_pt(ctx: _Ctx) -> float:  # about the width of a panel's plotting area, in points
    return (ctx.width_in - _AXES_MARGIN_IN) * 72


def _clusters(ctx: _Ctx, lo, hi, overview: bool) -> list[tuple[datetime, str]]:
    """The reload labels of one panel, ``(time, text)``: one per cluster of reloads closer than a label's
    height (a package run reloads several times a second), at the cluster's first reload."""
    items = [(t, _requester(e, ctx)) for t, _, _, e in _between(ctx, RELOAD, lo, hi)]
    items += [(t, _who(rb) + " (inferred)") for t, rb in ctx.inferred if lo <= t <= hi]
    items.sort(key=lambda x: x[0])
    sep = (hi - lo) * LABEL_SEP_PT / _axes_pt(ctx)
    clusters: list[list] = []
    for t, who in items:
        if clusters and t - clusters[-1][0][0] < sep:
            clusters[-1].append((t, who))
        else:
            clusters.append([(t, who)])
    out = []
    for c in clusters:
        whos = list(dict.fromkeys(w for _, w in c))
        text = _txt(", ".join(whos), 36) + (f" \u00d7{len(c)}" if len(c) > 1 else "")
        if overview and len(c) > 1 and width_pt(text) > _axes_pt(ctx) / 3:  # a phone: the zooms name them
            text = f"{len(c)} reloads"
        out.append((c[0][0], text if overview else f"{text} {_stamp(c[0][0], ctx, seconds=True)}"))
    return out


def _room_right(ctx: _Ctx, lo: datetime, hi: datetime) -> datetime:
    """``hi``, moved on so that the last reload label of the panel ``lo`` .. ``hi`` fits on its right,
    starting at its reload (else it would have to end there, over the reloads before it)."""
    labels = _clusters(ctx, lo, hi, True)
    if not labels:
        return hi
    t, text = labels[-1]
    axes, w = _axes_pt(ctx), width_pt(text) + LABEL_GAP_PT
    x = (t - lo) / (hi - lo) * axes
    if x + w <= axes or w >= axes / 2:
        return hi
    return lo + (t - lo) * (axes / (axes - w))


def _reload_labels(ctx: _Ctx, lo, hi, overview: bool) -> list[tuple[datetime, str, int, str]]:
    """The reload labels of one panel: ``(time, text, row, ha)``, each drawn at its own reload: starting
    there (``ha`` left) or ending there (right), on the side where it spans no other labelled reload when
    one does; level, in rows (styles.place_rows)."""
    out = _clusters(ctx, lo, hi, overview)
    axes = _axes_pt(ctx)
    xs = [(t - lo) / (hi - lo) * axes for t, _ in out]
    spans, sides = [], []
    for i, ((t, text), x) in enumerate(zip(out, xs)):
        w = width_pt(text)
        others = [o for j, o in enumerate(xs) if j != i]
        fits = [(a, b, ha) for a, b, ha in ((x, x + w, "left"), (x - w, x, "right")) if a >= 0 and b <= axes]
        clear = [f for f in fits if not any(f[0] - LABEL_GAP_PT / 2 < o < f[1] + LABEL_GAP_PT / 2 for o in others)]
        a, b, ha = (clear or fits or [(x, x + w, "left")])[0]
        spans.append((a, b))
        sides.append(ha)
    return [(t, text, row, ha) for (t, text), ha, row in zip(out, sides, place_rows(spans, LABEL_GAP_PT))]


def _label_height_pt(labels) -> float:
    """Vertical room the reload labels' rows need above the journal lane, in points."""
    rows = max((lb[2] for lb in labels), default=-1) + 1
    return rows * LABEL_ROW_PT + SMALL * 0.4 if rows else SMALL * 1.6


def _draw_labels(ax, labels, yj) -> None:
    # level, in the rows _reload_labels chose, each starting (ha left) or ending (ha right) at its reload,
    # with a thin line from the label down to the marker; the gid names them for tests and readers
    for t, text, row, ha in labels:
        y = yj + 0.32 + row * LABEL_ROW_PT / 72 / LANE_IN
        ax.plot([t, t], [yj + 0.2, y + 0.3], color="#7a0016", lw=0.6, zorder=4)
        ax.text(t, y, text, ha=ha, va="bottom", fontsize=SMALL, color="#7a0016", zorder=6, clip_on=False,
                gid=f"reload-label-{next(_GIDS)}")


def _legend(fig, ctx: _Ctx) -> None:
    looks = set(ctx.by_kind) | ({RELOAD} if ctx.inferred else set())
    handles = [Line2D([], [], marker=k.marker, ls="", ms=min(k.size, 10), mec=k.colour,
                      mfc=k.colour if k.filled else "white", label=k.legend) for k in LOOKS if k in looks]
    if ctx.inferred:
        handles.append(Line2D([], [], marker="v", ls="", ms=10, mec="#b00020", mfc="white",
                              label="daemon-reload (inferred)"))
    handles.append(Patch(facecolor="#ffe0b2", edgecolor="#c77700", ls="--", label="incident window"))
    handles.append(Patch(facecolor="#f2f2f2", edgecolor="#666666", hatch="///", label="no evidence (gap)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(2 if ctx.width_in < WIDTH_IN else 5, len(handles)),
               fontsize=SMALL,
               frameon=False)


# -- text and time helpers ------------------------------------------------------------------------------

def _requester(e: dict, ctx: _Ctx) -> str:
    t = when(e.get("at"))
    rb = next((rb for ct, rb in ctx.requesters.items() if t and abs(ct - t) < timedelta(seconds=1)), None)
    if rb:
        return _who(rb) + (" (inferred)" if rb.get("basis") == "inferred" else "")
    at = e.get("attrs") or {}
    who = at.get("requester_unit") or at.get("requester_comm")
    return _txt(who, 40) if who else "requester unknown"


def _who(rb: dict) -> str:
    return _txt(rb.get("unit") or rb.get("comm") or "requester unknown", 40)


def _txt(s, limit: int = 60) -> str:
    """Evidence text made safe for a label: printable characters only, one line, at most ``limit``, cut
    between words (``…`` where cut)."""
    return cut("".join(c if c.isprintable() else "?" for c in str(s)), limit)


def _first_clause(reason: str) -> str:
    return re.split(r"[;:(]", reason, maxsplit=1)[0].strip() or "not covered"


def _day(t: datetime, ctx: _Ctx) -> str:
    return t.astimezone(ctx.tz).strftime("%Y-%m-%d")


def _stamp(t: datetime, ctx: _Ctx, seconds: bool = False) -> str:
    return t.astimezone(ctx.tz).strftime("%H:%M:%S" if seconds else "%Y-%m-%d %H:%M:%S")
