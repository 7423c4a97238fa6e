"""The outcome of acquiring one piece of evidence.

Every collector records every artifact it tried to acquire with one of five statuses, so that
"could not read" is data in the manifest and never an empty list nobody notices (the first of the
four investigation mistakes). The shape follows fox-it/acquire's per-artifact outcome records.
"""
from __future__ import annotations

import errno as _errno
import os
from dataclasses import dataclass, field
from enum import Enum


class Status(str, Enum):
    """Acquisition outcome of one artifact, as written in ``manifest.json``."""

    COLLECTED = "collected"    #: copied or generated in full
    ABSENT = "absent"          #: the source does not exist on the host (ENOENT)
    UNREADABLE = "unreadable"  #: the source exists but could not be read (errno given: EACCES, EPERM, ...)
    ERROR = "error"            #: reading failed for another reason (corrupt, bad format); message given
    TRUNCATED = "truncated"    #: only part of the source was taken (a size or time bound); notes say why


@dataclass(frozen=True, slots=True)  # slots: a big node records thousands
class Artifact:
    """One manifest record.

    ``path`` is relative to the bundle root (``None`` when nothing was written), ``source`` is the
    path on the host as the node sees it (without ``--root``), ``size`` is in bytes and ``sha256`` is
    the hex digest of the bytes stored in the bundle.
    """

    path: str | None
    source: str
    status: Status
    method: str
    size: int | None = None
    sha256: str | None = None
    errno: int | None = None
    message: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        """Return the manifest record as a JSON-ready dict (status as its string value)."""
        return {"path": self.path, "source": self.source, "status": self.status.value, "method": self.method,
                "size": self.size, "sha256": self.sha256, "errno": self.errno, "message": self.message,
                "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: dict) -> "Artifact":
        """Inverse of :meth:`to_json`; raises ``KeyError``/``ValueError`` on a malformed record."""
        return cls(path=d.get("path"), source=d["source"], status=Status(d["status"]),
                   method=d.get("method", ""), size=d.get("size"), sha256=d.get("sha256"),
                   errno=d.get("errno"), message=d.get("message"), notes=tuple(d.get("notes") or ()))


def from_oserror(source: str, method: str, exc: OSError, notes: tuple[str, ...] = ()) -> Artifact:
    """Map an ``OSError`` met while reading ``source`` to an absent / unreadable / error artifact.

    ENOENT and ENOTDIR mean absent; EACCES and EPERM mean unreadable (with the errno kept, so that a
    permission problem is never mistaken for absence); anything else is an error with its errno.
    """
    code = exc.errno
    msg = exc.strerror or str(exc)
    if code in (_errno.ENOENT, _errno.ENOTDIR):
        return Artifact(None, source, Status.ABSENT, method, errno=code, message=msg, notes=notes)
    if code in (_errno.EACCES, _errno.EPERM):
        return Artifact(None, source, Status.UNREADABLE, method, errno=code, message=msg, notes=notes)
    return Artifact(None, source, Status.ERROR, method, errno=code,
                    message=f"{_errno.errorcode.get(code or 0, 'E?')}: {msg}" if code else msg, notes=notes)


def errno_name(code: int | None) -> str:
    """``13 -> 'EACCES'``; ``None`` or unknown codes give ``''``."""
    return _errno.errorcode.get(code, "") if code else ""


__all__ = ["Status", "Artifact", "from_oserror", "errno_name", "os"]
