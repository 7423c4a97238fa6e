"""The device plugin's settings, read from its container record: which container is the NVIDIA (or
HAMi) device plugin, and what its env says about how GPUs reach pods (``DEVICE_LIST_STRATEGY``,
``PASS_DEVICE_SPECS``, ``NVIDIA_DRIVER_ROOT``, ...; k8s-device-plugin cmd/nvidia-device-plugin/main.go).

Input is the container records of collectors/containers/ (``Reading.facts["containers"]``); the
exposure assessment (:mod:`forensics.findings.exposure`) weighs what this returns. Nothing here reads
the host or the bundle.
"""
from __future__ import annotations

import json

from ..redact import is_redacted
from .record import Record

PLUGIN_TOKENS = ("nvidia-device-plugin", "k8s-device-plugin", "hami-device-plugin")
NOT_PLUGIN = ("gpu-feature-discovery", "config-manager", "mps-control-daemon", "toolkit-validation")
#: how the basis names the kubelet's device-plugin directory when the reading does not say where it is
PLUGIN_DIR = "the kubelet's device-plugin directory"
_CTYPE = "io.kubernetes.cri.container-type"


def _nvidia_or_cuda(name: str) -> bool:
    return name.startswith(("NVIDIA_", "CUDA_"))


def device_plugin_settings(containers: list[dict], kept=_nvidia_or_cuda,
                           plugin_dir: str | None = None) -> dict | None:
    """Find the NVIDIA (or HAMi) device plugin among container records (by image, container name or pod
    name) and read its settings from its env (k8s-device-plugin cmd/nvidia-device-plugin/main.go).

    A name is no proof (a tenant pod can be called ``nvidia-device-plugin-x``), so a candidate is trusted
    only when its record's ``device_plugin_socket_mount`` is true: it mounts the host's
    /var/lib/kubelet/device-plugins, where a real plugin registers with the kubelet, and which a tenant pod
    normally cannot mount (hostPath). Candidates with the mount are preferred; when there are candidates
    but none has it, no env is trusted and every setting is ``None`` (unknown). A record without the field
    (a bundle from an older version) is taken as before, with a basis saying the mount was not checked.

    ``plugin_dir`` names that directory in the basis sentences: the containers Reading's
    ``facts["device_plugin_dir"]`` (collectors/containers/ checks the mount against it); ``None``
    says :data:`PLUGIN_DIR` instead.

    ``kept(name)`` says whether the container record's env keeps a variable of that name (the
    collector's allowlist, e.g. ``forensics.redact.ENV_ALLOW.match``): a kept name that is absent was
    not set, so the plugin's default applies; a name the allowlist drops is unknown when absent.

    Returns ``None`` when no plugin container is found, else ``{"id", "pod", "image",
    "device_list_strategy": [str]|None, "pass_device_specs": bool|None, "driver_root": str|None,
    "dev_root", "device_id_strategy", "cdi_annotation_prefix", "nvidia_ctk_path", "socket_mount":
    True|False|None (None: not checked), "ignored": ["ns/pod (container)"], "basis": {key: str}}``;
    ``basis["device_plugin"]`` says why the container was (or no container was) trusted, and ``id``,
    ``pod`` and ``image`` are ``None`` when none was. A redacted value is ``None`` (unknown). Flags given on
    the command line are not in the record.
    """
    plugin_dir = plugin_dir or PLUGIN_DIR
    found = [c for c in map(Record.of, containers) if _named_like_plugin(c)]
    if not found:
        return None
    mounted, unchecked, ignored = [], [], []
    for c in found:
        (mounted if c.socket_mount else unchecked if c.socket_mount is None else ignored).append(c)
    # a pod's sandbox (pause) container carries the pod's name but never runs the plugin: not worth naming
    shown = [c.label for c in ignored if c.annotations.get(_CTYPE) != "sandbox"]
    if not (mounted or unchecked):  # named like the plugin, but none mounts the kubelet's socket directory
        return _untrusted(shown or [c.label for c in ignored], shown, plugin_dir)
    c = sorted(mounted or unchecked, key=lambda c: "device-plugin" not in c.text("container_name"))[0]
    out = {"id": c.id, "pod": c.pod, "image": c.image,
           "socket_mount": True if mounted else None, "ignored": shown, "basis": {}}
    if mounted:
        out["basis"]["device_plugin"] = (f"{c.label} mounts {plugin_dir}, where the device plugin "
                                         "registers with the kubelet" + (
                                             f"; named like the plugin but without that mount, so not taken as "
                                             f"it: {_names(shown)}" if shown else ""))
    else:
        out["basis"]["device_plugin"] = (f"{c.label} is taken as the device plugin by its name alone: its "
                                         f"record predates the check of the {plugin_dir} mount, so the "
                                         "mount could not be checked")
    for key, var, default, parse in _plugin_settings():
        out[key], out["basis"][var] = _setting(c.env, var, default, parse, kept)
    return out


