"""rpm's package database, read as package names and versions (RHEL, Fedora, SUSE, Amazon Linux).

Format: ``rpmdb.sqlite`` (RPM 4.16 and later: ``/var/lib/rpm`` on RHEL 9, ``/usr/lib/sysimage/rpm`` on SUSE and
newer Fedora), opened with the standard library's sqlite3 read-only and ``immutable=1`` (no lock, no journal,
nothing written), through the descriptor :func:`forensics.hostfs.open_regular` checked, bounded in time. Each
``Packages.blob`` is an rpm header without its 8-byte magic: ``il``, ``dl`` (big-endian uint32), ``il`` index
entries ``(tag, type, offset, count)``, then ``dl`` bytes of data (rpm's lib/header.c; tags from rpmtag.h:
NAME 1000, VERSION 1001, RELEASE 1002, EPOCH 1003, ARCH 1022). A Berkeley DB ``Packages`` (RPM 4.15 and older)
or SUSE's ``Packages.db`` is recorded as unsupported, not read. Read by the nvidia_host collector (NVIDIA's
packages) and the node collector (the versioned packages, on a node without dpkg).
"""
from __future__ import annotations

import os
import struct
import time
from typing import Callable

from . import hostfs
from .artifact import Artifact, Status, from_oserror

PATHS = ("/var/lib/rpm/rpmdb.sqlite", "/usr/lib/sysimage/rpm/rpmdb.sqlite")
OLD = ("/var/lib/rpm/Packages", "/var/lib/rpm/Packages.db", "/usr/lib/sysimage/rpm/Packages.db")
LIMIT = 1 << 30      #: bytes of rpmdb.sqlite accepted (RHEL hosts: tens of MB)
SECONDS = 20.0       #: time the sqlite read may take
MAX_ROWS = 100_000   #: headers looked at
HEADER_TAGS = {1000: "name", 1001: "version", 1002: "release", 1003: "epoch", 1022: "arch"}
STRING, INT32 = 6, 4


