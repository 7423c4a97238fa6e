"""NVIDIA's Xid catalog: what an Xid code means, what the catalog says to do about it, and whether it
implicates the node or the application.

The table is data, ``forensics/xid_catalog.csv`` (shipped in the package, read once through
:mod:`importlib.resources`, so that it is found in a wheel and in the single-file collector alike);
its header comments name the source and version (NVIDIA ``Xid-Catalog.xlsx``, SHA-256 7f70ce96…d5a5,
as summarised in docs/sources.md "NVIDIA Xid catalog"). Nothing here reads a log line: the Xid lines
are :mod:`forensics.kmsg`'s.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

CATALOG = "xid_catalog.csv"
SCOPES = ("node", "application", "informational", "unknown")

#: how each entry's ``scope`` was decided (its ``scope_reason`` says which part applied)
SCOPE_RULE = (
    "node: the catalog's immediate action needs the GPU reset or the machine restarted "
    "(RESET_GPU, RESTART_BM, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR), or its trigger text puts the cause "
    "in the node's hardware whatever the bucket says (32: PCI Express quality); "
    "application: the immediate action restarts the application only (RESTART_APP: 'RESET_GPU or "
    "RESTART_BM is not deemed necessary') and the trigger text does not blame the node, or the trigger "
    "says the application hit the fault and the GPU stays healthy (43) or the error is contained to "
    "the one application (94); "
    "informational: the catalog says no action (IGNORE) and the GPU keeps working (63, 92, 121, 38), "
    "or the Xid reports on another one (154: the recovery action of the Xid before it; 45: the "
    "clean-up after an earlier error or a killed process); "
    "unknown: the catalog names no action that tells (61, marked unused), or the Xid is not in this "
    "table: never guessed.")


@dataclass(frozen=True)
class XidEntry:
    """One Xid code: ``mnemonic`` and ``description`` as the catalog gives them, ``immediate`` and
    ``investigatory`` resolution buckets (``RESTART_APP``, ``RESET_GPU``, ``RESTART_BM``, ``IGNORE``,
    ``WORKFLOW_XID_48``, ...), ``trigger`` (the catalog's trigger-conditions text, ``""`` where it
    gives none), ``xid154`` (the driver branch from which an Xid 154 follows it, e.g. ``R565``, or
    ``""``), ``scope`` (one of :data:`SCOPES`, decided by :data:`SCOPE_RULE`), ``scope_reason`` and
    ``disagreements`` (where other tools read the code otherwise, ``""`` when none is known)."""

    xid: int
    mnemonic: str | None
    description: str | None
    immediate: str | None
    investigatory: str | None
    trigger: str
    xid154: str
    scope: str
    scope_reason: str
    disagreements: str


@cache
def _load() -> tuple[dict[int, XidEntry], dict[str, str]]:
    text = resources.files(__package__).joinpath(CATALOG).read_text(encoding="utf-8")
    header, rows, key = {}, [], None
    for line in text.splitlines():
        if line.startswith("#   ") and key:  # a header comment's next line
            header[key] += " " + line[4:].strip()
        elif line.startswith("# "):
            key, sep, value = line[2:].partition(":")
            key = key.strip() if sep and " " not in key.strip() else None
            if key:
                header[key] = value.strip()
        elif not line.startswith("#"):
            rows.append(line)
    out = {}
    for r in csv.DictReader(rows):
        out[int(r["xid"])] = XidEntry(int(r["xid"]), r["mnemonic"] or None, r["description"] or None,
                                      r["immediate"] or None, r["investigatory"] or None, r["trigger"], r["xid154"],
                                      r["scope"], r["scope_reason"], r["disagreements"])
    return out, header


def catalog() -> dict[int, XidEntry]:
    """Every entry of the table, by Xid (read once). Raises ``OSError`` / ``ValueError`` only for a
    broken installation (the CSV missing or malformed; tests read it)."""
    return dict(_load()[0])


def source() -> str:
    """The table's source and version, from its header comments (``source:`` and ``version:``)."""
    h = _load()[1]
    return f"{h.get('source', '?')}; version: {h.get('version', '?')}"


def lookup(xid: int) -> XidEntry:
    """The entry of ``xid``; for a code not in the table, an entry with ``scope="unknown"``, no
    mnemonic, description or buckets, and a ``scope_reason`` that says so (never a guess)."""
    found = _load()[0].get(xid)
    if found is not None:
        return found
    return XidEntry(xid, None, None, None, None, "", "", "unknown",
                    f"Xid {xid} is not in the catalog table this tool ships ({CATALOG}): its scope is not guessed", "")
