"""Where a series changed, from stored answers: coarse ``min/max_over_time`` points
(:func:`coarse_points`), the spans whose raw samples must be read (:func:`suspicious_spans`,
:func:`merge_spans`), and the walk over them (:func:`change_points`). Times are unix seconds (UTC).
Both the collector (which raw spans to ask for) and ``read`` (the changes themselves) use them."""
from __future__ import annotations

from contextlib import suppress

#: points per range query (Prometheus refuses more than 11,000)
CHUNK_POINTS = 10000


def range_chunks(w0: int, now: int, step: int, points: int = CHUNK_POINTS) -> list[tuple[int, int, int]]:
    """``(chunk index, start, end)`` (unix s) of the range queries that evaluate every ``step`` s from
    ``w0 + step`` to the first time at or after ``now``, at most ``points`` evaluations each: the coarse
    queries of the capacity, Xid and alert histories."""
    n = -(-(now - w0) // step)
    return [(c, w0 + k0 * step, w0 + min(n, k0 + points - 1) * step) for c, k0 in enumerate(range(1, n + 1, points))]


def coarse_points(answers: dict) -> list[tuple[int, float, float]]:
    """``[(t, min, max)]`` per coarse step where the series held samples in ``(t - step, t]``, from
    the matrix results (``answers["min"]``, ``answers["max"]``) of ``min/max_over_time(X[step])``
    range queries; several series are merged, a sample of another shape skipped."""
    lo, hi = {}, {}  # t -> the lowest and the highest value (dict[int, float])
    for agg, acc, pick in (("min", lo, min), ("max", hi, max)):
        for r in answers.get(agg, []):
            for s in r.get("values", []) if isinstance(r, dict) and isinstance(r.get("values"), list) else ():
                with suppress(TypeError, ValueError, OverflowError, IndexError, KeyError):  # [1, "x"], 7, {}
                    t, v = int(s[0]), float(s[1])
                    acc[t] = pick(acc.get(t, v), v)
    return [(t, lo.get(t, hi.get(t)), hi.get(t, lo.get(t))) for t in sorted(set(lo) | set(hi))]


def suspicious_spans(points, step: int, now: float) -> list[tuple[int, int]]:
    """Spans ``(a, b]`` (unix s) whose raw samples must be read: the first coarse step (first sample
    held), every pair of steps whose values are not one constant, and the last step when the series
    ended before ``now``. Overlapping spans are merged."""
    spans = []
    if points:
        spans.append((points[0][0] - step, points[0][0]))
        if points[-1][0] < now - step:
            spans.append((points[-1][0] - step, points[-1][0]))
    for (t0, mn0, mx0), (t1, mn1, mx1) in zip(points, points[1:]):
        if not (mn0 == mx0 == mn1 == mx1):
            spans.append((t0 - step, t1))
    return merge_spans(spans)


def merge_spans(spans) -> list[tuple[int, int]]:
    """``(a, b]`` spans sorted, the overlapping or touching ones merged into one."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def change_points(points, spans, step: int, raw) -> tuple[list[dict], dict | None, tuple | None]:
    """Walk the spans in time order and return ``(changes, first, last)``.

    ``raw(a, b)`` gives ``(sorted [(t, v)] samples, evidence)`` for a span, or None when its raw answer
    is missing; then the coarse points inside the span stand in, with their minimum (resolution
    ``coarse``: the change happened in ``(last_old_at, at]``, one or two coarse steps; a flap inside
    one step shows as a change one step later). A change is ``{"at", "last_old_at", "old", "new",
    "resolution", "evidence"}`` (unix s); ``first`` is the first sample ``{"at", "value", …}``;
    ``last`` is the last ``(t, v)`` seen.
    """
    first = prev = None
    changes = []
    for a, b in spans:
        got = raw(a, b)
        if got is not None:
            samples, ev, res = got[0], got[1], "sample"
        else:
            samples, ev, res = [(t, mn) for t, mn, mx in points if a < t <= b], {}, "coarse"
        for t, v in samples:
            if prev is not None and v != prev[1]:
                changes.append({"at": t, "last_old_at": prev[0], "old": prev[1], "new": v, "resolution": res,
                                "evidence": ev})
            first = first or {"at": t, "value": v, "resolution": res, "evidence": ev}
            prev = (t, v)
    return changes, first, prev
