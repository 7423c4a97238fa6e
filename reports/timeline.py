"""The timeline formats of ``gpu-forensics timeline``: one small function per format, registered in
:data:`FORMATS` (plaso's psort output modules, in miniature).

Each writer takes the analysis dict (schema ``gpu-forensics/analysis/v1``, usually built with
``full_timeline=True``) and a text stream, and writes one line per ``timeline[]`` entry, in timeline
order. Like the other renderers they compute nothing the JSON does not hold.

Evidence text comes from a node that may be compromised and lands on an engineer's terminal or in a
spreadsheet, so every text cell goes through :func:`inert`: terminal control characters become
visible escapes, and (for CSV) a cell a spreadsheet would run as a formula is quoted (OWASP "CSV
Injection"). The JSON formats need no more than ``json.dumps``' ASCII escaping, which leaves no
control character raw.
"""
from __future__ import annotations

import csv as _csv
import json
import re
from typing import Callable, TextIO

from forensics.events import KINDS
from forensics.timeutil import parse_iso, to_second


#: C0 controls but tab and newline, DEL, C1 controls (a lone 0x9b is a CSI on many terminals), and the
#: Unicode line separators and bidirectional overrides that reorder or break what a reader sees
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile(_CONTROL.pattern[:-1] + "\n]")
#: first characters that make a spreadsheet read a cell as a formula (OWASP CSV Injection)
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(value, csv: bool = False, newline: bool = True) -> str:
    """``value`` as text that cannot drive a terminal or a spreadsheet: every control character
    (C0 but tab and newline, DEL, C1, so ANSI CSI/OSC sequences lose their ESC) and Unicode
    line separator or bidi override becomes a visible ``\\xNN`` / ``\\uNNNN`` escape; with
    ``newline`` false a newline too (one line per event); with ``csv`` a text starting with ``=``,
    ``+``, ``-``, ``@``, tab or CR gets a leading ``'``. ``None`` becomes ``""``."""
    if value is None:
        return ""
    text = (_CONTROL if newline else _CONTROL_NL).sub(_escape, str(value))
    return "'" + text if csv and text.startswith(_FORMULA) else text


def table(a: dict, out: TextIO) -> None:
    """Fixed-width text for a terminal: node-local time to the second with its offset
    (``2026-09-02 13:05:13 +09:00``; the CSV and JSON formats keep the exact time), source, kind,
    summary (each :func:`inert`, newlines escaped, so one line per event)."""
    for e in a["timeline"]:
        source, kind, summary = (inert(e[k], newline=False) for k in ("source", "kind", "summary"))
        local = inert(to_second(e["local"]), newline=False)
        print(f"{local:<26} {source:<12} {kind:<24} {summary}", file=out)


def csv(a: dict, out: TextIO) -> None:
    """CSV (RFC 4180, ``\\r\\n`` line ends) with a header row: ``at`` (UTC), ``local``, ``source``,
    ``kind``, ``summary`` and the evidence pointer ``artifact``, ``line``, ``cursor`` (empty when absent);
    every cell :func:`inert` with ``csv`` (a formula-like cell starts with ``'``)."""
    w = _csv.writer(out)
    w.writerow(["at", "local", "source", "kind", "summary", "artifact", "line", "cursor"])
    for e in a["timeline"]:
        ev = e.get("evidence") or {}
        w.writerow([inert(v, csv=True) for v in (e["at"], e["local"], e["source"], e["kind"], e["summary"],
                                                 ev.get("artifact", ""), ev.get("line", ""), ev.get("cursor", ""))])


def jsonl(a: dict, out: TextIO) -> None:
    """JSON Lines: each ``timeline[]`` entry as analysis.json holds it."""
    for e in a["timeline"]:
        print(json.dumps(e, default=str, ensure_ascii=True), file=out)


_TS_HEAD = ("message", "timestamp", "datetime", "timestamp_desc")  # Timesketch's CSV header, in its docs' order
_TRUTH = {"1": True, "0": False, "true": True, "false": False, "yes": True, "no": False}


