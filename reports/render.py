"""Render the ``gpu-forensics/analysis/v1`` dict (forensics/findings/analysis.py) as HTML, Markdown or JSON.

Renderers compute nothing the JSON does not hold; they only choose what to show. HTML goes through
jinja2 with autoescape on, so every string from the evidence (journal messages, package names,
command lines) is shown as text, never run.
"""
from __future__ import annotations

import gc
import io
import json
import os
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import jinja2
import markupsafe
from dateutil import parser as _dparser

from forensics.events import is_context
from forensics.timeutil import to_second, within
from forensics.words import count_of

from . import ticket
from .files import put, target
from .timeline import inert


def _finalize(value):
    """Every ``{{ }}`` of the templates: evidence text with its control characters made visible
    (:func:`reports.timeline.inert`, so a page printed on a terminal cannot drive it), then autoescaped;
    markup the renderer built (``Markup``: the inline SVG) and non-text values as they are."""
    return inert(value) if isinstance(value, str) and not isinstance(value, markupsafe.Markup) else value


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                          trim_blocks=True, lstrip_blocks=True, finalize=_finalize)
md = ticket.md  # the Markdown escaping, kept here for the callers that import it from render


def shown(value) -> str:
    """A table cell's value in words: ``True``/``False`` as ``yes``/``no``, ``None`` as ``unknown`` (a
    fact the node did not show), a list joined with ``", "``; anything else as its text."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(shown(v) for v in value)
    return str(value)


def what(e: dict) -> markupsafe.Markup:
    """A timeline row's "What" cell, escaped: its summary; when the summary is a cut of a longer line
    (it holds ``…`` and the event keeps the line in ``attrs.message``), the summary opens onto the
    whole line (``<details>``), one click away. Control characters become visible escapes, as everywhere."""
    summary = inert(str(e.get("summary") or ""))  # built as Markup: the template's finalize does not see it
    full = (e.get("attrs") or {}).get("message") if "…" in summary else None
    if not full or not isinstance(full, str):
        return markupsafe.escape(summary)
    return markupsafe.Markup('<details class="more"><summary>{}</summary>{}</details>').format(summary, inert(full))


def _all_excluded(verdicts) -> bool:
    """Jinja test: every ``{"verdict"}`` of a ``causes_checked[].incidents`` is ``excluded``."""
    return bool(verdicts) and all(v.get("verdict") == "excluded" for v in verdicts)


_ENV.filters.update(shown=shown, sec=to_second, count_of=count_of, what=what)
_ENV.tests["all_excluded"] = _all_excluded


#: events of context kinds (forensics.events.Kind.context) are shown only this close to an incident window
NEAR = timedelta(hours=1)


def _when(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)  # what analysis.json holds ("...Z"): the fast path
    except ValueError:
        return _dparser.isoparse(text)


def _shown_timeline(a: dict) -> tuple["_Picked", int]:
    """The entries of ``a["timeline"]`` report.html's table lists (a context kind only near an incident window),
    as a :class:`_Picked` view, and how many are left out."""
    near = within((_when(i["window"]["start"]) - NEAR, _when(i["window"]["end"]) + NEAR) for i in a["incidents"])
    timeline = a["timeline"]
    shown, hidden = [], 0
    for n, e in enumerate(timeline):
        if is_context(e["kind"]):
            if not near(_when(e["at"])):
                hidden += 1
                continue
        shown.append(n)
    return _Picked(timeline, shown), hidden


class _Picked:
    """The entries of ``timeline`` at the indices ``picked``, read as they are iterated (each entry of the
    analysis's timeline view is made when read: a busy node's table would hold them all)."""

    def __init__(self, timeline, picked: list[int]):
        self.timeline, self.picked = timeline, picked

    def __len__(self) -> int:
        return len(self.picked)

    def __iter__(self):
        timeline = self.timeline
        return (timeline[n] for n in self.picked)


def prepare() -> None:
    """Compile report.html's template now (jinja compiles a template at its first use, and the compiler's
    few MB are freed after): ``analyze`` calls this before it reads the bundle, so that those MB are not
    added to the peak of a busy node's analysis held whole (issue 30: 3 MB of the L bench's 91)."""
    _ENV.get_template("report.html.j2")


def html(a: dict) -> str:
    """The self-contained HTML postmortem (no external CSS, JS or fonts)."""
    return "".join(_html_parts(a))


def _html_parts(a: dict, chart=None, meanwhile=None, spill: Path | None = None) -> Iterator[str]:
    """:func:`html` piece by piece, as the template produces it (``write`` streams it to the file). With
    ``chart`` (a :class:`reports.chartproc.ChartChild` drawing the picture in another process), the
    part of the page after the picture is rendered while it is drawn, and held until it comes (in an
    unnamed file of directory ``spill`` when given, the report's own: most of a busy node's page);
    ``meanwhile()`` (if given) is called then, before the picture is asked for."""
    shown, hidden = _shown_timeline(a)
    hidden += sum((a.get("timeline_omitted") or {}).values())
    if chart is None:
        from .chart import figures  # matplotlib is imported only when a picture is drawn
        # figures escapes every text it draws (matplotlib's SVG writer), so its output is markup
        svg = markupsafe.Markup(figures(a))
    else:
        svg = _Pending()
    fix, first_cmds = ticket.first_commands(a)
    broke = ticket.broke_sentence((a.get("headline") or {}).get("broke"))
    parts = _ENV.get_template("report.html.j2").generate(a=a, timeline=shown, hidden=hidden, generated=_now(),
                                                          chart=svg, fix=fix, first_cmds=first_cmds, broke=broke)
    return _with_banner(parts if chart is None else _chart_later(parts, svg, chart, a, meanwhile, spill), a)


class _Pending:
    """The picture's place in the template until the child has drawn it: jinja's autoescape asks it for
    its markup (``__html__``) once, where ``{{ chart }}`` stands, and gets :data:`_PLACE`."""

    reached = False

    def __html__(self) -> str:
        self.reached = True
        return _PLACE


_PLACE = "<!--chart: drawn in another process-->"


#: characters of the page after the picture joined and encoded at a time while it waits for the picture (a
#: piece is held three times meanwhile: its chunks, their join, two bytes a character beyond Latin-1, and
#: its UTF-8; a megabyte was the peak of writing a busy node's report, issue 30)
SPILL_PIECE = 1 << 18


def _spill_file(spill: Path | None):
    """An unnamed temporary file in the directory ``spill``, or memory when there is none or no file can be
    made there (a folder that holds the report but takes no new file)."""
    if spill is not None:
        try:
            return tempfile.TemporaryFile("w+b", dir=spill)
        except OSError:
            pass
    return io.BytesIO()


def _chart_later(parts: Iterator[str], pending: _Pending, chart, a: dict, meanwhile=None,
                 spill: Path | None = None) -> Iterator[str]:
    """``parts`` with the picture from ``chart.svg_utf8(a)`` where :data:`_PLACE` is; what follows it is
    rendered before the picture is asked for, and kept in pieces of about :data:`SPILL_PIECE` characters, as UTF-8: in memory, or
    with ``spill`` (a directory) in an unnamed temporary file there, read back after the picture. The
    picture and that end are yielded as UTF-8 bytes (:func:`reports.files.put` writes them as they are)."""
    for chunk in parts:
        if pending.reached and chunk == _PLACE:
            break
        yield chunk
    else:  # a template without {{ chart }}
        return
    with _spill_file(spill) as rest:
        piece, size = [], 0
        for chunk in parts:
            piece.append(chunk)
            size += len(chunk)
            if size >= SPILL_PIECE:
                rest.write("".join(piece).encode("utf-8"))
                piece, size = [], 0
        rest.write("".join(piece).encode("utf-8"))
        del piece
        if meanwhile:
            meanwhile()
        yield chart.svg_utf8(a)
        rest.seek(0)
        while block := rest.read(SPILL_PIECE):
            yield block



#: ticket bodies beyond this many characters are shortened (about four screens; Jira's own field limit is
#: 32,767, GitHub's comment limit 65,536). 4000 could not hold the demo's five remedies whole, with their
#: needs and breaks; 8000 could not hold the fourteen causes checked for each of its two incidents (issue
#: 26); report.html has everything
MD_LIMIT = 16000


def markdown(a: dict, flavor: str = "markdown") -> str:
    """Paste-ready text for a ticket (:mod:`reports.ticket`): Markdown, or with ``flavor="jira"`` Jira
    wiki markup, under :data:`MD_LIMIT` characters by leaving out detail in :data:`reports.ticket.DROP_ORDER`;
    the verdicts, symptoms, gaps, remedies and the manifest SHA-256 are kept whole."""
    return ticket.render(a, MD_LIMIT, integrity_banner(a, markdown=flavor), flavor)


def to_json(a: dict) -> str:
    """The analysis as JSON, one object per line of the top level (compact inside: the indenting
    encoder is pure Python and several times slower on a big timeline)."""
    return "".join(_json_parts(a))


def _json_parts(a: dict) -> Iterator[str]:
    """:func:`to_json` one top-level key at a time (``write`` streams them to the file), a long list (the
    timeline, the bundle's artifacts) a few hundred items at a time."""
    yield "{\n"
    sep = ""
    for k, v in a.items():
        yield f"{sep}  {json.dumps(k)}: "
        yield from _json_value(v)
        sep = ",\n"
    yield "\n}\n"


#: items of a list encoded together: a list longer than this is never one string (a busy node's timeline is
#: tens of MB of JSON; holding it whole beside the analysis was the peak of writing analysis.json)
JSON_BATCH = 512


def _json_value(v) -> Iterator[str]:
    """``v`` as compact JSON (``json.dumps(v, default=str, separators=(',', ':'))``, the same text) in pieces:
    a list longer than :data:`JSON_BATCH`, and an object with string keys holding one, item by item."""
    if _view(v) or isinstance(v, list) and len(v) > JSON_BATCH:
        yield "["
        for i in range(0, len(v), JSON_BATCH):
            yield ("," if i else "") + ",".join(json.dumps(x, default=str, separators=(",", ":"))
                                                 for x in v[i:i + JSON_BATCH])
        yield "]"
    elif isinstance(v, dict) and all(isinstance(k, str) for k in v) and \
            any(_view(x) or isinstance(x, (list, dict)) and len(x) > JSON_BATCH for x in v.values()):
        yield "{"
        for j, (k, x) in enumerate(v.items()):
            yield ("," if j else "") + json.dumps(k) + ":"
            yield from _json_value(x)
        yield "}"
    else:
        yield json.dumps(v, default=str, separators=(",", ":"))


def _view(v) -> bool:
    """Whether ``v`` is a sequence that is neither a list nor text: the analysis's ``timeline[]``, a view whose
    entries are made as they are read (forensics/findings/entries.py), written as a list."""
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes, list, tuple))


