"""Pure parsers for the container collector (no host access here).

Formats, with where each is defined:
- OCI runtime spec ``config.json``: opencontainers/runtime-spec v1.3.0 config.md ("POSIX-platform
  Hooks", "Process" env, "Mounts"), config-linux.md ("Devices", "Allowed Device list"); docs/sources.md "OCI runtime spec and the NVIDIA modes".
- runc ``state.json``: runc libcontainer/container_linux.go ``State``; device ``type`` is a Go rune
  serialised as an integer (97 ``a``, 98 ``b``, 99 ``c``), ``-1`` is a wildcard; docs/sources.md "Container engine layouts".
- cgroup v1 ``devices.list``: ``<a|b|c> <major|*>:<minor|*> <rwm>`` per line
  (Documentation/admin-guide/cgroup-v1/devices.rst); docs/sources.md "cgroup device state".
- systemd transient unit files and drop-ins (``DevicePolicy=``, ``DeviceAllow=``; an empty
  ``DeviceAllow=`` resets the list): systemd.resource-control(5); docs/sources.md "Cases" C08.
- ``bpftool -j cgroup show`` / ``bpftool -j prog show id N`` JSON (bpftool-cgroup(8), bpftool-prog(8)).
- runc's ``log.json`` in containerd's task directory (runc run with ``--log <bundle>/log.json
  --log-format json`` by the runc.v2 shim): one logrus JSON object a line, ``{"level", "msg", "time"}``
  (time RFC 3339, seconds); runc 1.1.3-1.1.6 log ``skipping device /dev/char/195:255 for systemd: stat
  /sys/dev/char/195:255: no such file or directory`` for a device rule whose link is missing (runc#3708;
  seen with runc 1.1.5, docs/sources.md "The systemd lab").
- ``systemctl show -p NAME ...`` output: ``NAME=VALUE`` lines, a list property one line per item
  (``DeviceAllow=/dev/char/195:255 rw``), booleans ``yes``/``no``; an empty list prints no line
  (systemctl(1) ``show``; the exact text seen from systemd 252 in the lab, tests/test_systemd_scope.py).

Redaction of what this module parses is :mod:`forensics.redact`'s (the one policy).
"""
from __future__ import annotations

import json
import posixpath
import re
from datetime import datetime, timezone

from forensics.redact import ENV_ALLOW, kept_annotation
from forensics.timeutil import iso_z, parse_iso

HOOK_KINDS = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
RUNES = {97: "a", 98: "b", 99: "c", 117: "u", 112: "p"}


