"""A stored journal field as the readers see it (collectors/journal/entries.jsonl: ``journalctl -o json``'s
shapes: a string, a list for a repeated field, ``{"base64": ...}`` for a value that is not text)."""
from __future__ import annotations

import base64


def text(v) -> str:
    """A stored field value as text: the first of a repeated field, base64 decoded (bad UTF-8
    replaced), ``""`` when absent."""
    if isinstance(v, list):
        v = v[0] if v else ""
    if isinstance(v, dict):
        try:
            return base64.b64decode(v.get("base64", "")).decode("utf-8", "replace")
        except (ValueError, TypeError):  # not base64, or not text at all ({"base64": 5})
            return ""
    return v if isinstance(v, str) else "" if v is None else str(v)
