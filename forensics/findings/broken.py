"""Broken without a probe: a hook-injected GPU container under the systemd driver that PID 1 reloaded after
it was created has most likely lost its GPU already (issue 14 item 3).

The mechanism is exposure's (docs/sources.md "OCI runtime spec and the NVIDIA modes", "cgroup device state";
"Cases" C01, C05): a daemon-reload (or daemon-reexec) re-applies each scope's ``DeviceAllow=``, which never held
the GPU nodes the legacy hook added; on cgroup v2 systemd loads a fresh device program (``sd_devices``) for the
scope then, which the lab's hook container shows after a real reload (tests/test_exposure.py). Only PID 1's
trusted lines count (:func:`trusted_reloads`): a forged one is a red flag, never evidence.

``broken_basis`` of an exposure row: ``probe`` (open() gave EPERM), ``devices.list`` (cgroup v1 rules no
longer allow it), ``bpf`` (cgroup v2: a device program of the scope was loaded at or after the reload:
systemd rebuilt the allowlist from ``DeviceAllow=``), ``inferred`` (the reload alone); ``None`` when not
broken. Direct evidence wins: a probe that ran, a devices.list that was read, or a program list that
shows no program loaded after the reload keeps the container from being inferred broken.
"""
from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from ..events import Event
from ..timeutil import parse_iso
from .requester import RELOAD_KINDS, cite

#: flags that make a reload line no evidence of when (or whether) PID 1 reloaded (forensics.events.Event)
UNTRUSTED = frozenset({"forged", "after-collection", "before-boot"})
#: bpftool's ``loaded_at`` has whole seconds; the journal has microseconds
LOAD_SLACK = timedelta(seconds=1)
PROBE_HINT = ("`gpu-forensics collect --probe` settles it: open() of its GPU nodes from inside the container "
              "gives EPERM when access is revoked and ok when not")


def trusted_reloads(events: list[Event]) -> list[dict]:
    """PID 1's daemon-reload and daemon-reexec events (``journal.reload``, ``journal.reexec``: written by
    journald's trusted ``_PID=1``, collectors/journal) whose time holds, as cited evidence (``{"at",
    "source", "kind", "summary", "artifact", "line"|"cursor"}``), in time order. Forged lines are
    ``journal.forged`` events and never here; a reload flagged ``forged``, ``after-collection`` or
    ``before-boot`` is left out too."""
    return [cite(e) for e in sorted(events, key=lambda e: e.at)
            if e.kind in RELOAD_KINDS and not UNTRUSTED.intersection(e.flags)]


def infer(row, reasons: list[str], c: dict, reloads: list[dict]) -> None:
    """Mark exposure ``row`` (a :class:`forensics.findings.exposure_row.ExposureRow`) broken (``broken_basis``
    "bpf" or "inferred", the reload in ``broken_evidence``) when: the GPU came by the hook (``gpu_injection``
    "hook"), the reload drops its nodes (``row.not_reapplied``, from exposure's reload risk), the driver is systemd by the container's
    evidence or its engine's config (a default never makes it broken), no probe ran, no devices.list was
    read, and a trusted reload (:func:`trusted_reloads`) came after the record's ``created``. With the
    driver only assumed systemd, the reload is cited and the row stays at risk. Appends the sentence to
    ``reasons``; raises nothing for missing keys."""
    if row.gpu_injection != "hook" or not row.not_reapplied or row.cgroup_driver != "systemd":
        return
    cg = c.get("cgroup") if isinstance(c.get("cgroup"), dict) else {}
    if row.probe != "not-run" or cg.get("rules") is not None:
        return  # direct evidence (the probe's answer, devices.list) already judged it
    created = _at(c.get("created"))
    after = [r for r in reloads if created and (at := _at(r.get("at"))) and at > created]
    if not after:
        return
    first = after[0]
    what = "daemon-reexec" if first.get("kind") == "journal.reexec" else "daemon-reload"
    where = (f"line {first['line']}" if first.get("line") is not None else f"cursor {first.get('cursor')}")
    said = (f"PID 1 logged a {what} at {first['at']} ({first.get('artifact')} {where}), after the container was "
            f"created ({c.get('created')})" + (f", and {len(after) - 1} more since" if len(after) > 1 else ""))
    lost = ", ".join(row.not_reapplied)
    if row.cgroup_driver_basis not in ("evidence", "engine config"):
        reasons.append(f"{said}: if the driver is systemd as assumed, that {what} already revoked {lost} "
                       f"(inferred from the engine's default, so only at risk here); {PROBE_HINT}")
        return
    progs = cg.get("bpf") if cg.get("version") == 2 else None
    dated = [p for p in progs or [] if isinstance(p, dict) and _at(p.get("loaded_at"))]
    later = [p for p in dated if _at(p["loaded_at"]) >= _at(first["at"]) - LOAD_SLACK]
    if isinstance(progs, list) and (not progs or dated) and not later:
        shown = ", ".join(_prog(p) for p in progs) or "none"
        reasons.append(f"{said}, yet no device program of its scope was loaded after it (bpftool lists: {shown}), "
                       f"so as far as bpftool shows that {what} did not rebuild its allowlist; {PROBE_HINT}")
        return
    row.broken, row.broken_basis = True, "bpf" if later else "inferred"
    row.broken_evidence, row.broken_cause = [first], "daemon-reload"
    progs_said = (f"; the device program{'s' if len(later) > 1 else ''} {', '.join(_prog(p) for p in later)} "
                  f"attached to its scope {'were' if len(later) > 1 else 'was'} loaded after it (cgroup v2, bpftool): "
                  "consistent with systemd's allowlist rebuilt from DeviceAllow=" if later else
                  "; the scope's device programs were not listed (cgroup v2: bpftool absent)"
                  if cg.get("version") == 2 and progs is None else "")
    reasons.append(f"broken ({'bpf' if later else 'inferred'}, no probe ran): {said}; under the systemd driver "
                   f"({row.cgroup_driver_source}) it re-applied the scope's device rules, which lack {lost}, so "
                   f"GPU access is most likely already revoked{progs_said}; {PROBE_HINT}")


def _prog(p: dict) -> str:
    return f"{p.get('name') or 'unnamed'} (id {p.get('id')}, loaded {p.get('loaded_at') or 'time unknown'})"


def _at(text):
    return _parsed(str(text)) if text else None


@lru_cache(maxsize=4096)  # infer() reads every reload's time once per GPU container (195 x 300 on the L bench)
def _parsed(text: str):
    try:
        return parse_iso(text)
    except (ValueError, OverflowError):
        return None
