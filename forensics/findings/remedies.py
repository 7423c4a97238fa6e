"""Remedies for an exposed node: what to change, and why, for the exposure section of analysis.json.

Called by :func:`forensics.findings.exposure.assess` with what it found (node settings, container rows); each
remedy is written for the stack :mod:`forensics.findings.stacks` recognised (docs/sources.md "GPU stacks", its
items cited below as "stacks.md N": per stack, the fix as its users apply it and the traps), says what it needs
first and what it would break.
"""
from __future__ import annotations

from ..engines import ENGINES
from ..words import setting
from . import stack_remedies as sr
from .commands import Ev
from .stacks import recognise


def driver_root_trap(runtime: dict, dp: dict, stack: dict | None = None) -> list[str]:
    """Evidence of the containerised-driver trap: the driver lives under /run/nvidia/driver (nodes in
    /run/nvidia/driver/dev), /dev/nvidiactl is not on the host, yet CDI specs or the device plugin point at
    the host's /dev. The GPU Operator's plugin takes its root from the operator's driver-ready file, not
    its env (stacks.md 2), so on that stack an unset NVIDIA_DRIVER_ROOT is no evidence."""
    root = runtime.get("driver_root")
    if root in (None, "/") or any(d.get("path") == "/dev/nvidiactl" for d in runtime.get("host_devices") or []):
        return []
    out = []
    for s in (runtime.get("cdi") or {}).get("specs") or []:
        if str(s.get("kind") or "").startswith("nvidia.com/"):
            bad = sorted({n.get("hostPath") or n.get("path") for n in s.get("device_nodes") or []
                          if str(n.get("hostPath") or n.get("path") or "").startswith("/dev/nvidia")})
            if bad:
                out.append(f"CDI spec {s.get('source')} points at {', '.join(bad[:3])}")
    unset = str((dp.get("basis") or {}).get("NVIDIA_DRIVER_ROOT") or "").startswith("not set")
    if dp.get("driver_root") not in (None, root) and not (unset and (stack or {}).get("device_plugin") == "gpu-operator"):
        out.append(f"the device plugin has NVIDIA_DRIVER_ROOT={dp['driver_root']}")
    return out


def remedies(node: dict, runtime: dict, rows: list[dict], ctx, trap: list[str], future: bool,
             stack: dict | None = None) -> list[dict]:
    """The ``remedies`` of the exposure section: ``[{"what", "stack", "change", "needs", "breaks", "why",
    "order"}]``, in the order to apply them, each step leaving the node no worse than before.

    ``node``: the node settings of the exposure section (``systemd_cgroup``, ``enable_cdi``,
    ``nvidia_runtime_mode``, ``nvidia_runtime_mode_resolved``, ``device_list_strategy``,
    ``pass_device_specs``, ``driver_root``); ``runtime``: the runtime_config Reading's facts; ``rows``:
    the container rows; ``ctx``: the exposure's node context (its ``why_links`` names the runc or
    systemd version that needs /dev/char links); ``trap``: :func:`driver_root_trap`; ``future``: new
    GPU pods would be exposed; ``stack``: :func:`forensics.findings.stacks.recognise` (recognised from
    ``runtime`` alone when not given). ``change`` holds commands only (one a line, ``# ...`` comments);
    ``needs`` and ``breaks`` are sentences or ``None``. Per-stack remedies are in
    :mod:`forensics.findings.stack_remedies`. Raises nothing for missing keys."""
    st = stack if stack is not None else recognise(runtime, [], None, None)
    root = st.get("driver_root")
    out: list[dict] = []
    hooked = [r for r in rows if r["gpu_injection"] == "hook" and (r["at_risk"] or r["broken"])]
    legacy = node["nvidia_runtime_mode_resolved"] in (None, "legacy")
    if (hooked and legacy) or future:
        out += _spec_remedies(st, node, runtime, root)
    if any(r["dev_char_missing"] for r in rows):
        out.append(_dev_char(rows, ctx, root))
    if trap:
        out.append(_trap_remedy(st, root, trap))
    redo = [r for r in rows if r["broken"] or (r in hooked and not legacy) or r.get("runc_skipped")]
    if redo:
        out.append(_recreate(redo, legacy))
    for i, r in enumerate(out, 1):
        r["order"] = i
    return out


