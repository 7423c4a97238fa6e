"""The journal file header, and why libsystemd refused a file.

The header layout is ``struct Header`` in systemd src/libsystemd/sd-journal/journal-def.h: the
signature ``LPKSHHRH``, compatible and incompatible flags, the state byte, header and arena sizes,
the entry count, the head and tail entry times. :func:`why_unreadable` turns a probe's error and
this header into one sentence for the manifest. Nothing here touches the host but /proc/self/maps.
"""
from __future__ import annotations

import re
import struct

from forensics.artifact import errno_name
from forensics.timeutil import from_usec, iso_z

#: HEADER_INCOMPATIBLE_* bit -> (name, first systemd that writes it)
INCOMPAT = {0x1: ("XZ", 0), 0x2: ("LZ4", 216), 0x4: ("KEYED_HASH", 246), 0x8: ("ZSTD", 246),
            0x10: ("COMPACT", 252)}
COMPAT = {0x1: "SEALED", 0x2: "TAIL_ENTRY_BOOT_ID"}
STATES = {0: "offline", 1: "online", 2: "archived"}


def header(b: bytes, size: int) -> dict | None:
    """The header fields that explain a failure, from the first bytes ``b`` of a file of ``size``
    bytes: signature, flags (int and names), state, sizes, entry count, head/tail time (ISO UTC),
    ``truncated`` (the header describes more bytes than the file has, or the file ends inside the
    header itself). ``None`` under 16 bytes."""
    if len(b) < 16:
        return None
    sig, compat, incompat = struct.unpack_from("<8sII", b)
    hdr = {"signature_ok": sig == b"LPKSHHRH", "compatible_flags": compat, "incompatible_flags": incompat,
           "compatible": [n for bit, n in COMPAT.items() if compat & bit],
           "incompatible": [v[0] for bit, v in INCOMPAT.items() if incompat & bit]}
    if len(b) >= 17:
        hdr["state"] = STATES.get(b[16], f"unknown ({b[16]})")
    if len(b) >= 208:
        hsize, arena = struct.unpack_from("<QQ", b, 88)
        n_entries, = struct.unpack_from("<Q", b, 152)
        head_rt, tail_rt = struct.unpack_from("<QQ", b, 184)
        hdr.update(header_size=hsize, arena_size=arena, n_entries=n_entries,
                   head_realtime=iso_usec(head_rt), tail_realtime=iso_usec(tail_rt),
                   truncated=hsize + arena > size)
    else:
        hdr["truncated"] = True  # b is the file's start, so the whole file is shorter than its header
    return hdr


def iso_usec(usec: int | None) -> str | None:
    """µs since the epoch to ISO UTC text; ``None`` for 0, ``None`` or a value out of range."""
    try:
        return iso_z(from_usec(usec)) if usec else None
    except (OverflowError, OSError, ValueError):
        return None


def libsystemd_version() -> int | None:
    """The systemd release of the libsystemd this process has loaded (``libsystemd.so.0.N.0`` comes
    with systemd N+217: 0.35.0 is 252, 0.38.0 is 255), or ``None``."""
    try:
        with open("/proc/self/maps") as m:
            found = re.search(r"libsystemd\.so\.0\.(\d+)\.\d+", m.read())
        return int(found.group(1)) + 217 if found else None
    except OSError:
        return None


def why_unreadable(e: Exception, hdr: dict | None, size: int | None) -> str:
    """One sentence on why libsystemd refused a file: the error, then what the header says
    (not a journal, truncated, flags from a newer systemd than this reader's libsystemd)."""
    parts = [f"{errno_name(getattr(e, 'errno', None)) or type(e).__name__}: {getattr(e, 'strerror', None) or e}"]
    if hdr is None:
        parts += ["shorter than a journal file header"] if size is not None else []
    elif not hdr["signature_ok"]:
        parts.append("not a journal file (the signature is not LPKSHHRH)")
    else:
        if hdr.get("truncated") and "header_size" in hdr:
            parts.append(f"truncated: the header describes {hdr['header_size'] + hdr['arena_size']} bytes "
                         f"but the file has {size}")
        elif hdr.get("truncated"):
            parts.append(f"truncated: the file ends inside its own header, after {size} bytes")
        lib = libsystemd_version()
        bits = [1 << i for i in range(32) if hdr["incompatible_flags"] & (1 << i)]
        newer = [f"{INCOMPAT[b][0]} (systemd >= {INCOMPAT[b][1]})" if b in INCOMPAT else f"unknown flag {b:#x}"
                 for b in bits if b not in INCOMPAT or (lib is not None and INCOMPAT[b][1] > lib)]
        if newer:
            parts.append(f"written by a newer systemd: {', '.join(newer)}; this reader's libsystemd "
                         f"is from systemd {lib or 'unknown'}")
    return "; ".join(parts)