# -- config.json -----------------------------------------------------------------------------------
def dig(obj, *keys):
    """``obj[k1][k2]...`` or ``None`` when a level is missing or not a dict."""
    for k in keys:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def _num(v) -> int | None:
    """An OCI/runc major or minor: ``None`` for unset or the ``-1`` wildcard."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        return None
    return v


def _type(v) -> str | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return RUNES.get(v, chr(v) if 0 < v < 0x110000 else None)
    return v if isinstance(v, str) and v else None


def _strs(v) -> list[str]:
    """The str items of a JSON list; ``[]`` for anything that is not a list."""
    return [a for a in v if isinstance(a, str)] if isinstance(v, list) else []


def hooks(spec: dict) -> dict:
    """``{kind: [{"path", "args"}]}`` for every OCI hook kind (empty lists when absent)."""
    out = {}
    for kind in HOOK_KINDS:
        entries = dig(spec, "hooks", kind)
        out[kind] = [{"path": h.get("path") if isinstance(h.get("path"), str) else None,
                      "args": _strs(h.get("args"))}
                     for h in (entries if isinstance(entries, list) else []) if isinstance(h, dict)]
    return out


def linux_devices(spec: dict) -> list[dict]:
    """``linux.devices`` as ``[{"path": str|None, "type", "major", "minor"}]``; any JSON value is
    accepted, and entries or values of the wrong type are left out (``None``)."""
    devs = dig(spec, "linux", "devices")
    return [{"path": d.get("path") if isinstance(d.get("path"), str) else None, "type": _type(d.get("type")),
             "major": _num(d.get("major")), "minor": _num(d.get("minor"))}
            for d in (devs if isinstance(devs, list) else []) if isinstance(d, dict)]


def resources_devices(spec: dict) -> list[dict]:
    """``linux.resources.devices`` as ``[{"allow", "type", "major", "minor", "access"}]``; an unset
    type stays ``None`` (the spec says it means ``a``) and an unset or -1 major/minor is ``None``."""
    rules = dig(spec, "linux", "resources", "devices")
    return [{"allow": bool(r.get("allow")), "type": _type(r.get("type")), "major": _num(r.get("major")),
             "minor": _num(r.get("minor")), "access": r.get("access") if isinstance(r.get("access"), str) else None}
            for r in (rules if isinstance(rules, list) else []) if isinstance(r, dict)]


def env_allowlisted(spec: dict) -> dict:
    """Allowlisted ``process.env`` entries as a dict; for a repeated name the last one wins, as it
    does for execve(2) users that scan from the end (and for the NVIDIA runtime's getenv)."""
    out = {}
    env = dig(spec, "process", "env")
    for e in env if isinstance(env, list) else []:
        if isinstance(e, str) and "=" in e:
            name, _, value = e.partition("=")
            if ENV_ALLOW.match(name):
                out.pop(name, None)
                out[name] = value
    return out


def annotations(spec: dict) -> dict:
    """CDI (``cdi.k8s.io/*``) and Kubernetes annotations of the spec, ``{name: str}``. The spec says
    annotation values are strings; any other value (a corrupt file) is left out."""
    ann = spec.get("annotations") if isinstance(spec, dict) else None
    if not isinstance(ann, dict):
        return {}
    return {k: v for k, v in ann.items()
            if isinstance(v, str) and kept_annotation(k)}


def pod_identity(ann: dict) -> tuple[str | None, str | None, str | None, str | None]:
    """``(pod, pod_namespace, container_name, image)`` from containerd CRI annotations, or the
    ``io.kubernetes.*`` labels that dockershim and CRI-O use."""
    return (ann.get("io.kubernetes.cri.sandbox-name") or ann.get("io.kubernetes.pod.name"),
            ann.get("io.kubernetes.cri.sandbox-namespace") or ann.get("io.kubernetes.pod.namespace"),
            ann.get("io.kubernetes.cri.container-name") or ann.get("io.kubernetes.container.name"),
            ann.get("io.kubernetes.cri.image-name"))


#: where the kubelet keeps device-plugin sockets (``kubelet.sock``, and each plugin's own): Kubernetes docs
#: "Device Plugins" (pluginapi ``DevicePluginPath``); NVIDIA's k8s-device-plugin DaemonSet mounts it as a
#: hostPath volume at the same path, as every device plugin must to register with the kubelet
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def _abs_norm(path: str) -> str:
    """``path`` normalised and absolute; a relative mount destination is relative to ``/`` (runtime-spec
    config.md "Mounts": relative destinations are deprecated and MUST be interpreted as relative to "/")."""
    return "/" + posixpath.normpath("/" + path).lstrip("/")


def _under(path: str, parent: str) -> bool:
    """``path`` is ``parent`` or below it (both normalised and absolute)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def device_plugin_socket_mount(spec: dict, target: str = DEVICE_PLUGIN_DIR) -> bool:
    """Whether the container sees the host's kubelet device-plugin directory (``target``) at the same path,
    as a real device plugin does: it registers over ``kubelet.sock`` there and serves its own socket beside
    it. A tenant pod normally cannot (hostPath volumes are denied by the baseline Pod Security standard),
    so a container named like the device plugin without this mount is no evidence of the plugin's settings.

    Reads the OCI spec's ``mounts`` array (opencontainers/runtime-spec config.md "Mounts": entries with
    ``destination``, ``source``, ``type`` and ``options``, mounted in array order, so a later entry over the
    same or a parent path hides an earlier one). The deciding entry is the last one whose destination is
    ``target`` or a parent of it (``/var/lib/kubelet``); it must be a bind mount (type ``bind`` or a
    ``bind``/``rbind`` option, as containerd and CRI-O write hostPath volumes) whose source maps ``target``
    to the host path ``target`` itself, or to ``<kubelet root dir>/device-plugins`` for a kubelet run with
    another ``--root-dir`` (``/var/snap/microk8s/common/var/lib/kubelet``, ``/var/lib/k0s/kubelet``) but
    never to a path inside a pod's own volumes (``.../pods/<uid>/...``, where emptyDir and subPath sources
    live). Any JSON value is accepted; a spec without such an entry gives ``False``."""
    target = _abs_norm(target)
    mounts = spec.get("mounts") if isinstance(spec, dict) else None
    last = None
    for m in mounts if isinstance(mounts, list) else []:
        dest = m.get("destination") if isinstance(m, dict) else None
        if isinstance(dest, str) and dest and _under(target, _abs_norm(dest)):
            last = m
    if last is None:
        return False
    options = _strs(last.get("options"))
    source = last.get("source")
    if not (last.get("type") == "bind" or "bind" in options or "rbind" in options) \
            or not isinstance(source, str) or not source.startswith("/"):
        return False
    rest = target[len(_abs_norm(last["destination"])):].lstrip("/")
    host = _abs_norm(posixpath.join(source, rest))
    if host == target:
        return True
    tail = "/" + "/".join(target.split("/")[-2:])  # "/kubelet/device-plugins"
    return host.endswith(tail) and "pods" not in host.split("/")


# -- runc state.json -------------------------------------------------------------------------------
def state_created(state: dict) -> str | None:
    """runc ``created`` (RFC 3339 with nanoseconds) as ISO UTC, or ``None``."""
    v = state.get("created") if isinstance(state, dict) else None
    if not isinstance(v, str):
        return None
    try:
        return iso_z(parse_iso(v))
    except (ValueError, OverflowError):
        return None


def state_rules(state: dict) -> list[dict]:
    """runc's merged cgroup device rules (``config.cgroups.devices``; the spec's
    ``resources.devices`` plus runc's default allowlist) as ``resources_devices`` shaped dicts."""
    rules = dig(state, "config", "cgroups", "devices")
    return [{"allow": bool(r.get("allow")), "type": _type(r.get("type")), "major": _num(r.get("major")),
             "minor": _num(r.get("minor")), "access": r.get("permissions")}
            for r in (rules if isinstance(rules, list) else []) if isinstance(r, dict)]


