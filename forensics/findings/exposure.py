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

import re

from ..redact import is_redacted
from ..timeutil import parse_iso
from ..versions import version_tuple
from .broken import infer
from .cgroup_driver import decide
from .device_plugin import plugin_notes
from .device_rules import NVIDIA_MAJOR, dropin_allows, from_env, given, rules_allow
from .remedies import driver_root_trap, remedies
from .stacks import recognise

CDI_HOOKS = ("nvidia-cdi-hook", "nvidia-ctk")
LEGACY_HOOK = "nvidia-container-runtime-hook"
PROBE_ORDER = ("EPERM", "EACCES", "ENOENT", "ENXIO", "ok", "not-run")


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
    ctx = _Context(runtime, engines, reloads or [])
    rows = [_container(c, ctx) for c in containers]
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


class _Context:
    """What every container's assessment needs from the node, computed once."""

    def __init__(self, runtime: dict, engines: dict | None, reloads: list[dict]):
        self.runtime, self.engines, self.reloads = runtime, engines, reloads
        self.proc_devices = runtime.get("proc_devices") or {}
        self.majors = {NVIDIA_MAJOR, *self.proc_devices.values(), *(runtime.get("nvidia_majors") or [])}
        self.host = {d["path"]: d for d in runtime.get("host_devices") or [] if d.get("kind") == "c"}
        dc = runtime.get("dev_char")
        self.dev_char = set(dc) if dc is not None else set() if runtime.get("dev_char_absent") else None
        v = runtime.get("versions") or {}
        self.runc = version_tuple((v.get("runc") or {}).get("version"))
        self.systemd = version_tuple((v.get("systemd") or {}).get("version"))
        self.runc_text = (v.get("runc") or {}).get("version")
        # runc 1.1.3-1.1.6 skip, and systemd < 240 cannot resolve, /dev/char/M:m rules with no link
        self.needs_links = (bool(self.runc) and (1, 1, 3) <= self.runc < (1, 1, 7)) or \
                           (bool(self.systemd) and self.systemd[0] < 240)
        self.why_links = (f"runc {self.runc_text}" if self.runc and (1, 1, 3) <= self.runc < (1, 1, 7)
                          else f"systemd {'.'.join(map(str, self.systemd))}")
        self.notes: list[str] = []

    def link(self, major: int, minor: int) -> bool | None:
        """Whether /dev/char/M:m exists on the host (None: not known)."""
        if self.dev_char is not None:
            return f"{major}:{minor}" in self.dev_char
        for d in self.host.values():
            if (d.get("major"), d.get("minor")) == (major, minor):
                return d.get("dev_char_exists")
        return None


def _row(c: dict, inj: str, drv: dict) -> dict:
    """An exposure row with what every container has, before its devices are judged."""
    return {"id": c.get("id"), "pod": c.get("pod"), "namespace": c.get("pod_namespace"), "created": c.get("created"),
            "container_name": c.get("container_name"), "engine": drv["engine"], "gpu_injection": inj,
            "spec_status": (c.get("config") or {}).get("status") if isinstance(c.get("config"), dict) else None,
            "at_risk": False, "broken": False, "broken_basis": None, "broken_evidence": [], "broken_cause": None, "probe": "not-run",
            "probe_detail": c.get("probe") or {}, "devices": [], "not_reapplied": [], "dev_char_missing": [],
            "runc_skipped": [], "systemd_unit": c.get("systemd_unit"), "cgroup_driver": drv["driver"],
            "cgroup_driver_source": drv["source"], "cgroup_driver_basis": drv["basis"],
            "cgroup_driver_conflict": drv["conflict"], "made_inside": []}


def _spec_unread(c: dict) -> str | None:
    """Why the container's config.json was not read (``config.status`` and its detail), or None when it was
    (or the record predates the ``config`` key and holds the spec's lists)."""
    cfg = c.get("config") if isinstance(c.get("config"), dict) else None
    if cfg is None:
        return None if c.get("linux_devices") is not None or c.get("hooks") is not None else "not recorded"
    if cfg.get("status") == "collected":
        return None
    return f"{cfg.get('status') or 'unknown'}" + (f": {cfg['detail']}" if cfg.get("detail") else "")


