"""Render the ``gpu-forensics/fleet/v1`` dict (forensics/ops/fleet.py :func:`build`) as HTML and JSON.

Like the node report (reports/render.py) the page computes nothing the JSON does not hold: it goes
through jinja2 with autoescape on (templates/fleet.html.j2), so node names, bundle paths and pod
names from the evidence are shown as text, never run.
"""
from __future__ import annotations

import json
from pathlib import Path

from .render import _ENV


def html(report: dict) -> str:
    """The self-contained HTML page of ``report`` (no external CSS, JS or fonts)."""
    return _ENV.get_template("fleet.html.j2").render(r=report)


def to_json(report: dict) -> str:
    """``report`` as indented JSON (a fleet report is a few kilobytes per node, so indenting is cheap)."""
    return json.dumps(report, indent=1, default=str) + "\n"


def write(report: dict, html_path: Path | None, json_path: Path | None) -> list[Path]:
    """Write whichever of ``fleet.json`` and ``fleet.html`` has a path (JSON first), creating their
    folders; returns the paths written. Raises ``OSError`` when a file cannot be written."""
    done = []
    for path, render in ((json_path, to_json), (html_path, html)):
        if path:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(report), encoding="utf-8")
            done.append(path)
    return done
