"""The stack-specific remedies: how each GPU stack's own users put GPUs into the OCI spec, with what each
step needs first and what it would break on this node.

Every fact is from docs/sources.md "GPU stacks" (the item, "stacks.md N", is named beside each remedy) or from the
upstream file cited. Each function returns remedy dicts without ``order`` (:mod:`forensics.findings.remedies`
numbers them); ``change`` holds only commands, one per line, and ``# ...`` comment lines.
"""
from __future__ import annotations

import re

from ..engines import ENGINES
from ..versions import gate
from ..words import setting
from .commands import Ev, lines, valid

#: the stack of a remedy that is the same on every stack (the reports say "(for every stack)")
EVERY_STACK = "every stack"

HOOK_BREAK = ("the standalone nvidia-container-runtime-hook refuses to run in any mode but legacy "
              "(toolkit cmd/nvidia-container-runtime-hook/main.go, assertModeIsLegacy)")


#: remedies whose commands name the driver root: never given while it is unknown (issue 14)
NEED_ROOT = ("Generate a CDI spec for the GPUs", "Or: have the device plugin request devices through CDI (cdi-cri)",
             "Or: have HAMi's device plugin request devices through CDI", "Switch nvidia-container-runtime to CDI mode",
             *(e.cdi.run_what for e in ENGINES.values() if e.cdi))


def remedy(what, stack, change, needs, breaks, why, follows: bool = False) -> dict:
    """One remedy; ``change`` a list of command lines (``# ...`` lines are comments), each an authored
    ``str``, a ``tuple`` of words holding values from the node (:class:`forensics.findings.commands.Ev`,
    checked and quoted) or a lone ``Ev`` (checked only). A value that fails its grammar gives no line;
    it is named as data in ``held_back`` (a list of sentences, only when there is one). ``follows``: the
    remedy is the next step of the one before it, not an alternative to it (``"follows": true``, only when
    set: the plan runs it after that one, :mod:`forensics.findings.remedy_plan`)."""
    cmds, bad = lines(change)
    out = {"what": what, "stack": stack, "change": "\n".join(cmds), "needs": needs or None,
           "breaks": breaks or None, "why": why}
    if bad:
        out["held_back"] = bad
    if follows:
        out["follows"] = True
    return out


def plugin_driver_root(st: dict, root: str) -> list[str]:
    """Commands that point the identified device plugin at ``root`` (stacks.md 1 ``nvidiaDriverRoot``,
    4 ``devicePlugin.nvidiaDriverRoot``); none for the GPU Operator, whose plugin learns it from the
    operator, nor for an unidentified plugin."""
    plugin = st.get("device_plugin")
    if plugin == "nvidia-device-plugin":
        rel, ns, bad = _release(st, "nvidia-device-plugin")
        if str((st.get("plugin_pod") or {}).get("pod") or "").startswith("nvidia-device-plugin-daemonset-"):
            return bad + [("kubectl", "-n", Ev("namespace", ns), "set", "env", "daemonset/nvidia-device-plugin-daemonset",
                           Ev("path", root, "NVIDIA_DRIVER_ROOT="))]
        return bad + _vars(rel, ns) + ["# check both with: helm list -A",
                                       ('helm upgrade "$RELEASE" nvdp/nvidia-device-plugin -n "$NAMESPACE" --reuse-values '
                                        "--set", Ev("path", root, "nvidiaDriverRoot="))]
    if plugin == "hami":
        rel, ns, bad = _release(st, "device-plugin")
        return bad + _vars(rel, ns) + ["CHART=hami-charts/hami", "# check all three with: helm list -A",
                                       ('helm upgrade "$RELEASE" "$CHART" -n "$NAMESPACE" --reuse-values --set',
                                        Ev("path", root, "devicePlugin.nvidiaDriverRoot="))]
    return []


def label(st: dict) -> str:
    """The stack a remedy is written for, as the report shows it: ``engine + device plugin``."""
    return f"{st.get('engine') or 'unknown engine'} + {st.get('device_plugin') or 'unknown device plugin'}"


def root_args(root: str | None, flag: str) -> list:
    """``--flag=ROOT`` as a checked word (:class:`Ev`), none for an unknown or ``/`` root."""
    return [Ev("path", root, f"{flag}=")] if root and root != "/" else []


