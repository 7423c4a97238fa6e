"""The kubelet collector's reads of the host: the running kubelet's command line, the files that configure
it, its checkpoints and its pod directories. Every read goes through :mod:`forensics.hostfs` under
``ctx.root``, is bounded, and is recorded with its outcome in ``idx["status"]`` (and the manifest).

``idx`` is the ``kubelet/index.json`` document being built (shape in :mod:`collectors.kubelet`).
"""
from __future__ import annotations

import json
import os

import yaml

from forensics import hostfs
from forensics import redact as rd
from forensics import redact_config as rc
from forensics.artifact import Artifact, Status, from_oserror

from .allocresp import WireError, decode
from .checkpoints import get
from .config import NEVER

MAX_PROCS = 65536            #: /proc entries looked at
STATUS_LIMIT = 16 << 10      #: bytes of /proc/<pid>/status read
CMDLINE_LIMIT = 64 << 10     #: bytes of /proc/<pid>/cmdline read
TEXT_LIMIT = 1 << 20         #: bytes of a config file, unit file or drop-in stored
STATE_LIMIT = 4 << 20        #: bytes of cpu_manager_state / memory_manager_state stored
CHECKPOINT_LIMIT = 16 << 20  #: bytes of kubelet_internal_checkpoint read
MAX_FILES = 64               #: files taken from one drop-in directory
MAX_NAMES = 10000            #: names kept from one pod directory listing


def note(idx: dict, art: Artifact) -> Artifact:
    """Keep ``art``'s outcome in ``idx["status"]`` (``"collected"``, ``"absent"``, ``"unreadable (EACCES)"``...)
    and its bundle path in ``idx["files"]``; returns ``art``."""
    said = art.status.value
    if art.status in (Status.UNREADABLE, Status.ERROR) and (art.errno or art.message):
        said += f" ({art.message or art.errno})"
    idx["status"][art.source] = said
    if art.path:
        idx["files"][art.source] = art.path
    return art


def record(ctx, idx: dict, art: Artifact) -> Artifact:
    """Record ``art`` in the manifest and in ``idx``."""
    return note(idx, ctx.writer.record(art))


