"""The CRI container log format as the kubelet's runtime writes it: file names, lines, times.

``/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log``, rotated by the kubelet to
``<restart>.log.<YYYYMMDD-hhmmss>`` and gzipped (``.gz``); each line is ``<RFC 3339 nano time>
<stdout|stderr> <P|F> <message>``, ``P`` marking a partial line continued by the next one (Kubernetes CRI
"container logging" design; kubelet pkg/kubelet/kuberuntime/logs/logs.go;
pkg/kubelet/logs/container_log_manager.go). Nothing here touches the host or the bundle.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

PARTIAL_LIMIT = 64 << 10        #: bytes of one P-joined line kept
LOG_NAME = re.compile(r"^(?P<restart>\d+)\.log(?:\.(?P<rot>\d{8}-\d{6}))?(?P<gz>\.gz)?$")
_LINE = re.compile(rb"^(?P<t>\S+) (?P<stream>stdout|stderr) (?P<tag>[PF])(?: (?P<msg>.*))?$", re.S)
_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def split_pod_dir(name: str) -> tuple[str, str, str] | None:
    """``"<namespace>_<pod>_<uid>"`` -> ``(namespace, pod, uid)`` (namespaces and pod names are DNS
    names, so neither holds ``_``); ``None`` for anything else."""
    parts = name.split("_")
    if len(parts) < 3 or not all(parts):
        return None
    return parts[0], "_".join(parts[1:-1]), parts[-1]


def order_key(name: str) -> tuple:
    """Sort key putting a container's log files oldest first: by restart count, then rotations by
    their timestamp, then the current file."""
    m = LOG_NAME.match(name)
    if not m:
        return (1 << 30, "", "")
    return (int(m.group("restart")), 0 if m.group("rot") else 1, m.group("rot") or "")


@dataclass
class LogLine:
    """One full (P-joined) CRI log line from a stored file; ``line`` is 1-based in that file."""

    at: datetime
    stream: str
    message: bytes
    artifact: str
    line: int


def parse_time(text: str) -> datetime | None:
    """RFC 3339 with up to nanoseconds (``2024-05-01T10:00:00.123456789Z`` or ``+09:00``) -> UTC;
    ``None`` when it is not one."""
    m = _TIME.match(text)
    if not m:
        return None
    frac = (m.group(2) or "")[:6].ljust(6, "0")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}").astimezone(timezone.utc)
    except (ValueError, OverflowError):  # 9999-12-31T23:59:59-01:00 leaves datetime's range in UTC
        return None


def parse_lines(data: bytes, artifact: str, problems: list | None = None):
    """Yield :class:`LogLine` from CRI log bytes, joining ``P`` segments with the line of the same
    stream that ends them (kept to :data:`PARTIAL_LIMIT` bytes). Lines that are not CRI lines are
    skipped; the first few are reported in ``problems``."""
    pending: dict[bytes, tuple[bytearray, datetime, int]] = {}
    bad = 0
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw:
            continue
        m = _LINE.match(raw)
        at = parse_time(m.group("t").decode("ascii", "replace")) if m else None
        if not m or at is None:
            bad += 1
            if problems is not None and bad <= 3:
                problems.append({"artifact": artifact, "message": f"line {n}: not a CRI log line"})
            continue
        stream, msg = m.group("stream"), m.group("msg") or b""
        buf, first_at, first_n = pending.setdefault(stream, (bytearray(), at, n))
        if len(buf) < PARTIAL_LIMIT:
            buf += msg[: PARTIAL_LIMIT - len(buf)]
        if m.group("tag") == b"F":
            del pending[stream]
            yield LogLine(first_at, stream.decode(), bytes(buf), artifact, first_n)
    for stream, (buf, first_at, first_n) in pending.items():
        yield LogLine(first_at, stream.decode(), bytes(buf), artifact, first_n)
