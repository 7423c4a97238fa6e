"""Which journal entries are kept: the selection rules, run over a reader source, and the spool
that holds what they keep.

:func:`select` runs the rules of :data:`RULES` over a source of :mod:`collectors.journal.reader`:
PID 1's manager and unit lines (what they say is in :mod:`collectors.journal.wording`), the
requester's entries and every unit's start/stop lines in a window of :data:`BEFORE_US` before to
:data:`AFTER_US` after each reload (:func:`windows`), NVML/CUDA errors, healthy kubelet probe lines, containerd's
UpdateContainerResources lines and, in the same pass, the kernel's lines that matter (:mod:`collectors.journal.kernel`),
and the first and last entry of each boot and of the journal. The kept entries go to a :class:`Spool` on disk, so memory hardly
grows with the journal. Nothing here touches the host or the bundle but through the source and the
spool's file.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from array import array

from .header import iso_usec
from forensics import kmsg, neighbours
from .kernel import KERNEL, claims_kernel, kernel_rule
from .runtime import UPDATE_TEXT, update_resources
from .fields import text
from .sudo import sudo_verdict
from .wording import (FOREIGN_TRANSPORTS, NVML_MARKERS, PID1, REQUESTER_UNITS, UNIT_PARTS, UNITS_THAT_MATTER,
                      healthy_probe, log_trusted, manager_line, nvml_error, nvml_unit, pid1_trusted,
                      symptom_line, unit_action, unit_matters)

BEFORE_US, AFTER_US = 300_000_000, 5_000_000  # the requester window around a reload


def _scan_all(scan, problems: list[str], what: str):
    """Iterate ``scan`` and keep going as far as the files allow: a read error ends it, noted."""
    try:
        yield from scan
    except OSError as e:
        problems.append(f"{what}: reading stopped early: {e}")


def windows(triggers: list[tuple[int, int | None]], since: int | None):
    """Merge ``[T - 300 s, T + 5 s]`` around each trigger; yields ``(start, end, pids)``."""
    out: list[list] = []
    for t, pid in sorted(triggers, key=lambda x: x[0]):
        start = max(t - BEFORE_US, since or 0, 0)  # boards without an RTC log near 1970
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], t + AFTER_US)
        else:
            out.append([start, t + AFTER_US, set()])
        if pid and pid != 1:
            out[-1][2].add(pid)
    return [(s, e, sorted(p)) for s, e, p in out]


#: the rules that keep an entry (``_GF_SELECTED_BY``), in the order :func:`select` applies them
#: ``forged``: a line that would have been kept as PID 1's, kubelet's, sudo's or the kernel's by what its writer
#: says (SYSLOG_IDENTIFIER, SYSLOG_PID) while journald's trusted fields name another process
#: (:func:`collectors.journal.wording.pid1_trusted`, :func:`~collectors.journal.wording.log_trusted`,
#: :func:`~collectors.journal.sudo.sudo_verdict`, :func:`~collectors.journal.wording.kernel_trusted`): kept to be
#: shown as a red flag, never as evidence; a sudo line whose writer journald could not read is kept as
#: ``requester`` and flagged unverified (:func:`~collectors.journal.sudo.sudo_verdict`), neither
#: ``symptom``: a line of a neighbouring GPU failure (forensics/neighbours.py) from kubelet, containerd,
#: docker or an NVIDIA unit (create errors, CDI spec generation, a device plugin's back-off), never ``nvml``
#: ``kernel``: a kernel line that matters (forensics/kmsg.py: Xid, GPU lost, API mismatch, OOM kill, NVRM,
#: PCIe AER), written by the kernel itself (collectors/journal/kernel.py)
#: ``update-resources``: containerd's UpdateContainerResources lines (collectors/journal/runtime.py)
RULES = ("pid1", "unit", "requester", "nvml", "healthy", "boot", "coverage", "forged", "symptom", "kernel",
         "update-resources")
_BASE = 16  # rule codes 1..len(RULES) packed as hex digits


class Spool:
    """The entries :func:`select` keeps, on disk: each kept entry is one JSON line appended to an
    unlinked temporary file in ``dir`` (the bundle being written, so that nothing is written outside
    the output; ``None``: the system's temporary directory). In memory stay only a 128-bit hash of
    each cursor (less its sequence numbers, see :meth:`_key`) and four numbers (realtime µs, offset,
    length, rules), about 130 bytes an entry, so memory hardly grows with what a big journal yields.
    Raises ``OSError`` when the file cannot be made or written."""

    def __init__(self, dir=None):
        self.f = tempfile.TemporaryFile(dir=dir)
        self.slot: dict[int, int] = {}  # cursor hash -> slot in the arrays below
        self.realtime, self.offset, self.length = array("q"), array("q"), array("q")
        self.rules = array("q")  # rule numbers (1 + index in RULES) as hex digits, in keep order
        self.end = 0

    @staticmethod
    def _key(cursor: str) -> int:
        # the entry, not one file's copy of it: boot ID, monotonic and realtime µs and the XOR hash of
        # its data (b=, m=, t=, x=) are the same in every file that holds it, the sequence numbers (s=,
        # i=) are the writer's (journal-remote numbers what it copies anew). libsystemd's reader over
        # several files shows such an entry once (sd-journal.c compare_with_location); select reads
        # file by file
        ident = ";".join(p for p in cursor.split(";") if p[:2] not in ("s=", "i=")) or cursor
        return int.from_bytes(hashlib.blake2b(ident.encode("utf-8", "surrogateescape"), digest_size=16).digest(),
                              "little")

    def keep(self, rule: str, cursor: str, entry) -> None:
        """Keep the entry at ``cursor`` under ``rule`` (one of :data:`RULES`): ``entry`` is the whole
        entry (see :meth:`collectors.journal.reader._ReaderSource.full`) or a function that gives it, called
        only when the entry is not kept yet; an entry already kept only gains the rule."""
        key = self._key(cursor)
        if key in self.slot:
            return self._add(rule, self.slot[key])
        e = entry() if callable(entry) else entry
        b = json.dumps(e, sort_keys=True).encode() + b"\n"
        self.f.write(b)
        self.slot[key] = len(self.realtime)
        self.realtime.append(e["__REALTIME_TIMESTAMP"])
        self.offset.append(self.end)
        self.length.append(len(b))
        self.rules.append(RULES.index(rule) + 1)
        self.end += len(b)

    def _add(self, rule: str, i: int) -> None:
        code = RULES.index(rule) + 1
        if code not in self._codes(self.rules[i]):
            self.rules[i] = self.rules[i] * _BASE + code

    @staticmethod
    def _codes(packed: int) -> list[int]:
        out = []
        while packed:
            packed, c = divmod(packed, _BASE)
            out.append(c)
        return out[::-1]

    def entries(self):
        """The kept entries in time order (ties: the order they were kept), each a dict with
        ``_GF_SELECTED_BY``: the rules that kept it, in the order they did."""
        self.f.flush()
        fd = self.f.fileno()
        for i in sorted(range(len(self.realtime)), key=lambda i: (self.realtime[i], i)):
            e = json.loads(os.pread(fd, self.length[i], self.offset[i]))
            e["_GF_SELECTED_BY"] = [RULES[c - 1] for c in self._codes(self.rules[i])]
            yield e

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: one search for what the NVML pass looks for in the units' lines, so that most lines are passed over
#: with one test
_UNIT_TEXTS = ('"SyncLoop (probe)"', UPDATE_TEXT)  #: kubelet's probe lines, the runtime's UpdateContainerResources
_NVML_PASS = re.compile("|".join(map(re.escape, NVML_MARKERS + _UNIT_TEXTS)))


def covering(texts) -> tuple[str, ...]:
    """``texts`` without repeats and without those that hold another of them (a line that holds
    ``"cuInit failed:"`` holds ``"cuInit failed"``: one ``in`` test is enough)."""
    texts = tuple(dict.fromkeys(texts))
    return tuple(t for t in texts if not any(o != t and o in t for o in texts))


#: texts one of which every line the NVML pass keeps contains (``in`` tests are ~20x faster than the
#: searches over most kubelet lines, measured on bench S), the kernel's (:data:`forensics.kmsg.TEXTS`)
#: included: the kernel lines are read in the same pass, so that each file's MESSAGE values are
#: enumerated once (:mod:`collectors.journal.unique`); each source's texts are declared beside its patterns
_NVML_TEXTS = (lambda t: t + tuple(k for k in kmsg.TEXTS if k not in t))(
    covering(NVML_MARKERS + _UNIT_TEXTS + neighbours.TEXTS))


def anchors_for(texts: tuple[str, ...] | None, short: tuple[str, ...]) -> tuple[str, ...] | None:
    """Fewer, shorter texts one of which each of ``texts`` contains: those of ``short`` that some
    text contains, and each text that holds none of them, itself. A line that holds one of ``texts``
    holds one of these, so one search for these passes over most lines, and only the lines it finds
    are tested against ``texts`` (issue 18: 13 ``in`` tests cost 5 µs a line, two thirds of the
    NVML pass on bench L; one search of 7 alternatives 1.7 µs). ``None`` when ``texts`` is."""
    if texts is None:
        return None
    used = tuple(a for a in short if any(a in t for t in texts))
    return used + tuple(t for t in texts if not any(a in t for a in used))


#: what the NVML pass searches every MESSAGE for before the ``in`` tests of :data:`_NVML_TEXTS`
#: ("ailed": "Failed to initialize NVML", "cuInit failed", "failed to generate spec", ...)
_NVML_ANCHORS = anchors_for(_NVML_TEXTS, ("ailed", "_ERROR_", "rror", "SyncLoop", "cudaError", "CUDA-", "nvml", "NVML",
                                         "Registered", "GPU", "NVIDIA", "mismatch", "initialized", "encountered",
                                         "devices", "fabric", "NVSwitch"))
_NVML_PRE = re.compile("|".join(map(re.escape, _NVML_ANCHORS))).search if _NVML_ANCHORS else None


def pid1_rule(e) -> str | None:
    """The rule that keeps an entry of the PID 1 pass: ``pid1`` (a manager line), ``unit`` (a
    start/stop line of a unit that matters), ``forged`` (either, while journald's trusted fields say
    PID 1 did not write it), or ``None``."""
    msg = text(e.get("MESSAGE"))
    k = manager_line(msg)
    # the fields are read as the answer needs them (each read is 3-4 µs, on ~200k PID 1 lines of bench
    # L): MESSAGE_ID only when the text says no unit action, the trusted fields and UNIT only for a
    # line that is a manager line or a unit action
    if not k and not (unit_action(msg) or unit_action(msg, text(e.get("MESSAGE_ID")))):
        return None
    if not pid1_trusted(e):
        return "forged"
    if k:
        return "pid1"
    return "unit" if unit_matters(text(e.get("UNIT"))) else None


def nvml_rule(e) -> str | None:
    """The rule that keeps an entry of the NVML pass: for a line on the kernel's matches
    (:func:`collectors.journal.kernel.claims_kernel`) :func:`~collectors.journal.kernel.kernel_rule`'s
    (``kernel`` or ``forged``); for the units' lines ``update-resources``, ``symptom``, ``nvml``,
    ``healthy``, or ``forged`` when journald's trusted fields contradict the writer; else ``None``."""
    msg = text(e.get("MESSAGE"))
    if _NVML_TEXTS is not None:
        if not _NVML_PRE(msg):
            return None
        for t in _NVML_TEXTS:
            if t in msg:
                break
        else:
            return None
    if claims_kernel(e):
        return kernel_rule(e)
    if not _NVML_PASS.search(msg) and not neighbours.ANY.search(msg):
        return None
    if update_resources(msg):
        return "update-resources" if log_trusted(e) else "forged"
    if symptom_line(e):
        return "symptom" if log_trusted(e) else "forged"
    if nvml_error(msg):
        return "nvml" if log_trusted(e) else "forged"
    if healthy_probe(msg):
        return "healthy" if log_trusted(e) else "forged"
    return None


def message_wanted(msg: str) -> bool:
    """A test of a MESSAGE text alone that every entry :func:`nvml_rule` keeps passes: a units' line
    of the NVML pass's wordings, or a kernel line :mod:`forensics.kmsg` reads (or a part of one). The
    pass applies it to each file's MESSAGE values, so that a value that holds a text and can never be
    kept (``NVRM: ...`` of no known wording, repeated on every boot) costs no walk over its entries."""
    return bool(_NVML_PASS.search(msg) or neighbours.ANY.search(msg)
                or (kmsg.might_matter(msg) and (kmsg.classify(msg) or kmsg.is_part(msg))))


def select(src, since: int | None, problems: list[str], spool: Spool | None = None):
    """Run the selection rules over ``src`` (a source with ``scan``, ``full``, ``cursor``,
    ``unique``, ``edge``) from ``since`` (µs or ``None``). Returns ``(kept entries, boots, first
    entry, last entry)``; the kept entries are ``spool`` (a new :class:`Spool` in the system's
    temporary directory when ``None``), and each lists the rules that kept it in
    ``_GF_SELECTED_BY``."""
    sel = spool if spool is not None else Spool()

    def keep(rule, e=None):
        sel.keep(rule, e["__CURSOR"] if e else src.cursor(), e or src.full)

    triggers = _pid1_pass(src, since, problems, keep)
    for start, end, pids in windows(triggers, since):
        _requester_window(src, start, end, pids, problems, keep)
    _nvml_pass(src, since, problems, keep)
    boots = []
    for b in src.unique("_BOOT_ID"):
        first, last = src.edge([("_BOOT_ID", b)]), src.edge([("_BOOT_ID", b)], last=True)
        if first and last:
            keep("boot", first)
            keep("boot", last)
            boots.append({"boot_id": b, **edge_record(first, "first"), **edge_record(last, "last")})
    first, last = src.edge(), src.edge(last=True)
    for e in (first, last):
        if e:
            keep("coverage", e)
    return sel, sorted(boots, key=lambda b: b["first_usec"]), first, last


def passed(src, groups, since, rule, problems: list[str], what: str, texts=None, anchors=None, wanted=None):
    """One selection pass, written once for both kinds of source: ``(kept rule, entry, whole)`` for each entry
    of the match ``groups`` from ``since`` that ``rule`` keeps. A source shared among processes
    (:mod:`collectors.journal.fileset`, with ``keep_each``) gives whole entries and may pass over lines by the
    MESSAGE ``texts``, ``anchors`` and ``wanted`` test (see :func:`nvml_rule`); another gives the fields
    read (``whole`` False: the entry is taken from the source's current position)."""
    if hasattr(src, "keep_each"):
        for r, e in src.keep_each(groups, since, rule, problems, what, texts, anchors, wanted):
            yield r, e, True
        return
    for e in _scan_all(src.scan(groups, since), problems, what):
        r = rule(e)
        if r:
            yield r, e, False


#: the entries of :data:`~collectors.journal.wording.PID1` whose trust the index cannot give (issue 30): ``_PID=1``
#: on a transport where journald's ``_PID`` is the sender's, and those whose *values* claim PID 1
#: (``SYSLOG_IDENTIFIER=systemd`` with ``SYSLOG_PID=1``: early-boot lines journald read from /dev/kmsg, and
#: ``logger -t systemd`` look-alikes). PID 1's native lines carry no ``SYSLOG_PID`` (systemd's log.c), so these
#: are few; PID 1's own lines are found by ``_PID=1``, which journald takes from the sender's credentials
PID1_CLAIMS = [[("_PID", "1"), *(("_TRANSPORT", t) for t in FOREIGN_TRANSPORTS)], PID1[1]]
#: texts one of which every unit that matters (:func:`~collectors.journal.wording.unit_matters`) holds
_MATTERING = covering(tuple(sorted(UNITS_THAT_MATTER)) + UNIT_PARTS)


def manager_rule(e) -> str | None:
    """:func:`pid1_rule` for a manager line alone (``pid1``, or ``forged``), ``None`` for any other line: the
    rule of the walk over every ``_PID=1`` entry, which reads only MESSAGE of the lines it passes over."""
    if not manager_line(text(e.get("MESSAGE"))):
        return None
    return "pid1" if pid1_trusted(e) else "forged"


def pid1_passes(src, problems: list[str] | None = None) -> list[tuple[str, list, object]]:
    """PID 1's lines as three walks by journald's index (issue 30), each ``(what, groups, rule)``: every
    ``_PID=1`` entry by :func:`manager_rule` (MESSAGE read, the trusted fields only for a manager line);
    the ``_PID=1`` entries of the units that matter (``UNIT=`` of ``src``'s values that
    :func:`~collectors.journal.wording.unit_matters` keeps) by :func:`pid1_rule`; and
    :data:`PID1_CLAIMS`, the few entries whose trust the index cannot give, by
    :func:`pid1_rule`. Together they keep what :func:`pid1_rule` keeps over :data:`~collectors.journal.wording.PID1`,
    without reading four fields of each of PID 1's lines (~220,000 on bench L) to find a few thousand.
    When the units cannot be listed (the time budget spent), that goes to ``problems`` and their walk is left out."""
    try:
        units = [u for u in src.unique_holding("UNIT", _MATTERING) if unit_matters(u)]
    except OSError as e:  # the time budget (TimeoutError) or a file that cannot be read: the other walks still run
        units = []
        if problems is not None:
            problems.append(f"PID 1 unit lines: reading stopped early: {e}")
    return [("PID 1 lines", [[("_PID", "1")]], manager_rule),
            *([("PID 1 unit lines", [[("_PID", "1"), *(("UNIT", u) for u in units)]], pid1_rule)] if units else []),
            ("lines that claim PID 1", PID1_CLAIMS, pid1_rule)]


def _pid1_pass(src, since, problems: list[str], keep) -> list[tuple]:
    """PID 1's lines (:func:`pid1_passes`), kept; returns the ``(µs, caller pid)`` of each reload, re-exec or
    SIGHUP line, around which the requesters are looked for."""
    triggers = []
    for what, groups, rule_ in pid1_passes(src, problems):
        for rule, e, whole in passed(src, groups, since, rule_, problems, what):
            keep(rule, e if whole else None)
            k = manager_line(text(e.get("MESSAGE"))) if rule == "pid1" else None
            if k and k["kind"] in ("caller", "reload", "reexec", "sighup"):
                triggers.append((e.get("__REALTIME_TIMESTAMP"), k.get("pid")))
    return triggers


def _requester_window(src, start, end, pids, problems: list[str], keep) -> None:
    """The lines of who may have asked for one reload (``[start, end]`` µs around it): the caller's PID, the
    requester units, sudo's systemctl lines, and every unit's start and stop lines."""
    groups = ([[("_PID", p) for p in pids]] if pids else []) + \
        [[("_SYSTEMD_UNIT", u) for u in REQUESTER_UNITS], [("SYSLOG_IDENTIFIER", "sudo")]]
    for e in _scan_all(src.scan(groups, start, end), problems, "requester window"):
        if text(e.get("SYSLOG_IDENTIFIER")) == "sudo" and text(e.get("_PID")) not in map(str, pids) \
                and "systemctl" not in text(e.get("MESSAGE")).partition("COMMAND=")[2]:
            continue
        keep("forged" if sudo_verdict(e) == "forged" else "requester")
    # on systemd <= 252 no caller is logged: any unit whose run brackets the reload may have asked for
    # it (a systemd-run service, a timer's service, a session scope), so every unit's lines are kept here
    for e in _scan_all(src.scan(PID1, start, end), problems, "unit lines around a reload"):
        if text(e.get("UNIT")) and unit_action(text(e.get("MESSAGE")), text(e.get("MESSAGE_ID"))):
            keep("unit" if pid1_trusted(e) else "forged")


def _nvml_pass(src, since, problems: list[str], keep) -> None:
    """The NVML/CUDA errors, kubelet's probe lines and the kernel's lines (:func:`nvml_rule`), kept."""
    units = [u for u in src.unique("_SYSTEMD_UNIT") if nvml_unit(u)]
    # the identifiers: kubelet's and containerd's lines outside their units (microk8s' snap units; a
    # forgery), the kernel's (collectors.journal.kernel.KERNEL)
    groups = ([[("_SYSTEMD_UNIT", u) for u in units]] if units else []) + \
        [[("SYSLOG_IDENTIFIER", "kubelet"), ("SYSLOG_IDENTIFIER", "containerd")]] + KERNEL
    for rule, e, whole in passed(src, groups, since, nvml_rule, problems, "NVML/kubelet/kernel lines", _NVML_TEXTS,
                                 _NVML_ANCHORS, message_wanted):
        keep(rule, e if whole else None)


def kernel_span(src) -> tuple[dict | None, dict | None]:
    """The first and last ``_TRANSPORT=kernel`` entry of ``src`` (``None`` when it holds none): the
    span over which the journal holds the kernel's lines (journald with ``ReadKMsg=no`` holds none)."""
    return src.edge([("_TRANSPORT", "kernel")]), src.edge([("_TRANSPORT", "kernel")], last=True)


def edge_record(e: dict | None, name: str) -> dict:
    t = e["__REALTIME_TIMESTAMP"] if e else None
    return {f"{name}_usec": t, name: iso_usec(t) if t else None, f"{name}_cursor": e["__CURSOR"] if e else None}