def _spec_remedies(st: dict, node: dict, runtime: dict, root: str | None) -> list[dict]:
    """What puts new GPU containers' devices into the OCI spec on this stack (stacks.md per stack)."""
    engine, plugin = st.get("engine"), st.get("device_plugin")
    if engine is None and plugin in (None, "none"):
        return [sr.remedy("Stack not recognised: check it before changing anything", "unrecognised",
                          ["nvidia-ctk --version", "cat /etc/nvidia-container-runtime/config.toml",
                           "ls -l /etc/cdi /var/run/cdi /etc/containers/oci/hooks.d /usr/share/containers/oci/hooks.d",
                           "ls -l /dev/nvidiactl /run/nvidia/driver/dev/nvidiactl"],
                          None, None, "no engine or device plugin was recognised from the evidence, so no change is "
                          "advised: a remedy written for another stack can stop this node's GPU containers "
                          "(evidence seen: " + ("; ".join(st.get("evidence") or []) or "none") + ")")]
    out = _for_stack(st, node, runtime, root)
    if root is None:  # what names the driver root waits until it is known
        out = [sr.remedy("Find the driver root before any CDI change", sr.label(st),
                         ["cat /run/nvidia/validations/driver-ready", "ls -l /dev/nvidiactl /run/nvidia/driver/dev/nvidiactl"],
                         None, None, "neither /dev/nvidiactl on the host nor a containerised driver's root was seen, so "
                         "no step that names the driver root is given: CDI specs written for the wrong root point at "
                         "nodes that do not exist (create-time lstat errors)")] + [
            r for r in out if r["what"] not in sr.NEED_ROOT]
    return out


def _for_stack(st: dict, node: dict, runtime: dict, root: str | None) -> list[dict]:
    engine, plugin = st.get("engine"), st.get("device_plugin")
    versions = dict(runtime.get("versions") or {})  # the binaries' and packages' answers, else the Node's report
    if (rep := st.get("engine_version")) and not (versions.get(rep["engine"]) or {}).get("version"):
        versions[rep["engine"]] = {"version": rep["version"], "basis": rep["basis"]}
    specs_ok = any(str(s.get("kind") or "").startswith("nvidia.com/") and not s.get("problems")
                   for s in (runtime.get("cdi") or {}).get("specs") or [])
    if plugin == "bottlerocket":
        return sr.bottlerocket(st, node, (runtime.get("stack") or {}).get("bottlerocket_plugin"))
    if plugin == "gpu-operator":
        return sr.gpu_operator(st, node, {})
    if engine in ENGINES and ENGINES[engine].cdi:  # Docker, Podman: GPU containers started by the engine's command
        return sr.by_command(ENGINES[engine], st, runtime, specs_ok, root, versions)
    out = sr.containerd_cdi(st, runtime, versions)
    if plugin == "hami":
        plug = sr.hami(st, node, root)
    elif plugin == "nvidia-device-plugin":
        plug = sr.nvidia_chart(st, node, {"pod": (st.get("plugin_pod") or {}).get("pod")}, root, versions)
    elif engine == "runc" or node["pass_device_specs"] is True:
        plug = []
    else:
        plug = [_unknown_plugin(st, node)]
    # device specs first (no engine change), then the engine's CDI, then the plugin's CDI strategy
    out = plug[:1] + out + plug[1:]
    if engine in ("containerd", "k3s", "rke2", "runc") and not (st.get("hook_users") and engine != "runc"):
        out += sr.toolkit_cdi_mode(st, node, runtime, specs_ok, root)
    return out


def _unknown_plugin(st: dict, node: dict) -> dict:
    """No device plugin identified (none seen, or none trusted): each known stack's own way, as comments."""
    return sr.remedy("Have the device plugin pass device specs (plugin not identified)", sr.label(st),
                     ["kubectl get daemonsets -A -o wide | grep -i device-plugin",
                      "# every plugin below renders PASS_DEVICE_SPECS=true in its env:",
                      "# NVIDIA's chart: helm upgrade <release> nvdp/nvidia-device-plugin --reuse-values --set compatWithCPUManager=true",
                      "# HAMi's chart: --set devicePlugin.passDeviceSpecsEnabled=true",
                      "# GPU Operator: keep its default PASS_DEVICE_SPECS=true; Bottlerocket: apiclient set "
                      "settings.kubelet-device-plugins.nvidia.pass-device-specs=true"],
                     "the plugin identified first: each chart ignores the others' values (stacks.md 1, 4, 5)", None,
                     f"PASS_DEVICE_SPECS is {setting(node['pass_device_specs'])}; device specs put the GPU nodes into the CRI "
                     "request, so they reach linux.devices")


