"""How the timeline picture (reports/chart.py) draws each event kind and each evidence gap: its lane,
its marker, and the words of a gap. One table, :data:`STYLES`, keyed by the kinds of
:data:`forensics.events.KINDS` (a test checks that every kind has an entry).

Markers are print-safe: shapes differ, not only colours.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the lanes always drawn, top to bottom
LANES = ("journal", "packages", "containers", "DCGM", "GPU capacity")
#: lanes drawn below those only when an event falls in them (the demo node has no Kubernetes evidence)
OPTIONAL_LANES = ("kernel", "Kubernetes", "alerts")
#: gap ``source`` (a name of :data:`forensics.events.GAP_SOURCES`) -> the lanes it limits; a source no lane
#: shows (``boot``) limits none: the gaps table shows it
GAP_LANES = {"journal": ("journal",), "dpkg": ("packages",), "apt": ("packages",),
             "unattended-upgrades": ("packages",), "prometheus": ("DCGM", "GPU capacity"), "kernel": ("kernel",),
             "kern.log": ("kernel",), "kmsg": ("kernel",), "boot": ()}
#: how a gap reads when its source starts covering at date D (node local date)
GAP_WORDING = {"journal": "journal rotated before {d}", "dpkg": "dpkg.log rotated before {d}",
               "apt": "apt history rotated before {d}", "prometheus": "Prometheus retention starts {d}"}
#: ``container.probe`` results drawn as a failed probe
PROBE_ERRORS = ("EPERM", "ENXIO", "ENOENT", "EACCES")


@dataclass(frozen=True)
class Look:
    """One marker: legend text, matplotlib marker, face (and edge) colour, size in points, and
    whether it is filled (else white inside)."""

    legend: str
    marker: str
    colour: str
    size: float
    filled: bool


RELOAD = Look("daemon-reload", "v", "#b00020", 11, True)
PROBE_OK = Look("device probe ok", "o", "#2e7d32", 8, False)
PROBE_FAILED = Look("device probe failed", "X", "#b00020", 10, True)
OTHER = Look("other event", ".", "#999999", 6, True)
_REEXEC = Look("daemon-reexec", "v", "#b00020", 10, False)
_BOOT = Look("boot", "|", "#000000", 16, True)
_NVML = Look("NVML/GPU error", "X", "#d35400", 10, True)
_APT = Look("apt transaction", "s", "#1f4e9c", 8, True)
_UNATTENDED = Look("unattended-upgrades run", "D", "#1f4e9c", 8, False)
_DPKG = Look("dpkg action", "|", "#777777", 9, True)
_CREATED = Look("container created", "^", "#2e7d32", 9, True)
_RUNC_WARNING = Look("runc warning", "*", "#d35400", 10, True)
_DCGM = Look("DCGM last seen", "o", "#6a1b9a", 9, True)
_CAPACITY = Look("GPU capacity change", "D", "#6a1b9a", 8, True)
_KUBE_EVENT = Look("Kubernetes event", "P", "#00838f", 9, True)
_KUBE_CONDITION = Look("node condition change", "s", "#00838f", 8, False)
_KUBE_TERMINATED = Look("container terminated", "x", "#00838f", 9, True)
_SYMPTOM = Look("other GPU failure (not EPERM)", "h", "#8d6e63", 9, True)
_FORGED = Look("forged PID 1/kubelet line (red flag)", "d", "#ff00aa", 10, False)
_XID = Look("Xid (kernel)", "*", "#b00020", 11, True)
_GPU_LOST = Look("GPU fell off the bus / API mismatch", "X", "#4a0010", 11, True)
_OOM = Look("OOM kill", "v", "#5d4037", 9, False)
_UPDATE = Look("runtime UpdateContainerResources", ">", "#d35400", 9, True)
_ALERT = Look("alert recorded by Prometheus", "p", "#c62828", 9, True)

#: every look, in drawing and legend order (a later one is drawn over an earlier one)
LOOKS = (RELOAD, _REEXEC, _BOOT, _NVML, _APT, _UNATTENDED, _DPKG, _CREATED, _RUNC_WARNING, PROBE_OK, PROBE_FAILED,
         _DCGM, _CAPACITY, _KUBE_EVENT, _KUBE_CONDITION, _KUBE_TERMINATED, _SYMPTOM, _FORGED, _XID, _GPU_LOST, _OOM,
         _UPDATE, _ALERT, OTHER)

#: kind -> ``(lane, look)``; ``None`` for the kinds not drawn as markers (incident windows are shaded).
#: A ``container.probe`` whose result is one of :data:`PROBE_ERRORS` is drawn as :data:`PROBE_FAILED`.
STYLES: dict[str, tuple[str, Look] | None] = {
    "journal.reload": ("journal", RELOAD),
    "journal.reload-finished": ("journal", OTHER),
    "journal.reexec": ("journal", _REEXEC),
    "journal.sighup": ("journal", OTHER),
    "journal.boot": ("journal", _BOOT),
    "journal.nvml-error": ("journal", _NVML),
    "journal.healthy": ("journal", OTHER),
    "journal.unit": ("journal", OTHER),
    "journal.requester": ("journal", OTHER),
    "journal.banner": ("journal", OTHER),
    "journal.forged": ("journal", _FORGED),
    "journal.symptom": ("journal", _SYMPTOM),
    "package.transaction": ("packages", _APT),
    "package.unattended-run": ("packages", _UNATTENDED),
    "package.dpkg-action": ("packages", _DPKG),
    "container.created": ("containers", _CREATED),
    "container.probe": ("containers", PROBE_OK),
    "container.device-rules-applied": ("containers", OTHER),
    "container.runc-warning": ("containers", _RUNC_WARNING),
    "container.log-error": ("containers", OTHER),
    "container.log-healthy": ("containers", OTHER),
    "container.log-symptom": ("containers", _SYMPTOM),
    "metrics.dcgm-last-seen": ("DCGM", _DCGM),
    "metrics.capacity-change": ("GPU capacity", _CAPACITY),
    "kube.event": ("Kubernetes", _KUBE_EVENT),
    "kube.node-condition": ("Kubernetes", _KUBE_CONDITION),
    "kube.container-terminated": ("Kubernetes", _KUBE_TERMINATED),
    "kernel.xid": ("kernel", _XID),
    "kernel.gpu-lost": ("kernel", _GPU_LOST),
    "kernel.api-mismatch": ("kernel", _GPU_LOST),
    "kernel.oom-kill": ("kernel", _OOM),
    "kernel.nvrm": ("kernel", OTHER),
    "kernel.pcie-error": ("kernel", OTHER),
    "runtime.update-resources": ("containers", _UPDATE),
    "metrics.xid": ("DCGM", _XID),
    "metrics.alert": ("alerts", _ALERT),
    "incident.start": None,
    "incident.end": None,
}


def style(entry: dict) -> tuple[str, Look] | None:
    """``(lane, look)`` of one ``timeline[]`` entry, or ``None`` when it is not drawn as a marker
    (an incident bound, or a kind this table does not know)."""
    return style_of(entry.get("kind") or "", entry.get("attrs"))


def style_of(kind: str, attrs: dict | None) -> tuple[str, Look] | None:
    """:func:`style` of an entry of ``kind`` with ``attrs`` (a probe's result picks its look)."""
    s = STYLES.get(kind)
    if s and kind == "container.probe":
        vals = {str(v) for v in (attrs or {}).values()}
        return (s[0], PROBE_FAILED) if vals & set(PROBE_ERRORS) else s
    return s


def gap_lanes(source: str) -> tuple[str, ...]:
    """The lanes a gap of ``source`` (a ``gaps[].source``, one of :data:`forensics.events.GAP_SOURCES`)
    limits; ``()`` for one that is not an evidence lane (``boot``: the gaps table shows it)."""
    return GAP_LANES.get(source, ())


def place_rows(spans: list[tuple[float, float]], gap: float) -> list[int]:
    """For labels taking the horizontal ``spans`` ``(start, end)`` (points), in drawing order, the row of
    each: the lowest row where it keeps ``gap`` from every span already there (0 is the lowest)."""
    rows: list[list[tuple[float, float]]] = []
    out = []
    for s, e in spans:
        row = next((i for i, taken in enumerate(rows) if all(e + gap <= a or b + gap <= s for a, b in taken)), len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append((s, e))
        out.append(row)
    return out
