"""systemd's own view of a container's scope unit: read-only ``systemctl show`` of the runc scope.

Only when collecting live (``--root /``) with a reachable systemd (a ``systemctl`` binary and
``/run/systemd/private`` or the system bus socket): ``systemctl show --no-pager -p NeedDaemonReload -p
DevicePolicy -p DeviceAllow -p ControlGroup -p LoadState <unit>`` for each GPU container under the systemd
cgroup driver, :data:`SHOW_TIMEOUT_S` a call and :data:`SHOW_BUDGET_S` for the whole collection. ``show``
reads properties and changes nothing. Elsewhere the artifact is recorded once as absent, with the reason.

The output is stored as ``containers/<ns>/<id>/systemctl-show.txt`` and parsed by
:func:`collectors.containers.parse.parse_systemctl_show` into the record's ``systemd_unit``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

from forensics import hostfs
from forensics.artifact import Artifact, Status

import collectors.containers.parse as cp
from .cgroup import SMALL_LIMIT

SHOW_TIMEOUT_S = 5.0    #: one ``systemctl show``
SHOW_BUDGET_S = 60.0    #: every ``systemctl show`` of one collection together; later ones are not run
#: where systemctl reaches PID 1: its private socket (root), else the system bus
SYSTEMD_SOCKETS = ("/run/systemd/private", "/run/dbus/system_bus_socket")
SOURCE = "systemctl show"
_UNIT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9:_.\\@-]{0,250}\.scope")


class Systemctl:
    """Whether ``systemctl show`` may run in this collection (:attr:`path`, else :attr:`why`), and its
    time left. ``root``: the collection's ``--root``; ``which``: finds the binary (``shutil.which``)."""

    def __init__(self, root, which=shutil.which):
        self.path: str | None = None
        self.why: str | None = None
        self.left_s = SHOW_BUDGET_S
        self.noted = False
        if os.path.realpath(str(root)) != "/":
            self.why = f"--root is {root}, not /: the node's systemd is not the one this process reaches"
        elif not (found := which("systemctl")):
            self.why = "systemctl is not installed"
        elif not any(hostfs.exists("/", s) for s in SYSTEMD_SOCKETS):
            self.why = f"systemd is not reachable (no {' or '.join(SYSTEMD_SOCKETS)})"
        else:
            self.path = found


def unit_name(cid: str, cgroup: dict, spec: dict) -> str | None:
    """The container's scope unit: the last component of its cgroup path when that is a ``.scope``,
    else runc's name for a systemd ``linux.cgroupsPath`` ``<slice>:<prefix>:<name>`` (``<prefix>-<name>.scope``);
    ``None`` when neither says, or the name is not a plain unit name."""
    last = str(cgroup.get("path") or "").rstrip("/").rsplit("/", 1)[-1]
    if not last.endswith(".scope"):
        cgpath = cp.dig(spec, "linux", "cgroupsPath")
        parts = cgpath.split(":") if isinstance(cgpath, str) else []
        last = f"{parts[1]}-{parts[2] or cid}.scope" if len(parts) == 3 and parts[1] else ""
    return last if _UNIT.fullmatch(last) else None


def show(ctx, sysctl: Systemctl, rel: str, unit: str | None) -> dict | None:
    """``systemctl show`` of ``unit`` stored at ``{rel}/systemctl-show.txt`` and parsed (shape:
    :func:`collectors.containers.parse.parse_systemctl_show`), or ``None`` when it was not run (reason
    recorded: once per collection for a node without a reachable systemd) or failed (recorded)."""
    if sysctl.path is None or unit is None:
        if sysctl.path is None and not sysctl.noted:
            sysctl.noted = True
            ctx.writer.record(Artifact(None, SOURCE, Status.ABSENT, "command",
                                       message=f"{sysctl.why}; the scopes' NeedDaemonReload, DevicePolicy and "
                                               "DeviceAllow were not read from systemd"))
        return None
    argv = [sysctl.path, "show", "--no-pager", *(f"-p{p}" for p in cp.SHOW_PROPERTIES), unit]
    src = " ".join(argv)
    if sysctl.left_s <= 0:
        ctx.writer.record(Artifact(None, src, Status.TRUNCATED, "command", notes=(
            f"truncated: systemctl time budget of {SHOW_BUDGET_S:.0f} s spent; not run",)))
        return None
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, timeout=ctx.left(min(SHOW_TIMEOUT_S, sysctl.left_s)), check=False,
                             stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C",
                                                            "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"})
    except subprocess.TimeoutExpired:
        sysctl.left_s = 0  # a systemd that does not answer in time will not answer the next one either
        ctx.writer.record(Artifact(None, src, Status.ERROR, "command",
                                   message=f"no answer in {SHOW_TIMEOUT_S:g} s; no more systemctl calls"))
        return None
    except OSError as e:
        ctx.writer.record(Artifact(None, src, Status.ERROR, "command", message=str(e)))
        return None
    finally:
        sysctl.left_s -= time.monotonic() - t0
    if out.returncode != 0:
        ctx.writer.record(Artifact(None, src, Status.ERROR, "command", message=f"exit {out.returncode}: "
                                   + out.stderr[-500:].decode("utf-8", "replace").strip()))
        return None
    data = out.stdout[:SMALL_LIMIT]
    ctx.writer.write_bytes(f"{rel}/systemctl-show.txt", data, src, "command",
                           notes=("read-only: systemctl show of the container's scope unit",))
    return cp.parse_systemctl_show(data.decode("utf-8", "replace"))
