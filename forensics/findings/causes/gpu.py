"""What the kernel, DCGM and the device plugin say about the node's GPUs, for the GPU fault rules
(:mod:`.hardware`, :mod:`.app_fault`): the Xids with their entry in NVIDIA's Xid catalog
(:mod:`forensics.xid`), the GPUs that fell off the bus, fatal PCIe errors of NVIDIA functions, and whether
the GPU a line names is one the incident's pods hold.

Sources of an Xid, each cited: the kernel's ``NVRM: Xid`` line (the journal's ``_TRANSPORT=kernel``
entries, kern.log, /dev/kmsg), DCGM's ``DCGM_FI_DEV_XID_ERRORS`` field (Prometheus), and the NVIDIA
device plugin's ``XidCriticalError: Xid=N on Device=...`` line (its pod log): the plugin saw the Xid
through NVML even when the kernel log has rotated away.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import xid as catalog
from ...kmsg import recovery_action
from ...neighbours import match
from ...events import Event
from .. import scope as S
from ...timeutil import iso_z
from ..verdicts import Evidence, Happened, Mechanism, Window, cite, coverage_of

#: the sources whose coverage bounds what the kernel's lines can show
KERNEL_SOURCES = ("kernel", "kern.log", "kmsg")
#: Xid 154's text: the recovery action the driver asks for (docs/sources.md "NVIDIA Xid catalog", R565 and later)
NODE_ACTIONS = ("Node Reboot Required", "GPU Reset Required", "Drain and Reset")


@dataclass
class Fault:
    """One GPU fault line: the event, its Xid (None for a GPU lost without one, a PCIe error), its catalog
    entry, the GPU it names (PCI address as the line prints it, or a UUID), and its scope (``node``,
    ``application``, ``informational``, ``unknown``)."""

    event: Event
    xid: int | None
    entry: object | None
    gpu: str | None
    scope: str

    def what(self) -> str:
        """``Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, GPU has fallen off the bus)`` or the line's own words."""
        if self.xid is None:
            return {"kernel.gpu-lost": "the GPU fell off the bus", "kernel.pcie-error": "a fatal PCIe error"}.get(
                self.event.kind, self.event.kind)
        e = self.entry
        name = f"{e.mnemonic}, {e.description}" if e is not None and getattr(e, "mnemonic", None) else "not in the catalog"
        return f"Xid {self.xid} ({name})"


#: how a fault line's source is named in a sentence
_SOURCES = {"journal": "kernel log (journal)", "kern.log": "kernel log (kern.log)", "kmsg": "kernel ring buffer",
            "podlogs": "device plugin's log", "metrics": "DCGM Xid field (Prometheus)", "prometheus": "DCGM Xid field (Prometheus)"}


def source_name(e: Event) -> str:
    """``kernel log (journal)``, ``device plugin's log``, ...: where a fault line was read."""
    return _SOURCES.get(e.source, e.source)


def _nvidia_pci(ev: Evidence) -> set[str]:
    return set(S.node_gpus(ev) or [])


def faults(ev: Evidence, events: list[Event]) -> list[Fault]:
    """Every GPU fault line of ``events`` (time order) as :class:`Fault`; an Xid 154 asking for a reset or a
    reboot is node-level whatever the Xid it follows, a fatal PCIe error counts only on an NVIDIA function
    the node shows (host_gpu ``pci``)."""
    out, nvidia = [], _nvidia_pci(ev)
    for e in events:
        if "same-line" in e.flags:  # another source's copy of a line already counted
            continue
        a = e.attrs
        if e.kind == "kernel.xid" and isinstance(a.get("xid"), int):
            entry = catalog.lookup(a["xid"])
            scope = entry.scope
            if a["xid"] == 154:  # the action it changes to (kmsg: "... from 0x0 (None) to 0x4 (Drain and Reset)")
                scope = "node" if recovery_action(str(a.get("detail") or a.get("message") or "")) in NODE_ACTIONS \
                    else "informational"
            out.append(Fault(e, a["xid"], entry, a.get("pci"), scope))
        elif e.kind == "metrics.xid" and isinstance(a.get("xid"), int) and a["xid"] > 0:
            entry = catalog.lookup(a["xid"])
            out.append(Fault(e, a["xid"], entry, a.get("uuid"), entry.scope))
        elif e.kind == "kernel.gpu-lost":
            out.append(Fault(e, None, None, a.get("pci"), "node"))
        elif e.kind == "kernel.pcie-error" and "Fatal" in str(a.get("severity") or "") \
                and S.norm_pci(a.get("pci")) in nvidia:
            out.append(Fault(e, None, None, a.get("pci"), "node"))
        elif e.kind in ("container.log-symptom", "journal.symptom") and a.get("signature") == "device-unhealthy":
            n, device = _plugin_xid(a.get("message"))
            if n is not None:
                entry = catalog.lookup(n)
                out.append(Fault(e, n, entry, device, entry.scope))
    return out


