"""Render the ``gpu-forensics/analysis/v1`` dict (forensics/analysis.py) as HTML, Markdown or JSON.

Renderers compute nothing the JSON does not hold; they only choose what to show. HTML goes through
jinja2 with autoescape on, so every string from the evidence (journal messages, package names,
command lines) is shown as text, never run.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import jinja2
import markupsafe
from dateutil import parser as _dparser

from .chart import timeline_svg

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                          trim_blocks=True, lstrip_blocks=True)
_MD_ENV = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"), autoescape=False,
                             trim_blocks=True, lstrip_blocks=True)
_MD_SPECIAL = re.compile(r"([\\<>\[\]|`])")
_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x85\u2028\u2029]+")


def md(value) -> str:
    """Evidence text made inert in Markdown (autoescape is off for report.md): a backslash, ``<``,
    ``>``, ``[``, ``]``, ``|`` and backticks are escaped with a backslash, so no HTML tag, link, table
    cell or code span can be opened from the evidence, and line breaks become spaces, so no heading,
    list or block can be started. ``None`` becomes the empty string."""
    if value is None:
        return ""
    return _MD_SPECIAL.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(value)))


_MD_ENV.filters["md"] = md
#: dpkg actions are shown only this close to an incident window; the JSON keeps all of them
NEAR = timedelta(hours=1)


def _shown_timeline(a: dict) -> tuple[list[dict], int]:
    windows = [(_dparser.isoparse(i["window"]["start"]) - NEAR, _dparser.isoparse(i["window"]["end"]) + NEAR)
               for i in a["incidents"]]
    shown, hidden = [], 0
    for e in a["timeline"]:
        if e["kind"] in ("package.dpkg-action", "journal.requester", "journal.reload-finished"):
            t = _dparser.isoparse(e["at"])
            if not any(lo <= t <= hi for lo, hi in windows):
                hidden += 1
                continue
        shown.append(e)
    return shown, hidden


def html(a: dict) -> str:
    """The self-contained HTML postmortem (no external CSS, JS or fonts)."""
    shown, hidden = _shown_timeline(a)
    hidden += sum((a.get("timeline_omitted") or {}).values())
    # timeline_svg escapes every text it draws (matplotlib's SVG writer), so its output is markup
    return _ENV.get_template("report.html.j2").render(a=a, timeline=shown, hidden=hidden, generated=_now(),
                                                       chart=markupsafe.Markup(timeline_svg(a)))


#: ticket bodies beyond this are cut (Jira and GitHub comments read best short); report.html has all
MD_LIMIT = 4000


def markdown(a: dict) -> str:
    """Paste-ready Markdown for a Jira or GitHub ticket, under :data:`MD_LIMIT` characters: when the
    node has many incidents or containers the middle is cut, and the last line (the bundle's name and
    manifest SHA-256) is always kept."""
    text = _MD_ENV.get_template("report.md.j2").render(a=a, generated=_now())
    if len(text) < MD_LIMIT:
        return text
    body, _, last = text.rstrip("\n").rpartition("\n")
    note = "\n\n(cut to fit a ticket; report.html holds everything)\n\n"
    keep = MD_LIMIT - len(last) - len(note) - 2
    return body[:keep].rsplit("\n", 1)[0] + note + last + "\n"


def to_json(a: dict) -> str:
    """The analysis as JSON, one object per line of the top level (compact inside: the indenting
    encoder is pure Python and several times slower on a big timeline)."""
    parts = [f"  {json.dumps(k)}: {json.dumps(v, default=str, separators=(',', ':'))}" for k, v in a.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write(a: dict, html_path: Path | None, md_path: Path | None, json_path: Path | None) -> list[Path]:
    """Write whichever outputs have a path; returns the paths written. When the alert audit ran, the
    suggested rules go beside the first output as ``gpu-alerts.rules.yml`` (PrometheusRule-ready;
    ``promtool check rules`` accepts it)."""
    done = []
    audit = (a.get("metrics") or {}).get("alert_audit") or {}
    first = next((Path(p) for p in (html_path, md_path, json_path) if p), None)
    if audit.get("suggested_rules_yaml") and first:
        rules = first.parent / "gpu-alerts.rules.yml"
        rules.parent.mkdir(parents=True, exist_ok=True)
        rules.write_text(audit["suggested_rules_yaml"], encoding="utf-8")
        done.append(rules)
    for path, fn in ((html_path, html), (md_path, markdown), (json_path, to_json)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(fn(a), encoding="utf-8")
            done.append(Path(path))
    return done


def _now() -> str:
    from datetime import timezone
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