def _named_like_plugin(c: Record) -> bool:
    """A candidate by its image, container or pod name (no proof: see :func:`device_plugin_settings`)."""
    name = c.text("container_name").lower()
    text = " ".join(c.text(k) for k in ("image", "container_name", "pod")).lower()
    return any(t in text for t in PLUGIN_TOKENS) and not any(t in name for t in NOT_PLUGIN)


def _untrusted(named: list[str], shown: list[str], plugin_dir: str) -> dict:
    """The settings when containers are named like the plugin but none mounts ``plugin_dir``: all unknown."""
    why = (f"no container named like the device plugin ({_names(named)}) "
           f"mounts {plugin_dir}, where a real plugin registers with the kubelet, so its settings are "
           "not trusted (a tenant pod could carry the name)")
    out = {"id": None, "pod": None, "image": None, "socket_mount": False, "ignored": shown,
           "basis": {"device_plugin": why}}
    for key, var, _, _ in _plugin_settings():
        out[key] = None
        out["basis"][var] = f"unknown: {why}"
    return out


def _setting(env: dict, key: str, default, parse, kept) -> tuple:
    """``(value, basis)`` of the plugin's setting ``key`` from its container's ``env``: the value set, the
    plugin's ``default`` when a kept name is absent, ``None`` (unknown) when the allowlist dropped it or it
    was redacted."""
    if key not in env and not kept(key):
        return None, "not kept in the container record's env (allowlist): unknown"
    if key not in env:
        return (parse(default) if default is not None else None), f"not set; the plugin's default {default!r} applies"
    v = env[key]
    if v is None or is_redacted(v):
        return None, "redacted in the container record: unknown"
    return parse(str(v)), f"{key}={v} in the container's env"


def _plugin_settings() -> tuple:
    """``(key, env name, the plugin's default or None, parse)`` for each setting read from the plugin's env
    (k8s-device-plugin cmd/nvidia-device-plugin/main.go flags and their env names)."""
    return (("device_list_strategy", "DEVICE_LIST_STRATEGY", "envvar", _strategy_list),
            ("pass_device_specs", "PASS_DEVICE_SPECS", "false", _parse_bool),
            ("driver_root", "NVIDIA_DRIVER_ROOT", "/", str), ("dev_root", "NVIDIA_DEV_ROOT", None, str),
            ("device_id_strategy", "DEVICE_ID_STRATEGY", "uuid", str),
            ("cdi_annotation_prefix", "CDI_ANNOTATION_PREFIX", "cdi.k8s.io/", str),
            ("nvidia_ctk_path", "NVIDIA_CTK_PATH", None, str))


def _names(labels: list[str], most: int = 3) -> str:
    return ", ".join(labels[:most]) + (f" and {len(labels) - most} more" if len(labels) > most else "")


def plugin_notes(dp: dict) -> list[str]:
    """Notes on how far the device plugin's settings are evidence: none when a container with the
    kubelet's socket directory mounted was taken and no other container was named like it."""
    basis = (dp.get("basis") or {}).get("device_plugin")
    if not basis or (dp.get("socket_mount") is True and not dp.get("ignored")):
        return []
    if dp.get("socket_mount") is False:
        return [f"Device plugin settings unknown: {basis}."]
    return [f"Device plugin: {basis}."]


def _strategy_list(v: str) -> list[str]:
    v = v.strip()
    if v.startswith("["):
        try:
            return [str(x) for x in json.loads(v)]
        except ValueError:
            pass
    return [s.strip() for s in v.split(",") if s.strip()]


def _parse_bool(v: str) -> bool | None:
    """Go's strconv.ParseBool."""
    return {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}.get(v.strip().lower())
