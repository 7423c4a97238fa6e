"""CRI container logs of GPU containers and dcgm-exporter: a bounded tail of each, read back into the
first NVML/CUDA error and the last clean line before it.

Source: ``/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log`` written by the container
runtime for the kubelet, rotated by the kubelet to ``<restart>.log.<YYYYMMDD-hhmmss>`` and then
gzipped (``.gz``). Each line is ``<RFC 3339 nano time> <stdout|stderr> <P|F> <message>``; ``P`` marks
a partial line continued by the next one (Kubernetes CRI "container logging" design; kubelet
pkg/kubelet/kuberuntime/logs/logs.go; pkg/kubelet/logs/container_log_manager.go).

Which containers: those the container collector found to be GPU containers (``ctx.gpu_containers``,
:class:`forensics.source.GpuContainer`), any container whose pod or container name names
dcgm-exporter, the NVIDIA device plugin or a GPU, and any container where the last
:data:`SCAN_LIMIT` bytes of a current log (one per restart, newest :data:`MAX_SCANS`) hold an
NVML/CUDA error. A pod that runs ``nvidia-smi`` in a loop pins the loss to within seconds from
inside the pod (issue 3 item 6).

Log content belongs to the container's author: it is stored as bytes, and read back as capped text
with control characters escaped; nothing in it is ever interpreted.

Redaction policy for log content (unless ``--no-redact``): a log is evidence and is kept as text,
line for line, but credentials that can be recognised in free text are replaced before it is stored
(:func:`forensics.redact.redact_bytes`): URL credentials (``scheme://user:pass@`` becomes ``scheme://<redacted>@``),
``Bearer X`` / ``Basic X`` (so ``Authorization:`` headers), and ``NAME=X`` where NAME holds token,
secret, passw*, key, auth* or credential (the value becomes a ``<redacted hmac:XXXXXXXX>`` hash,
the same for the same value). A secret printed as plain prose cannot be recognised and stays.
Messages shown in events and facts (:func:`clean`) get the same redaction when read back, unless the
bundle's manifest says it was collected with ``--no-redact``.

Nothing below /var/log/pods is followed: a symlink at any level (a pod directory, a container
directory, ``0.log -> /etc/shadow``) is refused and recorded as an error. A ``.gz`` rotation is read
up to :data:`GZ_COMPRESSED_LIMIT` compressed and :data:`GZ_READ_LIMIT` decompressed bytes, and the
time budget (``--time-budget``) is checked before each file.

Bundle layout: ``podlogs/<namespace>_<pod>_<uid>/<container>/<file>`` holds the last
:data:`TAIL_LIMIT` bytes of each file (``.gz`` rotations decompressed, stored without ``.gz``).
"""
from __future__ import annotations

import gzip
import os
import stat
import time
import zlib

from forensics import hostfs, neighbours
from forensics.artifact import Artifact, Status, from_oserror
from forensics.bundle import Bundle
from forensics.source import CollectContext, Reading
from forensics.events import Event, NodeFacts

from forensics.redact import TEXT_NOTE, redact_bytes, redact_text

from .cri import LOG_NAME, LogLine, order_key, parse_lines, parse_time, split_pod_dir  # noqa: F401 (the package's API)

NAME = "podlogs"
OPTIONS: list = []  #: none
PODS_DIR = "/var/log/pods"
PREFIX = "podlogs"
TAIL_LIMIT = 1 << 20            #: bytes kept from the end of each log file
SCAN_LIMIT = 64 << 10           #: bytes of a non-GPU container's current log scanned for errors
GZ_READ_LIMIT = 64 << 20        #: decompressed bytes read from one .gz before giving up
GZ_COMPRESSED_LIMIT = 64 << 20  #: compressed bytes read from one .gz (a file of empty gzip members)
GZ_TIME_LIMIT_S = 10.0          #: seconds spent on one .gz (millions of empty members are slow to walk)
MAX_FILES = 10                  #: newest files kept per container
MAX_SCANS = 5                   #: current files (one per restart) scanned per unknown container
MAX_POD_DIRS = 5000
MESSAGE_CAP = 500               #: characters of a log message kept in an event
NAME_HINTS = ("dcgm-exporter", "dcgm", "nvidia", "gpu", neighbours.PLUGIN_HINT)
MAX_SYMPTOMS = 200              #: container.log-symptom events kept per container instance (the rest is counted)