def html_parts(a: dict, flavor: str = "markdown") -> Iterator[str]:
    """report.html in pieces (the ``html`` format of reports/formats.py; ``flavor`` is not used)."""
    return _html_parts(a)


def markdown_parts(a: dict, flavor: str = "markdown") -> Iterator[str]:
    """report.md as one piece, in ``flavor`` (the ``markdown`` format of reports/formats.py)."""
    return iter([markdown(a, flavor)])


def json_parts(a: dict, flavor: str = "markdown") -> Iterator[str]:
    """analysis.json in pieces (the ``json`` format of reports/formats.py; ``flavor`` is not used)."""
    return _json_parts(a)


def write(a: dict, html_path: Path | None, md_path: Path | None, json_path: Path | None,
          flavor: str = "markdown", chart=None) -> list[Path]:
    """:func:`write_all` of the three formats by their paths (``None``: not written)."""
    return write_all(a, {"html": html_path, "markdown": md_path, "json": json_path}, flavor, chart)


RULES_FILE = "gpu-alerts.rules.yml"  #: the suggested alert rules' file, beside the first report of a file of its own


class WriteFailed(OSError):
    """A report or the suggested rules could not be written, after every other one was tried: the first
    ``OSError`` (``error``; its ``errno``, ``strerror`` and ``filename``, the path as named), and ``written``,
    the paths written."""

    def __init__(self, error: OSError, written: list[Path]):
        super().__init__(error.errno, error.strerror, error.filename)
        self.error, self.written = error, written