def _container(c: dict, ctx: _Context) -> dict:
    drv = decide(c, ctx.engines, ctx.runtime)
    if drv["conflict"]:
        ctx.notes.append(f"{c.get('id')}: the sources disagree on the cgroup driver: {drv['conflict']}")
    unread = _spec_unread(c)
    if unread:
        row = _row(c, "unknown", drv)
        row["spec_detail"] = unread
        row["reason"] = (f"config.json {unread}: whether the runtime gave it a GPU, and how, cannot be assessed "
                         "(unknown, not \"no GPU\").")
        return row
    spec = [(d.get("major"), d.get("minor"), d.get("path")) for d in c.get("linux_devices") or []
            if d.get("type", "c") == "c"
            and (d.get("major") in ctx.majors or str(d.get("path", "")).startswith("/dev/nvidia"))]
    allowed = [d for d in spec if rules_allow(c.get("resources_devices") or [], d[0], d[1])]
    inside = [(e.get("major"), e.get("minor"), e.get("path")) for e in c.get("dev_entries") or []
              if e.get("kind") == "c" and e.get("major") in ctx.majors]
    env = c.get("env") or {}
    nvd = env.get("NVIDIA_VISIBLE_DEVICES")
    requested = (nvd is not None and not is_redacted(nvd)
                 and str(nvd).strip().lower() not in ("", "void", "none"))
    hooks = c.get("hooks") or {}
    # In legacy mode with nvidia as the default runtime every container gets the prestart hook, pause
    # and CPU-only containers too; the hook injects a GPU only where one was asked for: the variable set,
    # or unset in a legacy CUDA image (CUDA_VERSION set: the hook's default is "all"). With the variable
    # unset, GPU nodes in its /dev say nothing (a container can mknod them itself) unless its value is
    # unknown (redacted) or the image is such a legacy CUDA image.
    unknown = nvd is not None and is_redacted(nvd)
    legacy_default = nvd is None and env.get("CUDA_VERSION") is not None
    legacy = any(LEGACY_HOOK in _hook_names(h) for h in hooks.get("prestart") or []) and (
        requested or (bool(inside) and (unknown or legacy_default)))
    cdi_hook = any(n in CDI_HOOKS for k in ("createContainer", "createRuntime") for h in hooks.get(k) or []
                   for n in _hook_names(h))
    cdi_ann = any(str(k).startswith("cdi.k8s.io/") for k in c.get("annotations") or {})
    if cdi_hook and (spec or cdi_ann):
        inj = "cdi"
    elif allowed:
        inj = "spec"
    elif legacy or (requested and not (c.get("pid") and not inside and c.get("dev_entries") is not None)):
        inj = "hook"
    else:
        inj = "spec" if spec else "none"
    # only the nodes the runtime gave the container are evidence of its access (P1: a container without
    # a GPU can mknod /dev/nvidiactl itself, and the device cgroup rightly denies it)
    selection = (str(nvd) if requested else "all" if legacy_default else None if not unknown else "?")
    gave = given(inj, spec, inj == "hook" or legacy, selection, ctx)
    made = _made_inside(c)  # after the runtime created the container: not the runtime's doing either
    inside_all = inside
    inside = [u for u in inside_all if gave(*u) and u[2] not in made]
    foreign = [u for u in inside_all if u not in inside and u[2] not in made]
    used = inside or [u for u in spec if gave(*u)] or (
        from_env(selection, ctx) if selection not in (None, "?") and inj != "none" else [])
    cg = c.get("cgroup") or {}
    driver = drv["driver"]
    row = {**_row(c, inj, drv), "probe": _probe_summary(c.get("probe") or {}, [u[2] for u in used]),
           "devices": [f"{p} ({M}:{m})" for M, m, p in used]}
    reasons = [_how(inj, legacy, requested, nvd)]
    if foreign:
        reasons.append(f"{', '.join(f'{p} ({M}:{m})' for M, m, p in foreign)} in its /dev "
                       f"{'was' if len(foreign) == 1 else 'were'} not given by the runtime, so "
                       f"{'its' if len(foreign) == 1 else 'their'} access is no evidence")
    if made:
        row["made_inside"] = made
        reasons.append(f"{', '.join(made)} {'was' if len(made) == 1 else 'were'} made inside the container "
                       "(changed after the runtime created it), so no evidence of what the runtime gave")
    assumed = f" ({drv['source']})" if drv["basis"] == "default" else ""
    if used and driver == "systemd":
        _reload_risk(row, reasons, c, used, spec, ctx)
        if assumed and row["at_risk"]:
            reasons.append(f"at risk inferred from the engine's default: the systemd driver is{assumed[:-1]}, "
                           "not shown by the node)")
    elif used and driver == "cgroupfs":
        reasons.append(f"the cgroupfs driver{assumed}: a daemon-reload does not rewrite its device rules")
    elif used:
        reasons.append(f"the cgroup driver is unknown ({drv['source']}), so the reload risk cannot be judged")
    eperm = [p for p, v in (c.get("probe") or {}).items() if v == "EPERM" and any(p == u[2] for u in inside)]
    rules = cg.get("rules")
    denied = [f"{p} ({M}:{m})" for M, m, p in used if rules is not None and not rules_allow(rules, M, m)]
    if inside and eperm:
        row["broken"], row["broken_basis"] = True, "probe"
        reasons.append(f"open() of {', '.join(eperm)} gives EPERM: access already revoked"
                       + _programs(cg.get("bpf") if cg.get("version") == 2 else None))
    if denied:
        row["broken"], row["broken_basis"] = True, row["broken_basis"] or "devices.list"
        reasons.append(f"devices.list no longer allows {', '.join(denied)}")
    if not row["broken"] and row["at_risk"]:
        infer(row, reasons, c, ctx.reloads)
    row["reason"] = "; ".join(reasons) + "."
    return row