# -- acquire ---------------------------------------------------------------------------------------
def acquire(ctx: CollectContext) -> None:
    """Copy a bounded tail of the logs of every GPU-related container under /var/log/pods.

    Runs after :mod:`collectors.containers` (it takes the GPU containers from
    ``ctx.gpu_containers``), but also works without them. Never reads more than
    :data:`TAIL_LIMIT` bytes of a plain file nor :data:`GZ_READ_LIMIT` decompressed bytes of a
    ``.gz``; unreadable files are recorded with their errno. Raises nothing for bad files.
    """
    gpu = {(c.pod_namespace, c.pod, c.container_name) for c in ctx.gpu_containers}
    pod_dirs = ctx.listdir(PODS_DIR)
    if pod_dirs is None:
        return
    for pod_dir in pod_dirs[:MAX_POD_DIRS]:
        ident = split_pod_dir(pod_dir)
        if ident is None or _symlink_refused(ctx, f"{PODS_DIR}/{pod_dir}"):
            continue
        containers = ctx.listdir(f"{PODS_DIR}/{pod_dir}")
        if containers is None:
            continue
        for cname in containers:
            if cname in (".", ".."):
                continue
            base = f"{PODS_DIR}/{pod_dir}/{cname}"
            if _symlink_refused(ctx, base):
                continue
            try:
                files = sorted((n for n in hostfs.listdir(ctx.root, base) if LOG_NAME.match(n)
                                and not _symlink_refused(ctx, f"{base}/{n}")), key=order_key)
            except OSError:
                continue
            if not files:
                continue
            if ctx.expired():
                ctx.writer.record(Artifact(None, PODS_DIR, Status.TRUNCATED, "tail",
                                           notes=("truncated: the time budget ran out; the remaining pod logs "
                                                  f"from {base} on were not read",)))
                return
            current = [n for n in files if n.endswith(".log")][-MAX_SCANS:]
            if not ((ident[0], ident[1], cname) in gpu or _named_gpu(ident[1], cname)
                    or any(_tail_has_error(ctx, f"{base}/{n}") for n in current)):
                continue
            for name in files[-MAX_FILES:]:
                if ctx.expired():
                    ctx.writer.record(Artifact(None, f"{base}/{name}", Status.TRUNCATED, "tail",
                                               notes=("truncated: the time budget ran out before this file",)))
                    return
                _copy_tail(ctx, f"{base}/{name}", f"{PREFIX}/{pod_dir}/{cname}/{name.removesuffix('.gz')}",
                           name.endswith(".gz"))
            if len(files) > MAX_FILES:
                ctx.writer.record(Artifact(None, base, Status.TRUNCATED, "tail",
                                           notes=(f"truncated: only the newest {MAX_FILES} of {len(files)} "
                                                  "log files were taken",)))


def _symlink_refused(ctx, path: str) -> bool:
    """True when ``path`` (below :data:`PODS_DIR`) or a directory between it and PODS_DIR is a symlink;
    recorded as an error artifact. The kubelet writes plain directories and files there, so a link
    (``0.log -> /etc/shadow``, a pod directory linked to /etc) is refused, never followed."""
    cur = hostfs.resolve(ctx.root, PODS_DIR)
    for part in path[len(PODS_DIR):].strip("/").split("/"):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except OSError:
            return False  # missing or unreadable: the read that follows reports it
        if stat.S_ISLNK(st.st_mode):
            ctx.writer.record(Artifact(None, path, Status.ERROR, "tail",
                                       message="symlink refused: nothing below /var/log/pods is followed"))
            return True
    return False


