"""Pure parsers and the redaction for the container collector (no host access here).

Formats, with where each is defined:
- OCI runtime spec ``config.json``: opencontainers/runtime-spec v1.3.0 config.md ("POSIX-platform
  Hooks", "Process" env, "Mounts"), config-linux.md ("Devices", "Allowed Device list"); formats.md §5.1.
- runc ``state.json``: runc libcontainer/container_linux.go ``State``; device ``type`` is a Go rune
  serialised as an integer (97 ``a``, 98 ``b``, 99 ``c``), ``-1`` is a wildcard; formats.md §5.2.
- cgroup v1 ``devices.list``: ``<a|b|c> <major|*>:<minor|*> <rwm>`` per line
  (Documentation/admin-guide/cgroup-v1/devices.rst); formats.md §6.
- systemd transient unit files and drop-ins (``DevicePolicy=``, ``DeviceAllow=``; an empty
  ``DeviceAllow=`` resets the list): systemd.resource-control(5); cases.md C08.
- ``bpftool -j cgroup show`` / ``bpftool -j prog show id N`` JSON (bpftool-cgroup(8), bpftool-prog(8)).

Redaction policy (:func:`redact_spec`, unless ``--no-redact``); names are always kept, values become
``<redacted hmac:XXXXXXXX>`` (a keyed hash prefix, so equal values in one bundle still match):

- env: a value is kept only when its name is in :data:`ENV_ALLOW` (matched whole: ``PATH\n`` is not
  ``PATH``) and does not look like a credential (:data:`CRED_WORDS`: ``NVIDIA_API_KEY``,
  ``CUDA_AUTH_TOKEN`` are hashed although NVIDIA_*/CUDA_* are otherwise kept);
- annotations (and runc's ``labels``, which hold them as ``key=value``): values are kept only for
  :data:`K8S_ANNOTATIONS` and ``cdi.k8s.io/*`` (and runc's ``bundle`` label); every other value is
  hashed (``kubectl.kubernetes.io/last-applied-configuration`` holds whole manifests, secrets included);
- args (process and hooks): the value after a credential-looking flag (``--password X``,
  ``--token=X``), after ``-p`` (``-p X`` and ``-pX``, mysql's password flag; a port or ``mkdir -p``'s
  path is hashed too) and after ``Bearer``/``Basic``; and in every string (``sh -c "..."`` included)
  by :func:`redact_text`: URL credentials, ``Bearer X`` / ``Basic X``, ``NAME=X`` where NAME holds
  token, secret, passw*, key, auth* or credential, and ``-p X``;
- every other string: URL credentials, ``Bearer X`` and credential ``NAME=X`` (:func:`redact_text`
  without the ``-p`` rule).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import posixpath
import re
from datetime import datetime, timezone

from forensics.timeutil import iso_z, parse_iso

CRED_WORDS = ("token", "secret", "password", "passwd", "key", "auth", "credential")
#: env names whose values are kept (issue 6 item 3); everything else becomes a hash prefix
#: plus the NVIDIA device plugin's and HAMi's own settings, which are evidence and hold no secret.
#: The whole name must match (``\Z``: ``"PATH\n"`` is not ``PATH``), and a name holding a credential
#: word is never kept (``NVIDIA_API_KEY``, ``CUDA_AUTH_TOKEN``), so ``ENV_ALLOW.match`` is the whole test
ENV_ALLOW = re.compile(r"^(?!(?s:.*)(?i:" + "|".join(CRED_WORDS) + r"))"
                       r"(NVIDIA_\w*|CUDA_\w*|PATH|HOSTNAME|HOME|KUBERNETES_SERVICE_HOST|"
                       r"KUBERNETES_SERVICE_PORT\w*|DEVICE_LIST_STRATEGY|PASS_DEVICE_SPECS|DEVICE_ID_STRATEGY|"
                       r"DEVICE_DISCOVERY_STRATEGY|MIG_STRATEGY|CDI_ANNOTATION_PREFIX|FAIL_ON_INIT_ERROR|"
                       r"NVIDIA_CDI_HOOK_PATH|NVIDIA_CTK_PATH|CONTAINER_DRIVER_ROOT|DRIVER_ROOT_CTR_PATH)\Z")
#: free-text rules of :func:`redact_text` (each linear in the text's length)
#: the scheme word stands alone (not ``monitoring-plugins-basic``) and its value is on the same line
_AUTH_SCHEME = re.compile(r"(?i)(?<![\w.\-])(?P<name>bearer|basic)(?P<sp>[ \t]+)(?!<redacted)(?P<v>\S+)")
_AUTH_SCHEME_LAST = re.compile(r"(?i)\b(?:bearer|basic)\s*\Z")
_ASSIGN = re.compile(r"(?<![\w.\-])(?P<name>[\w.\-]++)=(?!<redacted)(?P<v>\S+)")
_ASSIGN_WORDS = re.compile(r"(?i)token|secret|passw|key|auth|credential")
_ASSIGN_HINTS = ("token", "secret", "passw", "key", "auth", "credential")  #: the same words, for ``in``
_P_FLAG = re.compile(r"(?<!\S)-p(?P<sp>[ \t]*)(?![\-\s]|<redacted)(?P<v>\S+)")
#: ``scheme://user:pass@``: anchored on ``://`` after a scheme character (a scheme run before it is
#: kept as text), so that the match is linear in the text's length (hostile args can be megabytes)
_URL_CRED = re.compile(r"(?<=[A-Za-z0-9+.\-])://(?P<cred>[^/?#@\s]+(?:@[^/?#@\s]*)*)@")
_FLAG_NAME = re.compile(r"-{1,2}[\w.\-]*")
HOOK_KINDS = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
#: annotations kept in the record (values already redacted)
K8S_ANNOTATIONS = ("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.container-name", "io.kubernetes.cri.container-type",
                   "io.kubernetes.cri.sandbox-id", "io.kubernetes.cri.sandbox-uid",
                   "io.kubernetes.cri.image-name", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace",
                   "io.kubernetes.pod.uid", "io.kubernetes.container.name")
RUNES = {97: "a", 98: "b", 99: "c", 117: "u", 112: "p"}


# -- redaction -------------------------------------------------------------------------------------
#: drawn once per process (one collection) and never stored: the hash prefixes of one bundle can be
#: matched with each other, but not tried against a list of likely passwords
_KEY = os.urandom(32)


def redacted(value: str) -> str:
    """``"<redacted hmac:XXXXXXXX>"``: the first 8 hex digits of HMAC-SHA256(value) under a key drawn
    for this collection (RFC 2104), so that two containers sharing a value can still be matched
    within a bundle without the value being stored, and a weak password cannot be guessed from it."""
    digest = hmac.new(_KEY, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
    return f"<redacted hmac:{digest}>"


def redact_url_credentials(text: str) -> str:
    """``scheme://user:pass@host`` -> ``scheme://<redacted>@host`` anywhere in ``text``."""
    return _URL_CRED.sub("://<redacted>@", text)


