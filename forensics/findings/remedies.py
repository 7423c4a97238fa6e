"""Remedies for an exposed node: what to change, and why, for the exposure section of analysis.json.

Called by :func:`forensics.findings.exposure.assess` with what it found (node settings, container rows);
the commands are those of the NVIDIA Container Toolkit (``nvidia-ctk``), the k8s-device-plugin Helm chart
and containerd's CRI config (../shared/research/formats.md 6).
"""
from __future__ import annotations


def driver_root_trap(runtime: dict, dp: dict) -> list[str]:
    """Evidence of the containerised-driver trap: the driver lives under /run/nvidia/driver (nodes in
    /run/nvidia/driver/dev), /dev/nvidiactl is not on the host, yet CDI specs or the device plugin point at
    the host's /dev."""
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
    if dp.get("driver_root") not in (None, root):
        out.append(f"the device plugin has NVIDIA_DRIVER_ROOT={dp['driver_root']}")
    return out


def remedies(node: dict, runtime: dict, rows: list[dict], ctx, trap: list[str], future: bool) -> list[dict]:
    """The ``remedies`` of the exposure section: ``[{"what", "change", "why"}]``, in the order to apply them.

    ``node``: the node settings of the exposure section (``systemd_cgroup``, ``enable_cdi``,
    ``nvidia_runtime_mode``, ``nvidia_runtime_mode_resolved``, ``device_list_strategy``,
    ``pass_device_specs``, ``driver_root``); ``runtime``: the runtime_config Reading's facts; ``rows``:
    the container rows; ``ctx``: the exposure's node context (its ``why_links`` names the runc or
    systemd version that needs /dev/char links); ``trap``: :func:`driver_root_trap`; ``future``: new
    GPU pods would be exposed. Raises nothing for missing keys."""
    out = []
    root = node["driver_root"] or "/"
    hooked = [r for r in rows if r["gpu_injection"] == "hook" and (r["at_risk"] or r["broken"])]
    strategy = node["device_list_strategy"] or []
    legacy = node["nvidia_runtime_mode_resolved"] in (None, "legacy")
    if (hooked and legacy) or future:
        specs = [s for s in (runtime.get("cdi") or {}).get("specs") or []
                 if str(s.get("kind") or "").startswith("nvidia.com/") and not s.get("problems")]
        why = "with CDI the GPU nodes enter linux.devices, so runc hands them to systemd and a reload keeps them"
        if not specs:
            out.append({"what": "Generate a CDI spec for the GPUs",
                        "change": "nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml"
                        + (f" --driver-root={root}" if root != "/" else ""), "why": why})
        if node["nvidia_runtime_mode"] not in ("cdi", "jit-cdi"):
            out.append({"what": "Switch nvidia-container-runtime to CDI mode",
                        "change": "nvidia-ctk config --in-place --set nvidia-container-runtime.mode=cdi",
                        "why": f"mode is {node['nvidia_runtime_mode'] or 'unknown'}"
                               f" ({node['nvidia_runtime_mode_resolved'] or 'unresolved'}); legacy mode injects GPUs"
                               " with a prestart hook outside the spec"})
        if node["enable_cdi"] is not True:
            out.append({"what": "Enable CDI in containerd's CRI plugin", "change": _enable_cdi_snippet(runtime),
                        "why": "cdi-cri device requests need containerd's CDI support"
                               " (default off in containerd 1.7, on in 2.x); restart containerd afterwards"})
        if "cdi-cri" not in strategy:
            out.append({"what": "Have the device plugin request devices through CDI",
                        "change": f"helm upgrade <release> nvdp/nvidia-device-plugin --reuse-values "
                                  f"--set deviceListStrategy=cdi-cri --set nvidiaDriverRoot={root}"
                                  f"  (env DEVICE_LIST_STRATEGY=cdi-cri, NVIDIA_DRIVER_ROOT={root})",
                        "why": f"the strategy is {','.join(strategy) or 'unknown'}; envvar hands GPUs over as "
                               "NVIDIA_VISIBLE_DEVICES, which keeps them out of the OCI spec"})
        if node["pass_device_specs"] is not True:
            out.append({"what": "Or, without CDI: pass the device specs",
                        "change": "helm upgrade <release> nvdp/nvidia-device-plugin --reuse-values "
                                  "--set compatWithCPUManager=true  (env PASS_DEVICE_SPECS=true)",
                        "why": "the plugin then puts the GPU nodes into the CRI request, so they reach linux.devices;"
                               " it does not protect pods that get GPUs by NVIDIA_VISIBLE_DEVICES=all (the plugin"
                               " itself, dcgm-exporter)"})
    if any(r["dev_char_missing"] for r in rows):
        logged = [r for r in rows if r.get("runc_skipped")]
        cause = (f"runc logged 'skipping device {logged[0]['runc_skipped'][0]} for systemd' (log.json of "
                 f"{', '.join(_name(r) for r in logged[:5])}): without the link it leaves the rule out of the scope's "
                 "DeviceAllow=" if logged
                 else f"{ctx.why_links} drops device rules whose /dev/char/M:m link is missing")
        out.append({"what": "Create the /dev/char links for the NVIDIA nodes",
                    "change": "nvidia-ctk system create-dev-char-symlinks --create-all"
                              + (f" --driver-root={root}" if root != "/" else ""),
                    "why": f"{cause} (runc#3708), so a reload revokes GPUs even from spec-injected containers; "
                           "the command (NVIDIA Container Toolkit >= 1.12.0, run as root on the node) creates a "
                           "/dev/char/M:m symlink to each NVIDIA device node it finds; it loads no module and makes no "
                           "node unless --load-kernel-modules or --create-device-nodes is given; a udev rule running "
                           "it keeps the links across reboots and driver reloads; runc >= 1.1.7 with systemd >= 240 no "
                           "longer needs the links"
                           + ("; containers created before the links exist keep the short DeviceAllow=: recreate them"
                              if logged else "")})
    if trap:
        out.append({"what": "Point the device plugin and the CDI spec at the containerised driver",
                    "change": f"helm upgrade ... --set nvidiaDriverRoot={root}; nvidia-ctk cdi generate "
                              f"--driver-root={root} --output=/var/run/cdi/nvidia.yaml",
                    "why": f"the driver's nodes live under {root}/dev, but {'; '.join(trap)}"})
    redo = [r for r in rows if r["broken"] or (r in hooked and not legacy) or r.get("runc_skipped")]
    if redo:
        out.append({"what": "Recreate the containers that lost their GPU"
                    + ("" if legacy else " or predate the switch away from legacy mode")
                    + (", and those runc created without the /dev/char links"
                       if any(r.get("runc_skipped") and not r["broken"] for r in redo) else ""),
                    # one delete per pod, however many of its containers need it
                    "change": "; ".join(dict.fromkeys(f"kubectl delete pod -n {r['namespace']} {r['pod']}" if r["pod"]
                                                      else f"recreate container {r['id']}" for r in redo)),
                    "why": "device access is only (re)built when the container is created again"})
    return out


def _name(r: dict) -> str:
    return f"{r['namespace']}/{r['pod']}" if r.get("pod") else str(r.get("id"))


def _enable_cdi_snippet(runtime: dict) -> str:
    v = ((runtime.get("containerd") or {}).get("config_version")) or 2
    if v >= 3:
        return ("[plugins.'io.containerd.cri.v1.runtime']\n  enable_cdi = true\n"
                "  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']")
    return ('[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]'
            + ("\n# (config version 1: add version = 2 and move the CRI settings to this table first)"
               if v == 1 else ""))
