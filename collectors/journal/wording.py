"""What the journal says: PID 1's reload wordings, unit start/stop lines, NVML errors and kubelet
probe lines, the units that matter, and the events the stored entries become.
:mod:`collectors.journal.selection` uses it to select entries at acquisition and
:mod:`collectors.journal` to read them back, so the two never disagree. Nothing here touches the
host or the bundle. The journal file header is in :mod:`collectors.journal.header`.

Wordings are from the systemd sources at release tags (docs/sources.md "systemd: the
manager reload message, by version"): ``log_caller()`` in src/core/dbus-manager.c (v253-v258),
``manager_log_caller()`` in src/core/manager.c (v259+), ``invoke_main_loop()`` in src/core/main.c.
None of these lines has a MESSAGE_ID, so the text is all there is; ``CODE_LINE`` and ``PRIORITY``
differ between distributions and versions and are never used.
"""
from __future__ import annotations

import re
from datetime import datetime

from forensics import neighbours
from forensics.engines import ENGINES
from forensics.excerpt import excerpt
from forensics.events import Event
from forensics.timeutil import from_usec, iso_z
from .fields import text
from .runtime import update_event
from .sudo import sudo_verdict

#: caller line; comm and unit are each left out when systemd could not find them. Numbers are bounded
#: (pid_max is 2^22; anyone may log as ``SYSLOG_IDENTIFIER=systemd``), so int() never meets 5000 digits
CALLER_RE = re.compile(r"^(Reloading|Reload|Reexecuting|Reexecution) requested from client PID (\d{1,10})"
                       r"(?: \('([^']*)'\))?(?: \(unit ([^)]+)\))?\.\.\.$")
SIGHUP_RE = re.compile(r"^Received SIGHUP from PID (\d{1,10})(?: \(([^)]*)\))?\.$")
FINISHED_RE = re.compile(r"^Reloading finished in (\d{1,15}) ms\.$")
#: v246+ "systemd 255.4-1ubuntu8 running in system mode (+PAM ...)"; v245 and older add a period; RHEL puts
#: the package version in parentheses: "systemd 239 (239-58.el8) running in system mode. (+PAM ...)"
BANNER_RE = re.compile(r"^systemd (\S+)(?: \(([^()\s]+)\))? running in system mode(?:\.)?(?: \(|$)")
RELOAD_LINES = ("Reloading.", "Reloading...")  # main.c: <= 253.1 / 253.2+
REEXEC_LINE = "Reexecuting."

PID1 = [[("_PID", "1")], [("SYSLOG_IDENTIFIER", "systemd"), ("SYSLOG_PID", "1")]]  # early boot: via kmsg
GROUP_SECONDS = 5  # a caller line (or SIGHUP) and the main.c line it causes are this close

#: units whose start/stop lines PID 1 writes with UNIT= and that matter to the incident
UNITS_THAT_MATTER = frozenset({
    "apt-daily.service", "apt-daily-upgrade.service", "unattended-upgrades.service", "snapd.service",
    "packagekit.service", "containerd.service", "kubelet.service", "docker.service", "crio.service",
    "k3s.service", "k3s-agent.service"})
#: parts of unit names that matter besides :data:`UNITS_THAT_MATTER`: dpkg's, every NVIDIA unit
#: (nvidia-fabricmanager, nvidia-persistenced, nvidia-mig-manager, nvidia-dcgm), DCGM's, and the host
#: units NVIDIA's MIG manager stops around a reconfiguration (gpu-operator
#: assets/state-mig-manager/0410_configmap.yaml: nvsm*.service, nv_peer_mem.service, dcgm*.service)
UNIT_PARTS = ("dpkg", "nvidia", "dcgm", "nvsm", "nv_peer_mem")
#: units that commonly run ``systemctl daemon-reload`` (package managers and their timers)
REQUESTER_UNITS = ("apt-daily.service", "apt-daily-upgrade.service", "unattended-upgrades.service",
                   "snapd.service", "packagekit.service")
#: units whose own output may carry NVML/CUDA errors and kubelet probe lines
NVML_UNITS = ("kubelet.service", *(e.daemon[0] for e in ENGINES.values() if e.daemon), "k3s.service",
              "k3s-agent.service")