def state_bundle(state: dict) -> str | None:
    """The bundle directory runc recorded in ``config.labels`` (``bundle=<path>``)."""
    labels = dig(state, "config", "labels")
    for label in labels if isinstance(labels, list) else []:
        if isinstance(label, str) and label.startswith("bundle="):
            return label[len("bundle="):]
    return None


def cgroup_driver(state: dict, spec: dict, path: str | None, path_from: str | None,
                  options, cid: str | None = None) -> tuple[str | None, str | None]:
    """``(driver, source)``: the cgroup driver this container's own evidence shows, and which evidence,
    first found of (the contract in ../../h-contracts.md; runc libcontainer/configs ``Cgroup``,
    libcontainer/specconv ``CreateCgroupConfig``):

    1. runc's ``state.json`` ``config.cgroups.Systemd`` (a bool: what runc itself used);
    2. the container's cgroup directory (``path``, read from ``path_from``: runc's ``cgroup_paths`` or the
       init's /proc/<pid>/cgroup): a ``*.scope`` component is a systemd scope (runc's systemd driver makes
       ``<prefix>-<id>.scope``); a directory named by the container id ``cid`` with no ``*.slice`` and no
       ``*.scope`` component (``/kubepods/besteffort/pod.../<id>``, ``/docker/<id>``) is the cgroupfs shape;
    3. the spec's ``linux.cgroupsPath``: ``slice:prefix:name`` is the systemd driver's form (runc refuses any
       other under systemd), an absolute path the cgroupfs form;
    4. containerd's ``options.json`` ``SystemdCgroup`` / ``systemd_cgroup`` when it is a bool.

    ``(None, None)`` when none shows it: no engine default is taken for a fact here."""
    sysd = dig(state, "config", "cgroups", "Systemd")
    if isinstance(sysd, bool):
        return ("systemd" if sysd else "cgroupfs"), f"runc state.json config.cgroups.Systemd={str(sysd).lower()}"
    if isinstance(path, str) and path:
        parts = [p for p in path.split("/") if p]
        if any(p.endswith(".scope") for p in parts):
            return "systemd", f"cgroup path {path} from {path_from} (a systemd scope)"
        if cid and parts[-1] == cid and not any(p.endswith(".slice") for p in parts):
            return "cgroupfs", f"cgroup path {path} from {path_from} (no systemd slice or scope: the cgroupfs shape)"
    cgpath = dig(spec, "linux", "cgroupsPath")
    if isinstance(cgpath, str) and cgpath.count(":") == 2 and not cgpath.startswith("/"):
        return "systemd", f"config.json linux.cgroupsPath {cgpath} (slice:prefix:name, the systemd driver's form)"
    if isinstance(cgpath, str) and cgpath.startswith("/") and ":" not in cgpath:
        return "cgroupfs", f"config.json linux.cgroupsPath {cgpath} (a plain path, the cgroupfs form)"
    if isinstance(options, dict):
        for key in ("SystemdCgroup", "systemd_cgroup"):
            if isinstance(options.get(key), bool):
                return ("systemd" if options[key] else "cgroupfs"), f"options.json {key}={str(options[key]).lower()}"
    return None, None


