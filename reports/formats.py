"""The whole-report formats ``analyze`` (and ``run``, ``demo``) writes, in one registry: the CLI takes each
format's flag, default file and help from it, and :func:`reports.render.write_all` the function that writes
it. A new format is its renderer (a function giving the file's text in pieces) and one line in
:data:`FORMATS`; the ticket flavours of the Markdown report are :data:`FLAVORS` (reports/ticket.py).

Importable without jinja2 or matplotlib (the single-file collector builds its parser from it): the
renderers are named here, imported only when a report is written.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Iterator

from .ticket import FLAVORS

__all__ = ["FLAVORS", "FORMATS", "Format", "by_flag"]


@dataclass(frozen=True)
class Format:
    """One report format: ``name`` (its flag is ``--<name>``, and the key of its path), ``file`` (the default
    file in ``<bundle>-report/``), ``what`` (how help and messages name it), ``renderer``
    (``"module:function"``: ``function(analysis, flavor) -> Iterator[str]``, the file's text in pieces),
    ``said`` (its line's label where ``run`` says where everything is)."""

    name: str
    file: str
    what: str
    renderer: str
    said: str

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def parts(self) -> Callable[[dict, str], Iterator[str]]:
        """The renderer, imported now (it may need jinja2 or matplotlib: the ``report`` extra)."""
        module, _, func = self.renderer.partition(":")
        return getattr(importlib.import_module(module), func)


#: every whole-report format, in the order they are written and listed
FORMATS = (Format("html", "report.html", "the HTML report", "reports.render:html_parts", "report"),
           Format("markdown", "report.md", "the Markdown report (the ticket text)", "reports.render:markdown_parts",
                  "ticket text"),
           Format("json", "analysis.json", "analysis.json", "reports.render:json_parts", "analysis"))


def by_flag(flag: str) -> Format | None:
    """The format whose flag is ``flag`` (``"--json"``), or None."""
    return next((f for f in FORMATS if f.flag == flag), None)
