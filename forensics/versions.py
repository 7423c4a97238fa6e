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


#: a pre-release after the numbers (``28.2.0~rc1``, ``1.7.0-beta.2``, ``v2.0.0-rc.1``): below the release
_PRE = re.compile(r"(?:\d+:)?v?\d+(?:\.\d+)*[~.+-]?(?:rc|beta|alpha|pre)", re.IGNORECASE)


def number(text: str | None) -> str | None:
    """The dotted numbers of a version as a sentence shows them (``"5:24.0.7-1~debian.12~bookworm"`` ->
    ``"24.0.7"``: an epoch is no part of the release a person names), ``None`` when it has none."""
    t = version_tuple(text) if isinstance(text, str) else ()
    return ".".join(map(str, t)) if t else None


def at_least(found: dict | None, minimum: str) -> bool | None:
    """Whether the version in ``found`` (``{"version", "basis"}`` of the runtime facts' ``versions``) is
    ``minimum`` or later, None when it was not seen. A pre-release of the minimum itself (``28.2.0~rc1`` against
    ``28.2``) is below it, as dpkg orders them."""
    v = (found or {}).get("version") if isinstance(found, dict) else None
    t = version_tuple(v) if isinstance(v, str) else ()
    if not t:
        return None
    m = version_tuple(minimum)
    n = max(len(t), len(m))
    t, m = t + (0,) * (n - len(t)), m + (0,) * (n - len(m))
    return t > m or (t == m and not _PRE.match(v.strip()))


def gate(product: str, minimum: str, found: dict | None) -> str:
    """A remedy's version gate with what this node runs (runtime facts' ``versions`` entry ``found``:
    ``{"version", "basis"}``, or None when not read): ``"Docker >= 25.0 (this node: 24.0.7, read as 5:24.0.7-1~deb12u1
    from /var/lib/dpkg/status (docker-ce): below it, upgrade Docker first)"``, ``"Docker >= 25.0 (this node:
    27.1.1, from dockerd --version)"``, or ``"Docker >= 25.0 (this node's version was not seen)"``, with what dpkg
    says of a package whose install or upgrade did not finish (``found["unfinished"]``: ``{"package", "version",
    "state"}``) when it does: never a default presented as the node's. Raises nothing."""
    ok = at_least(found, minimum)
    if ok is None:
        u = (found or {}).get("unfinished") if isinstance(found, dict) else None
        if isinstance(u, dict) and u.get("package"):
            named = " ".join(str(x) for x in (u["package"], u.get("version")) if x)
            return (f"{product} >= {minimum} (this node's version was not seen: dpkg lists {named} as "
                    f"{u.get('state')}, an install or upgrade that did not finish; `dpkg --configure -a` finishes it)")
        return f"{product} >= {minimum} (this node's version was not seen)"
    v, basis = found["version"], found.get("basis")
    said = f"this node: {number(v)}" + (f", read as {v}" if number(v) != v else "") + (
        (" from " if number(v) != v else ", from ") + basis if basis else "")
    return f"{product} >= {minimum} ({said}" + ("" if ok else f": below it, upgrade {product} first") + ")"
