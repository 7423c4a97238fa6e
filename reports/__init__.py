"""Renderers for the analysis dict: self-contained HTML, Markdown for the ticket, and JSON."""