def _cred_name(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in CRED_WORDS)


def _cred_flag(arg: str) -> bool:
    """``--password``, ``-api-key``: a flag whose name holds a credential word."""
    return bool(_FLAG_NAME.fullmatch(arg)) and _cred_name(arg)


def redact_text(text: str, p_flag: bool = True) -> str:
    """Credentials inside free text (a shell command line, a log line): URL credentials,
    ``Bearer X`` / ``Basic X``, ``NAME=X`` where NAME holds token, secret, passw*, key, auth* or
    credential (the name is kept), and with ``p_flag`` ``-p X`` / ``-pX``; each value becomes a
    :func:`redacted` hash. Already redacted values are left as they are."""
    if "://" in text:  # each rule runs only when its marker is present: megabytes of junk stay cheap
        text = redact_url_credentials(text)
    low = text.lower()
    if "bearer" in low or "basic" in low:
        text = _AUTH_SCHEME.sub(lambda m: m.group("name") + m.group("sp") + redacted(m.group("v")), text)
    if "=" in text and any(w in low for w in _ASSIGN_HINTS):
        text = _ASSIGN.sub(lambda m: (f"{m.group('name')}={redacted(m.group('v'))}"
                                      if _ASSIGN_WORDS.search(m.group("name")) else m.group(0)), text)
    if p_flag and "-p" in text:
        text = _P_FLAG.sub(lambda m: "-p" + m.group("sp") + redacted(m.group("v")), text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """Log bytes with the credentials :func:`redact_text` recognises (without the ``-p`` rule)
    replaced: URL credentials, ``Bearer``/``Basic`` values, credential ``NAME=X``; every other byte,
    valid UTF-8 or not, is kept as it was. Linear in ``len(data)``; raises nothing."""
    text = data.decode("utf-8", "surrogateescape")
    return redact_text(text, p_flag=False).encode("utf-8", "surrogateescape")


def kept_annotation(name) -> bool:
    """Whether an annotation's value is kept: :data:`K8S_ANNOTATIONS` and ``cdi.k8s.io/*``."""
    return isinstance(name, str) and (name in K8S_ANNOTATIONS or name.startswith("cdi.k8s.io/"))


def redact_env(entries: list) -> list:
    """Redact a ``["NAME=value", ...]`` list: names are kept, values of names outside
    :data:`ENV_ALLOW` become :func:`redacted` hashes."""
    out = []
    for e in entries:
        if not isinstance(e, str):
            out.append(e)
            continue
        name, eq, value = e.partition("=")
        value = redacted(value) if eq and not ENV_ALLOW.match(name) else redact_text(value, p_flag=False)
        out.append(f"{name}{eq}{value}")
    return out


def redact_args(args: list) -> list:
    """Redact an argv: values of credential-looking flags (``--token=X``, ``--password X``), the value
    after ``-p`` and after a trailing ``Bearer``/``Basic``, and in every string :func:`redact_text`."""
    out, hide_next = [], False
    for a in args:
        if not isinstance(a, str):
            out.append(a)
            hide_next = False
            continue
        if hide_next and not a.startswith("-"):
            out.append(redacted(a))
            hide_next = False
            continue
        flag, eq, value = a.partition("=")
        if eq and _cred_flag(flag):
            out.append(f"{flag}={redacted(value)}")
        else:
            out.append(redact_text(a))
        hide_next = _cred_flag(a) or a == "-p" or bool(_AUTH_SCHEME_LAST.search(a))
    return out


def _redact_label(label):
    """runc keeps the spec's annotations as ``key=value`` strings in ``config.labels``."""
    if not isinstance(label, str):
        return redact_spec(label)
    key, eq, value = label.partition("=")
    if eq and not (key == "bundle" or kept_annotation(key)):
        return f"{key}={redacted(value)}"
    return redact_text(label, p_flag=False)


def _plain(text: str) -> bool:
    """True when :func:`redact_text` (without the ``-p`` rule) certainly leaves ``text`` as it is: it has
    no ``://`` (URL rule), no ``=`` (``NAME=X`` rule) and no ``b``/``B`` (``Bearer``/``Basic``: no other
    character lowercases to ``b``). Most strings of a spec (paths, capabilities, mount types) are plain,
    and this costs four substring scans instead of a lowercased copy."""
    return "://" not in text and "=" not in text and "b" not in text and "B" not in text


def _text_unchanged(text: str) -> bool:
    """True when ``redact_text(text, p_flag=False)`` returns ``text`` as it is: none of its rules'
    markers is present (the same tests :func:`redact_text` makes before running a rule)."""
    if "://" in text:
        return False
    low = text.lower()
    return not ("bearer" in low or "basic" in low or ("=" in text and any(w in low for w in _ASSIGN_HINTS)))


def redact_spec(obj):
    """Return a redacted deep copy of an OCI ``config.json`` or runc ``state.json`` object.

    Every ``env`` list (process, hooks; runc's ``Hooks``) goes through :func:`redact_env`, every
    ``args`` list through :func:`redact_args`, ``annotations`` values (and runc's ``labels``, which
    hold the annotations as ``key=value``) other than :func:`kept_annotation` ones become hashes, and
    every other string goes through :func:`redact_text` (without the ``-p`` rule). Never raises
    (except ``RecursionError`` for JSON nested deeper than the interpreter's recursion limit).
    """
    # strings are handled in place (no call for the many plain ones): this walk visits every value of
    # every config.json and state.json, hundreds each
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(v, str):
                out[k] = v if _plain(v) else redact_text(v, p_flag=False)
            elif not isinstance(v, (dict, list)):
                out[k] = v
            elif k == "env" and isinstance(v, list):
                out[k] = redact_env(v)
            elif k == "args" and isinstance(v, list):
                out[k] = redact_args(v)
            elif k in ("annotations", "labels") and isinstance(v, dict):
                out[k] = {ak: (redact_spec(av) if kept_annotation(ak) else  # (a non-string: its JSON)
                               redacted(av if isinstance(av, str) else json.dumps(av, sort_keys=True)))
                          for ak, av in v.items()}
            elif k == "labels" and isinstance(v, list):
                out[k] = [_redact_label(x) for x in v]
            else:
                out[k] = redact_spec(v)
        return out
    if isinstance(obj, list):
        try:  # a list of strings (seccomp syscall names, capabilities, mount options): one test, in C
            if _text_unchanged("\0".join(obj)):  # (no marker spans the NUL between two items)
                return list(obj)
        except TypeError:  # an item that is not a string
            pass
        return [(v if _plain(v) else redact_text(v, p_flag=False)) if isinstance(v, str)
                else redact_spec(v) if isinstance(v, (dict, list)) else v for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, p_flag=False)
    return obj


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
            if isinstance(k, str) and isinstance(v, str) and (k.startswith("cdi.k8s.io/") or k in K8S_ANNOTATIONS)}


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