# -- cgroup device rules ---------------------------------------------------------------------------
def parse_devices_list(text: str) -> list[dict]:
    """cgroup v1 ``devices.list`` lines -> ``[{"allow": True, "type", "major", "minor", "access"}]``
    (``*`` becomes ``None``); malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s*([abc])\s+(\*|\d+):(\*|\d+)\s+([rwm]+)\s*$", line)
        if m:
            out.append({"allow": True, "type": m.group(1),
                        "major": None if m.group(2) == "*" else int(m.group(2)),
                        "minor": None if m.group(3) == "*" else int(m.group(3)), "access": m.group(4)})
    return out


def parse_unit_device_settings(texts: list[str]) -> dict:
    """``DevicePolicy=`` and ``DeviceAllow=`` from a transient unit file and its drop-ins, given in
    the order systemd reads them (unit file, then drop-ins sorted by name).

    Returns ``{"policy": str|None, "allow": ["/dev/char/195:0 rw", "char-pts rwm", ...]}``; an empty
    ``DeviceAllow=`` resets the list (systemd.resource-control(5))."""
    policy, allow = None, []
    for text in texts:
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line[0] in "#;[":
                continue
            key, eq, value = line.partition("=")
            if not eq:
                continue
            key, value = key.strip(), value.strip()
            if key == "DevicePolicy":
                policy = value or None
            elif key == "DeviceAllow":
                if value:
                    allow.append(value)
                else:
                    allow = []
    return {"policy": policy, "allow": allow}


def bpf_time(v) -> str | None:
    """bpftool's ``loaded_at`` (JSON mode: seconds since the epoch; text: ``2024-05-01T10:00:00+0000``)
    as ISO UTC."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return iso_z(datetime.fromtimestamp(v, timezone.utc))
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(v, str):
        try:
            return iso_z(parse_iso(v))
        except (ValueError, OverflowError):
            return None
    return None


def bpf_device_prog_ids(cgroup_show: object) -> list[int]:
    """Program ids attached as device filters in ``bpftool -j cgroup show PATH`` output
    (attach type ``cgroup_device`` in libbpf-based bpftool, ``device`` in older ones)."""
    ids = []
    for e in cgroup_show if isinstance(cgroup_show, list) else []:
        if isinstance(e, dict) and e.get("attach_type") in ("cgroup_device", "device") \
                and isinstance(e.get("id"), int):
            ids.append(e["id"])
    return ids


