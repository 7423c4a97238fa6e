"""The timeline formats of ``gpu-forensics timeline``: one small function per format, registered in
:data:`FORMATS` (plaso's psort output modules, in miniature).

Each writer takes the analysis dict (schema ``gpu-forensics/analysis/v1``, usually built with
``full_timeline=True``) and a text stream, and writes one line per ``timeline[]`` entry, in timeline
order. Like the other renderers they compute nothing the JSON does not hold.
"""
from __future__ import annotations

import csv as _csv
import json
from typing import Callable, TextIO

from forensics.events import KINDS
from forensics.timeutil import parse_iso


def table(a: dict, out: TextIO) -> None:
    """Fixed-width text for a terminal: node-local time, source, kind, summary."""
    for e in a["timeline"]:
        print(f"{e['local']:<32} {e['source']:<20} {e['kind']:<24} {e['summary']}", file=out)


def csv(a: dict, out: TextIO) -> None:
    """CSV (RFC 4180, ``\\r\\n`` line ends) with a header row: ``at`` (UTC), ``local``, ``source``,
    ``kind``, ``summary`` and the evidence pointer ``artifact``, ``line``, ``cursor`` (empty when absent)."""
    w = _csv.writer(out)
    w.writerow(["at", "local", "source", "kind", "summary", "artifact", "line", "cursor"])
    for e in a["timeline"]:
        ev = e.get("evidence") or {}
        w.writerow([e["at"], e["local"], e["source"], e["kind"], e["summary"], ev.get("artifact", ""),
                    ev.get("line", ""), ev.get("cursor", "")])


def jsonl(a: dict, out: TextIO) -> None:
    """JSON Lines: each ``timeline[]`` entry as analysis.json holds it."""
    for e in a["timeline"]:
        print(json.dumps(e, default=str), file=out)


def timesketch(a: dict, out: TextIO) -> None:
    """JSON Lines that Timesketch imports: ``message``, ``datetime`` (ISO 8601 UTC), ``timestamp``
    (microseconds since the epoch) and ``timestamp_desc`` (what the time means, from
    :data:`forensics.events.KINDS`), plus ``data_type`` (``gpu_forensics:<kind>``), ``source``,
    ``node``, ``local_time``, the evidence pointer and each scalar attribute as ``attr_<name>``.
    Raises ``KeyError`` for an entry whose kind is not in ``KINDS`` (events never have one)."""
    for e in a["timeline"]:
        ev = e.get("evidence") or {}
        print(json.dumps({"message": e["summary"], "datetime": e["at"],
                          "timestamp": int(parse_iso(e["at"]).timestamp() * 1_000_000),
                          "timestamp_desc": KINDS[e["kind"]].timestamp_desc,
                          "data_type": f"gpu_forensics:{e['kind']}", "source": e["source"],
                          "node": a["node"], "local_time": e["local"], "artifact": ev.get("artifact"),
                          "line": ev.get("line"), "cursor": ev.get("cursor"),
                          **{f"attr_{k}": v for k, v in (e.get("attrs") or {}).items()
                             if isinstance(v, (str, int, float, bool)) or v is None}}, default=str), file=out)


#: format name (``timeline --format``) -> its writer; the first is the default
FORMATS: dict[str, Callable[[dict, TextIO], None]] = {"table": table, "csv": csv, "jsonl": jsonl,
                                                      "timesketch": timesketch}


def write(a: dict, fmt: str, out: TextIO) -> None:
    """Write the timeline of ``a`` to ``out`` in format ``fmt`` (a key of :data:`FORMATS`; any other
    raises ``KeyError``)."""
    FORMATS[fmt](a, out)
