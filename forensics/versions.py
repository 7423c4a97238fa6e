"""Version numbers as the node writes them, made comparable: the one parser every floor uses.

Package managers, ``--version`` answers and file names write a version with decoration around the
numbers the tool compares: a Debian epoch (``1:1.7.24-1``, deb-version(7)), a ``v`` prefix
(``v1.1.12``, Go modules' tags as runc and containerd print them), a Debian revision or a build suffix
(``-0ubuntu1~22.04.1``, ``+ds1``, ``~rc1``), a distribution tag (``systemd 252 (252.22-1~deb12u1)``
is given here as ``252.22-1~deb12u1``). Only the leading dotted numbers are kept.
"""
from __future__ import annotations

import re

_LEADING = re.compile(r"(?:\d+:)?v?(\d+(?:\.\d+)*)")


def version_tuple(text: str | None) -> tuple[int, ...]:
    """The leading dotted numbers of a version, as ints: ``"1:1.17.8-1"`` -> ``(1, 17, 8)``,
    ``"v1.1.5+ds1"`` -> ``(1, 1, 5)``, ``"550.54.15"`` -> ``(550, 54, 15)``. ``()`` when ``text`` is
    ``None``, empty or does not start with a number (after an epoch and a ``v``): an unknown version
    sorts before every known one and compares below any gate. Raises nothing."""
    m = _LEADING.match((text or "").strip()) if isinstance(text, str) or text is None else None
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def gate(product: str, minimum: str, found: dict | None) -> str:
    """A remedy's version gate with what this node runs (runtime facts' ``versions`` entry ``found``:
    ``{"version", "basis"}``, or None when not read): ``"Docker >= 25.0 (this node: 24.0.7, from dockerd
    --version: below it, upgrade Docker first)"``, ``"Docker >= 25.0 (this node: 27.1.1, from dockerd
    --version)"``, or ``"Docker >= 25.0 (this node's version was not seen)"``: never a default presented
    as the node's. Raises nothing."""
    v = (found or {}).get("version") if isinstance(found, dict) else None
    if not isinstance(v, str) or not version_tuple(v):
        return f"{product} >= {minimum} (this node's version was not seen)"
    said = f"this node: {v}" + (f", from {found['basis']}" if found.get("basis") else "")
    if version_tuple(v) < version_tuple(minimum):
        return f"{product} >= {minimum} ({said}: below it, upgrade {product} first)"
    return f"{product} >= {minimum} ({said})"


def at_least(found: dict | None, minimum: str) -> bool | None:
    """Whether the version in ``found`` (as :func:`gate`'s) is ``minimum`` or later; None when it was not seen."""
    v = (found or {}).get("version") if isinstance(found, dict) else None
    t = version_tuple(v) if isinstance(v, str) else ()
    return None if not t else t >= version_tuple(minimum)
