"""The kernel's ring buffer, read from /dev/kmsg on a live node, and its records read back.

Format (the kernel's Documentation/ABI/testing/dev-kmsg): each read(2) returns one record,
``<priority>,<sequence>,<timestamp µs>,<flags>[,...];<message>\\n`` then zero or more continuation lines
`` KEY=value\\n`` (``SUBSYSTEM=pci``, ``DEVICE=+pci:0000:3b:00.0``). ``priority`` is ``facility << 3 | level``:
facility 0 is the kernel's own records, any other a line written into /dev/kmsg from user space (root only;
the kernel forces LOG_USER on one written without a facility, kernel/printk/printk.c ``devkmsg_write``), so
the two are told apart. The message escapes non-printable bytes as ``\\xNN`` (a multi-line printk holds
``\\x0a``). Opened ``O_RDONLY|O_NONBLOCK`` and positioned at the oldest record still held (``SEEK_SET`` 0),
records are read until ``EAGAIN``; ``EPIPE`` means records were overwritten while reading (the next read
returns the oldest one left). The timestamp is ``local_clock()`` since boot, which stops during suspend: a
record's time is the boot time (/proc/stat ``btime``, ``NodeFacts.boot_time``) plus its timestamp, early by
the time the node spent suspended before it (``dmesg -T`` has the same caveat): approximate.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from forensics.artifact import Artifact, Status, from_oserror
from forensics.source import CollectContext
from forensics.timeutil import iso_z

from .files import redacted
from .syslog import inert

KMSG = "/dev/kmsg"
STORED = "kernlog/kmsg"
KMSG_LIMIT = 32 << 20       #: bytes read from /dev/kmsg (the largest ring, log_buf_len=32M, holds less text)
RECORD_BUF = 16 << 10       #: bytes asked of one read(2): a record is at most 8 KiB (devkmsg_user.buf)
_HEADER = re.compile(rb"(\d+),(\d+),(\d+),([^,;]*)[^;]*;")


def acquire(ctx: CollectContext) -> dict | None:
    """On a live node (``ctx.live``), store every record /dev/kmsg holds as read (redacted) in ``kernlog/kmsg``
    and return its ``files.json`` entry: ``source, path, records, kernel_records`` (facility 0), ``user_records``,
    ``bytes``, ``overwritten`` (EPIPE while reading), ``read_at`` (ISO UTC), ``boot_time`` and ``boot_id`` (the
    node collector's), ``suspended_s`` (CLOCK_BOOTTIME - CLOCK_MONOTONIC at the read: time spent suspended since
    boot, which the record times do not count). None when the node is not live (nothing recorded). Raises nothing."""
    if not ctx.live:
        return None
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        ctx.writer.record(from_oserror(KMSG, "read", e))
        return {"source": KMSG, "path": None}
    try:
        if not stat.S_ISCHR(os.fstat(fd).st_mode):
            ctx.writer.record(Artifact(None, KMSG, Status.ERROR, "read", message="not a character device"))
            return {"source": KMSG, "path": None}
        os.lseek(fd, 0, os.SEEK_SET)
        entry = {"source": KMSG, "path": STORED, "read_at": iso_z(datetime.now(timezone.utc)),
                 "boot_time": ctx.node.boot_time, "boot_id": ctx.node.boot_id,
                 "suspended_s": max(0.0, round(time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic(), 3))}
        records, why = _records(fd, ctx, entry)
    finally:
        os.close(fd)
    _store(ctx, records, why, entry)
    return entry


def _records(fd: int, ctx: CollectContext, entry: dict) -> tuple[list[bytes], str | None]:
    """The records of ``fd`` up to EAGAIN, :data:`KMSG_LIMIT` bytes or the time budget; and why reading
    stopped early (None: it reached the newest record)."""
    out, size, lost = [], 0, 0
    while True:
        if ctx.expired():
            why = "the time budget (--time-budget) ran out"
            break
        if size >= KMSG_LIMIT:
            why = f"stopped after {KMSG_LIMIT} bytes"
            break
        try:
            b = os.read(fd, RECORD_BUF)
        except BlockingIOError:
            why = None
            break
        except OSError as e:
            if e.errno == errno.EPIPE:
                lost += 1
                continue
            why = f"read failed: {errno.errorcode.get(e.errno, e.errno)}: {e.strerror}"
            break
        if not b:
            why = None
            break
        out.append(b)
        size += len(b)
    m = [_HEADER.match(r) for r in out]
    entry.update(records=len(out), bytes=size, overwritten=lost,
                 kernel_records=sum(1 for h in m if h and int(h.group(1)) >> 3 == 0))
    entry["user_records"] = len(out) - entry["kernel_records"]
    return out, why


def _store(ctx: CollectContext, records: list[bytes], why: str | None, entry: dict) -> None:
    data = b"".join(r if r.endswith(b"\n") else r + b"\n" for r in records)
    notes = [f"{entry['records']} records of the ring buffer as read(2) returned them: {entry['kernel_records']} "
             f"of the kernel (facility 0), {entry['user_records']} written into /dev/kmsg from user space",
             f"read at {entry['read_at']}; record times are btime ({entry['boot_time']}) + the record's timestamp, "
             f"approximate: the {entry['suspended_s']} s the node spent suspended are not counted"]
    if entry["overwritten"]:
        notes.append(f"records were overwritten while reading ({entry['overwritten']} EPIPE)")
    if why:
        notes.append(f"truncated: {why}")
    if ctx.redact:
        data, said = redacted(data)
        notes += said
    ctx.writer.write_bytes(STORED, data, KMSG, "read", tuple(notes),
                           status=Status.TRUNCATED if why else Status.COLLECTED)


# -- read ------------------------------------------------------------------------------------------
@dataclass
class Record:
    """One stored record: ``n`` the line of its header in ``kernlog/kmsg``; ``facility``, ``level``, ``seq``,
    ``usec`` (since boot) and ``flags`` from its header (``original``: the header's text); ``text`` the message
    with its ``\\xNN`` escapes undone; ``props`` its `` KEY=value`` lines."""

    n: int
    facility: int
    level: int
    seq: int
    usec: int
    flags: str
    original: str
    text: str
    props: dict

    def at(self, boot: datetime) -> datetime | None:
        """The record's time (UTC, approximate: the module docstring) for the boot time ``boot``."""
        try:
            return boot + timedelta(microseconds=self.usec)
        except OverflowError:
            return None


#: the kernel's ``\xNN`` escapes undone for a newline, a tab, a backslash and the bytes of UTF-8 text; other
#: control characters stay written ``\xNN`` (inert)
_ESCAPE = re.compile(rb"\\x(0a|09|5c|[89a-f][0-9a-f])")


def parse(data: bytes) -> list[Record]:
    """The records of a stored ``kernlog/kmsg``, in order; lines of no record shape are skipped."""
    out: list[Record] = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if raw.startswith(b" ") and out:
            k, eq, v = raw[1:].partition(b"=")
            if eq:
                out[-1].props[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
            continue
        m = _HEADER.match(raw)
        if m is None:
            continue
        prio = int(m.group(1))
        text = inert(_ESCAPE.sub(lambda e: bytes([int(e.group(1), 16)]), raw[m.end():]).decode("utf-8", "replace"))
        out.append(Record(n, prio >> 3, prio & 7, int(m.group(2)), int(m.group(3)), m.group(4).decode("ascii", "replace"),
                          raw[:m.end() - 1].decode("ascii", "replace"), text, {}))
    return out
