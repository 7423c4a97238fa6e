"""Reading parsed settings documents (TOML, JSON, YAML): a value of the wrong type counts as absent, and
later files override earlier ones.

Every engine's and the toolkit's settings go through these (forensics/engines, collectors/runtime_config,
collectors/containers); nothing here reads a file or raises for what a document holds.
"""
from __future__ import annotations

import json
import tomllib


def parse(text: str, fmt: str) -> tuple[dict | None, str | None]:
    """A settings file's ``text`` parsed as ``fmt`` (``"json"``: daemon.json; ``"toml"``: containerd's,
    crio.conf, containers.conf) -> ``(document, None)``, or ``(None, why)`` where it does not parse or is
    not a table, ``why`` a phrase to follow the file's name (an empty JSON file reads as ``{}``, as
    dockerd reads it)."""
    try:
        doc = json.loads(text or "{}") if fmt == "json" else tomllib.loads(text)
    except (ValueError, RecursionError) as e:
        return None, f"is not valid {fmt.upper()}: {' '.join(str(e).split())[:200]}"
    if not isinstance(doc, dict):
        return None, f"is not a {fmt.upper()} object (a {type(doc).__name__}): its settings are unknown, read as unset"
    return doc, None


def merge(a: dict, b: dict, deep_plugins: bool, depth: int = 0) -> dict:
    """``b`` laid over ``a``, tables merged key by key (crio.conf(5) and containers.conf(5) drop-ins,
    containerd's imports). ``deep_plugins`` False: a ``plugins.<id>`` table of ``b`` replaces ``a``'s whole
    (containerd 1.x imports); True: merged like every other table."""
    out = dict(a)
    for k, v in b.items():
        replace_section = depth == 1 and not deep_plugins  # containerd 1.x: plugins.<id> replaced whole
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not replace_section:
            out[k] = merge(out[k], v, deep_plugins, depth + 1 if (depth or k == "plugins") else 0)
        else:
            out[k] = v
    return out


def get(d, *keys):
    """``d[k1][k2]...``; None where a key is missing or a step is not a table."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def tab(v) -> dict:
    """A TOML/JSON/YAML table, or ``{}`` for a value of any other type."""
    return v if isinstance(v, dict) else {}


def text(v) -> str | None:
    """A non-empty string, or ``None`` for anything else."""
    return v if isinstance(v, str) and v else None


def scalar(v) -> str | None:
    """A YAML/JSON scalar as text (``cdiVersion: 0.6`` is a float to YAML), ``None`` for the rest."""
    return str(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else None


def num(v) -> int | None:
    """An integer (not a bool), or None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def items(v) -> list:
    """A list, or ``[]`` for anything else."""
    return v if isinstance(v, list) else []


def str_list(v) -> list[str]:
    """The strings of a list (a lone string is a list of one); ``[]`` for anything else."""
    return [x for x in (v if isinstance(v, list) else [v] if isinstance(v, str) else []) if isinstance(x, str)]
