"""The journal's kernel lines: which entries the kernel itself wrote, the ``kernel.*`` events the kept
ones become (wordings: :mod:`forensics.kmsg`), and the span over which the journal holds them.

journald reads the kernel's ring buffer from /dev/kmsg and stores each record with
``_TRANSPORT=kernel`` (systemd src/journal/journald-kmsg.c ``dev_kmsg_record``): a record of the
kernel's own facility (``LOG_KERN``, 0) gets ``SYSLOG_IDENTIFIER=kernel``; a line a root process
wrote into /dev/kmsg has a facility of its own (the kernel sets ``LOG_USER`` when the writer gave
none, kernel/printk/printk.c ``devkmsg_write``), which journald stores as ``SYSLOG_FACILITY`` with the
identifier it parsed from the text. Any process may log ``SYSLOG_IDENTIFIER=kernel`` on the syslog,
journal or stdout transport (``logger -t kernel``): such a line is never a kernel event; when it
reads as one, it is kept as ``journal.forged`` (claim ``kernel``). Nothing here touches the host or
the bundle.
"""
from __future__ import annotations

from datetime import datetime

from forensics import kmsg
from forensics.events import Coverage, Event
from forensics.excerpt import cut
from forensics.timeutil import from_usec, iso_z
from .spans import clipped
from .fields import text
from .wording import kernel_trusted

KERNEL = [[("_TRANSPORT", "kernel")], [("SYSLOG_IDENTIFIER", "kernel")]]  #: the pass's journal matches
JOIN_SECONDS = 1.0  #: the lines of one multi-line driver message are this close at most


def claims_kernel(e: dict) -> bool:
    """True for an entry on the kernel pass's matches: the kernel transport, or a writer naming
    itself ``kernel``."""
    return text(e.get("_TRANSPORT")) == "kernel" or text(e.get("SYSLOG_IDENTIFIER")) == "kernel"


def kernel_rule(e) -> str | None:
    """The rule that keeps an entry of :data:`KERNEL`: ``kernel`` (the kernel wrote a line
    :func:`forensics.kmsg.classify` reads, or one line of a multi-line driver message,
    :func:`forensics.kmsg.is_part`), ``forged`` (such a line whose writer only claims to be the
    kernel), else ``None``."""
    msg = text(e.get("MESSAGE"))
    if not kmsg.might_matter(msg) or not (kmsg.classify(msg) or kmsg.is_part(msg)):
        return None
    if kernel_trusted(e):
        return "kernel"
    return "forged" if text(e.get("SYSLOG_IDENTIFIER")) == "kernel" else None


def kernel_events(items: list[tuple[datetime, dict, dict]]) -> list[Event]:
    """The ``kernel.*`` events of the stored entries kept by the ``kernel`` rule, ``(at, entry,
    evidence)`` in time order: consecutive lines of one multi-line driver message (same boot, within
    :data:`JOIN_SECONDS`) joined (:func:`forensics.kmsg.join_continuations`), each message read by
    :func:`forensics.kmsg.classify`, and the lines of one OOM kill made one event
    (:func:`forensics.kmsg.merge_oom`). An event's evidence is its first entry's; a line that reads
    as nothing alone (a part whose message was not completed) gives none."""
    def close(a, b):
        return (text(a[1].get("_BOOT_ID")) == text(b[1].get("_BOOT_ID"))
                and (b[0] - a[0]).total_seconds() <= JOIN_SECONDS)

    out = []
    for group, message in kmsg.join_continuations(items, lambda it: text(it[1].get("MESSAGE")), close):
        got = kmsg.classify(message)
        if got is None:
            continue
        kind, attrs = got
        at, _e, evidence = group[0]
        out.append(Event(at=at, source="journal", kind=kind, summary=_summary(kind, attrs), attrs=attrs,
                         evidence=evidence, original=iso_z(at)))
    return kmsg.merge_oom(out)


def _summary(kind: str, a: dict) -> str:
    first = a["message"].split("\n", 1)[0]
    if kind == kmsg.KIND_XID:
        who = f" (pid {a['pid']}, {a['process']})" if a["pid"] is not None else ""
        return cut(f"Xid {a['xid']} on GPU {a['pci']}{who}: {a['detail'] or ''}", 200)
    if kind == kmsg.KIND_LOST:
        return f"GPU {a['pci']} has fallen off the bus ({a['stage']})"
    if kind == kmsg.KIND_MISMATCH:
        return (f"NVIDIA API mismatch: client {a['client'] or '?'} has {a['client_version']}, "
                f"the kernel module {a['kernel_version']}")
    if kind == kmsg.KIND_OOM:
        return f"OOM kill of {a['process'] or '?'} (pid {a['pid']})" + (
            f" in container {a['container_id'][:12]}" if a["container_id"] else "")
    return f"kernel: {first[:180]}"


def kernel_coverage(cov: dict, refused: list[str], problems: list) -> Coverage:
    """The ``kernel`` source's :class:`Coverage` from the journal's coverage.json: the span of its
    ``_TRANSPORT=kernel`` entries (``kernel_first_usec`` / ``kernel_last_usec``). No journal entries
    at all, no kernel entries among them, or a bundle collected before kernel lines were read give
    ``start`` ``None`` with the reason. A bad record gives an unknown span, reported in ``problems``."""
    try:
        if cov.get("first_usec") is None:
            why = ": " + "; ".join(refused) if refused else ""
            return Coverage("kernel", None, None, f"no journal entries were collected, so no kernel lines{why}")
        if "kernel_first_usec" not in cov:
            return Coverage("kernel", None, None, "this bundle's journal was collected without its kernel lines "
                                                  "(a collector older than the kernel pass)")
        if cov["kernel_first_usec"] is None:
            return Coverage("kernel", None, None,
                            "the journal holds no kernel lines (_TRANSPORT=kernel) from "
                            f"{cov.get('first')} to {cov.get('last')}: journald does not read the kernel's "
                            "log (ReadKMsg=no, journald.conf(5); a container's or a remote journal), so kernel "
                            "lines must come from /var/log/kern.log or /var/log/messages")
        start, end = from_usec(cov["kernel_first_usec"]), from_usec(cov["kernel_last_usec"])
        reason = (f"the journal holds kernel lines (_TRANSPORT=kernel) from {iso_z(start)} to {iso_z(end)} only "
                  "(older ones rotated away, or the kernel's ring buffer had dropped them before journald read it)")
        last = from_usec(cov["last_usec"]) if cov.get("last_usec") is not None else end
        if last > end:  # journald read the kernel's log as long as it wrote: no kernel line after the last means none
            end, reason = last, reason + f"; journald kept reading the kernel's log up to its last entry ({iso_z(last)})"
        start, reason = clipped(cov, start, reason, "read", "kernel lines")
        return Coverage("kernel", start, end, reason)
    except (KeyError, TypeError, ValueError, OverflowError, OSError) as e:
        problems.append({"artifact": "journal/coverage.json", "message": f"kernel span unusable: {e!r}"})
        return Coverage("kernel", None, None, "kernel coverage unknown: journal/coverage.json is unusable")