def write_all(a: dict, paths: dict, flavor: str = "markdown", chart=None) -> list[Path]:
    """Write each format of :data:`reports.formats.FORMATS` that ``paths`` (``{format name: path or None}``)
    gives a path, the Markdown one in ``flavor`` (see :func:`markdown`); returns the paths written.
    ``chart``: a started :class:`reports.chartproc.ChartChild`, which draws the picture of report.html while
    the rest is rendered (without it, it is drawn here). When the alert audit ran, the suggested rules go
    last, as :data:`RULES_FILE` (PrometheusRule-ready; ``promtool check rules`` accepts it), beside the first
    report written as a file of its own: none when every report goes to a stream or a device
    (``--html /dev/stdout``; report.html holds them too). Each is written (:func:`reports.files.put`) even
    when one before it could not be; then :class:`WriteFailed` names the first that could not."""
    from .formats import FORMATS
    outs = [(Path(paths[f.name]), f) for f in FORMATS if paths.get(f.name)]
    errors: dict[Path, OSError] = {}
    _write_reports(a, outs, flavor, chart, errors)
    done = [p for p, _ in outs if p not in errors]
    audit = (a.get("metrics") or {}).get("alert_audit") or {}
    beside = next((p for p in done if target(p)[0] == "file"), None)
    rules = beside.parent / RULES_FILE if beside else None
    # never over a report of this run (--html gpu-alerts.rules.yml): the report the user named stays
    if audit.get("suggested_rules_yaml") and rules and not any(_same(rules, p) for p in done):
        try:
            put(rules, [audit["suggested_rules_yaml"]])
            done.append(rules)
        except OSError as e:
            errors[rules] = e
    if errors:
        raise WriteFailed(next(iter(errors.values())), done)
    return done