def _release(st: dict, chart: str) -> tuple[str, str, list]:
    """``(release, namespace, held)``: the Helm release and namespace of the plugin, from its pod name
    ``<release>-<chart>-<hash>`` (the chart's fullname helper, stacks.md 1) and its pod's namespace;
    the docs' names otherwise, and also in place of a name that is not a release name or namespace
    (which is then in ``held``, a lone :class:`Ev` for :func:`remedy`'s note)."""
    pp = st.get("plugin_pod") or {}
    m = re.match(rf"^(.+?)-{re.escape(chart)}-[a-z0-9]{{5}}$", str(pp.get("pod") or ""))
    static = str(pp.get("pod") or "").startswith("nvidia-device-plugin-daemonset-")  # deployments/static: kube-system
    default = ("nvdp", "nvidia-device-plugin") if chart == "nvidia-device-plugin" and not static else ("hami", "kube-system")
    rel, ns = (m.group(1) if m else default[0]), (pp.get("namespace") or default[1])
    bad = [Ev(k, v) for k, v in (("release", rel), ("namespace", ns)) if not valid(k, v)]
    return (rel if valid("release", rel) else default[0]), (ns if valid("namespace", ns) else default[1]), bad


def _vars(rel: str, ns: str) -> list:
    """The ``RELEASE=`` and ``NAMESPACE=`` lines of a Helm remedy (checked names: :func:`_release`)."""
    return [(Ev("release", rel, "RELEASE="),), (Ev("namespace", ns, "NAMESPACE="),)]


def containerd_cdi(st: dict, runtime: dict, versions: dict | None = None) -> list[dict]:
    """Enable CDI in containerd's CRI plugin (stacks.md 3 ``nvidia-ctk runtime configure --cdi.enabled``,
    since toolkit v1.15.0; k3s/RKE2 through the ``config.toml.tmpl`` they regenerate config.toml from,
    stacks.md 8). Only for containerd-based engines, never CRI-O or Docker. ``versions``: as :func:`nvidia_chart`'s."""
    if st.get("engine") not in ("containerd", "k3s", "rke2") or runtime.get("enable_cdi") is True:
        return []
    why = (f"enable_cdi is {setting(runtime.get('enable_cdi'))} ({(runtime.get('containerd') or {}).get('enable_cdi_basis')}); "
           "cdi-cri and CDI annotations need containerd's CDI support (off by default in 1.7, on in 2.x)")
    if st["engine"] == "containerd":
        return [remedy("Enable CDI in containerd's CRI plugin", label(st),
                       ["nvidia-ctk runtime configure --runtime=containerd --cdi.enabled", "systemctl restart containerd"],
                       f"{gate('containerd', '1.7', (versions or {}).get('containerd'))} and NVIDIA "
                       "Container Toolkit >= 1.15.0 (the --cdi.enabled flag)",
                       "restarting containerd pauses pod starts and image pulls for a moment; running containers keep "
                       "running under their shims", why)]
    d = st.get("k3s_config_dir")
    tmpl = f"{d}/config.toml.tmpl"
    plain = [t for t in st.get("k3s_templates") or [] if t.get("directives") is False]
    templated = [t for t in st.get("k3s_templates") or [] if t.get("directives") is not False]
    if templated:
        path = Ev("path", templated[0].get("path"))
        change = [("#", path, "holds Go template actions: nvidia-ctk cannot edit it as TOML"),
                  f"# add enable_cdi = true to its CRI plugin table by hand, then restart {st['engine']}",
                  ("grep -n enable_cdi", path)]
    else:
        change = ([] if plain else [("cp", Ev("path", f"{d}/config.toml"), Ev("path", tmpl))]) + [
            ("nvidia-ctk runtime configure --runtime=containerd --cdi.enabled",
             Ev("path", plain[0].get("path") if plain else tmpl, "--config=")),
            "# on an agent node the unit is " + ("k3s-agent" if st["engine"] == "k3s" else "rke2-agent"),
            f"systemctl restart {'k3s' if st['engine'] == 'k3s' else 'rke2-server'}"]
    return [remedy(f"Enable CDI in {st['engine']}'s embedded containerd, through its config.toml.tmpl", label(st), change,
                   "NVIDIA Container Toolkit >= 1.15.0; edit the template, never config.toml itself "
                   "(\"DO NOT EDIT. Use config.toml.tmpl instead\")",
                   None if plain or templated else ("a template copied from the generated config.toml freezes what "
                                                    f"{st['engine']} would otherwise detect at each start (SystemdCgroup, "
                                                    "the nvidia runtimes)"), why + f"; {st['engine']} regenerates config.toml from the template at start "
                   "(stacks.md 8), and plain nvidia-ctk edits /etc/containerd, which it does not read")]