NVML_MARKERS = neighbours.NVML_MARKERS
#: klog structured line written by kubelet's prober on a probe status change
PROBE_RE = re.compile(r'"SyncLoop \(probe\)" probe="(readiness|liveness|startup)" status="([^"]*)"'
                      r'(?: pod="([^"]+)")?')
HEALTHY_STATUSES = frozenset({"ready", "healthy", "started"})
POD_RE = re.compile(r'\bpod="([^"/]+/[^"]+)"')

#: MESSAGE_ID (sd-messages.h) -> action, for unit lines whose text does not say it
_UNIT_IDS = {"7d4958e842da4a758f6c1cdc7b36dcc5": "starting", "39f53479d3a045ac8e11786248231fbf": "started",
             "de5b426a63be47a7b6ac3eaac82e2f6f": "stopping", "9d1aaa27d60140bd96365438aad20286": "stopped",
             "be02cf6855d2428ba40df7e9d022f03d": "failed",
             "5eb03494b6584870a536b337290809b3": "restart-scheduled"}  # SD_MESSAGE_UNIT_RESTART_SCHEDULED
_UNIT_PREFIXES = (("Starting ", "starting"), ("Started ", "started"), ("Stopping ", "stopping"),
                  ("Stopped ", "stopped"), ("Finished ", "finished"), ("Failed to start ", "failed"))
_UNIT_SUFFIXES = ((": Deactivated successfully.", "deactivated"),  # v248+
                  (": Succeeded.", "deactivated"),                 # v247 and older
                  (": Failed with result ", "failed"),
                  # src/core/service.c service_enter_restart: v236+ "Scheduled restart job, restart counter is
                  # at %u." (MESSAGE_ID 5eb03494...); before, "Service hold-off time over, scheduling restart."
                  (": Scheduled restart job", "restart-scheduled"),
                  (": Service hold-off time over, scheduling restart.", "restart-scheduled"),
                  # service_sigchld_event: "Main process exited, code=%s, status=%i/%s" (killed, dumped, exited)
                  (": Main process exited, code=", "exited"))


#: transports on which journald's ``_PID`` is the sender's (socket peer credentials), not PID 1's own:
#: ``logger -t systemd`` arrives on ``syslog`` with ``_PID=<logger>``; a service's output on ``stdout``
FOREIGN_TRANSPORTS = ("syslog", "stdout")
#: the ``_COMM`` of the daemons whose NVML/probe lines count when they are in no unit of :data:`NVML_UNITS`
NVML_COMMS = ("kubelet", *(e.daemon[1] for e in ENGINES.values() if e.daemon), "k3s-server", "k3s-agent")


def pid1_trusted(e: dict) -> bool:
    """True when journald's trusted fields say PID 1 wrote entry ``e``: ``_PID=1`` (journald takes it
    from the socket's peer credentials, which a sender cannot choose without CAP_SYS_ADMIN) on a
    transport other than :data:`FOREIGN_TRANSPORTS`, or an early-boot ``systemd[1]:`` line that journald
    read from /dev/kmsg (``_TRANSPORT=kernel``, which only root can write). ``SYSLOG_IDENTIFIER`` and
    ``SYSLOG_PID`` alone are what the writer says (``logger -t systemd``) and never suffice."""
    transport = text(e.get("_TRANSPORT"))
    if text(e.get("_PID")) == "1":
        return transport not in FOREIGN_TRANSPORTS
    return (transport == "kernel" and text(e.get("SYSLOG_IDENTIFIER")) == "systemd"
            and text(e.get("SYSLOG_PID")) == "1" and not text(e.get("_PID")))


#: SYSLOG_FACILITY of the kernel's own records: LOG_KERN (0), or none where journald did not write it
KERNEL_FACILITY = ("", "0")


def kernel_trusted(e: dict) -> bool:
    """True when journald's fields say the kernel wrote entry ``e``: ``_TRANSPORT=kernel`` (journald
    read it from /dev/kmsg, which only the kernel and root write) with the kernel's own facility
    (:data:`KERNEL_FACILITY`; a line root wrote into /dev/kmsg has another, see
    :mod:`collectors.journal.kernel`)."""
    return text(e.get("_TRANSPORT")) == "kernel" and text(e.get("SYSLOG_FACILITY")) in KERNEL_FACILITY