def timesketch_rows(a: dict) -> list[dict]:
    """The events as Timesketch's rows: ``message``, ``timestamp`` (microseconds since the epoch),
    ``datetime`` (ISO 8601 UTC), ``timestamp_desc`` (what the time means, from
    :data:`forensics.events.KINDS`, for every kind), plus ``data_type`` (``gpu_forensics:<kind>``),
    ``source``, ``node``, ``local_time``, the evidence pointer and each scalar attribute as
    ``attr_<name>``. An attribute has one JSON type across all rows (Timesketch's index maps each field
    once; a clash drops events): where one row holds a bool, ``"0"``/``"1"``/``"true"``/``"false"``
    become bools; any other mix becomes text; ``null`` stays null. Raises ``KeyError`` for an entry
    whose kind is not in ``KINDS`` (events never have one)."""
    rows = []
    for e in a["timeline"]:
        ev = e.get("evidence") or {}
        rows.append({"message": e["summary"], "timestamp": int(parse_iso(e["at"]).timestamp() * 1_000_000),
                     "datetime": e["at"], "timestamp_desc": KINDS[e["kind"]].timestamp_desc,
                     "data_type": f"gpu_forensics:{e['kind']}", "source": e["source"], "node": a["node"],
                     "local_time": e["local"], "artifact": ev.get("artifact"), "line": ev.get("line"),
                     "cursor": ev.get("cursor"),
                     **{f"attr_{k}": v for k, v in (e.get("attrs") or {}).items()
                        if isinstance(v, (str, int, float, bool)) or v is None}})
    kinds: dict[str, set] = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith("attr_") and v is not None:
                kinds.setdefault(k, set()).add(bool if isinstance(v, bool) else float if isinstance(v, float)
                                               else int if isinstance(v, int) else str)
    for k, ts in kinds.items():
        if len(ts) < 2:
            continue
        if ts <= {int, float}:
            fix = float
        elif bool in ts and all(str(r[k]).lower() in _TRUTH for r in rows if r.get(k) is not None
                                and not isinstance(r[k], bool)):
            fix = lambda v: v if isinstance(v, bool) else _TRUTH[str(v).lower()]  # noqa: E731
        else:
            fix = lambda v: (("true" if v else "false") if isinstance(v, bool) else str(v))  # noqa: E731
        for r in rows:
            if r.get(k) is not None:
                r[k] = fix(r[k])
    return rows


def timesketch(a: dict, out: TextIO) -> None:
    """JSON Lines that Timesketch imports, one :func:`timesketch_rows` row a line (ASCII-escaped)."""
    for r in timesketch_rows(a):
        print(json.dumps(r, default=str, ensure_ascii=True), file=out)


def timesketch_csv(a: dict, out: TextIO) -> None:
    """Timesketch's CSV ("Create timeline from JSON/JSONL/CSV file": a header row, the mandatory
    ``message``, ``datetime``, ``timestamp_desc`` and ``timestamp`` in microseconds first): the
    :func:`timesketch_rows` with every column any row has, in first-seen order; ``null`` is an empty
    cell, a bool ``true``/``false``; each cell :func:`inert` with ``csv``."""
    rows = timesketch_rows(a)
    cols = list(dict.fromkeys([*_TS_HEAD, *(k for r in rows for k in r)]))
    w = _csv.writer(out)
    w.writerow(cols)
    for r in rows:
        w.writerow(["" if (v := r.get(c)) is None else ("true" if v else "false") if isinstance(v, bool)
                    else v if isinstance(v, (int, float)) else inert(v, csv=True) for c in cols])


#: format name (``timeline --format``) -> its writer; the first is the default
FORMATS: dict[str, Callable[[dict, TextIO], None]] = {"table": table, "csv": csv, "jsonl": jsonl,
                                                      "timesketch": timesketch, "timesketch-csv": timesketch_csv}


def write(a: dict, fmt: str, out: TextIO) -> None:
    """Write the timeline of ``a`` to ``out`` in format ``fmt`` (a key of :data:`FORMATS`; any other
    raises ``KeyError``)."""
    FORMATS[fmt](a, out)