def nvidia_chart(st, node, dp, root, versions: dict | None = None) -> list[dict]:
    """NVIDIA's device plugin chart, or its static manifest (stacks.md 1): device specs through
    ``compatWithCPUManager`` (a bool: the chart renders PASS_DEVICE_SPECS only for a bool, v0.12.0+),
    and ``deviceListStrategy=cdi-cri`` on a CDI-enabled engine (CRI-O's gate said against ``versions``: the
    runtime facts' ``versions``, with the Node's report where they have none, forensics/findings/remedies.py)."""
    out = []
    static = str(dp.get("pod") or "").startswith("nvidia-device-plugin-daemonset-")  # deployments/static
    rel, ns, bad = _release(st, "nvidia-device-plugin")
    head = bad + _vars(rel, ns) + ["# check both with: helm list -A"]
    drv = root_args(root, "nvidiaDriverRoot")
    kubectl = ("kubectl", "-n", Ev("namespace", ns), "set", "env", "daemonset/nvidia-device-plugin-daemonset")
    if node["pass_device_specs"] is not True:
        change = (bad + [(*kubectl, "PASS_DEVICE_SPECS=true")]
                  + ([(*kubectl, Ev("path", root, "NVIDIA_DRIVER_ROOT="))] if drv else []) if static else
                  head + [('helm upgrade "$RELEASE" nvdp/nvidia-device-plugin -n "$NAMESPACE" --reuse-values',
                           "--set compatWithCPUManager=true", *[x for w in drv for x in ("--set", w)])])
        out.append(remedy("Have the device plugin pass device specs", label(st), change,
                          "nothing else: the plugin reads PASS_DEVICE_SPECS from its env, which overrides its config file"
                          if static else "chart >= v0.7.0; use --set, never --set-string (a quoted true renders no "
                          "PASS_DEVICE_SPECS from chart v0.12.0 on); check the rendered env afterwards",
                          ("" if static else "compatWithCPUManager also makes the plugin pod privileged; ")
                          + "the plugin pods restart, running GPU pods keep their devices",
                          f"PASS_DEVICE_SPECS is {setting(node['pass_device_specs'])}: the plugin then puts the GPU nodes into the "
                          "CRI request, so they reach linux.devices and survive a daemon-reload; it does not protect "
                          "pods that get GPUs by NVIDIA_VISIBLE_DEVICES=all (the plugin itself, dcgm-exporter)"))
    if "cdi-cri" not in (node["device_list_strategy"] or []) and st.get("engine") in ("containerd", "k3s", "rke2", "crio"):
        change = (bad + [(*kubectl, "DEVICE_LIST_STRATEGY=cdi-cri")]
                  if static else head + [('helm upgrade "$RELEASE" nvdp/nvidia-device-plugin -n "$NAMESPACE"',
                                          "--reuse-values --set deviceListStrategy=cdi-cri",
                                          "--set", Ev("path", root or "/", "nvidiaDriverRoot="))])
        out.append(remedy("Or: have the device plugin request devices through CDI (cdi-cri)", label(st), change,
                          "chart >= v0.15.0 (cdi-cri), Kubernetes >= 1.29 (DevicePluginCDIDevices beta), and CDI enabled "
                          "in the engine first" + (" (the containerd step above)" if st.get("engine") != "crio" else
                                                   f" ({gate('CRI-O', '1.24', (versions or {}).get('crio'))}: "
                                                   "always on from there)"),
                          "the plugin pods restart; pods created before keep their old injection until recreated",
                          f"the strategy is {','.join(node['device_list_strategy'] or []) or 'unknown'}; envvar hands "
                          "GPUs over as NVIDIA_VISIBLE_DEVICES, which keeps them out of the OCI spec (stacks.md 1)"))
    return out