def _programs(progs) -> str:
    """cgroup v2 has no devices.list: the evidence is the device programs attached to the scope (bpftool's
    ``cgroup show``, collectors/containers/cgroup.py), cited by name, id and load time."""
    if not isinstance(progs, list) or not progs:
        return ""
    each = ", ".join(f"{p.get('name') or 'unnamed'} (id {p.get('id')}"
                     + (f", loaded {p['loaded_at']})" if p.get("loaded_at") else ")") for p in progs)
    return (f"; the device programs attached to its scope (cgroup v2, bpftool): {each}; a device is allowed "
            "only when every attached program allows it")


def _reload_risk(row: dict, reasons: list[str], c: dict, used: list[tuple], spec: list[tuple], ctx: _Context) -> None:
    """Which used devices the next daemon-reload drops: those outside the rules systemd re-applies (its
    drop-in when known, else its ``systemctl show`` DeviceAllow=, else the spec); those runc logged
    ``skipping device /dev/char/M:m for systemd`` for (its log.json: the rule never reached DeviceAllow=);
    and, with runc 1.1.3-1.1.6 or systemd < 240, those whose /dev/char/M:m link is missing on the host."""
    drop_in = (c.get("cgroup") or {}).get("systemd_drop_in")
    where = "systemd's transient DeviceAllow drop-in"
    unit = c.get("systemd_unit") if isinstance(c.get("systemd_unit"), dict) else None
    if drop_in is None and unit and unit.get("LoadState") == "loaded":
        drop_in = {"policy": unit.get("DevicePolicy"), "allow": unit.get("DeviceAllow") or []}
        where = "the scope's DeviceAllow= (systemctl show)"
    if drop_in is not None:  # what systemd holds already reflects runc's skipping; it is the evidence
        out = [u for u in used if not dropin_allows(drop_in, u, ctx)]
    else:
        out = [u for u in used if not rules_allow(c.get("resources_devices") or [], u[0], u[1])]
        where = "the OCI spec's linux.resources.devices"
    skipped = _runc_skipped(c)
    logged = [u for u in used if (u[0], u[1]) in skipped and (drop_in is None or u in out)]
    nolink = [u for u in (out if drop_in is not None else spec)
              if ctx.needs_links and u[0] is not None and ctx.link(u[0], u[1]) is False and u not in logged]
    outside = [u for u in out if u not in nolink and u not in logged]
    row["not_reapplied"] = [f"{p} ({M}:{m})" for M, m, p in dict.fromkeys(out + nolink + logged)]
    row["dev_char_missing"] = [f"/dev/char/{M}:{m}" for M, m, _ in dict.fromkeys(logged + nolink)]
    row["runc_skipped"] = [f"/dev/char/{M}:{m}" for M, m, _ in logged]
    row["at_risk"] = bool(outside or nolink or logged)
    if logged:
        reasons.append(_skipped_reason(logged, skipped, ctx))
    if outside:
        reasons.append(f"{', '.join(f'{p} ({M}:{m})' for M, m, p in outside)} {'is' if len(outside) == 1 else 'are'}"
                       f" not in {where}, so the next daemon-reload revokes access")
    if nolink:
        reasons.append(f"{', '.join(f'/dev/char/{M}:{m}' for M, m, _ in nolink)} {'is' if len(nolink) == 1 else 'are'}"
                       f" missing on the host, and {ctx.why_links} drops device rules without that link, so a reload "
                       "revokes them")
    if not ctx.runc and not logged and any(ctx.link(M, m) is False for M, m, _ in spec if M is not None):
        ctx.notes.append(f"{c.get('id')}: /dev/char links are missing for spec devices and the runc version is unknown")


