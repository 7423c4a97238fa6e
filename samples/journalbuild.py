"""Build real ``.journal`` files from Journal Export Format text with ``systemd-journal-remote``.

Used by the sample node's set-up (samples/build.py) and by the tests, so that every journal the
tool reads in tests is a real binary journal written by systemd's own code, not a mock.
Export format: systemd docs/JOURNAL_EXPORT_FORMATS.md; converter: man systemd-journal-remote(8).
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

CANDIDATES = ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")


def journal_remote() -> str:
    """Path of systemd-journal-remote. Raises ``FileNotFoundError`` naming the Debian package."""
    for c in CANDIDATES:
        if os.access(c, os.X_OK):
            return c
    found = shutil.which("systemd-journal-remote")
    if found:
        return found
    raise FileNotFoundError("systemd-journal-remote not found: apt-get install systemd-journal-remote")


def export_entry(fields: dict) -> bytes:
    """One entry in Journal Export Format. ``fields`` maps names to str/int/bytes (or a list of them
    for a repeated field). Values with newlines or non-UTF-8 bytes use the binary form."""
    out = bytearray()
    for name, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            b = v if isinstance(v, bytes) else str(v).encode()
            if b"\n" in b or any(c < 32 and c != 9 for c in b) or not _utf8(b):
                out += name.encode() + b"\n" + struct.pack("<Q", len(b)) + b + b"\n"
            else:
                out += name.encode() + b"=" + b + b"\n"
    return bytes(out) + b"\n"


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def build_journal(export: bytes | str | os.PathLike, out_file: str | os.PathLike) -> Path:
    """Convert export text (bytes, or a path to an export file) into the journal file ``out_file``
    (must end in ``.journal``; parent directories are created; an existing file is replaced, since
    systemd-journal-remote appends). Raises ``subprocess.CalledProcessError`` on failure."""
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    if isinstance(export, bytes):
        subprocess.run([journal_remote(), f"--output={out}", "-"], input=export, check=True,
                       capture_output=True)
    else:
        subprocess.run([journal_remote(), f"--output={out}", str(export)], check=True, capture_output=True)
    return out