def log_trusted(e: dict) -> bool:
    """True when journald's trusted fields say kubelet, containerd, docker or an NVIDIA/DCGM unit wrote
    entry ``e``: its ``_SYSTEMD_UNIT`` (from the writer's cgroup) passes :func:`nvml_unit`, or its
    ``_COMM`` is one of :data:`NVML_COMMS` run by root (``_UID=0``). ``SYSLOG_IDENTIFIER=kubelet`` alone
    is what the writer says and never suffices."""
    unit = text(e.get("_SYSTEMD_UNIT"))
    return (bool(unit) and nvml_unit(unit)) or (text(e.get("_COMM")) in NVML_COMMS and text(e.get("_UID")) == "0")


def forged_claim(e: dict, rules: list) -> str | None:
    """What a stored entry kept by ``rules`` (its ``_GF_SELECTED_BY``) falsely claims to be: ``"PID 1"``
    (kept as PID 1's line, :func:`pid1_trusted` false), ``"sudo"`` (``SYSLOG_IDENTIFIER=sudo``,
    :func:`collectors.journal.sudo.sudo_verdict` ``"forged"``: an unverifiable one claims nothing), ``"kernel"``
    (``SYSLOG_IDENTIFIER=kernel`` on a line the kernel did not
    write, :func:`collectors.journal.kernel.kernel_trusted` false), ``"kubelet"`` (kept as an
    NVML/probe/symptom/UpdateContainerResources line, :func:`log_trusted` false; the writer's
    SYSLOG_IDENTIFIER when it gave one), or ``None`` for a genuine entry. The ``forged`` rule (set at selection)
    is read again here, so bundles collected before it are judged the same way."""
    if ("pid1" in rules or "unit" in rules or "forged" in rules) and (
            text(e.get("SYSLOG_IDENTIFIER")) == "systemd" or text(e.get("_PID")) == "1") and not pid1_trusted(e):
        return "PID 1"
    if ("requester" in rules or "forged" in rules) and sudo_verdict(e) == "forged":
        return "sudo"
    if ("kernel" in rules or "forged" in rules) and text(e.get("SYSLOG_IDENTIFIER")) == "kernel" \
            and not kernel_trusted(e):
        return "kernel"
    if ("nvml" in rules or "healthy" in rules or "symptom" in rules or "update-resources" in rules
            or "forged" in rules) and not log_trusted(e):
        return text(e.get("SYSLOG_IDENTIFIER")) or "kubelet"
    return None


def unit_matters(unit: str | None) -> bool:
    """True for the units whose start/stop lines are kept (package tooling, container runtime,
    kubelet, NVIDIA and DCGM units)."""
    if not unit:
        return False
    return unit in UNITS_THAT_MATTER or any(p in unit for p in UNIT_PARTS)


def nvml_unit(unit: str) -> bool:
    """True for the units whose output is checked for NVML/CUDA errors."""
    return unit in NVML_UNITS or "nvidia" in unit or "dcgm" in unit


def manager_line(message: str) -> dict | None:
    """Classify a PID 1 MESSAGE. Returns ``None`` or ``{"kind": K, ...}`` with K one of
    ``caller`` (``method``: reload|reexec, ``word``, ``pid``, ``comm``, ``unit``), ``reload``,
    ``reexec``, ``finished`` (``duration_ms``), ``sighup`` (``pid``, ``comm``), ``banner``
    (``version``)."""
    if message in RELOAD_LINES:
        return {"kind": "reload"}
    if message == REEXEC_LINE:
        return {"kind": "reexec"}
    m = CALLER_RE.match(message)
    if m:
        word = m.group(1)
        return {"kind": "caller", "method": "reload" if word.startswith("Reload") else "reexec",
                "word": word, "pid": int(m.group(2)), "comm": m.group(3), "unit": m.group(4)}
    m = FINISHED_RE.match(message)
    if m:
        return {"kind": "finished", "duration_ms": int(m.group(1))}
    m = SIGHUP_RE.match(message)
    if m:
        return {"kind": "sighup", "pid": int(m.group(1)), "comm": m.group(2)}
    m = BANNER_RE.match(message)
    if m:
        return {"kind": "banner", "version": m.group(2) or m.group(1)}
    return None