def _plugin_xid(message) -> tuple[int | None, str | None]:
    """``(Xid, device)`` the device plugin's ``XidCriticalError: Xid=N on Device=...`` line names (forensics
    neighbours' ``device-unhealthy``), ``(None, None)`` for its other unhealthy lines."""
    m = match(str(message or ""))
    if not (m and m[0] == "device-unhealthy" and m[1].get("xid")):
        return None, None
    try:
        return int(m[1]["xid"]), m[1].get("device")
    except ValueError:
        return None, None


def in_window(fs: list[Fault], window: Window, scopes: tuple) -> list[Fault]:
    """The faults of ``scopes`` inside ``window`` (inclusive)."""
    start, end = window
    return [f for f in fs if f.scope in scopes and start <= f.event.at <= end]


def same_gpu(ev: Evidence, fs: list[Fault]) -> Mechanism | None:
    """Whether the GPUs the faults name are those the incident's pods hold: ``shown`` (one of them, or
    the node has a single GPU), ``ruled-out`` (every fault names a GPU the pods do not hold, both read
    from the node), or None when that is unknown (the caller then says ``fits``)."""
    names = [f.gpu for f in fs if f.gpu]
    gpus = S.node_gpus(ev)
    if gpus is not None and len(gpus) == 1 and all(S.norm_pci(n) in (gpus[0], None) for n in names):
        return Mechanism("shown", f"The node has a single NVIDIA GPU ({gpus[0]}), so it is the incident's GPU.")
    held, where = S.pod_gpus(ev)
    if not held or not names:
        return None
    uuid = S.uuid_of_pci(ev.everything(), ev.facts)
    named = {uuid.get(S.norm_pci(n), n) if S.norm_pci(n) else n for n in names}
    if any(n in held for n in named):
        return Mechanism("shown", f"It names {', '.join(sorted(named & held))}, a GPU the incident's pods hold "
                         f"({where}).")
    if all(str(n).startswith(("GPU-", "MIG-")) for n in named):  # only a UUID can be compared with what pods hold
        return Mechanism("ruled-out", f"It names {', '.join(sorted(named))}, while the incident's pods hold "
                         f"{', '.join(sorted(held))} ({where}): another GPU.")
    return None


def cited(fs: list[Fault]) -> list[dict]:
    """The cited lines of ``fs`` (at most 20), each with its catalog reading."""
    out = []
    for f in fs[:20]:
        c = cite(f.event)
        c["xid"], c["scope"] = f.xid, f.scope
        if f.entry is not None and getattr(f.entry, "mnemonic", None):
            c["catalog"] = {"mnemonic": f.entry.mnemonic, "immediate": f.entry.immediate,
                            "investigatory": f.entry.investigatory}
        out.append(c)
    return out


def seen(hits: list[Fault], window: Window, ev: Evidence, none: str, process: bool = False) -> Happened:
    """The :class:`Happened` of the faults ``hits`` in the window: the first one named with its catalog
    reading, its GPU and where it was read (``process``: the process the line names), how many there are,
    and where tools read the Xid differently; with none, what the kernel's sources cover (``none``: the
    clause for "logged none")."""
    if not hits:
        return coverage_of(KERNEL_SOURCES, ev, window, none)
    first, a = hits[0], hits[0].event.attrs
    who = f" by {a.get('process')} (PID {a.get('pid')})" if process and (a.get("process") or a.get("pid")) else ""
    line = first.event.evidence.get("line")
    where = f"{first.event.evidence.get('artifact')}" + (f" line {line}" if line is not None else "")
    more = f"; {len(hits)} such lines in the window" if len(hits) > 1 else ""
    said = (f"The {source_name(first.event)} shows {first.what()}{who} at {iso_z(first.event.at)} on GPU "
            f"{first.gpu or 'unknown'}, inside the window ({where}){more}.")
    notes = disagreements(hits)
    if notes:
        said += " Tools disagree on some of these codes: " + "; ".join(notes) + "."
    return Happened("yes", said, at=first.event.at, evidence=cited(hits))


def disagreements(fs: list[Fault]) -> list[str]:
    """The catalog's notes where other tools read an Xid differently (docs/sources.md "NVIDIA Xid catalog")."""
    return list(dict.fromkeys(f"Xid {f.xid}: {f.entry.disagreements}" for f in fs
                              if f.entry is not None and getattr(f.entry, "disagreements", None)))
