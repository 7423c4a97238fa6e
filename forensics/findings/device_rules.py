"""Which device nodes a container was given, and whether a rule list allows one: the device-rule
predicates of the exposure assessment (:mod:`forensics.findings.exposure`).

Rule lists are OCI ``linux.resources.devices`` and cgroup v1 ``devices.list`` (ordered, last match wins:
the runtime-spec's config-linux.md "Allowed Device list"; the kernel's
Documentation/admin-guide/cgroup-v1/devices.rst), and systemd's ``DeviceAllow=``
(systemd.resource-control(5)). ``ctx`` is the exposure's node context (its ``proc_devices``, ``host``,
``majors``, ``systemd`` and ``link``). Nothing here reads the host or the bundle.
"""
from __future__ import annotations

import fnmatch
import re

NVIDIA_MAJOR = 195  #: fixed (Documentation/admin-guide/devices.txt); the others come from /proc/devices


def given(inj: str, spec: list[tuple], hooked: bool, selection: str | None, ctx):
    """A predicate ``(major, minor, path) -> bool``: whether the runtime gave the container that node.

    Given are the NVIDIA entries of ``linux.devices`` (spec and CDI injection) and, when the GPU came by
    the hook or NVIDIA_VISIBLE_DEVICES (``hooked``), the nodes ``selection`` picks: the control nodes
    (nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools, nvidia-caps/*) and /dev/nvidiaN for each
    index; every NVIDIA node for "all" when the host's nodes are unknown, for UUIDs, MIG specs and an
    unknown (redacted, ``"?"``) value. Nothing is given when ``inj`` is "none". The device cgroup judges
    a node by major:minor, so a node matches by its numbers (by path only where the spec has none)."""
    if inj == "none":
        return lambda M, m, p: False
    pairs = {(M, m) for M, m, _ in spec if M is not None}
    paths = {p for M, _, p in spec if M is None and p}
    majors: set = set()
    sel = (selection or "").strip().lower()
    if hooked and selection is not None and sel not in ("", "void"):
        uvm = ctx.proc_devices.get("nvidia-uvm")
        pairs |= {(NVIDIA_MAJOR, 255), (NVIDIA_MAJOR, 254)} | ({(uvm, 0), (uvm, 1)} if uvm is not None else set())
        majors |= {v for k, v in ctx.proc_devices.items() if k.startswith("nvidia-caps")}
        control = ("/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
        pick = set()
        gpus = {p: d for p, d in ctx.host.items() if re.fullmatch(r"/dev/nvidia[0-9]+", p)}
        idx = [i.strip() for i in sel.split(",")]
        if sel == "none":
            pass
        elif sel == "all" and gpus:
            pick |= set(gpus)
        elif all(re.fullmatch(r"[0-9]{1,4}", i) for i in idx):
            pick |= {f"/dev/nvidia{int(i)}" for i in idx}
            pairs |= {(NVIDIA_MAJOR, int(i)) for i in idx}
        else:  # all with the host unknown, UUIDs, MIG, unknown: every NVIDIA node
            majors |= set(ctx.majors)
        pairs |= {(d.get("major"), d.get("minor")) for p, d in ctx.host.items()
                  if p in control or p in pick or p.startswith("/dev/nvidia-caps/")}
    return lambda M, m, p: ((M, m) in pairs or M in majors) if M is not None else p in paths


def from_env(nvd: str, ctx) -> list[tuple]:
    """Devices a container uses when only NVIDIA_VISIBLE_DEVICES says so: nvidiactl, nvidia-uvm, and
    /dev/nvidiaN for "all" or indices (a UUID's minor is not known from the env)."""
    out = [(NVIDIA_MAJOR, 255, "/dev/nvidiactl")]
    uvm = ctx.proc_devices.get("nvidia-uvm")
    if uvm is not None:
        out.append((uvm, 0, "/dev/nvidia-uvm"))
    if nvd.strip().lower() == "all":
        out += [(d["major"], d["minor"], p) for p, d in sorted(ctx.host.items()) if re.fullmatch(r"/dev/nvidia\d+", p)]
    else:
        # ASCII digits only, at most 4 (isdigit() accepts "²", and int() of 5000 digits raises)
        idx = [i.strip() for i in nvd.split(",")]
        out += [(NVIDIA_MAJOR, int(i), f"/dev/nvidia{int(i)}") for i in idx if re.fullmatch(r"[0-9]{1,4}", i)]
    return out


def rules_allow(rules: list[dict], major, minor, typ: str = "c") -> bool:
    """Whether ordered allow/deny rules (OCI ``linux.resources.devices`` or cgroup v1 ``devices.list``;
    ``None`` major/minor = ``*``) end up allowing read and write of ``typ major:minor``; last match wins."""
    state = {"r": False, "w": False}
    for rule in rules:
        if rule.get("type") not in (None, "a", typ):
            continue
        if rule.get("major") not in (None, major) or rule.get("minor") not in (None, minor):
            continue
        for bit in state:
            if bit in (rule.get("access") or "rwm"):
                state[bit] = bool(rule.get("allow", True))
    return all(state.values())


def dropin_allows(drop_in: dict, dev: tuple, ctx) -> bool:
    """Whether systemd's DeviceAllow= list (systemd.resource-control(5)) grants rw on ``dev`` when re-applied."""
    major, minor, _ = dev
    allow = drop_in.get("allow") or []
    if drop_in.get("policy") in (None, "auto") and not allow:
        return True
    for entry in allow:
        spec, _, access = str(entry).strip().partition(" ")
        if not ("r" in (access or "rwm") and "w" in (access or "rwm")):
            continue
        m = re.fullmatch(r"/dev/char/(\d+):(\d+)", spec)
        if m:
            if (int(m.group(1)), int(m.group(2))) == (major, minor) and not (
                    ctx.systemd and ctx.systemd[0] < 240 and ctx.link(major, minor) is False):
                return True
        elif spec.startswith("char-"):
            name = spec[5:]
            if name == "*" or name == str(major) or any(fnmatch.fnmatchcase(n, name) and v == major
                                                        for n, v in ctx.proc_devices.items()):
                return True
        elif spec in ctx.host and (ctx.host[spec].get("major"), ctx.host[spec].get("minor")) == (major, minor):
            return True
    return False