def _named_gpu(pod: str, container: str) -> bool:
    text = f"{pod}/{container}".lower()
    return any(h in text for h in NAME_HINTS)


def _tail_has_error(ctx, source: str) -> bool:
    try:
        with hostfs.open_regular(ctx.root, source) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - SCAN_LIMIT))
            data = f.read(SCAN_LIMIT)
    except OSError:
        return False
    return bool(neighbours.NVML_ANY_BYTES.search(data)) or bool(neighbours.ANY.search(data.decode("utf-8", "replace")))


def _copy_tail(ctx, source: str, rel: str, gz: bool) -> None:
    try:
        f = hostfs.open_regular(ctx.root, source)
    except OSError as e:
        ctx.writer.record(from_oserror(source, "tail", e))
        return
    notes: list[str] = []
    with f:
        try:
            data, start, total, problem = _gz_tail(f, ctx.deadline) if gz else _plain_tail(f)
        except OSError as e:
            ctx.writer.record(from_oserror(source, "tail", e))
            return
    if start:
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else b""
        notes.append(f"truncated: only the last {len(data)} of {total} bytes"
                     f"{' (decompressed)' if gz else ''} were kept, from the first whole line")
    elif gz:
        notes.append("decompressed from the .gz rotation")
    if problem:
        notes.append(f"truncated: {problem}")
    if ctx.redact:
        data = redact_bytes(data)
        notes.append(f"credentials redacted: {TEXT_NOTE}")
    with ctx.writer.create(rel, source, "tail", notes=notes, text=False) as fh:
        fh.write(data)


def _plain_tail(f) -> tuple[bytes, int, int, str | None]:
    size = os.fstat(f.fileno()).st_size
    start = max(0, size - TAIL_LIMIT)
    f.seek(start)
    return f.read(TAIL_LIMIT), start, size, None


class _Capped:
    """A file's ``read`` that stops after ``limit`` bytes or at ``until`` (``time.monotonic()``);
    ``hit`` names the bound that stopped it."""

    mode = "rb"

    def __init__(self, f, limit: int, until: float | None = None):
        self.f, self.left, self.until, self.hit = f, limit, until, None

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            self.hit = f"stopped after reading {GZ_COMPRESSED_LIMIT} compressed bytes"
            return b""
        if self.until is not None and time.monotonic() >= self.until:
            self.hit = "stopped: the time allowed for this file (or the run's time budget) ran out"
            return b""
        data = self.f.read(self.left if n is None or n < 0 or n > self.left else n)
        self.left -= len(data)
        return data


def _gz_tail(f, deadline: float | None = None) -> tuple[bytes, int, int, str | None]:
    buf, total, problem = bytearray(), 0, None
    until = time.monotonic() + GZ_TIME_LIMIT_S
    f = _Capped(f, GZ_COMPRESSED_LIMIT, until if deadline is None else min(until, deadline))
    try:
        with gzip.GzipFile(fileobj=f) as z:
            while True:
                chunk = z.read(1 << 16)
                if not chunk:
                    break
                total += len(chunk)
                buf += chunk
                if len(buf) > 2 * TAIL_LIMIT:
                    del buf[:-TAIL_LIMIT]
                if total >= GZ_READ_LIMIT:
                    problem = f"decompression stopped after {GZ_READ_LIMIT} bytes"
                    break
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        problem = f.hit or f"not a complete gzip stream after {total} decompressed bytes ({e})"
    if f.hit and problem is None:
        problem = f.hit
    data = bytes(buf[-TAIL_LIMIT:])
    return data, total - len(data), total, problem


# -- read ------------------------------------------------------------------------------------------
def error_signature(message: bytes) -> str | None:
    """The EPERM-class NVML/CUDA failure a message shows (:func:`forensics.neighbours.nvml_class`:
    ``nvml-unknown-error``, ``cuinit-failed``, the ``NVML_ERROR_*`` / ``CUDA_ERROR_*`` name), or ``None``,
    a line of a neighbouring failure included."""
    return neighbours.nvml_class(message)