def kubelet_process(ctx, idx: dict) -> tuple[int, list[str]] | None:
    """``(pid, argv)`` of the running kubelet: the lowest pid whose ``/proc/<pid>/status`` says ``Name:
    kubelet`` and uid 0 in all four ``Uid:`` fields (proc(5)); a process named kubelet run by any other
    user is recorded as ignored, never read. None when there is none, or /proc cannot be listed."""
    try:
        pids = sorted((int(p) for p in hostfs.listdir(ctx.root, "/proc") if p.isdigit()))[:MAX_PROCS]
    except OSError as e:
        record(ctx, idx, from_oserror("/proc", "listdir", e, ("no running kubelet can be looked for",)))
        return None
    for pid in pids:
        if ctx.expired():
            record(ctx, idx, Artifact(None, "/proc/*/status", Status.TRUNCATED, "read",
                                      notes=("truncated: the time budget ran out while looking for kubelet",)))
            return None
        try:
            text = hostfs.read_text(ctx.root, f"/proc/{pid}/status", limit=STATUS_LIMIT)
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("Name", "").strip() != "kubelet":
            continue
        uids = fields.get("Uid", "").split()
        if not uids or any(u != "0" for u in uids):
            record(ctx, idx, Artifact(None, f"/proc/{pid}/cmdline", Status.ERROR, "read", message=(
                f"a process named kubelet runs with uids {' '.join(uids) or '?'} (not root): ignored, "
                "its command line is not read")))
            continue
        try:
            with hostfs.open_regular(ctx.root, f"/proc/{pid}/cmdline") as f:
                raw = hostfs.read_upto(f, CMDLINE_LIMIT)
        except OSError as e:
            record(ctx, idx, from_oserror(f"/proc/{pid}/cmdline", "read", e))
            continue
        argv = [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")]
        while argv and argv[-1] == "":
            argv.pop()
        return (pid, argv) if argv else None
    return None


def _refused(ctx, idx: dict, src: str) -> bool:
    """True (and recorded) for a path of :data:`NEVER` (a kubeconfig holding the node's credentials), and for
    any path once the time budget is spent (recorded truncated, not read)."""
    late = ctx.budget_spent(src)
    if late:
        note(idx, late)
        return True
    if os.path.normpath(src) not in NEVER:
        return False
    record(ctx, idx, Artifact(None, src, Status.ERROR, "copy", message="a kubeconfig with the node's credentials: "
                              "never read"))
    return True


def copy_text(ctx, idx: dict, src: str, rel: str, fmt: str, limit: int = TEXT_LIMIT) -> str | None:
    """Copy the text file ``src`` (``fmt``: ``"unit"`` or ``"env"``) to ``rel``, redacted unless
    ``--no-redact`` (:func:`forensics.redact_config.store_config`: Environment= values of secret names,
    credential flags in ExecStart=, URL credentials, Bearer/Basic values, secret shapes), and return the
    text stored (None when not stored). A path of :data:`NEVER` (a kubeconfig) is refused."""
    if _refused(ctx, idx, src):
        return None
    stored: list[bytes] = []
    art = note(idx, rc.store_config(ctx, src, rel, fmt, limit, kept=stored))
    if art.status not in (Status.COLLECTED, Status.TRUNCATED) or not stored:
        return None
    return stored[0].decode("utf-8", "replace")


def copy_config(ctx, idx: dict, src: str, rel: str):
    """A KubeletConfiguration or k3s ``config.yaml`` (YAML or JSON) copied to ``rel`` and returned parsed
    (None when not stored or not parsed; redacted unless ``--no-redact``). Redaction is the ``config``
    rule's (:func:`forensics.redact_config.redact_config`, format ``yaml``: values of secret-named keys,
    such as k3s's ``token``): a file with nothing to redact is stored byte for byte, another keeps its
    layout where it can or is written back from the redacted values (noted); a file that does not parse
    (or is too large once aliases are expanded: :data:`forensics.redact_config.MAX_NODES`) is stored
    through the text rule, noted."""
    if _refused(ctx, idx, src):
        return None
    try:
        with hostfs.open_regular(ctx.root, src) as f:
            data = hostfs.read_upto(f, TEXT_LIMIT + 1)
    except OSError as e:
        record(ctx, idx, from_oserror(src, "copy", e))
        return None
    if len(data) > TEXT_LIMIT:
        record(ctx, idx, Artifact(None, src, Status.ERROR, "copy", message=f"larger than {TEXT_LIMIT} bytes; not read"))
        return None
    text = data.decode("utf-8", "replace")
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
        why = (None if isinstance(doc, dict) and rc.small_doc(doc) else
               "not parsed: too large once YAML aliases are expanded" if isinstance(doc, dict) else
               f"not a YAML/JSON mapping (a {type(doc).__name__}): none of its settings are read")
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        why = f"not parsed as YAML or JSON ({' '.join(str(e).split())[:200]})"
    red = rc.redact_config(data, "yaml") if ctx.redact else rc.Redacted(data, (), 0)
    if why:  # stored through the text rule, for a human to read
        note(idx, ctx.writer.write_bytes(rel, red.data, src, "copy-redacted" if ctx.redact else "copy",
                                         notes=(why, *red.notes)))
        return None
    note(idx, ctx.writer.write_bytes(rel, red.data, src, "copy-redacted" if ctx.redact else "copy", notes=red.notes))
    return rc.redact_doc(doc) if ctx.redact else doc


def listdir(ctx, idx: dict, path: str) -> list[str] | None:
    """Names in the host directory ``path`` (at most :data:`MAX_NAMES`), or None, its outcome noted."""
    try:
        names = hostfs.listdir(ctx.root, path)
    except OSError as e:
        record(ctx, idx, from_oserror(path, "listdir", e))
        return None
    idx["status"][path] = "collected" if len(names) <= MAX_NAMES else f"truncated (first {MAX_NAMES} names)"
    return names[:MAX_NAMES]


def copy_state(ctx, idx: dict, src: str, rel: str) -> None:
    """A CPU or memory manager checkpoint (pod UIDs, cpusets, NUMA sizes: nothing secret), copied as is."""
    note(idx, ctx.copy(src, rel, "copy", limit=STATE_LIMIT))


def device_checkpoint(ctx, idx: dict, src: str, rel: str) -> None:
    """``kubelet_internal_checkpoint`` parsed and stored as JSON at ``rel`` with every ``AllocResp`` replaced
    by :func:`alloc_record` (the plugin's answer may carry any env value: the raw base64 is never stored).
    A file that is not JSON is not stored (it could not be redacted) and is recorded as an error."""
    if _refused(ctx, idx, src):
        return
    try:
        with hostfs.open_regular(ctx.root, src) as f:
            data = hostfs.read_upto(f, CHECKPOINT_LIMIT + 1)
    except OSError as e:
        record(ctx, idx, from_oserror(src, "copy-parsed", e))
        return
    if len(data) > CHECKPOINT_LIMIT:
        record(ctx, idx, Artifact(None, src, Status.ERROR, "copy-parsed",
                                  message=f"larger than {CHECKPOINT_LIMIT} bytes; not stored"))
        return
    try:
        doc = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as e:
        record(ctx, idx, Artifact(None, src, Status.ERROR, "copy-parsed",
                                  message=f"not JSON ({str(e)[:200]}); not stored because it cannot be redacted"))
        return
    allocs = []  # (entry index, key, record): the base64 is replaced before anything else is stored
    for i, e in enumerate(_entries(doc)):
        for k in [k for k in e if isinstance(k, str) and k.lower() == "allocresp"]:  # any spelling Go takes
            allocs.append((i, k, alloc_record(e[k], ctx.redact)))
            e[k] = None
    if ctx.redact:  # every other string through the text rule (a hostile file may hold anything)
        try:
            doc = rd.redact_spec(doc)
        except RecursionError:
            record(ctx, idx, Artifact(None, src, Status.ERROR, "copy-parsed", message="JSON nested too deeply to "
                                      "redact; not stored"))
            return
    entries = _entries(doc)
    for i, k, rec in allocs:
        entries[i][k] = rec
    try:
        note(idx, ctx.writer.write_json(rel, doc, src, "copy-parsed", notes=(
            "re-serialised from the parsed file; each AllocResp (base64 protobuf of the device plugin's "
            "ContainerAllocateResponse) replaced by what it held: env and annotation values hashed except "
            f"{', '.join(rd.ENV_KEPT)}, device specs, mounts and CDI device names kept" if ctx.redact else
            "re-serialised; each AllocResp decoded (--no-redact: values kept)",), compact=True))
    except RecursionError:  # (--no-redact: nothing walked it before)
        record(ctx, idx, Artifact(None, src, Status.ERROR, "copy-parsed", message="JSON nested too deeply to "
                                  "write back; not stored"))


def _entries(doc) -> list:
    """The checkpoint's ``Data.PodDeviceEntries`` objects (the list itself, so that they can be changed)."""
    data = get(doc, "Data") if isinstance(doc, dict) else None
    entries = get(data, "PodDeviceEntries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def alloc_record(b64, redact: bool) -> dict:
    """What the bundle keeps of one ``AllocResp``: ``{"bytes": len of the base64 text, "decoded": {envs,
    mounts, devices, annotations, cdi_devices} (values redacted) | None, "error": why it could not be
    decoded | None, "device_specs_passed": bool | None, "cdi_devices_passed": bool | None}``."""
    out = {"bytes": len(b64) if isinstance(b64, str) else None, "decoded": None, "error": None,
           "device_specs_passed": None, "cdi_devices_passed": None}
    if b64 is None or b64 == "":
        out["error"] = "empty"
        return out
    try:
        d = decode(b64)
    except WireError as e:
        out["error"] = str(e)[:200]
        return out
    if redact:
        d["envs"] = {k: v if rd.env_kept(k) else rd.redacted(v) for k, v in d["envs"].items()}
        d["annotations"] = {k: v if rd.kept_annotation(k) else rd.redacted(v) for k, v in d["annotations"].items()}
        for key in ("mounts", "devices", "cdi_devices"):  # paths and CDI names: the text rule
            d[key] = rd.redact_spec(d[key])
    out.update(decoded=d, device_specs_passed=bool(d["devices"]), cdi_devices_passed=bool(d["cdi_devices"]))
    return out