def _dev_char(rows: list[dict], ctx, root: str | None) -> dict:
    logged = [r for r in rows if r.get("runc_skipped")]
    cause = (f"runc logged 'skipping device {logged[0]['runc_skipped'][0]} for systemd' (log.json of "
             f"{', '.join(_name(r) for r in logged[:5])}): without the link it leaves the rule out of the scope's "
             "DeviceAllow=" if logged
             else f"{ctx.why_links} drops device rules whose /dev/char/M:m link is missing")
    return sr.remedy("Create the /dev/char links for the NVIDIA nodes", sr.EVERY_STACK,
                     [("nvidia-ctk system create-dev-char-symlinks --create-all", *sr.root_args(root, "--driver-root"))],
                     "NVIDIA Container Toolkit >= 1.12.0, run as root on the node", None,
                     f"{cause} (runc#3708), so a reload revokes GPUs even from spec-injected containers; "
                     "the command (NVIDIA Container Toolkit >= 1.12.0, run as root on the node) creates a /dev/char/M:m symlink to each NVIDIA device node it finds; it loads no "
                     "module and makes no node unless --load-kernel-modules or --create-device-nodes is given; a udev "
                     "rule running it keeps the links across reboots and driver reloads; runc >= 1.1.7 with systemd "
                     ">= 240 no longer needs the links"
                     + ("; containers created before the links exist keep the short DeviceAllow=: recreate them"
                        if logged else ""))


def _trap_remedy(st: dict, root: str | None, trap: list[str]) -> dict:
    """The containerised-driver trap, fixed the stack's own way (stacks.md 1, 2, 4)."""
    root = root or "/run/nvidia/driver"
    why = f"the driver's nodes live under {root}/dev, but {'; '.join(trap)}"
    plugin = st.get("device_plugin")
    if plugin == "gpu-operator":  # the operator's plugin learns its root from driver-ready: no Helm value
        return sr.remedy("Check the GPU Operator's driver root", sr.label(st),
                         ["cat /run/nvidia/validations/driver-ready",
                          "kubectl get clusterpolicies.nvidia.com/cluster-policy -o jsonpath='{.spec.hostPaths}'"],
                         None, None, why + "; the operator's plugin takes its driver root from the operator "
                         "(driver-ready), not from a Helm value")
    change = sr.plugin_driver_root(st, root) + [
        ("nvidia-ctk cdi generate", Ev("path", root, "--driver-root="), "--output=/var/run/cdi/nvidia.yaml")]
    return sr.remedy("Point the device plugin and the CDI spec at the containerised driver", sr.label(st), change,
                     None, "the plugin pods restart" if plugin in ("nvidia-device-plugin", "hami") else None, why)


def _recreate(redo: list[dict], legacy: bool) -> dict:
    lines = [("kubectl delete pod -n", Ev("namespace", r["namespace"]), Ev("pod", r["pod"])) if r["pod"]
             else ("# recreate container", Ev("container", r["id"]), "with the same arguments (it has no pod)")
             for r in redo]  # one delete per pod, however many of its containers need it (commands.lines)
    return sr.remedy("Recreate the containers that lost their GPU"
                     + ("" if legacy else " or predate the switch away from legacy mode")
                     + (", and those runc created without the /dev/char links"
                        if any(r.get("runc_skipped") and not r["broken"] for r in redo) else ""),
                     sr.EVERY_STACK, lines, "the steps above applied first, so the new containers get "
                     "their devices in the spec", "the containers restart (a pod's controller creates it again; a container "
                     "without a pod must be started again by whoever started it)",
                     "device access is only (re)built when the container is created again")


def _name(r: dict) -> str:
    return f"{r['namespace']}/{r['pod']}" if r.get("pod") else str(r.get("id"))