def _runc_skipped(c: dict) -> dict[tuple[int, int], dict]:
    """``{(major, minor): log entry}`` for each ``skipping device /dev/char/M:m for systemd`` line of the
    container's runc log.json (the record's ``runc_log``; collectors/containers/parse.py ``runc_log``)."""
    out = {}
    for e in c.get("runc_log") or []:
        m = re.fullmatch(r"/dev/char/(\d+):(\d+)", str((e or {}).get("device") or ""))
        if m:
            out.setdefault((int(m.group(1)), int(m.group(2))), e)
    return out


def _skipped_reason(logged: list[tuple], skipped: dict, ctx: _Context) -> str:
    """Why runc's skipped rules put a spec-injected GPU at risk, citing the first log line and tying it to
    the node's /dev/char listing (runtime_config's ``dev_char``)."""
    first = skipped[(logged[0][0], logged[0][1])]
    links = [f"/dev/char/{M}:{m}" for M, m, _ in logged]
    now = {ctx.link(M, m) for M, m, _ in logged}
    node = ("; the node has no such link now either" if now == {False}
            else "; the link exists on the node now, made after the container was created, so only recreating it "
                 "puts the rule into DeviceAllow=" if now == {True}
            else "; the node's /dev/char was not listed, so whether the link exists now is unknown")
    return (f"runc logged \"{first.get('msg')}\" (log.json, {first.get('time') or 'time unknown'}): without the "
            f"{', '.join(links)} link{'s' if len(links) > 1 else ''} it left "
            f"{', '.join(f'{p} ({M}:{m})' for M, m, p in logged)} out of the scope's DeviceAllow=, so the next "
            f"daemon-reload revokes {'it' if len(logged) == 1 else 'them'} although the spec lists "
            f"{'it' if len(logged) == 1 else 'them'}{node}")


def _how(inj: str, legacy: bool, requested: bool, nvd) -> str:
    if inj == "cdi":
        return "GPU injected through CDI: the devices are in the OCI spec"
    if inj == "spec":
        return "GPU devices listed in linux.devices and allowed in linux.resources.devices"
    if inj == "hook":
        via = f"the {LEGACY_HOOK} prestart hook" if legacy else f"NVIDIA_VISIBLE_DEVICES={nvd} (no spec devices)"
        return f"GPU injected by {via}, outside the OCI spec"
    return "no GPU" + (f" (NVIDIA_VISIBLE_DEVICES={nvd} requested, but no hook ran and no GPU node is in its /dev)"
                       if requested else "")


def _hook_names(h: dict) -> set[str]:
    args = h.get("args") or []
    return {str(x).rsplit("/", 1)[-1] for x in [h.get("path") or "", *(args[:1])]}




def _made_inside(c: dict) -> list[str]:
    """/dev entries whose ctime is later than the container's creation (runc's ``created``, taken after
    the prestart hooks ran): made (or changed) by something inside the container, not by the runtime."""
    try:
        created = parse_iso(str(c.get("created")))
    except (ValueError, OverflowError):
        return []
    out = []
    for e in c.get("dev_entries") or []:
        try:
            if e.get("ctime") and parse_iso(str(e["ctime"])) > created:
                out.append(str(e.get("path")))
        except (ValueError, OverflowError):
            continue
    return out








def _probe_summary(probe: dict, paths: list[str]) -> str:
    """The worst probe result among the nodes the container was given (``paths``); results for nodes it
    was not given (made inside it) stay in ``probe_detail`` only."""
    vals = [v for p, v in probe.items() if p in paths] or ["not-run"]
    return min(vals, key=lambda v: PROBE_ORDER.index(v) if v in PROBE_ORDER else 0.5)


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

