"""A reboot inside the window: a boot whose first journal entry, or the running boot's btime
(/proc/stat), falls in it.

A reboot recreates every container with fresh device rules, so it does not leave a pod running without
its GPU; it can still be where an outage began (a GPU that did not come back, the driver not ready when
the pods started, a driver mismatch cured), so it explains those classes and is weighed for a window
whose symptom is unknown.
"""
from __future__ import annotations

from ...timeutil import iso_z
from ..verdicts import Cause, Evidence, Happened, Mechanism, Rule, Window, cite, covers, explains, gap_sentence, weigh

KIND = "reboot"
TITLE = "a reboot"
EXPLAINS = frozenset({"nvml-unknown", "gpu-lost", "no-driver", "create-failed", "system-not-ready", "no-device",
                      "device-unhealthy", "plugin-down", "unknown"})


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: the running boot's btime, or a new boot's first journal entry, falls inside the window;
    excluded: the running boot began before the window and was still running at collection (a single boot
    spans the window), or the journal covers the window and shows no new boot; undetermined: neither the
    boot time nor the journal covers it. A boot's first entry in the journal is its start only when an
    earlier boot precedes it in the journal (``ev.boots``): the oldest boot in a rotated journal began
    before its first surviving entry, and the running boot (``ev.node["boot_id"]``, from /proc) is dated by
    btime instead."""
    return weigh(KIND, happened(window, ev), explains(EXPLAINS, ev.scope, TITLE) or Mechanism(
        "fits", "A reboot restarts every pod with new device rules; the driver or the GPU may not have come back."))


def happened(window: Window, ev: Evidence) -> Happened:
    """The boot that falls inside the window, or what covers it."""
    (start, end), cov, running = window, ev.coverage, ev.node.get("boot_id")
    all_boots = [e for e in ev.boots if e.kind == "journal.boot"]
    norm = lambda b: (b or "").replace("-", "").lower()  # noqa: E731
    boots = [e for i, e in enumerate(all_boots) if i > 0 and start < e.at <= end
             and not (running and norm(e.attrs.get("boot_id")) == norm(running))]
    b = cov.get("boot")
    proc = {"artifact": "node/proc-stat", "summary": b.reason if b else "", "at": iso_z(b.start) if b else None}
    if b and b.start and start < b.start <= end:
        return Happened("yes", f"The running boot started {iso_z(b.start)}, inside the window.", at=b.start,
                        evidence=[proc])
    if boots:
        return Happened("yes", f"The journal shows a new boot at {iso_z(boots[0].at)}, inside the window.",
                        at=boots[0].at, evidence=[cite(e) for e in boots])
    if covers(b, start, end):
        return Happened("no", f"A single boot spans the window: {b.reason}, and it was still running at collection.",
                        evidence=[proc])
    j = cov.get("journal")
    if covers(j, start, end):
        return Happened("no", "The journal covers the window and shows no new boot inside it.")
    return Happened("unknown", "Neither the boot time nor the journal covers the window.",
                    gaps=[g for g in [gap_sentence("journal", j, start, end), gap_sentence("boot", b, start, end)] if g])


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Read why the node rebooted, and whether the driver and GPUs came back."""
    return {"what": "Find why the node rebooted (the previous boot's last lines) and check that the driver and "
                    "every GPU came back",
            "commands": ["journalctl --list-boots | tail -n 3", "journalctl -b -1 -n 50 --no-pager",
                         "cat /proc/driver/nvidia/version", "ls /proc/driver/nvidia/gpus/"],
            "why": "A reboot restarts every pod; the outage then lies in what did not come back.", "sources": []}


RULE = Rule(KIND, TITLE, EXPLAINS, ("boot", "journal"), judge, remedy, severity="node")