def gpu_operator(st, node, dp) -> list[dict]:
    """The GPU Operator (stacks.md 2): its ClusterPolicy, never the plugin chart; the plugin learns its
    driver root from the operator (driver-ready), so nvidiaDriverRoot is never set by Helm."""
    out = [remedy("Enable CDI in the GPU Operator's ClusterPolicy", label(st),
                  ["kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge "
                   "-p '{\"spec\":{\"cdi\":{\"enabled\":true}}}'",
                   "# operator v23.3 to v25.3 only: also make the runtime use CDI for everything",
                   "# kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge "
                   "-p '{\"spec\":{\"cdi\":{\"default\":true}}}'"],
                  "GPU Operator >= v23.3.0 (cdi fields; on by default from v25.10.0); no DEVICE_LIST_STRATEGY=envvar "
                  "in spec.devicePlugin.env (it is applied after the CDI settings and silently undoes them)",
                  "the operator rolls the toolkit and device-plugin DaemonSets; on CRI-O the toolkit moves from its "
                  "OCI hook to the runtime config (CRIO_CONFIG_MODE=config)",
                  "with cdi.enabled the operator's plugin requests devices by CDI and its toolkit enables CDI in the "
                  "engine, so GPUs enter linux.devices; do not edit /etc/nvidia-container-runtime/config.toml "
                  "here: the operator's runtime reads /usr/local/nvidia/toolkit/.config and the toolkit pod rewrites it")]
    if node["pass_device_specs"] is False:
        out.append(remedy("Remove the PASS_DEVICE_SPECS=false override from the ClusterPolicy", label(st),
                          ["kubectl get clusterpolicies.nvidia.com/cluster-policy -o jsonpath='{.spec.devicePlugin.env}'",
                           "# delete the PASS_DEVICE_SPECS entry of spec.devicePlugin.env",
                           "kubectl edit clusterpolicies.nvidia.com/cluster-policy"],
                          "GPU Operator >= v1.9.0 (its plugin manifest sets PASS_DEVICE_SPECS=true)",
                          "the device-plugin DaemonSet rolls", f"the plugin runs with PASS_DEVICE_SPECS=false "
                          f"({(dp.get('basis') or {}).get('PASS_DEVICE_SPECS')})"))
    return out


def hami(st, node, root) -> list[dict]:
    """HAMi's own chart values (stacks.md 4): NVIDIA's ``compatWithCPUManager`` is an unknown value there
    and silently ignored."""
    rel, ns, bad = _release(st, "device-plugin")
    head = bad + _vars(rel, ns) + ["CHART=hami-charts/hami",
            "# check all three with: helm list -A (CHART is the repo/chart the release came from)"]
    out = []
    if node["pass_device_specs"] is not True:
        out.append(remedy("Have HAMi's device plugin pass device specs", label(st),
                          head + ['helm upgrade "$RELEASE" "$CHART" -n "$NAMESPACE" --reuse-values '
                                  "--set devicePlugin.passDeviceSpecsEnabled=true",
                                  "# chart older than v2.5.0: --set 'devicePlugin.extraArgs={--pass-device-specs=true}' "
                                  "instead (it replaces the default -v=4)"],
                          "HAMi chart >= v2.5.0 (the value's default is false from v2.5.1); a bool, not a string",
                          "the HAMi device-plugin pods restart", "HAMi's values are not NVIDIA's: compatWithCPUManager "
                          "is ignored by the HAMi chart; passDeviceSpecsEnabled renders PASS_DEVICE_SPECS"))
    if "cdi-cri" not in (node["device_list_strategy"] or []) and st.get("engine") in ("containerd", "k3s", "rke2", "crio"):
        out.append(remedy("Or: have HAMi's device plugin request devices through CDI", label(st),
                          head + [('helm upgrade "$RELEASE" "$CHART" -n "$NAMESPACE" --reuse-values '
                                   "--set devicePlugin.deviceListStrategy=cdi-cri --set",
                                   Ev("path", root or "/", "devicePlugin.nvidiaDriverRoot="))],
                          "HAMi chart >= v2.8.0 (deviceListStrategy, nvidiaDriverRoot) and CDI enabled in the engine; "
                          "read from the chart template, not HAMi's docs (stacks.md 4 [D])",
                          "the HAMi device-plugin pods restart", "devices requested by CDI enter linux.devices"))
    return out


