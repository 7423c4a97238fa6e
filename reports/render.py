"""Render the ``gpu-forensics/analysis/v1`` dict (forensics/findings/analysis.py) as HTML, Markdown or JSON.

Renderers compute nothing the JSON does not hold; they only choose what to show. HTML goes through
jinja2 with autoescape on, so every string from the evidence (journal messages, package names,
command lines) is shown as text, never run.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import jinja2
import markupsafe
from dateutil import parser as _dparser

from forensics.events import is_context
from forensics.timeutil import within

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
#: events of context kinds (forensics.events.Kind.context) are shown only this close to an incident window
NEAR = timedelta(hours=1)


def _when(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)  # what analysis.json holds ("...Z"): the fast path
    except ValueError:
        return _dparser.isoparse(text)


def _shown_timeline(a: dict) -> tuple[list[dict], int]:
    near = within((_when(i["window"]["start"]) - NEAR, _when(i["window"]["end"]) + NEAR) for i in a["incidents"])
    shown, hidden = [], 0
    for e in a["timeline"]:
        if is_context(e["kind"]):
            if not near(_when(e["at"])):
                hidden += 1
                continue
        shown.append(e)
    return shown, hidden


def html(a: dict) -> str:
    """The self-contained HTML postmortem (no external CSS, JS or fonts)."""
    return "".join(_html_parts(a))


def _html_parts(a: dict) -> Iterator[str]:
    """:func:`html` piece by piece, as the template produces it (``write`` streams it to the file)."""
    from .chart import timeline_svg  # matplotlib is imported only when a picture is drawn
    shown, hidden = _shown_timeline(a)
    hidden += sum((a.get("timeline_omitted") or {}).values())
    # timeline_svg escapes every text it draws (matplotlib's SVG writer), so its output is markup
    return _with_banner(_ENV.get_template("report.html.j2").generate(
        a=a, timeline=shown, hidden=hidden, generated=_now(), chart=markupsafe.Markup(timeline_svg(a))), a)


#: ticket bodies beyond this are cut (Jira and GitHub comments read best short); report.html has all
MD_LIMIT = 4000


def markdown(a: dict) -> str:
    """Paste-ready Markdown for a Jira or GitHub ticket, under :data:`MD_LIMIT` characters: when the
    node has many incidents or containers the middle is cut, and the last line (the bundle's name and
    manifest SHA-256) is always kept."""
    text = integrity_banner(a, markdown=True) + _MD_ENV.get_template("report.md.j2").render(a=a, generated=_now())
    if len(text) < MD_LIMIT:
        return text
    body, _, last = text.rstrip("\n").rpartition("\n")
    note = "\n\n(cut to fit a ticket; report.html holds everything)\n\n"
    keep = MD_LIMIT - len(last) - len(note) - 6
    kept = body[:keep].rsplit("\n", 1)[0]
    if sum(line.startswith("```") for line in kept.splitlines()) % 2:  # cut inside a remedy's code block
        kept += "\n```"
    return kept + note + last + "\n"


def to_json(a: dict) -> str:
    """The analysis as JSON, one object per line of the top level (compact inside: the indenting
    encoder is pure Python and several times slower on a big timeline)."""
    return "".join(_json_parts(a))


def _json_parts(a: dict) -> Iterator[str]:
    """:func:`to_json` one top-level key at a time (``write`` streams them to the file)."""
    yield "{\n"
    sep = ""
    for k, v in a.items():
        yield f"{sep}  {json.dumps(k)}: {json.dumps(v, default=str, separators=(',', ':'))}"
        sep = ",\n"
    yield "\n}\n"


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
    # the big ones are written piece by piece: a report of a busy node is tens of MB of text
    for path, parts in ((html_path, _html_parts), (md_path, lambda a: [markdown(a)]), (json_path, _json_parts)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(parts(a))
            done.append(Path(path))
    return done


# -- the integrity banner (analysis.json's "integrity", set by ``analyze``, which verifies first) ------
def integrity_banner(a: dict, markdown: bool = False) -> str:
    """The banner of a bundle that does not match its manifest (``a["integrity"]["verified"]`` false):
    escaped HTML, or with ``markdown`` a Markdown paragraph; ``""`` for a verified bundle or an
    analysis without ``integrity``. It names the first problems and, when ``analysed_anyway``, says
    that ``--allow-tampered`` was given."""
    i = a.get("integrity") or {}
    if not i or i.get("verified", True):
        return ""
    problems = i.get("problems") or []
    text = (f"TAMPERED OR DAMAGED BUNDLE: it does not match its manifest ({len(problems)} problems: "
            + "; ".join(str(p) for p in problems[:3]) + (" ..." if len(problems) > 3 else "") + ")."
            + (" Analysed anyway (--allow-tampered): nothing below can be taken as evidence."
               if i.get("analysed_anyway") else ""))
    if markdown:
        return f"**{md(text)}**\n\n"
    return ('<div role="alert" id="integrity" style="border:3px solid #b00020;background:#fde7ea;color:#5c0011;'
            f'padding:.6rem 1rem;margin:.5rem 0;font-weight:bold">{markupsafe.escape(text)}</div>\n')


def _with_banner(parts: Iterator[str], a: dict) -> Iterator[str]:
    """``parts`` of the HTML with :func:`integrity_banner` right after ``<body>``."""
    banner, head = integrity_banner(a), ""
    for chunk in parts:
        if banner and (i := (head := head + str(chunk)).find("<body>")) >= 0:  # str: Markup + str escapes
            yield head[:i + 6] + "\n" + banner + head[i + 6:]
            banner, head = "", ""
        elif not banner:
            yield chunk
    if head:
        yield banner + head


def _now() -> str:
    from datetime import timezone
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