def unit_action(message: str, message_id: str | None = None) -> str | None:
    """``starting|started|stopping|stopped|finished|failed|deactivated|restart-scheduled|exited`` for a
    PID 1 unit line, or ``None`` for the other lines about a unit (CPU time consumed, ...)."""
    for prefix, action in _UNIT_PREFIXES:
        if message.startswith(prefix):
            return action
    for suffix, action in _UNIT_SUFFIXES:
        if suffix in message:
            return action
    return _UNIT_IDS.get((message_id or "").replace("-", "").lower())


def nvml_error(message: str) -> bool:
    """True when ``message`` reports an NVML or CUDA initialisation error of the EPERM class: a line
    of a neighbouring failure (:func:`forensics.neighbours.match`, ``cuInit failed:100`` say) is not one."""
    return neighbours.nvml_class(message) is not None


def probe_status(message: str) -> tuple[str, str, str | None] | None:
    """``(probe, status, pod)`` for kubelet's ``"SyncLoop (probe)"`` line, else ``None``."""
    m = PROBE_RE.search(message)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def healthy_probe(message: str) -> bool:
    """True for a kubelet probe-status line whose status means healthy (ready/healthy/started)."""
    p = probe_status(message)
    return bool(p and p[1] in HEALTHY_STATUSES)


def pod_of(message: str) -> str | None:
    """``ns/name`` from a klog ``pod="ns/name"`` key, or ``None``."""
    m = POD_RE.search(message)
    return m.group(1) if m else None


def version_from_wording(caller_word: str | None, main_line: str | None) -> tuple[str, str] | None:
    """Infer the systemd version range from one reload's caller word and main.c line.

    Returns ``(version, basis)``; ``None`` when there is neither. Table: docs/sources.md "systemd: the manager reload message, by version" ("Version inference
    from the journal alone".
    """
    if caller_word in ("Reload", "Reexecution"):
        return ">=256", f"wording: '{caller_word} requested from client PID ...' (systemd 256+)"
    if caller_word in ("Reloading", "Reexecuting"):
        return "253-255", f"wording: '{caller_word} requested from client PID ...' (systemd 253-255)"
    if main_line == "Reloading...":
        return ">=253.2", "wording: 'Reloading...' (systemd 253.2+)"
    if main_line == "Reloading.":
        return "<=253.1", "wording: only 'Reloading.' (systemd 253.1 or older)"
    return None


# -- stored entries to events ---------------------------------------------------------------------
def _int(v) -> int | None:
    try:
        return int(text(v))
    except ValueError:
        return None


def event(at: datetime, kind: str, summary: str, attrs: dict, evidence: dict) -> Event:
    return Event(at=at, source="journal", kind=kind, summary=summary, attrs=attrs, evidence=evidence,
                 original=iso_z(at))


def _who(a: dict) -> str:
    who = f"PID {a['requester_pid']}" + (f", {a['requester_comm']}" if a["requester_comm"] else "")
    return f"{a['requester_unit']} ({who})" if a["requester_unit"] else who


def forged_event(at: datetime, e: dict, claim: str, evidence: dict) -> Event:
    """The ``journal.forged`` event (flag ``forged``) of an entry whose writer claims to be ``claim``
    (:func:`forged_claim`) while journald's trusted fields name someone else: what it claimed
    (``claimed_identifier``, ``claimed_pid``: SYSLOG_IDENTIFIER, SYSLOG_PID) and who really wrote it
    (``pid``, ``comm``, ``uid``, ``transport``, ``unit``: _PID, _COMM, _UID, _TRANSPORT, _SYSTEMD_UNIT)."""
    msg = text(e.get("MESSAGE"))
    a = {"claim": claim, "claimed_identifier": text(e.get("SYSLOG_IDENTIFIER")) or None,
         "claimed_pid": text(e.get("SYSLOG_PID")) or None, "pid": _int(e.get("_PID")),
         "comm": text(e.get("_COMM")) or None, "uid": _int(e.get("_UID")),
         "transport": text(e.get("_TRANSPORT")) or None, "unit": text(e.get("_SYSTEMD_UNIT")) or None,
         "message": msg}
    who = f"{a['comm'] or '?'}[{a['pid']}] (uid {a['uid']}, transport {a['transport']})"
    return Event(at=at, source="journal", kind="journal.forged",
                 summary=f"forged {claim} line written by {who}: {excerpt(msg, 160)}", attrs=a, evidence=evidence,
                 original=iso_z(at), flags=("forged",))