def bottlerocket(st, node, rendered: dict | None = None) -> list[dict]:
    """Bottlerocket's settings API for its host device-plugin service (stacks.md 5), never Helm.
    ``rendered``: the plugin's settings.yaml as the host rendered it (runtime_config's
    ``bottlerocket_plugin``), the evidence when no plugin container is there to read."""
    pds = node["pass_device_specs"] if node["pass_device_specs"] is not None else (rendered or {}).get("pass_device_specs")
    if pds is True:
        return []
    seen = (f"{pds}" + (" (flags.plugin.passDeviceSpecs in /etc/nvidia-k8s-device-plugin/settings.yaml)"
                        if node["pass_device_specs"] is None and pds is not None else "")) if pds is not None else "unknown"
    return [remedy("Restore Bottlerocket's pass-device-specs setting", label(st),
                   ["apiclient set settings.kubelet-device-plugins.nvidia.pass-device-specs=true"],
                   "Bottlerocket >= v1.23.0 (the settings API for the device plugin; earlier releases pass specs "
                   "from v1.15.0 by default); the key is kubelet-device-plugins.nvidia, not kubelet-device-plugin",
                   "the host service nvidia-k8s-device-plugin restarts",
                   f"PASS_DEVICE_SPECS is {setting(seen)}; Bottlerocket's default (true) puts the GPU "
                   "nodes into the spec; the plugin is a host service, so kubectl and Helm remedies do not apply")]


def _cdi_spec(st, root, output: str, why: str) -> dict:
    """The "Generate a CDI spec" remedy: ``nvidia-ctk cdi generate`` into ``output``, with the driver root."""
    return remedy("Generate a CDI spec for the GPUs", label(st),
                  [(f"nvidia-ctk cdi generate --output={output}", *root_args(root, "--driver-root"))],
                  "NVIDIA Container Toolkit >= 1.12.0", None, why)


def by_command(engine, st, runtime, specs_ok: bool, root, versions: dict | None = None) -> list[dict]:
    """An engine that starts GPU containers by its own command (its :attr:`forensics.engines.engine.Engine.cdi`:
    Docker, stacks.md 6; Podman, forensics/engines/podman.py): a CDI spec where none is usable, then the
    engine's own steps, each the next step of the one before."""
    conf = (runtime.get("stack") or {}).get(engine.name) or {}
    out = [] if specs_ok else [_cdi_spec(st, root, "/etc/cdi/nvidia.yaml", engine.cdi.spec_why(conf))]
    return out + [remedy(s["what"], label(st), s["change"], s["needs"], s["breaks"], s["why"], follows=True)
                  for s in engine.cdi.steps(conf, st.get("hook_users") or [], (versions or {}).get(engine.name))]


def toolkit_cdi_mode(st, node, runtime, specs_ok: bool, root) -> list[dict]:
    """The toolkit's CDI mode for engines that start GPU containers through nvidia-container-runtime
    (stacks.md 3): only where no standalone-hook user is left, since the hook refuses non-legacy modes."""
    if node["nvidia_runtime_mode"] in ("cdi", "jit-cdi") or runtime.get("nvidia_runtime") is None:
        return []
    out = []
    if not specs_ok:
        out.append(_cdi_spec(st, root, "/var/run/cdi/nvidia.yaml", "the runtime's cdi mode resolves devices from the CDI specs"))
    users = st.get("hook_users") or []
    src = runtime["nvidia_runtime"].get("source")
    out.append(remedy("Switch nvidia-container-runtime to CDI mode", label(st),
                      [("nvidia-ctk config --in-place --set nvidia-container-runtime.mode=cdi",
                        *([Ev("path", src, "--config-file=")] if str(src or "").startswith("/") and
                          src != "/etc/nvidia-container-runtime/config.toml" else []))],
                      "a CDI spec for the GPUs" + ("; every standalone-hook user below moved to CDI first" if users else ""),
                      (f"{HOOK_BREAK}: these would stop starting: {'; '.join(users)}" if users else
                       "none seen here: no OCI hook file, Docker, CRI-O or plain runc container uses the standalone "
                       f"hook; {HOOK_BREAK}"),
                      f"mode is {_mode(node)};"
                      " legacy mode injects GPUs with a prestart hook outside the spec; toolkit >= 1.18 with mode auto "
                      "already gives jit-cdi through the runtime and leaves the hook legacy"))
    return out


def _mode(node: dict) -> str:
    """The runtime's mode as the config names it, and what it resolves to only where that differs
    (``auto (resolves to legacy)``, ``legacy``)."""
    mode, resolved = node["nvidia_runtime_mode"] or "unknown", node["nvidia_runtime_mode_resolved"] or "unresolved"
    return mode if mode == resolved else f"{mode} (resolves to {resolved})"
