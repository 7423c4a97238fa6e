"""Exposure: is each GPU container one daemon-reload away from losing its devices, and what fixes the node.

The mechanism (docs/sources.md "OCI runtime spec and the NVIDIA modes", "cgroup device state"; "Cases" C01, C05,
C07, C09): under the systemd cgroup driver, a daemon-reload re-applies to each container scope the device rules
runc handed to systemd (``DeviceAllow=``, built from the OCI spec's ``linux.resources.devices``). A GPU that
entered outside the spec (the legacy ``nvidia-container-runtime-hook``) is not among them and is revoked; so is a
GPU in the spec whose ``/dev/char/M:m`` link is missing when runc is 1.1.3-1.1.6 or systemd older than 240 (runc's
log.json then says ``skipping device /dev/char/M:m for systemd``: the record's ``runc_log``). systemd's own view
of a scope (``systemctl show``: the record's ``systemd_unit``) stands in for unread drop-ins, and its
``NeedDaemonReload=yes`` is reported as evidence in a note, never as a cause.

Inputs are plain dicts: ``runtime`` from collectors/runtime_config/ (``Reading.facts["runtime"]``),
container records from collectors/containers/ and the device plugin's settings
(:mod:`forensics.findings.device_plugin`); the remedies are in :mod:`forensics.findings.remedies`.
Nothing here reads the host or the bundle.
"""
from __future__ import annotations

from .device_plugin import plugin_notes
from .exposure_row import Context, row
from .remedies import driver_root_trap, remedies
from .stacks import recognise


def assess(runtime: dict, containers: list[dict], device_plugin: dict | None, engines: dict | None = None,
           reloads: list[dict] | None = None, kube: dict | None = None) -> dict:
    """Build the ``exposure`` section of analysis.json (docs/design.md "Command line and JSON: stable").

    ``runtime``: ``Reading.facts["runtime"]`` of collectors/runtime_config/ (``{}`` when absent);
    ``containers``: container records of collectors/containers/; ``device_plugin``: the dict of
    :func:`forensics.findings.device_plugin.device_plugin_settings` or ``None``; ``engines``: the
    runtime_config fact ``engine_cgroup_driver`` (None when the bundle has none); ``reloads``: PID 1's
    trusted reloads (:func:`forensics.findings.broken.trusted_reloads`). Returns ``{"assessed": True,
    "systemd_cgroup",
    "enable_cdi", "nvidia_runtime_mode", "nvidia_runtime_mode_resolved", "device_list_strategy",
    "pass_device_specs", "driver_root", "gpu_outside_spec": bool|None, "containers": [{"id", "pod",
    "namespace", "container_name", "engine", "gpu_injection": spec|cdi|hook|none|unknown (config.json not
    read), "spec_status" (the record's config.status; None in older bundles), "at_risk", "broken",
    "broken_basis" (probe|devices.list|bpf|inferred|None, :mod:`forensics.findings.broken`),
    "broken_evidence" ([cited reload] when inferred), "probe",
    "probe_detail", "devices", "not_reapplied", "dev_char_missing", "runc_skipped" (/dev/char/M:m runc logged it
    skipped for systemd), "systemd_unit" (the record's ``systemctl show`` view or None), "cgroup_driver",
    "cgroup_driver_source", "cgroup_driver_basis" (:func:`forensics.findings.cgroup_driver.decide`),
    "made_inside", "reason"}], "unknown_containers": [the rows whose config.json could not be read],
    "new_pods_exposed": bool, "stack": (:func:`forensics.findings.stacks.recognise`), "remedies": [{"what",
    "stack", "change", "needs", "breaks", "why", "order"}], "notes": [str], "verdict": str}``.
    Raises nothing for missing keys.

    Only device nodes the runtime gave a container (:func:`forensics.findings.device_rules.given`) are evidence: a node in its /dev that
    it was not given (it can mknod one: CAP_MKNOD is in the default set) never makes it broken or at
    risk, and ``made_inside`` lists /dev entries changed after the container was created.
    """
    runtime = runtime or {}
    dp = device_plugin or {}
    node = {"systemd_cgroup": runtime.get("systemd_cgroup"), "enable_cdi": runtime.get("enable_cdi"),
            "nvidia_runtime_mode": runtime.get("nvidia_runtime_mode"),
            "nvidia_runtime_mode_resolved": runtime.get("nvidia_runtime_mode_resolved"),
            "device_list_strategy": dp.get("device_list_strategy"), "pass_device_specs": dp.get("pass_device_specs"),
            "driver_root": runtime.get("driver_root")}
    ctx = Context(runtime, engines, reloads or [])
    rows = [row(c, ctx) for c in containers]
    unknown = [r for r in rows if r["gpu_injection"] == "unknown"]
    gpu = [r for r in rows if r["gpu_injection"] not in ("none", "unknown")]
    # a container whose spec was not read may hold a hook-injected GPU: no "all in the spec" then
    outside = True if any(r["gpu_injection"] == "hook" for r in gpu) else None if unknown or not gpu else False
    out = {"assessed": True, "assesses": "daemon-reload", **node, "gpu_outside_spec": outside,
           "containers": rows, "unknown_containers": unknown,
           "notes": plugin_notes(dp) + list(ctx.notes) + _need_reload_note(rows)}
    out["stack"] = recognise(runtime, containers, device_plugin, kube)  # kube: facts["kube"] of collectors/kube
    # one driver root in the report: the stack's, read from evidence (None: unknown), not the runtime's default
    out["driver_root"] = out["stack"].get("driver_root")
    trap = driver_root_trap(runtime, dp, out["stack"])
    strategy = node["device_list_strategy"] or []
    # new GPU pods would be hook-injected under the systemd driver: legacy mode, no device specs, no CDI
    out["new_pods_exposed"] = (node["systemd_cgroup"] is True and runtime.get("nvidia_runtime") is not None
                               and node["nvidia_runtime_mode_resolved"] in (None, "legacy")
                               and node["pass_device_specs"] is not True and "cdi-cri" not in strategy)
    out["remedies"] = remedies(node, runtime, rows, ctx, trap, out["new_pods_exposed"], out["stack"])
    out["verdict"] = _verdict(node, rows, trap, out["new_pods_exposed"])
    return out