def entry_events(at: datetime, e: dict, rules: list, evidence: dict) -> list[Event]:
    """Events of one stored entry selected by ``unit``, ``requester``, ``nvml``, ``symptom``,
    ``update-resources`` or ``healthy`` (the ``kernel`` rule's are :mod:`collectors.journal.kernel`'s);
    a forged entry (:func:`forged_claim`) gives one ``journal.forged`` event instead of
    those of ``unit``, ``nvml``, ``symptom`` and ``healthy`` (and of ``requester`` for a forged sudo
    line). A line of a neighbouring failure gives ``journal.symptom``, never ``journal.nvml-error``,
    even when an older collector kept it as ``nvml``."""
    msg, out = text(e.get("MESSAGE")), []
    ident, unit = text(e.get("SYSLOG_IDENTIFIER")) or None, text(e.get("_SYSTEMD_UNIT")) or None
    claim = forged_claim(e, rules)
    if claim:
        out.append(forged_event(at, e, claim, evidence))
        rules = [r for r in rules if r == "requester" and claim != "sudo"]
    if "unit" in rules:
        name, action = text(e.get("UNIT")), unit_action(msg, text(e.get("MESSAGE_ID")))
        if action:
            out.append(event(at, "journal.unit", f"{name}: {action}",
                              {"unit": name, "action": action, "message": msg}, evidence))
    if "requester" in rules:
        pid, comm = _int(e.get("_PID")), text(e.get("_COMM")) or None
        ev = event(at, "journal.requester", f"{ident or comm}[{pid}] ({unit}): {excerpt(msg, 160)}",
                   {"pid": pid, "comm": comm, "unit": unit, "identifier": ident, "message": msg}, evidence)
        if sudo_verdict(e) == "unverified":  # neither sudo's nor forged: said, never a requester (requester.py wants comm sudo)
            ev.summary = (f"{ident}[{pid}]: {excerpt(msg, 160)} (cannot be verified: journald recorded none of what "
                          "it reads of the writer from /proc)")
            ev.flags = ("unverified",)
        out.append(ev)
    if ("nvml" in rules or "symptom" in rules) and (sig := neighbours.match(msg)) and sig[0] != "plugin-registered":
        out.append(symptom_event(at, msg, sig, ident, unit, evidence))
    elif "nvml" in rules:
        out.append(event(at, "journal.nvml-error", f"NVML/CUDA error logged by {unit or ident}: {excerpt(msg, 160)}",
                          {"message": msg, "identifier": ident, "unit": unit, "pod": pod_of(msg)}, evidence))
    if "update-resources" in rules and (ev := update_event(at, msg, unit or ident, evidence)):
        out.append(ev)
    if "healthy" in rules and (p := probe_status(msg)):
        out.append(event(at, "journal.healthy", f"kubelet: {p[0]} probe {p[1]} for pod {p[2]}",
                          {"message": msg, "identifier": ident, "unit": unit, "pod": p[2]}, evidence))
    return out