# -- runc log.json ---------------------------------------------------------------------------------
RUNC_LOG_LEVELS = ("warning", "error", "fatal", "panic")  #: the logrus levels kept in the record
RUNC_LOG_MAX = 100                                        #: entries kept in the record
_SKIPPING = re.compile(r"\Askipping device (/dev/(?:char|block)/\d+:\d+) for systemd\b")


def runc_log(text: str) -> list[dict]:
    """The warning and worse entries of runc's ``log.json`` (format in the module docstring) as
    ``[{"time": ISO UTC|None, "level", "msg", "device": "/dev/char/M:m"|None}]``, at most
    :data:`RUNC_LOG_MAX`, in file order; ``device`` is set for a ``skipping device ... for systemd``
    line. Lines that are not JSON objects (a torn last line) are skipped."""
    out = []
    for line in text.splitlines():
        if len(out) >= RUNC_LOG_MAX:
            break
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a hostile line nested beyond the limit
            continue
        if not isinstance(obj, dict) or obj.get("level") not in RUNC_LOG_LEVELS or not isinstance(obj.get("msg"), str):
            continue
        t = _time(obj.get("time"))
        m = _SKIPPING.match(obj["msg"])
        out.append({"time": iso_z(t) if t else None, "level": obj["level"], "msg": obj["msg"][:2000],
                    "device": m.group(1) if m else None})
    return out


# -- systemctl show --------------------------------------------------------------------------------
SHOW_PROPERTIES = ("NeedDaemonReload", "DevicePolicy", "DeviceAllow", "ControlGroup", "LoadState")
_SHOW_LISTS = ("DeviceAllow",)


def parse_systemctl_show(text: str) -> dict:
    """``systemctl show -p ...`` output (format in the module docstring) as ``{"NeedDaemonReload":
    bool|None, "DevicePolicy", "ControlGroup", "LoadState": str|None, "DeviceAllow": [str]}`` for the
    :data:`SHOW_PROPERTIES`; an empty value is ``None`` (``ControlGroup=`` of a unit without a cgroup), a
    property missing from the text is ``None`` (``[]`` for DeviceAllow, whose empty list prints nothing)."""
    out: dict = {k: ([] if k in _SHOW_LISTS else None) for k in SHOW_PROPERTIES}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if not eq or key not in out:
            continue
        if key in _SHOW_LISTS:
            if value:
                out[key].append(value)
        elif key == "NeedDaemonReload":
            out[key] = {"yes": True, "no": False}.get(value)
        else:
            out[key] = value or None
    return out


# -- classification --------------------------------------------------------------------------------
def is_gpu(record: dict) -> bool:
    """True when the container has, or asked for, an NVIDIA GPU by any route: a device node under
    /dev/nvidia*, a GPU entry in ``linux.devices``, an NVIDIA hook, a CDI annotation, or
    ``NVIDIA_VISIBLE_DEVICES`` set to something other than void/none/empty."""
    if any((d.get("path") or "").startswith("/dev/nvidia") or d.get("major") == 195
           for d in record.get("linux_devices") or []):
        return True
    if any(e.get("kind") == "c" and (e.get("path") or "").startswith("/dev/nvidia")
           for e in record.get("dev_entries") or []):
        return True
    # an NVIDIA hook alone is no GPU: in legacy mode with nvidia as the default runtime every container,
    # pause and CPU-only ones included, carries it; CDI hooks only come with a requested device
    for kind, entries in (record.get("hooks") or {}).items():
        if kind != "prestart" and any("nvidia" in (h.get("path") or "").rsplit("/", 1)[-1] for h in entries):
            return True
    if any(k.startswith("cdi.k8s.io/") for k in record.get("annotations") or {}):
        return True
    vis = (record.get("env") or {}).get("NVIDIA_VISIBLE_DEVICES")
    return vis is not None and vis.strip().lower() not in ("", "void", "none")


def _time(text) -> datetime | None:
    """ISO text (a record's ``created``, a BPF program's ``loaded_at``) as a datetime; ``None`` for
    anything else."""
    if not isinstance(text, str):
        return None
    try:
        return parse_iso(text)
    except (ValueError, OverflowError):
        return None