def clean(message: bytes, cap: int = MESSAGE_CAP, redact: bool = True) -> str:
    """Hostile log text as inert data: UTF-8 with replacement, credentials redacted (the policy of the
    module docstring; ``redact=False`` for a bundle collected with ``--no-redact``), control characters
    escaped (``\\x1b``), at most ``cap`` characters (``…`` marks a cut)."""
    text = message.decode("utf-8", "replace")
    if redact:
        text = redact_text(text[: 4 * cap + 4096], p_flag=False)  # as redact_bytes does for the stored bytes
    text = "".join(c if (c == "\t" or (ord(c) >= 32 and not 0x7f <= ord(c) <= 0x9f)) else f"\\x{ord(c):02x}"
                   for c in text[: cap + 1])
    return text[:cap] + "…" if len(text) > cap else text


def read(bundle: Bundle, node: NodeFacts) -> Reading:
    """Read the stored log tails back (never the host).

    For each container instance (pod, container, restart count) the files are read oldest first.
    Events (``source`` ``podlogs``, evidence ``{"artifact": REL, "line": N}``):

    - ``container.log-error`` at the first line showing an NVML/CUDA failure: attrs ``pod,
      namespace, container, message, signature, stream, restart, truncated``;
    - ``container.log-healthy`` at the last line before it: the same attrs less ``signature``;
    - ``container.log-symptom`` (attrs ``pod, namespace, container, restart, stream, message, signature,
      path``) at each line of a neighbouring GPU failure (:data:`forensics.neighbours.SIGNATURES`), at most
      :data:`MAX_SYMPTOMS` per instance (``plugin-registered`` only from a run's second registration on),
      and ``plugin-restart`` at the first line kept of a device plugin's run N >= 1 (``N.log``).

    ``container.log-healthy`` also marks the last line before the first line of a failure that opens an
    incident (:data:`forensics.neighbours.OPENS_INCIDENT`), where that incident's window starts.
    ``truncated`` is true when older log content was not kept, so an earlier error may exist.
    ``facts["podlogs"]`` lists every instance: ``namespace, pod, container, restart, first_line, exporter,
    truncated, files, first_error, last_healthy, last_line`` (each line as ``{at, message, artifact,
    line}`` or ``None``). Raises nothing for bad content.
    """
    reading = Reading()
    # shown messages are redacted like the stored bytes, unless the bundle was made with --no-redact
    redact = (bundle.manifest.get("redaction") or {}).get("enabled", True) is not False
    groups: dict[tuple, list] = {}
    for art in bundle.find(PREFIX + "/"):
        parts = art.path.split("/")
        if len(parts) != 4 or not LOG_NAME.match(parts[3]):
            continue
        ident = split_pod_dir(parts[1])
        if ident is None:
            continue
        restart = int(LOG_NAME.match(parts[3]).group("restart"))
        groups.setdefault((ident[0], ident[1], parts[2], restart), []).append(art)
    dropped = {a.source for a in bundle.artifacts() if a.path is None and a.status is Status.TRUNCATED}
    facts = []
    for (ns, pod, cname, restart), arts in sorted(groups.items()):
        arts.sort(key=lambda a: order_key(a.path.rsplit("/", 1)[1]))
        pod_dir = arts[0].path.split("/")[1]
        truncated = any(a.status is Status.TRUNCATED for a in arts) or f"{PODS_DIR}/{pod_dir}/{cname}" in dropped
        facts.append(_instance(bundle, arts, {"pod": pod, "namespace": ns, "container": cname, "restart": restart,
                                              "truncated": truncated}, redact, reading))
    reading.facts["podlogs"] = facts
    return reading