def collect(ctx, keep: Callable[[str], bool], rel: str, max_packages: int,
            record: bool = True) -> tuple[dict, list[dict] | None]:
    """Read the headers of the rpm database under ``ctx.root`` whose name ``keep`` takes (at most
    ``max_packages``) and store them as the bundle's ``rel`` (JSON: ``[{"name", "epoch", "version", "release",
    "arch"}]``). Returns ``({"status", "source", "packages": count or None}, the packages or None)``. An absent,
    old, oversized, unreadable or corrupt database is a manifest record saying so when ``record`` (the first
    reader of a collection records it; a second one would repeat it), and ``None`` packages."""
    path = next((p for p in PATHS if hostfs.exists(ctx.root, p)), None)
    if path is None:
        old = next((p for p in OLD if hostfs.exists(ctx.root, p)), None)
        if old is not None:
            if record:
                ctx.writer.record(Artifact(None, old, Status.ERROR, "sqlite",
                                           message="unsupported: a Berkeley DB / ndb rpm database (RPM 4.15 and older, "
                                                   "SUSE) is not read; rpm -qa on the node lists it"))
            return {"status": "unsupported", "source": old, "packages": None}, None
        if record:
            ctx.writer.record(Artifact(None, PATHS[0], Status.ABSENT, "sqlite", message="no rpm database on this host"))
        return {"status": "absent", "source": None, "packages": None}, None
    try:
        with hostfs.open_regular(ctx.root, path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > LIMIT:
                if record:
                    ctx.writer.record(Artifact(None, path, Status.ERROR, "sqlite", size=size,
                                               message=f"not read: {size} bytes, over the {LIMIT}-byte bound"))
                return {"status": "error", "source": path, "packages": None}, None
            packages, note = read(f.fileno(), keep, max_packages, ctx.deadline)
    except OSError as e:
        status = from_oserror(path, "sqlite", e)
        if record:
            ctx.writer.record(status)
        return {"status": status.status.value, "source": path, "packages": None}, None
    except Exception as e:  # sqlite3.Error (corrupt, not a database, interrupted) or sqlite3 missing
        if record:
            ctx.writer.record(Artifact(None, path, Status.ERROR, "sqlite", message=f"{type(e).__name__}: {e}"))
        return {"status": "error", "source": path, "packages": None}, None
    notes = [n for n in (note, wal_note(ctx.root, path)) if n]
    a = ctx.writer.write_json(rel, packages, source=path, method="sqlite-immutable", notes=tuple(notes))
    return {"status": a.status.value, "source": path, "packages": len(packages)}, packages


def wal_note(root, path: str) -> str | None:
    """rpm keeps its database in WAL mode: transactions not yet checkpointed sit in ``-wal``, which an
    immutable read does not see. Say so when that file is not empty."""
    try:
        size = os.lstat(hostfs.resolve(root, path + "-wal")).st_size
    except OSError:
        return None
    return (f"{path}-wal holds {size} bytes not yet checkpointed: the transactions in it (the latest rpm/dnf run) "
            "are not in this reading (read-only, immutable)") if size else None


def read(fd: int, keep: Callable[[str], bool], max_packages: int,
         deadline: float | None) -> tuple[list[dict], str | None]:
    """``[{"name", "epoch", "version", "release", "arch"}]`` of the packages ``keep`` takes in the sqlite
    database open on ``fd`` (at most ``max_packages``), and a note when the row or time bound (:data:`SECONDS`,
    or ``deadline``, a ``time.monotonic()`` value) cut the scan. Raises sqlite3.Error, ImportError."""
    import sqlite3  # the standard library's; a Python built without it records the error
    stop = time.monotonic() + SECONDS
    if deadline is not None:
        stop = min(stop, deadline)
    conn = sqlite3.connect(f"file:/proc/self/fd/{fd}?mode=ro&immutable=1", uri=True)
    try:
        conn.set_progress_handler(lambda: 1 if time.monotonic() > stop else 0, 10_000)
        out, note, rows = [], None, 0
        try:
            for (blob,) in conn.execute("SELECT blob FROM Packages"):
                rows += 1
                if rows > MAX_ROWS:
                    note = f"truncated: only the first {MAX_ROWS} packages were looked at"
                    break
                h = header(blob) if isinstance(blob, bytes) else None
                if h and h.get("name") and keep(h["name"]) and len(out) < max_packages:
                    out.append(h)
        except sqlite3.OperationalError as e:
            if "interrupt" not in str(e):
                raise
            note = f"truncated: the read was stopped at its time bound after {rows} packages"
        return out, note
    finally:
        conn.close()


def header(blob: bytes) -> dict | None:
    """``{"name", "epoch", "version", "release", "arch"}`` of one rpm header blob (None when malformed)."""
    if len(blob) < 8:
        return None
    il, dl = struct.unpack(">II", blob[:8])
    start = 8 + 16 * il
    if il > 10_000 or start + dl > len(blob):
        return None
    store = blob[start:start + dl]
    out: dict = dict.fromkeys(("name", "epoch", "version", "release", "arch"))
    for i in range(il):
        tag, typ, off, count = struct.unpack(">iIiI", blob[8 + 16 * i: 24 + 16 * i])
        key = HEADER_TAGS.get(tag)
        if key is None or off < 0 or off >= len(store):
            continue
        if typ == STRING and key != "epoch":
            end = store.find(b"\0", off)
            out[key] = store[off:end if end >= 0 else len(store)].decode("utf-8", "replace")
        elif typ == INT32 and key == "epoch" and off + 4 <= len(store):
            out[key] = struct.unpack(">i", store[off:off + 4])[0]
    return out


def versions(packages: list) -> dict:
    """``{name: "[epoch:]version-release"}`` (``name.arch`` when a name has two architectures)."""
    names = [p.get("name") for p in packages if isinstance(p, dict)]
    out = {}
    for p in packages:
        if not isinstance(p, dict) or not p.get("name"):
            continue
        key = f"{p['name']}.{p.get('arch')}" if names.count(p["name"]) > 1 else p["name"]
        evr = f"{p.get('version')}-{p.get('release')}" if p.get("release") else str(p.get("version"))
        out[key] = f"{p['epoch']}:{evr}" if p.get("epoch") not in (None, 0) else evr
    return out
