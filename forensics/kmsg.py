"""Kernel log lines that tell why a pod lost its GPU: the kernel's and the NVIDIA driver's own
wordings, read into the ``kernel.*`` event kinds of :data:`forensics.events.KINDS`.

Pure text, no I/O: the journal collector reads the MESSAGE of its ``_TRANSPORT=kernel`` entries
through it, the kern.log collector its syslog lines (after the syslog prefix). :func:`classify` reads
one message into ``(kind, attrs)``; :func:`join_continuations` puts back together a message the
driver printed as one ``printk`` with embedded newlines and a source split into lines (rsyslog's
kern.log, an old driver's separate ``printk`` calls); :data:`TEXTS` / :func:`might_matter` are the
cheap prefilter (literal texts one of which every message :func:`classify` or :func:`is_part` accepts
holds); :func:`container_id` reads a container id out of a memory cgroup path; :func:`merge_oom` makes
one event of the lines of one OOM kill.

Wordings, each from its upstream source (OGKM = NVIDIA/open-gpu-kernel-modules, by tag; collected in
docs/sources.md "NVIDIA kernel and driver wordings", "OOM"):

- Xid, ``src/nvidia/src/kernel/gpu/rc/kernel_rc.c`` ``krcReportXid_IMPL`` (OGKM 595.45.04):
  ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s``; an unknown process prints
  ``pid='<unknown>', name=<unknown>``; on a MIG GPU the parenthesis adds `` GPU-I:%02u`` and
  `` GPU-CI:%02u``. The contained/uncontained memory errors (Xid 94/95) print ``pid=%d`` without a
  name: ``NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST:
  No, D-RST: No`` (NVIDIA "A100 GPU Memory Error Management",
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/). Older drivers print no pid and no
  ``PCI:``: ``NVRM: Xid (0000:03:00): 14, Channel 00000001`` (leptonai/gpud
  ``components/accelerator/nvidia/xid/kmsg_test.go``), and older still bus:device only,
  ``NVRM: Xid (0001:00): 6, PE0000 ...``. Xid 154 names a recovery action: ``154, GPU recovery action
  changed from 0x0 (None) to 0x4 (Drain and Reset)`` (gpud ``kmsg_test.go``; :func:`recovery_action`).
- Fallen off the bus at run time, OGKM ``src/nvidia/arch/nvalloc/unix/src/osinit.c``
  ``osHandleGpuLost``: Xid 79 ``GPU has fallen off the bus.``, then ``NV_DEV_PRINTF``'s
  ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`` (``"NVRM: GPU %04x:%02x:%02x.%x: "``,
  ``kernel-open/common/inc/os-interface.h``) and ``... GPU serial number is %s.``
- Fallen off the bus at probe, OGKM ``osapi.c`` ``rm_is_supported_device`` (same text 535.43.02 to
  595.45.04), one ``printk`` of three lines: ``NVRM: The NVIDIA GPU %04x:%02x:%02x.%x`` /
  ``NVRM: (PCI ID: %04x:%04x) installed in this system has`` / ``NVRM: fallen off the bus and is not
  responding to commands.`` (NVIDIA/NVSentinel#155 shows it as one journal entry).
- API mismatch, OGKM ``osapi.c`` ``RmPerformVersionCheck``: up to 570.x (515.43.04 to 570.211.01)
  ``NVRM: API mismatch: the client has the version %s, but`` / ``NVRM: this kernel module has the
  version %s.  Please`` / ``NVRM: make sure that this kernel module and all NVIDIA driver`` /
  ``NVRM: components have the same version.``; from 575.51.02 ``NVRM: API mismatch: the client '%s'
  (pid %u)`` / ``NVRM: has the version %s, but this kernel module has`` / ``NVRM: the version %s.
  Please make sure that this`` / ``NVRM: kernel module and all NVIDIA driver components`` / ``NVRM:
  have the same version.``. The closed drivers before them printed the first wording with the old
  ``1.0-9631`` version magic (Ubuntu forums 2006-2007, in kern.log as four lines of one timestamp).
- Module load and init failures, OGKM ``kernel-open/nvidia/nv.c``: ``NVRM: loading %s`` with the
  ``/proc/driver/nvidia/version`` id (``NVIDIA UNIX x86_64 Kernel Module  570.158.01  ...``, ``NVIDIA
  UNIX Open Kernel Module for x86_64  570.158.01  Release Build ...``, older ``NVIDIA Linux x86 Kernel
  Module  1.0-8762 ...``), ``NVRM: The NVIDIA probe routine failed for %d device(s).``, ``NVRM: The
  NVIDIA probe routine was not called for %d device(s).``, ``NVRM: No NVIDIA devices probed.``,
  ``NVRM: None of the NVIDIA devices were initialized.``, ``NV_DEV_PRINTF`` ``rm_init_adapter
  failed, device minor number %d``; ``osinit.c`` ``RmInitAdapter failed! (0x%x:0x%x:%d)``.
- ``kernel_rc.c`` ``_krcLogUuidOnce``: ``NVRM: GPU at PCI:%04x:%02x:%02x: GPU-<uuid>`` and ``NVRM:
  GPU Board Serial Number: %s``; ``src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c``: ``NVRM: Rate
  limiting GSP RPC error prints for GPU at PCI:%04x:%02x:%02x (printing 1 of every %d).  The GPU
  likely needs to be reset.``
- OOM, Linux ``mm/oom_kill.c`` (v4.19 on; ``mm/memcontrol.c`` ``mem_cgroup_print_oom_context``):
  ``%s invoked oom-killer: gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd``; the summary
  ``oom-kill:constraint=%s,nodemask=%*pbl,cpuset=%s,mems_allowed=%*pbl,oom_memcg=<path>,task_memcg=<path>,task=%s,pid=%d,uid=%d``
  (``nodemask`` and ``mems_allowed`` are lists that hold commas, ``oom_memcg`` only for a memcg OOM);
  the victim ``%s: Killed process %d (%s) total-vm:%lukB, ...`` with ``Memory cgroup out of memory``
  or ``Out of memory``; before 4.19 ``mem_cgroup_print_oom_info`` printed ``Task in %s killed as a
  result of limit of %s`` (google/cadvisor ``utils/oomparser``).
- PCIe AER, Linux ``drivers/pci/pcie/aer.c`` through ``dev_printk`` (``<driver> <BDF>: ``; ``AER: ``
  before the text since v4.19): ``pcieport 0000:00:03.1: AER: Multiple Corrected error received:
  0000:3b:00.0``, ``nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical
  Layer, (Receiver ID)``, ``... AER:   device [10de:2330] error status/mask=00000001/0000e000``,
  ``... AER:    [ 0] RxErr                  (First)``; severities ``Corrected``, ``Uncorrected
  (Non-Fatal)``, ``Uncorrected (Fatal)`` (``aer_error_severity_string``); ``CXL Bus Error`` on CXL
  devices (v6.x). Before v4.19 the detail lines carry no ``AER:`` and are not kept.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import TypeVar

from .engines import CONTAINER_IN_CGROUP

KIND_XID, KIND_LOST, KIND_MISMATCH = "kernel.xid", "kernel.gpu-lost", "kernel.api-mismatch"
KIND_OOM, KIND_NVRM, KIND_PCIE = "kernel.oom-kill", "kernel.nvrm", "kernel.pcie-error"

#: literal texts one of which every message that :func:`classify` or :func:`is_part` accepts holds
#: (tests check it on every wording): the journal's pass tests them on the raw MESSAGE bytes first
TEXTS = ("NVRM:", "oom-kill", "Killed process", "killed as a result of limit", "AER:", "Bus Error")

_HEX = "[0-9a-fA-F]"
_BDF = rf"(?:{_HEX}{{4}}:)?{_HEX}{{2}}:{_HEX}{{2}}\.{_HEX}"  # NV_PCI_DEV_FMT, the domain optional
XID_RE = re.compile(rf"NVRM: Xid \((?:PCI:)?(?P<pci>{_HEX}{{2,4}}(?::{_HEX}{{2}}){{1,2}})"
                    r"(?: (?P<gi>GPU-I:\d+(?: GPU-CI:\d+)?))?\): (?P<xid>\d{1,5}),(?P<rest>.*)", re.S)
#: what follows the Xid number: ``pid=...`` (``'<unknown>'`` when unknown), ``name=...`` (not on 94/95)
XID_WHO = re.compile(r"\s*pid=(?P<pid>\d{1,10}|'<unknown>'|<unknown>)(?:, name=(?P<name>.*?))?(?:, |,?$)(?P<detail>.*)",
                     re.S)
RECOVERY_RE = re.compile(r"GPU recovery action changed from 0x[0-9a-fA-F]+ \((?P<old>[^)]*)\) to 0x[0-9a-fA-F]+ "
                         r"\((?P<new>[^)]*)\)")
LOST_RUNTIME = re.compile(rf"NVRM: GPU (?P<pci>{_BDF}): GPU has fallen off the bus\.")
LOST_PROBE = "fallen off the bus and is not responding to commands"
PROBE_GPU = re.compile(rf"NVRM: The NVIDIA GPU (?P<pci>{_BDF})")
MISMATCH = "API mismatch: the client"
MISMATCH_CLIENT = re.compile(r"API mismatch: the client '(?P<client>.*?)' \(pid (?P<pid>\d{1,10})\)")
MISMATCH_CLIENT_VERSION = re.compile(r"has the version (?P<v>[^\s,]+), but")
MISMATCH_KERNEL_VERSION = re.compile(r"this kernel module has(?:\s+NVRM:)?\s+the version (?P<v>\S+?)\.(?:\s|$)")
LOAD_RE = re.compile(r"NVRM: loading NVIDIA .*?Kernel Module(?: for \S+)?\s+(?P<version>\d[\w.\-]*)")
UUID_RE = re.compile(rf"NVRM: GPU at PCI:(?P<pci>{_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}): (?P<uuid>GPU-[0-9a-fA-F-]+)")
DEV_PREFIX = re.compile(rf"NVRM: GPU (?P<pci>{_BDF}): ")
INIT_FAILED = ("RmInitAdapter failed", "rm_init_adapter failed", "None of the NVIDIA devices were initialized",
               "The NVIDIA probe routine failed", "The NVIDIA probe routine was not called", "No NVIDIA devices probed")
NVRM_OTHER = ("GPU Board Serial Number:", "GPU serial number is", "Rate limiting GSP RPC error prints")
GSP_PCI = re.compile(rf"for GPU at PCI:(?P<pci>{_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}})")
OOM_INVOKED = re.compile(r"^(?P<comm>.*?) invoked oom-killer: ")
OOM_SUMMARY = re.compile(r"oom-kill:constraint=(?P<constraint>\w+),")
OOM_VICTIM = re.compile(r"(?:^|: )Killed process (?P<pid>\d{1,10}) \((?P<comm>.*?)\)(?: total-vm:|$)")
OOM_TASK_IN = re.compile(r"Task in (?P<task>\S+) killed as a result of limit of (?P<oom>\S+)")
#: ``<driver> <BDF>: `` (dev_printk), after an optional printk time (``[ 1843.439662] ``, as dmesg and a kern.log
#: of rsyslog's imklog print it)
AER_LINE = re.compile(rf"^(?:\[\s*\d+\.\d+\]\s*)?(?P<driver>\S+) (?P<pci>{_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.{_HEX}): "
                      r"(?P<rest>.*)", re.S)
AER_SEVERITY = re.compile(r"(Corrected|Correctable|Uncorrected \((?:Non-Fatal|Fatal)\)|Uncorrectable \((?:Non-Fatal|Fatal)\))")
AER_SOURCE = re.compile(rf"(?:error received|error message received from):? (?P<pci>{_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.{_HEX})")
#: AER lines at boot that say nothing went wrong
AER_BENIGN = ("AER: enabled with IRQ",)
#: container ids in a cgroup path: the systemd driver's ``<engine>-<id>.scope`` (containerd's CRI,
#: Docker, CRI-O, Podman) and cgroupfs' bare ``<id>`` (``/kubepods/burstable/pod<uid>/<id>``, ``/docker/<id>``)


def might_matter(message: str) -> bool:
    """The prefilter: False when ``message`` holds none of :data:`TEXTS`, so that neither
    :func:`classify` nor :func:`is_part` can accept it. Six ``in`` tests: 0.2-0.4 µs a line that holds
    none, 2.5 times faster than one search for their alternation (measured over bench's kernel lines)."""
    for t in TEXTS:
        if t in message:
            return True
    return False


def classify(message: str) -> tuple[str, dict] | None:
    """Read one kernel message (a journal MESSAGE, or a syslog line after its prefix; a multi-line
    message joined with ``\\n``) into ``(kind, attrs)``: kind one of ``kernel.xid``,
    ``kernel.gpu-lost``, ``kernel.api-mismatch``, ``kernel.oom-kill``, ``kernel.nvrm``,
    ``kernel.pcie-error`` with exactly the attrs :data:`forensics.events.KINDS` lists for it (``None``
    for what the line does not say), or ``None`` for any other line. Wordings: the module's
    docstring. Raises nothing."""
    if not might_matter(message):
        return None
    msg = message.strip()
    if "NVRM:" in msg:
        return _nvrm(msg)
    return _oom(msg) or _aer(msg)


def _nvrm(msg: str) -> tuple[str, dict] | None:
    m = XID_RE.search(msg)
    if m:
        return KIND_XID, _xid(m, msg)
    m = LOST_RUNTIME.search(msg)
    if m:
        return KIND_LOST, {"pci": m.group("pci"), "stage": "runtime", "message": msg}
    if LOST_PROBE in msg:
        m = PROBE_GPU.search(msg)
        return KIND_LOST, {"pci": m.group("pci") if m else None, "stage": "probe", "message": msg}
    if MISMATCH in msg:
        return KIND_MISMATCH, _mismatch(msg)
    m = LOAD_RE.search(msg)
    if m:
        return KIND_NVRM, _nvrm_attrs("module-load", None, None, m.group("version"), msg)
    m = UUID_RE.search(msg)
    if m:
        return KIND_NVRM, _nvrm_attrs("gpu-uuid", m.group("pci"), m.group("uuid"), None, msg)
    what = "init-failed" if any(t in msg for t in INIT_FAILED) else \
        "other" if any(t in msg for t in NVRM_OTHER) else None
    if what is None:
        return None
    m = DEV_PREFIX.search(msg) or GSP_PCI.search(msg)
    return KIND_NVRM, _nvrm_attrs(what, m.group("pci") if m else None, None, None, msg)


def _nvrm_attrs(what, pci, uuid, version, msg) -> dict:
    return {"what": what, "pci": pci, "uuid": uuid, "version": version, "message": msg}


def _xid(m: re.Match, msg: str) -> dict:
    rest, pid, name = m.group("rest"), None, None
    who = XID_WHO.match(rest)
    if who:
        pid = int(who.group("pid")) if who.group("pid").isdigit() else None
        name = who.group("name")
        name = None if name in (None, "<unknown>", "") else name
        rest = who.group("detail")
    return {"xid": int(m.group("xid")), "pci": m.group("pci"), "gpu_instance": m.group("gi"), "pid": pid,
            "process": name, "detail": rest.strip() or None, "message": msg}


def recovery_action(detail: str | None) -> str | None:
    """The action an Xid 154 line names (``Drain and Reset``, ``GPU Reset Required``, ``Node Reboot
    Required``, ``Drain P2P``, ``None``; the catalog's "Xid 154" text) from its ``detail``, else ``None``."""
    m = RECOVERY_RE.search(detail or "")
    return m.group("new") if m else None


def _mismatch(msg: str) -> dict:
    c, cv, kv = MISMATCH_CLIENT.search(msg), MISMATCH_CLIENT_VERSION.search(msg), MISMATCH_KERNEL_VERSION.search(msg)
    return {"client": c.group("client") if c else None, "client_pid": int(c.group("pid")) if c else None,
            "client_version": cv.group("v") if cv else None, "kernel_version": kv.group("v") if kv else None,
            "message": msg}


def _oom(msg: str) -> tuple[str, dict] | None:
    a = {"pid": None, "process": None, "constraint": None, "task_memcg": None, "oom_memcg": None,
         "container_id": None, "message": msg}
    m = OOM_VICTIM.search(msg)
    if m:
        a.update(pid=int(m.group("pid")), process=m.group("comm"))
        return KIND_OOM, a
    m = OOM_SUMMARY.search(msg)
    if m:
        a["constraint"] = m.group("constraint")
        a["oom_memcg"] = _between(msg, ",oom_memcg=", (",task_memcg=", ",task="))
        a["task_memcg"] = _between(msg, ",task_memcg=", (",task=",))
        # task= is the comm, which may hold commas: pid= and uid= are the last two keys
        tail = re.search(r",task=(?P<comm>.*),pid=(?P<pid>\d{1,10}),uid=\d+\s*$", msg)
        if tail:
            a.update(pid=int(tail.group("pid")), process=tail.group("comm"))
        a["container_id"] = container_id(a["task_memcg"])
        return KIND_OOM, a
    m = OOM_TASK_IN.search(msg)
    if m:
        a.update(task_memcg=m.group("task"), oom_memcg=m.group("oom"), container_id=container_id(m.group("task")))
        return KIND_OOM, a
    if OOM_INVOKED.search(msg):
        return KIND_OOM, a
    return None


def _between(msg: str, key: str, ends: tuple[str, ...]) -> str | None:
    at = msg.find(key)
    if at < 0:
        return None
    start = at + len(key)
    stops = [i for i in (msg.find(e, start) for e in ends) if i >= 0]
    return msg[start:min(stops)] if stops else None


def oom_role(message: str) -> str | None:
    """Which line of an OOM kill ``message`` is: ``victim`` (``Killed process``), ``summary``
    (``oom-kill:``), ``task-in`` (pre-4.19 ``Task in ... killed as a result of limit of``),
    ``invoked`` (``invoked oom-killer``), or ``None``."""
    if OOM_VICTIM.search(message):
        return "victim"
    if OOM_SUMMARY.search(message):
        return "summary"
    if OOM_TASK_IN.search(message):
        return "task-in"
    return "invoked" if OOM_INVOKED.search(message) else None


def container_id(cgroup: str | None) -> str | None:
    """The 64-hex container id a cgroup path names, from its deepest component that is one:
    ``cri-containerd-<id>.scope``, ``docker-<id>.scope``, ``crio-<id>.scope``, ``libpod-<id>.scope``
    (the systemd cgroup driver) or a bare ``<id>`` (cgroupfs: ``/kubepods/burstable/pod<uid>/<id>``,
    ``/docker/<id>``); ``None`` for a pod's or a service's cgroup, or ``crio-conmon-<id>.scope``
    (CRI-O's monitor, not the container)."""
    for part in reversed((cgroup or "").split("/")):
        m = CONTAINER_IN_CGROUP.match(part)
        if m:
            return m.group("id")
    return None


def _aer(msg: str) -> tuple[str, dict] | None:
    m = AER_LINE.match(msg)
    if not m or not ("AER:" in m.group("rest") or "Bus Error" in m.group("rest")) or \
            any(b in m.group("rest") for b in AER_BENIGN):
        return None
    sev, src = AER_SEVERITY.search(m.group("rest")), AER_SOURCE.search(m.group("rest"))
    # a root port's "error received: <BDF>" is about the device it names, not the port
    return KIND_PCIE, {"pci": src.group("pci") if src else m.group("pci"), "severity": sev.group(1) if sev else None,
                       "message": msg}


# -- messages the driver prints over several lines ---------------------------------------------------
#: (first line, later lines, the text of the last line): one printk each (osapi.c) or, in old drivers,
#: one printk per line; a source that splits lines (rsyslog's kern.log) gives them one by one
MULTI = (
    (re.compile(r"NVRM: API mismatch: the client (?:has the version \S+, but|'.*' \(pid \d+\))$"),
     re.compile(r"NVRM: (?:this kernel module has the version|make sure that this kernel module|components have "
                r"the same version|has the version \S+, but this kernel module has|the version \S+\s+Please make sure"
                r"|kernel module and all NVIDIA driver components|have the same version)"),
     "have the same version."),
    (re.compile(rf"NVRM: The NVIDIA GPU {_BDF}$"),
     re.compile(rf"NVRM: (?:\(PCI ID: {_HEX}{{4}}:{_HEX}{{4}}\) installed in this system has|{LOST_PROBE})"),
     LOST_PROBE + "."),
)
MAX_PARTS = 6  #: lines of the longest of them (the 575 mismatch: 5)


def _family(line: str) -> int | None:
    for i, (head, _part, _end) in enumerate(MULTI):
        if head.search(line):
            return i
    return None


def is_part(message: str) -> bool:
    """True for one line of a multi-line driver message (:data:`MULTI`) that :func:`classify` cannot
    read alone: a source that split the message must keep it to join it back
    (:func:`join_continuations`)."""
    line = message.strip()
    return any(head.search(line) or part.match(line) for head, part, _end in MULTI)


T = TypeVar("T")


def join_continuations(items: Iterable[T], text: Callable[[T], str] = str,
                       close: Callable[[T, T], bool] = lambda _a, _b: True) -> Iterator[tuple[list[T], str]]:
    """Put back together the multi-line driver messages (:data:`MULTI`) that a source gave line by
    line: yields ``(items, message)`` for each message, ``items`` the consecutive inputs it was made
    of (one for most) and ``message`` their texts (``text(item)``, stripped) joined with ``\\n``. A
    message is open from its first line until its last (or :data:`MAX_PARTS` lines); a line that
    does not continue it, or that ``close(previous, item)`` says is too far from it (another boot,
    more than a second apart), ends it where it is. An item that already holds the whole message
    (a journal entry with embedded newlines) is one message. Raises what ``text`` or ``close`` raise."""
    group: list[T] = []
    fam, joined = None, ""
    for item in items:
        line = text(item).strip()
        if group:
            _head, part, end = MULTI[fam]
            if part.match(line) and close(group[-1], item):
                group.append(item)
                joined += "\n" + line
                if line.endswith(end) or len(group) >= MAX_PARTS:
                    yield group, joined
                    group = []
                continue
            yield group, joined
            group = []
        fam = _family(line.rsplit("\n", 1)[-1])
        if fam is not None and "\n" not in line:
            group, joined = [item], line
            continue
        yield [item], line
    if group:
        yield group, joined


# -- one event per OOM kill ---------------------------------------------------------------------------
OOM_MERGE = timedelta(seconds=1)  #: the lines of one kill are printed within this of each other
_ROLE_RANK = {"victim": 0, "summary": 1, "task-in": 2, "invoked": 3, None: 4}


def merge_oom(events: list) -> list:
    """``events`` (:class:`forensics.events.Event`, any kinds, any order) with the ``kernel.oom-kill``
    events of one kill made one: the ``invoked oom-killer``, ``oom-kill:`` summary, ``Task in ...``
    and ``Killed process`` lines within :data:`OOM_MERGE` of the first, one of each, become the event
    of the most telling of them (victim, summary, task-in, invoked: its time, evidence and flags),
    with ``pid``/``process`` of the victim line (else the summary's), the cgroups, ``constraint`` and
    ``container_id`` of the summary (else the ``Task in`` line's), and ``message`` the lines joined
    with ``\\n`` in time order. Other events are returned as they are; the result is in time order."""
    out, group = [], []

    def flush():
        if group:
            out.append(_merged(group))
            group.clear()

    for e in sorted(events, key=lambda e: e.at):
        if e.kind != KIND_OOM:
            out.append(e)
            continue
        role = oom_role(e.attrs.get("message") or "")
        if group and (e.at - group[0].at > OOM_MERGE or
                      role in {oom_role(g.attrs.get("message") or "") for g in group}):
            flush()
        group.append(e)
    flush()
    return sorted(out, key=lambda e: e.at)


def _merged(group: list):
    if len(group) == 1:
        return group[0]
    by_role = {oom_role(g.attrs.get("message") or ""): g for g in group}
    best = min(group, key=lambda g: _ROLE_RANK[oom_role(g.attrs.get("message") or "")])
    cg = by_role.get("summary") or by_role.get("task-in")
    who = by_role.get("victim") or by_role.get("summary")
    attrs = dict(best.attrs)
    if who is not None:
        attrs.update(pid=who.attrs["pid"], process=who.attrs["process"])
    if cg is not None:
        attrs.update({k: cg.attrs[k] for k in ("constraint", "task_memcg", "oom_memcg", "container_id")})
    attrs["message"] = "\n".join(g.attrs["message"] for g in group)
    best.attrs = attrs
    return best