def _instance(bundle: Bundle, arts: list, attrs: dict, redact: bool, reading: Reading) -> dict:
    """Read one container instance's stored files (``arts``, oldest first; ``attrs``: its pod, namespace,
    container, restart and truncated) into ``reading``'s events and problems (:func:`read` says which), and
    return its ``facts["podlogs"]`` record."""
    ns, pod, cname, restart = attrs["namespace"], attrs["pod"], attrs["container"], attrs["restart"]
    first_err, healthy, last, symptoms, registered = None, None, None, 0, 0
    first, first_sym, healthy_sym = None, None, None  # the first line; the first opening symptom and the line before it
    plugin = neighbours.device_plugin(pod) or neighbours.device_plugin(cname)
    for art in arts:
        try:
            data = bundle.path(art.path).read_bytes()
        except OSError as e:
            reading.problems.append({"artifact": art.path, "message": f"cannot read: {e}"})
            continue
        for ll in parse_lines(data, art.path, reading.problems):
            if last is None and plugin and restart >= 1:
                reading.events.append(_symptom(ll, "plugin-restart", {}, attrs, redact))
            first = first or ll
            prev, last = last, ll
            sig = neighbours.match(ll.message)
            if sig and first_sym is None and sig[0] in neighbours.OPENS_INCIDENT:
                first_sym, healthy_sym = ll, prev
            if sig and sig[0] == "plugin-registered" and (registered := registered + 1) == 1:
                continue  # a run's first registration is its start; another one is a re-registration
            if sig and (symptoms := symptoms + 1) <= MAX_SYMPTOMS:
                reading.events.append(_symptom(ll, sig[0], sig[1], attrs, redact))
            if first_err is None:
                if error_signature(ll.message):
                    first_err = ll
                else:
                    healthy = ll
    if symptoms > MAX_SYMPTOMS:
        reading.problems.append({"artifact": arts[-1].path,
                                 "message": f"{symptoms} symptom lines, {MAX_SYMPTOMS} kept"})
    if first_err:
        sig = error_signature(first_err.message)
        reading.events.append(_event(first_err, "container.log-error",
                                     f"{ns}/{pod} {cname}: first NVML/CUDA error ({sig})", {**attrs, "signature": sig},
                                     redact))
        if healthy:
            reading.events.append(_event(healthy, "container.log-healthy",
                                         f"{ns}/{pod} {cname}: last clean log line before the first error", attrs,
                                         redact))
    if healthy_sym is not None and healthy_sym is not healthy:  # where a symptom's window starts (openers)
        reading.events.append(_event(healthy_sym, "container.log-healthy",
                                     f"{ns}/{pod} {cname}: last line before the first GPU failure line", attrs, redact))
    return {"namespace": ns, "pod": pod, "container": cname, "restart": restart, "first_line": _fact(first, redact),
            "exporter": "dcgm-exporter" in f"{pod}/{cname}", "truncated": attrs["truncated"],
            "files": [a.path for a in arts], "first_error": _fact(first_err, redact),
            "last_healthy": _fact(healthy if first_err else None, redact), "last_line": _fact(last, redact)}


def _event(ll: LogLine, kind: str, summary: str, attrs: dict, redact: bool = True) -> Event:
    return Event(ll.at, "podlogs", kind, summary,
                 {**attrs, "message": clean(ll.message, redact=redact), "stream": ll.stream},
                 {"artifact": ll.artifact, "line": ll.line})


def _symptom(ll: LogLine, signature: str, groups: dict, a: dict, redact: bool) -> Event:
    return _event(ll, "container.log-symptom", f"{a['namespace']}/{a['pod']} {a['container']}: {signature}",
                  {**{k: a[k] for k in ("pod", "namespace", "container", "restart")}, "signature": signature,
                   "path": groups.get("path")}, redact)


def _fact(ll: LogLine | None, redact: bool = True) -> dict | None:
    if ll is None:
        return None
    return {"at": ll.at.isoformat().replace("+00:00", "Z"), "message": clean(ll.message, redact=redact),
            "artifact": ll.artifact, "line": ll.line, "stream": ll.stream}
