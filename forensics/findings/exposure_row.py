"""One container's exposure row: how the runtime gave it its GPU, which of its device nodes are evidence of
that, whether a daemon-reload can take them and whether it already lost them (:func:`row`), over the node's
facts every row needs (:class:`Context`). :mod:`forensics.findings.exposure` assembles the rows into the
``exposure`` section (see its docstring for the mechanism and the row's keys).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..redact import is_redacted
from ..timeutil import parse_iso
from ..versions import version_tuple
from .broken import infer
from .cgroup_driver import decide
from .device_rules import NVIDIA_MAJOR, dropin_allows, from_env, given, rules_allow
from .record import Record

CDI_HOOKS = ("nvidia-cdi-hook", "nvidia-ctk")
LEGACY_HOOK = "nvidia-container-runtime-hook"
PROBE_ORDER = ("EPERM", "EACCES", "ENOENT", "ENXIO", "ok", "not-run")


class Context:
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


@dataclass
class ExposureRow:
    """One container's exposure row, as :func:`row` builds it step by step; :meth:`as_json` is its
    ``exposure.containers[]`` entry (the keys in this order; ``spec_detail`` only when the spec was not
    read). Fields: the container's identity (``id``, ``pod``, ``namespace``, ``created``,
    ``container_name``, ``engine``), ``gpu_injection`` (cdi, spec, hook, none, unknown), ``spec_status``,
    the judgement (``at_risk``, ``broken``, ``broken_basis`` probe|devices.list|bpf|inferred,
    ``broken_evidence``, ``broken_cause``), the evidence (``probe``, the worst result on the nodes it was
    given, and ``probe_detail``; ``devices``; ``not_reapplied``, ``dev_char_missing``, ``runc_skipped``;
    ``systemd_unit``; ``made_inside``), the cgroup driver as decided (``cgroup_driver``, ``_source``,
    ``_basis``, ``_conflict``: :func:`forensics.findings.cgroup_driver.decide`) and ``reason``, its sentence."""

    id: object
    pod: object
    namespace: object
    created: object
    container_name: object
    engine: str | None
    gpu_injection: str
    spec_status: str | None
    cgroup_driver: str | None
    cgroup_driver_source: str
    cgroup_driver_basis: str
    cgroup_driver_conflict: str | None
    systemd_unit: object = None
    probe_detail: dict = field(default_factory=dict)
    at_risk: bool = False
    broken: bool = False
    broken_basis: str | None = None
    broken_evidence: list = field(default_factory=list)
    broken_cause: str | None = None
    probe: str = "not-run"
    devices: list = field(default_factory=list)
    not_reapplied: list = field(default_factory=list)
    dev_char_missing: list = field(default_factory=list)
    runc_skipped: list = field(default_factory=list)
    made_inside: list = field(default_factory=list)
    spec_detail: str | None = None
    reason: str = ""

    def as_json(self) -> dict:
        """The row as analysis.json holds it."""
        out = {k: getattr(self, k) for k in _JSON_ORDER}
        if self.spec_detail is not None:
            out["spec_detail"] = self.spec_detail
        out["reason"] = self.reason
        return out


#: the keys of an exposure row in analysis.json, in order (``spec_detail`` and ``reason`` follow)
_JSON_ORDER = ("id", "pod", "namespace", "created", "container_name", "engine", "gpu_injection", "spec_status",
               "at_risk", "broken", "broken_basis", "broken_evidence", "broken_cause", "probe", "probe_detail",
               "devices", "not_reapplied", "dev_char_missing", "runc_skipped", "systemd_unit", "cgroup_driver",
               "cgroup_driver_source", "cgroup_driver_basis", "cgroup_driver_conflict", "made_inside")


def _row(c: Record, inj: str, drv: dict) -> ExposureRow:
    """An exposure row with what every container has, before its devices are judged."""
    return ExposureRow(c.id, c.pod, c.pod_namespace, c.created, c.container_name, drv["engine"], inj,
                       c.config.get("status") if c.config is not None else None,
                       drv["driver"], drv["source"], drv["basis"], drv["conflict"], c.systemd_unit, c.probe)


def _spec_unread(c: Record) -> str | None:
    """Why the container's config.json was not read (``config.status`` and its detail), or None when it was
    (or the record predates the ``config`` key and holds the spec's lists)."""
    cfg = c.config
    if cfg is None:
        return None if c.linux_devices is not None or c.hooks is not None else "not recorded"
    if cfg.get("status") == "collected":
        return None
    return f"{cfg.get('status') or 'unknown'}" + (f": {cfg['detail']}" if cfg.get("detail") else "")


def row(c: dict, ctx: Context) -> dict:
    """One container's exposure row (:meth:`ExposureRow.as_json`): how its GPU came (:func:`_injection`),
    which device nodes are evidence of it (:func:`_given_nodes`), whether a reload can take them
    (:func:`_judge_risk`) and whether it already lost them (:func:`_judge_broken`), each step adding its
    clause to the row's ``reason``."""
    return judged(c, ctx).as_json()


def judged(raw: dict, ctx: Context) -> ExposureRow:
    """:func:`row`, typed."""
    c = Record.of(raw)
    drv = decide(raw, ctx.engines, ctx.runtime)
    if drv["conflict"]:
        ctx.notes.append(f"{c.id}: the sources disagree on the cgroup driver: {drv['conflict']}")
    unread = _spec_unread(c)
    if unread:
        row = _row(c, "unknown", drv)
        row.spec_detail = unread
        row.reason = (f"config.json {unread}: whether the runtime gave it a GPU, and how, cannot be assessed "
                      "(unknown, not \"no GPU\").")
        return row
    how = _injection(c, ctx)
    nodes = _given_nodes(c, how, ctx)
    row = _row(c, how.inj, drv)
    row.probe = _probe_summary(c.probe, [u[2] for u in nodes.used])
    row.devices = [f"{p} ({M}:{m})" for M, m, p in nodes.used]
    reasons = [_how(how.inj, how.legacy, how.requested, how.nvd)]
    if nodes.foreign:
        n = len(nodes.foreign)
        reasons.append(f"{', '.join(f'{p} ({M}:{m})' for M, m, p in nodes.foreign)} in its /dev "
                       f"{'was' if n == 1 else 'were'} not given by the runtime, so "
                       f"{'its' if n == 1 else 'their'} access is no evidence")
    if nodes.made:
        row.made_inside = nodes.made
        reasons.append(f"{', '.join(nodes.made)} {'was' if len(nodes.made) == 1 else 'were'} made inside the "
                       "container (changed after the runtime created it), so no evidence of what the runtime gave")
    _judge_risk(row, reasons, c, nodes.used, how.spec, drv, ctx)
    _judge_broken(row, reasons, c, nodes)
    if not row.broken and row.at_risk:
        infer(row, reasons, raw, ctx.reloads)
    row.reason = "; ".join(reasons) + "."
    return row


@dataclass(frozen=True)
class _Injection:
    """How the runtime gave a container its GPU (``inj``: ``cdi``, ``spec``, ``hook`` or ``none``) and what
    that was read from: its spec's GPU nodes (``spec``, (major, minor, path)), those its device rules allow,
    the GPU nodes in its /dev (``inside``), ``NVIDIA_VISIBLE_DEVICES`` (``nvd``; ``requested`` when it asks
    for one, ``unknown`` when redacted), a legacy CUDA image's default (``legacy_default``) and the
    legacy prestart hook's part (``legacy``)."""
    inj: str
    spec: list
    inside: list
    nvd: object
    requested: bool
    unknown: bool
    legacy_default: bool
    legacy: bool


def _injection(c: Record, ctx: Context) -> _Injection:
    spec = [(d.get("major"), d.get("minor"), d.get("path")) for d in c.linux_devices or []
            if d.get("type", "c") == "c"
            and (d.get("major") in ctx.majors or str(d.get("path", "")).startswith("/dev/nvidia"))]
    allowed = [d for d in spec if rules_allow(c.resources_devices, d[0], d[1])]
    inside = [(e.get("major"), e.get("minor"), e.get("path")) for e in c.dev_entries or []
              if e.get("kind") == "c" and e.get("major") in ctx.majors]
    env = c.env
    nvd = env.get("NVIDIA_VISIBLE_DEVICES")
    requested = (nvd is not None and not is_redacted(nvd)
                 and str(nvd).strip().lower() not in ("", "void", "none"))
    hooks = c.hooks or {}
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
    cdi_ann = any(str(k).startswith("cdi.k8s.io/") for k in c.annotations)
    if cdi_hook and (spec or cdi_ann):
        inj = "cdi"
    elif allowed:
        inj = "spec"
    elif legacy or (requested and not (c.pid and not inside and c.dev_entries is not None)):
        inj = "hook"
    else:
        inj = "spec" if spec else "none"
    return _Injection(inj, spec, inside, nvd, requested, unknown, legacy_default, legacy)


@dataclass(frozen=True)
class _Nodes:
    """A container's GPU nodes as evidence: those in its /dev the runtime gave (``inside``), those it did not
    (``foreign``), those made inside it after creation (``made``, paths) and the ones its access is judged
    on (``used``: ``inside``, else the spec's, else those its ``NVIDIA_VISIBLE_DEVICES`` selects)."""
    inside: list
    foreign: list
    made: list
    used: list


def _given_nodes(c: Record, how: _Injection, ctx: Context) -> _Nodes:
    # only the nodes the runtime gave the container are evidence of its access (P1: a container without
    # a GPU can mknod /dev/nvidiactl itself, and the device cgroup rightly denies it)
    selection = (str(how.nvd) if how.requested else "all" if how.legacy_default else None if not how.unknown
                 else "?")
    gave = given(how.inj, how.spec, how.inj == "hook" or how.legacy, selection, ctx)
    made = _made_inside(c)  # after the runtime created the container: not the runtime's doing either
    inside = [u for u in how.inside if gave(*u) and u[2] not in made]
    foreign = [u for u in how.inside if u not in inside and u[2] not in made]
    used = inside or [u for u in how.spec if gave(*u)] or (
        from_env(selection, ctx) if selection not in (None, "?") and how.inj != "none" else [])
    return _Nodes(inside, foreign, made, used)


def _judge_risk(row: ExposureRow, reasons: list, c: Record, used: list, spec: list, drv: dict, ctx: Context) -> None:
    """Whether a daemon-reload can take the nodes ``used``: it depends on the cgroup driver, shown or assumed."""
    assumed = f" ({drv['source']})" if drv["basis"] == "default" else ""
    if used and drv["driver"] == "systemd":
        _reload_risk(row, reasons, c, used, spec, ctx)
        if assumed and row.at_risk:
            reasons.append(f"at risk inferred from the engine's default: the systemd driver is{assumed[:-1]}, "
                           "not shown by the node)")
    elif used and drv["driver"] == "cgroupfs":
        reasons.append(f"the cgroupfs driver{assumed}: a daemon-reload does not rewrite its device rules")
    elif used:
        reasons.append(f"the cgroup driver is unknown ({drv['source']}), so the reload risk cannot be judged")


def _judge_broken(row: ExposureRow, reasons: list, c: Record, nodes: _Nodes) -> None:
    """Whether the container already lost its GPU: an EPERM probe of a node the runtime gave, or device rules
    (cgroup v1 devices.list) that no longer allow a node it uses."""
    cg = c.cgroup
    eperm = [p for p, v in c.probe.items() if v == "EPERM" and any(p == u[2] for u in nodes.inside)]
    rules = cg.get("rules")
    denied = [f"{p} ({M}:{m})" for M, m, p in nodes.used if rules is not None and not rules_allow(rules, M, m)]
    if nodes.inside and eperm:
        row.broken, row.broken_basis = True, "probe"
        reasons.append(f"open() of {', '.join(eperm)} gives EPERM: access already revoked"
                       + _programs(cg.get("bpf") if cg.get("version") == 2 else None))
    if denied:
        row.broken, row.broken_basis = True, row.broken_basis or "devices.list"
        reasons.append(f"devices.list no longer allows {', '.join(denied)}")


def _programs(progs) -> str:
    """cgroup v2 has no devices.list: the evidence is the device programs attached to the scope (bpftool's
    ``cgroup show``, collectors/containers/cgroup.py), cited by name, id and load time."""
    if not isinstance(progs, list) or not progs:
        return ""
    each = ", ".join(f"{p.get('name') or 'unnamed'} (id {p.get('id')}"
                     + (f", loaded {p['loaded_at']})" if p.get("loaded_at") else ")") for p in progs)
    return (f"; the device programs attached to its scope (cgroup v2, bpftool): {each}; a device is allowed "
            "only when every attached program allows it")


def _reload_risk(row: ExposureRow, reasons: list[str], c: Record, used: list[tuple], spec: list[tuple],
                 ctx: Context) -> None:
    """Which used devices the next daemon-reload drops: those outside the rules systemd re-applies (its
    drop-in when known, else its ``systemctl show`` DeviceAllow=, else the spec); those runc logged
    ``skipping device /dev/char/M:m for systemd`` for (its log.json: the rule never reached DeviceAllow=);
    and, with runc 1.1.3-1.1.6 or systemd < 240, those whose /dev/char/M:m link is missing on the host."""
    drop_in = c.cgroup.get("systemd_drop_in")
    where = "systemd's transient DeviceAllow drop-in"
    unit = c.unit
    if drop_in is None and unit and unit.get("LoadState") == "loaded":
        drop_in = {"policy": unit.get("DevicePolicy"), "allow": unit.get("DeviceAllow") or []}
        where = "the scope's DeviceAllow= (systemctl show)"
    if drop_in is not None:  # what systemd holds already reflects runc's skipping; it is the evidence
        out = [u for u in used if not dropin_allows(drop_in, u, ctx)]
    else:
        out = [u for u in used if not rules_allow(c.resources_devices, u[0], u[1])]
        where = "the OCI spec's linux.resources.devices"
    skipped = _runc_skipped(c)
    logged = [u for u in used if (u[0], u[1]) in skipped and (drop_in is None or u in out)]
    nolink = [u for u in (out if drop_in is not None else spec)
              if ctx.needs_links and u[0] is not None and ctx.link(u[0], u[1]) is False and u not in logged]
    outside = [u for u in out if u not in nolink and u not in logged]
    row.not_reapplied = [f"{p} ({M}:{m})" for M, m, p in dict.fromkeys(out + nolink + logged)]
    row.dev_char_missing = [f"/dev/char/{M}:{m}" for M, m, _ in dict.fromkeys(logged + nolink)]
    row.runc_skipped = [f"/dev/char/{M}:{m}" for M, m, _ in logged]
    row.at_risk = bool(outside or nolink or logged)
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
        ctx.notes.append(f"{c.id}: /dev/char links are missing for spec devices and the runc version is unknown")


def _runc_skipped(c: Record) -> dict[tuple[int, int], dict]:
    """``{(major, minor): log entry}`` for each ``skipping device /dev/char/M:m for systemd`` line of the
    container's runc log.json (the record's ``runc_log``; collectors/containers/parse.py ``runc_log``)."""
    out = {}
    for e in c.runc_log:
        m = re.fullmatch(r"/dev/char/(\d+):(\d+)", str(e.get("device") or ""))
        if m:
            out.setdefault((int(m.group(1)), int(m.group(2))), e)
    return out


def _skipped_reason(logged: list[tuple], skipped: dict, ctx: Context) -> str:
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




def _made_inside(c: Record) -> list[str]:
    """/dev entries whose ctime is later than the container's creation (runc's ``created``, taken after
    the prestart hooks ran): made (or changed) by something inside the container, not by the runtime."""
    try:
        created = parse_iso(str(c.created))
    except (ValueError, OverflowError):
        return []
    out = []
    for e in c.dev_entries or []:
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