def _need_reload_note(rows: list[dict]) -> list[str]:
    """A note naming the GPU scopes systemd reports ``NeedDaemonReload=yes`` for: evidence, not a cause."""
    units = [r for r in rows if r["gpu_injection"] != "none" and (r.get("systemd_unit") or {}).get("NeedDaemonReload")]
    if not units:
        return []
    names = ", ".join(f"{r['namespace'] or ''}/{r['pod'] or r['id']}" for r in units[:10])
    return [f"systemd reports NeedDaemonReload=yes for the scope of {len(units)} GPU container"
            f"{'s' if len(units) != 1 else ''} ({names}{', ...' if len(units) > 10 else ''}): runc adds DevicePolicy= "
            "and DeviceAllow= as drop-ins after the scope started (runc#4568), so every new runc scope reads yes. "
            "It is evidence that the next daemon-reload re-applies those drop-ins, not a cause of lost access"]


def _verdict(node: dict, rows: list[dict], trap: list[str], future: bool) -> str:
    """The exposure's one sentence: broken, exposed (at risk), undetermined or not exposed, saying which
    drivers are assumed from an engine's default, which containers are broken by inference, and how many
    could not be assessed (:func:`unassessed_text`)."""
    gpu = [r for r in rows if r["gpu_injection"] not in ("none", "unknown")]
    broken = [r for r in rows if r["broken"]]
    risk = [r for r in rows if r["at_risk"] and not r["broken"]]
    unread = unassessed_text([r for r in rows if r["gpu_injection"] == "unknown"])
    tail = (f" {unread[0].upper()}{unread[1:]}." if unread else "") + (
        f" Containerised-driver trap: {'; '.join(trap)}." if trap else "")
    containerd = all(r.get("engine") in ("containerd", None) and r["cgroup_driver_basis"] != "default" for r in risk)
    sc = {True: "SystemdCgroup=true", False: "SystemdCgroup=false"}.get(
        node["systemd_cgroup"] if containerd else None, "the systemd cgroup driver")
    assumed = [r for r in risk if r["cgroup_driver_basis"] == "default"]
    if assumed:
        sc += (f" (assumed for {len(assumed)} of them from the engine's default, not shown by the node)"
               if len(risk) > 1 else " (assumed from the engine's default, not shown by the node)")
    inferred = [r for r in broken if r.get("broken_basis") in ("inferred", "bpf")]
    how = (f" ({len(inferred)} of them inferred from a daemon-reload after {'its' if len(inferred) == 1 else 'their'}"
           f" creation, no probe ran: --probe would settle it)" if inferred else "")
    if risk:
        kinds = {"hook-injected" if r["gpu_injection"] == "hook" else "caught by the /dev/char trap" for r in risk}
        n = len(risk)
        head = (f"Broken and exposed: {len(broken)} container{'s' if len(broken) != 1 else ''} already lost GPU "
                f"access{how}, and {n} more " if broken else f"Exposed: {n} container{'s' if n != 1 else ''} ")
        return (head + f"{'is' if n == 1 else 'are'} {' or '.join(sorted(kinds))} under {sc}; one daemon-reload away "
                f"from losing {'its' if n == 1 else 'their'} GPU." + tail)
    if broken:
        return (f"Broken: {len(broken)} container{'s' if len(broken) != 1 else ''} already lost GPU access{how}; "
                "recreate them and apply the remedies." + tail)
    mode = node["nvidia_runtime_mode_resolved"] or "an unresolved"
    specs = ("no device specs passed" if node["pass_device_specs"] is False
             else "device specs not known to be passed (the device plugin's PASS_DEVICE_SPECS is unknown)")
    later = (f"; new GPU pods would be, though: SystemdCgroup=true with the toolkit in {mode} mode and {specs}"
             if future else "")
    trap_tail = f" Containerised-driver trap: {'; '.join(trap)}." if trap else ""
    if unread and not gpu:
        others = sum(r["gpu_injection"] == "none" for r in rows)
        return (f"Undetermined: {unread}; no GPU container was found among the {others} other"
                f"{'s' if others != 1 else ''}{later}." + trap_tail)
    if not gpu:
        return f"Not exposed now: no GPU containers were found{later}." + tail
    if not any(r["cgroup_driver"] for r in gpu):
        return f"Undetermined: {len(gpu)} GPU containers, but the cgroup driver is unknown." + tail
    unknown = [r for r in gpu if r["cgroup_driver"] is None and r["gpu_injection"] == "hook"]
    if unknown:
        return (f"Undetermined: {len(unknown)} of the {len(gpu)} GPU containers {'is' if len(unknown) == 1 else 'are'}"
                " hook-injected under an unknown cgroup driver." + tail)
    kept = "cgroupfs driver" if all(r["cgroup_driver"] == "cgroupfs" for r in gpu) else "devices in the OCI spec"
    guess = [r for r in gpu if r["cgroup_driver_basis"] == "default" and r["cgroup_driver"] == "cgroupfs"
             and r["gpu_injection"] == "hook"]
    if guess:
        kept += f"; the cgroupfs driver of {len(guess)} is assumed from the engine's default, not shown by the node"
    keep = f"keep their devices across a daemon-reload ({kept}){later}."
    if unread:
        return (f"Undetermined: {unread}; the {len(gpu)} GPU container{'s' if len(gpu) != 1 else ''} assessed "
                + keep + trap_tail)
    return f"Not exposed: all {len(gpu)} GPU container{'s' if len(gpu) != 1 else ''} " + keep + tail


def unassessed_text(unknown: list[dict]) -> str:
    """``"2 containers could not be assessed (config.json unreadable: EACCES)"`` for the rows whose spec was
    not read (``spec_detail``), or ``""`` when there are none."""
    if not unknown:
        return ""
    why = "; ".join(dict.fromkeys(f"config.json {r.get('spec_detail') or 'not read'}" for r in unknown))
    return f"{len(unknown)} container{'s' if len(unknown) != 1 else ''} could not be assessed ({why})"