def _same(a: Path, b: Path) -> bool:
    """Whether the paths ``a`` and ``b`` name one file (links and ``..`` resolved)."""
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def _write_reports(a: dict, outs: list, flavor: str, chart, errors: dict) -> None:
    """The reports of :func:`write_all` (``outs``: ``[(path, format)]``), each tried; ``errors`` gets
    ``{path: OSError}`` of those that could not be written."""
    def put_one(path: Path, parts) -> None:
        try:
            put(path, parts)
        except OSError as e:
            errors[path] = e
    # the big ones are written piece by piece: a report of a busy node is tens of MB of text. The cycle
    # collector is paused meanwhile: ``a`` of a busy node holds a million small acyclic objects that
    # every full collection would walk while matplotlib and jinja allocate (a fifth of the L bench's
    # rendering time, freeing nothing); what they leave in cycles is freed once it runs again
    enabled = gc.isenabled()
    gc.disable()
    try:
        html_path = next((p for p, f in outs if f.name == "html"), None)
        if chart is None or not html_path:
            for path, f in outs:
                put_one(path, f.parts()(a, flavor))
            return
        # with a child drawing the picture: the other formats are written while it draws, once the rest of
        # report.html is rendered (or once report.html failed)
        chart.send(a)
        called = []

        def meanwhile() -> None:
            called.append(True)
            for path, f in outs:
                if f.name != "html":
                    put_one(path, f.parts()(a, flavor))
        # the page after the picture waits beside the report's file, unless it goes to a stream or a device
        kind, where, _ = target(html_path)  # never raises: a path that cannot be looked at is put's error
        put_one(html_path, _html_parts(a, chart, meanwhile, spill=where.parent if kind == "file" else None))
        if not called:
            meanwhile()
    finally:
        if enabled:
            gc.enable()


# -- the integrity banner (analysis.json's "integrity", set by ``analyze``, which verifies first) ------
def integrity_banner(a: dict, markdown: bool | str = False) -> str:
    """The banner of a bundle that does not match its manifest (``a["integrity"]["verified"]`` false):
    escaped HTML, or with ``markdown`` a Markdown paragraph (``"jira"``: Jira wiki markup); ``""`` for a verified bundle or an
    analysis without ``integrity``. It names the first problems and, when ``analysed_anyway``, says
    that ``--allow-tampered`` was given."""
    i = a.get("integrity") or {}
    if not i or i.get("verified", True):
        return ""
    problems = i.get("problems") or []
    text = (f"TAMPERED OR DAMAGED BUNDLE: it does not match its manifest ({count_of(len(problems), 'problem')}: "
            + "; ".join(str(p) for p in problems[:3]) + (" ..." if len(problems) > 3 else "") + ")."
            + (" Analysed anyway (--allow-tampered): nothing below can be taken as evidence."
               if i.get("analysed_anyway") else ""))
    if markdown == "jira":
        return f"*{ticket.jira(text)}*\n\n"
    if markdown:
        return f"**{md(text)}**\n\n"
    return ('<div role="alert" id="integrity" style="border:3px solid #b00020;background:#fde7ea;color:#5c0011;'
            f'padding:.6rem 1rem;margin:.5rem 0;font-weight:bold">{markupsafe.escape(text)}</div>\n')


def _with_banner(parts: Iterator[str], a: dict) -> Iterator[str]:
    """``parts`` of the HTML with :func:`integrity_banner` right after ``<body>``."""
    banner, head = integrity_banner(a), ""
    if not banner:  # a verified bundle: the pieces as they come
        yield from parts
        return
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