def manager_events(items: list[tuple[datetime, dict, dict]]) -> tuple[list[Event], tuple[str, str] | None]:
    """Events of PID 1's manager lines ``(at, entry, evidence)``, and ``(systemd_version, basis)``.

    A caller line (or a SIGHUP) and the ``Reloading.``/``Reloading...``/``Reexecuting.`` line that
    follows it within :data:`GROUP_SECONDS` in the same boot are one reload (or re-exec), dated at
    the first line; a main.c line with no such predecessor is a reload of its own with no requester.
    The version comes from the newest banner, else from the newest reload's wording.
    """
    events, pending, groups, banner = [], [], [], None
    for at, e, ev in items:
        msg = text(e.get("MESSAGE"))
        k, boot = manager_line(msg), text(e.get("_BOOT_ID"))
        if not k:
            continue
        pending = [g for g in pending if g["boot"] == boot and (at - g["at"]).total_seconds() <= GROUP_SECONDS]
        if k["kind"] in ("caller", "sighup"):
            method = k.get("method", "reload")
            a = {"wording": msg, "requester_pid": k["pid"], "requester_comm": k["comm"],
                 "requester_unit": k.get("unit")}
            if k["kind"] == "sighup":
                events.append(event(at, "journal.sighup", f"PID 1 received SIGHUP from {_who(a)}",
                                     {"sender_pid": k["pid"], "sender_comm": k["comm"]}, ev))
                summary = f"daemon-reload on SIGHUP from {_who(a)}"
            else:
                summary = f"daemon-{method} requested by {_who(a)}"
            events.append(event(at, f"journal.{method}", summary, a, ev))
            groups.append({"at": at, "boot": boot, "method": method, "word": k.get("word"), "main": None})
            pending.append(groups[-1])
        elif k["kind"] in ("reload", "reexec"):
            g = next((g for g in pending if g["method"] == k["kind"]), None)
            if g:
                pending.remove(g)
                g["main"] = msg
                continue
            a = {"wording": msg, "requester_pid": None, "requester_comm": None, "requester_unit": None}
            events.append(event(at, f"journal.{k['kind']}",
                                 f"daemon-{k['kind']} (systemd logged no caller: {msg!r})", a, ev))
            groups.append({"at": at, "word": None, "main": msg})
        elif k["kind"] == "finished":
            events.append(event(at, "journal.reload-finished", f"daemon-reload finished in {k['duration_ms']} ms",
                                 {"duration_ms": k["duration_ms"]}, ev))
        elif k["kind"] == "banner":
            events.append(event(at, "journal.banner", f"systemd {k['version']} started in system mode",
                                 {"systemd_version": k["version"]}, ev))
            banner = (k["version"], f"start-up banner at {iso_z(at)}")
    if banner:
        return events, banner
    inferred = (version_from_wording(g["word"], g["main"]) for g in reversed(groups))
    return events, next((v for v in inferred if v), None)


def boot_events(boots: list, lines: dict, problems: list) -> list[Event]:
    """One ``journal.boot`` per boots.json record, dated at its first entry; ``lines`` maps cursors
    to entries.jsonl line numbers for the evidence. A bad record is reported in ``problems``."""
    out = []
    for b in boots:
        try:
            out.append(event(from_usec(b["first_usec"]), "journal.boot",
                             f"boot {b['boot_id']}: {b['first']} to {b['last']}",
                             {"boot_id": b["boot_id"], "first": b["first"], "last": b["last"]},
                             {"artifact": "journal/entries.jsonl", "cursor": b["first_cursor"],
                              "line": lines.get(b["first_cursor"])}))
        except (KeyError, TypeError, ValueError, OverflowError, OSError) as e:
            problems.append({"artifact": "journal/boots.json", "message": f"boot record skipped: {e!r}"})
    return out


# -- neighbouring GPU failures and trusted sudo lines (issue 14 item 7) ------------------------------
def symptom_line(e: dict) -> bool:
    """True when entry ``e`` (an output line of a unit or daemon of :func:`log_trusted`'s) shows a
    neighbouring GPU failure (:data:`forensics.neighbours.SIGNATURES`; a plugin's registration, which
    is its start, is none)."""
    sig = neighbours.match(text(e.get("MESSAGE")))
    return bool(sig) and sig[0] != "plugin-registered"


def symptom_event(at: datetime, msg: str, sig: tuple[str, dict], ident: str | None, unit: str | None,
                  evidence: dict) -> Event:
    """The ``journal.symptom`` event of a line that shows the neighbouring failure ``sig`` (the
    ``(signature, groups)`` of :func:`forensics.neighbours.match`): ``pod`` from a klog ``pod="ns/name"``
    key or the back-off line's ``pod=``, ``container`` and ``path`` as the line names them."""
    name, groups = sig
    return event(at, "journal.symptom", f"{name} logged by {unit or ident}: {excerpt(msg, 160)}",
                 {"signature": name, "message": msg, "identifier": ident, "unit": unit,
                  "pod": pod_of(msg) or groups.get("pod"), "container": groups.get("container"),
                  "path": groups.get("path")}, evidence)
