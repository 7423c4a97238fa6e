"""``gpu-forensics drill --yes-reload-systemd``: after the fix, prove that a daemon-reload no longer
takes a GPU away. This is the one command of the tool that changes the node: it runs
``systemctl daemon-reload``, so it refuses to run without ``--yes-reload-systemd``.

1. Start from a named GPU container (``--container``: id, id prefix, pod or container name), from a
   fresh probe container (``--fresh-image`` / ``--fresh-rootfs``: started with ``ctr`` through the
   node's containerd and the NVIDIA runtime, removed afterwards), or from every GPU container whose
   devices can be probed. Refuse (exit 2) when no such container exists.
2. ``before/``: a bundle of the node facts, the runtime configuration and the containers, with the
   open() probe (collectors/containers/, collectors/containers/probe.py): the on-disk ``config.json``, runc's
   state, the cgroup v1 ``devices.list`` or v2 device programs, systemd's ``DeviceAllow=`` drop-in and
   the errno of ``open()`` on each GPU device node from inside the container.
3. The reload: ``systemctl daemon-reload`` (``chroot ROOT systemctl daemon-reload`` when ``--root`` is
   not ``/``), or ``--reload-command`` (a test stand-in). The live path runs in the tests' systemd lab
   (tests/test_syslab_e2e.py: systemd 252 as PID 1 of a namespace, cgroup v1 and v2), the fresh probe
   container too (``--fresh-rootfs`` through a legacy-mode runtime stand-in).
4. ``after/``: the same bundle again, then per container: ``still exposed`` when a device that opened
   before (``ok``, or ``ENXIO``: the cgroup allowed it, no driver answered) now gives ``EPERM``;
   ``fixed`` when every such device still opens; ``inconclusive`` otherwise (the container already
   lost its GPU before, vanished, or its probe did not run). The node's verdict is ``still exposed``
   if any container is, else ``fixed`` if any is, else ``inconclusive``. The device rules are kept for
   the comparison: cgroup v1 ``devices.list`` (``rules_*``), cgroup v2 program names (``programs_*``).

Writes ``<out>/drill.json`` (``{"schema": "gpu-forensics/drill/v1", "verdict", "containers": [...],
"reload": {...}, "before", "after"}``). Exit codes: 0 fixed, 1 inconclusive, 2 refused or usage error,
4 still exposed.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..engines.containerd import CRI_NAMESPACE
from ..timeutil import iso_z

SCHEMA = "gpu-forensics/drill/v1"
FIXED, EXPOSED, INCONCLUSIVE = "fixed", "still exposed", "inconclusive"
EXIT = {FIXED: 0, INCONCLUSIVE: 1, EXPOSED: 4}
EXIT_REFUSED = 2
REACHABLE = ("ok", "ENXIO")  #: open() got past the device cgroup
RELOAD_TIMEOUT_S = 120
SETTLE_S = 0.5


class Refused(Exception):
    """The drill will not run (no consent, no usable GPU container, bad arguments): exit code 2."""


def reload_command(root: str | os.PathLike) -> list[str]:
    """The real reload for ``root``: ``systemctl daemon-reload``, through ``chroot`` when the host's
    root is mounted elsewhere (a pod with ``/`` at ``/host``); the ``chroot`` form is tested only on a
    real node."""
    return ["systemctl", "daemon-reload"] if os.path.realpath(root) == "/" else \
        ["chroot", str(root), "systemctl", "daemon-reload"]


def snapshot(root: Path, out: Path, state_dirs: list[str]) -> tuple[Path, list[dict]]:
    """Collect node facts, runtime configuration and containers (with the probe) into the bundle
    ``out``; returns ``(bundle path, container records as collectors.containers.read gives them)``."""
    from collectors import containers, node, runtime_config
    from ..bundle import Bundle, BundleWriter
    from ..source import CollectContext
    from ..events import NodeFacts
    started = datetime.now(timezone.utc)
    w = BundleWriter(out)
    ctx = CollectContext(root=Path(root), writer=w, options={containers.PROBE.dest: True,
                                                               containers.STATE_DIRS.dest: list(state_dirs)})
    for mod in (node, runtime_config, containers):
        mod.acquire(ctx)
    w.meta.update({"node": ctx.node.hostname, "node_facts": ctx.node.manifest(),
                   "collection": {"start": iso_z(started), "end": iso_z(datetime.now(timezone.utc)), "root": str(root)},
                   "command_line": "gpu-forensics drill (snapshot)", "incidents": []})
    path, _ = w.finish()
    return path, containers.read(Bundle.open(path), NodeFacts()).facts.get("containers", [])


def gpu_targets(rec: dict) -> dict[str, str]:
    """The probe results of a record's NVIDIA character devices (``{path: result}``), without ``not-run``."""
    return {p: r for p, r in (rec.get("probe") or {}).items() if r != "not-run"}


def usable(rec: dict) -> bool:
    """A GPU container the drill can use: its init runs and at least one GPU device node got past the
    device cgroup (``ok`` or ``ENXIO``); one that already lost its GPU cannot show what a reload does."""
    return bool(rec.get("gpu")) and any(r in REACHABLE for r in gpu_targets(rec).values())


def pick(records: list[dict], wanted: str | None) -> list[dict]:
    """The containers to test: those matching ``wanted`` (id, id prefix of 6+ characters, pod or
    container name) or, without it, every usable GPU container. Raises :class:`Refused`."""
    if wanted:
        found = [r for r in records if r.get("id") == wanted or (len(wanted) >= 6 and str(r.get("id")).startswith(wanted))
                 or wanted in (r.get("pod"), r.get("container_name"))]
        if not found:
            raise Refused(f"no container {wanted!r} on this node (ids, pod and container names were searched)")
        bad = [r for r in found if not usable(r)]
        if bad and len(bad) == len(found):
            raise Refused(f"container {wanted!r} has no GPU device node that could be opened before the reload "
                          "(no GPU, not running, or its probe failed); nothing to test")
        return [r for r in found if usable(r)]
    found = [r for r in records if usable(r)]
    if not found:
        raise Refused("no GPU container the test can use: none is running with an NVIDIA device node that opened "
                      "(start one, or give --fresh-image)")
    return found


def compare(before: dict, after: dict | None) -> dict:
    """The verdict for one container from its records before and after the reload: ``{"id", "pod",
    "container_name", "verdict", "reason", "probe_before", "probe_after", "rules_before", "rules_after"
    (cgroup v1 device rules other than the default devices', or None), "programs_before", "programs_after"
    (cgroup v2: names of the device programs on the cgroup, "" for an unnamed one, or None),
    "spec_gpu_devices", "prestart_hooks", "cgroup_driver"}``."""
    pb = gpu_targets(before)
    pa = gpu_targets(after or {})
    out = {"id": before.get("id"), "pod": before.get("pod"), "container_name": before.get("container_name"),
           "probe_before": pb, "probe_after": pa, "rules_before": _gpu_rules(before), "rules_after": _gpu_rules(after),
           "programs_before": _programs(before), "programs_after": _programs(after),
           "spec_gpu_devices": [d.get("path") for d in before.get("linux_devices") or [] if d.get("major") == 195
                                or str(d.get("path") or "").startswith("/dev/nvidia")],
           "prestart_hooks": [h.get("path") for h in (before.get("hooks") or {}).get("prestart") or []],
           "cgroup_driver": (before.get("cgroup") or {}).get("driver")}
    reachable = [p for p, r in pb.items() if r in REACHABLE]
    if any(r == "EPERM" for r in pb.values()):
        return {**out, "verdict": INCONCLUSIVE, "reason": "the container had already lost access (EPERM) before the "
                "reload; recreate it and run the drill again"}
    if after is None or not pa:
        return {**out, "verdict": INCONCLUSIVE, "reason": "after the reload the container was gone or its probe did "
                "not run, so nothing could be compared"}
    lost = [p for p in reachable if pa.get(p) == "EPERM"]
    if lost:
        return {**out, "verdict": EXPOSED, "reason": f"open() of {', '.join(lost)} went from "
                f"{'/'.join(sorted({pb[p] for p in lost}))} to EPERM across the reload: the device rules were rebuilt "
                "without the GPU"}
    if reachable and all(pa.get(p) in REACHABLE for p in reachable):
        tail = (" (cgroupfs driver: a reload does not rewrite this container's device rules)"
                if out["cgroup_driver"] == "cgroupfs" else "")
        return {**out, "verdict": FIXED, "reason": f"{', '.join(reachable)} still open after the reload{tail}"}
    return {**out, "verdict": INCONCLUSIVE, "reason": "the probe results changed in a way that is not the "
            f"device cgroup's EPERM: before {pb}, after {pa}"}


def _gpu_rules(rec: dict | None) -> list[str] | None:
    rules = ((rec or {}).get("cgroup") or {}).get("rules")
    if rules is None:
        return None
    return [f"{r.get('type')} {r.get('major') if r.get('major') is not None else '*'}:"
            f"{r.get('minor') if r.get('minor') is not None else '*'} {r.get('access')}"
            for r in rules if r.get("major") not in (1, 5, 10, 136) and r.get("type") == "c"]


def _programs(rec: dict | None) -> list[str] | None:
    progs = ((rec or {}).get("cgroup") or {}).get("bpf")
    return None if progs is None else [str(p.get("name") or "") for p in progs]


def run_reload(cmd: list[str] | Callable[[], tuple[int, str]]) -> dict:
    """Run the reload (an argv, or a callable returning ``(exit code, output)``); returns ``{"command",
    "exit", "output" (last 2000 characters), "at", "seconds"}``. Never raises."""
    started, t0 = datetime.now(timezone.utc), time.monotonic()
    shown = getattr(cmd, "__name__", "callable") if callable(cmd) else shlex.join(cmd)
    try:
        if callable(cmd):
            rc, text = cmd()
        else:
            cp = subprocess.run(cmd, capture_output=True, text=True, timeout=RELOAD_TIMEOUT_S, stdin=subprocess.DEVNULL)
            rc, text = cp.returncode, cp.stdout + cp.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        rc, text = None, f"{type(e).__name__}: {e}"
    time.sleep(SETTLE_S)
    return {"command": shown, "exit": rc, "output": (text or "")[-2000:], "at": iso_z(started),
            "seconds": round(time.monotonic() - t0, 3)}


# -- a fresh probe container -----------------------------------------------------------------------
class Fresh:
    """A probe container started with ``ctr run -d`` (image or root file system) through the node's
    containerd and the NVIDIA runtime binary, with ``NVIDIA_VISIBLE_DEVICES=all``; :meth:`remove` kills
    and deletes it."""

    def __init__(self, address: str, namespace: str, runtime_binary: str | None, runc_root: str | None,
                 image: str | None, rootfs: str | None, systemd_cgroup: bool):
        self.id = f"gpu-forensics-drill-{secrets.token_hex(4)}"
        self.base = ["ctr", "--address", address, "--namespace", namespace]
        args = ["run", "-d", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", "NVIDIA_DRIVER_CAPABILITIES=utility"]
        if runtime_binary:
            args += ["--runc-binary", runtime_binary]
        if runc_root:
            args += ["--runc-root", runc_root]
        if systemd_cgroup:
            args += ["--runc-systemd-cgroup", "--cgroup", f"system.slice:gpu-forensics:{self.id}"]
        args += ["--rootfs", rootfs] if rootfs else [image]
        self.argv = self.base + args + [self.id, "sleep", "600"]

    def start(self) -> None:
        """Raises :class:`Refused` when the container cannot be started."""
        try:
            cp = subprocess.run(self.argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Refused(f"cannot start a fresh probe container: {e}") from None
        if cp.returncode != 0:
            raise Refused(f"cannot start a fresh probe container ({shlex.join(self.argv)}): {cp.stderr.strip()[-500:]}")

    def remove(self) -> list[str]:
        """Kill and delete the task and the container; returns the problems met."""
        problems = []
        subprocess.run(self.base + ["task", "kill", "-s", "SIGKILL", self.id], capture_output=True, timeout=30)
        for _ in range(50):
            cp = subprocess.run(self.base + ["task", "delete", self.id], capture_output=True, text=True, timeout=30)
            if cp.returncode == 0 or "not found" in cp.stderr:
                break
            time.sleep(0.1)
        else:
            problems.append(f"task {self.id} not deleted")
        cp = subprocess.run(self.base + ["container", "delete", self.id], capture_output=True, text=True, timeout=30)
        if cp.returncode != 0 and "not found" not in cp.stderr:
            problems.append(f"container {self.id} not deleted: {cp.stderr.strip()}")
        return problems


# -- the command -----------------------------------------------------------------------------------
def drill(root: Path, out: Path, *, container: str | None = None, state_dirs: list[str] = (),
          reload: list[str] | Callable[[], tuple[int, str]] | None = None, fresh: Fresh | None = None,
          log: Callable[[str], None] = lambda m: None) -> dict:
    """Run the drill and return its report (also written to ``<out>/drill.json``). Raises
    :class:`Refused` when there is nothing to test; ``out`` must not exist yet (``FileExistsError``)."""
    out.mkdir(parents=True)
    report = {"schema": SCHEMA, "started": iso_z(datetime.now(timezone.utc)), "root": str(root), "verdict": INCONCLUSIVE,
              "live_systemd": reload is None,
              "note": "the reload was systemd's own (systemctl daemon-reload)" if reload is None else
                      "the reload was a stand-in command (--reload-command), not systemd's daemon-reload"}
    try:
        if fresh:
            report["fresh"] = {"id": fresh.id, "command": shlex.join(fresh.argv)}
            fresh.start()
            container = fresh.id
        log("recording spec, device rules and probe before the reload")
        b_path, before = snapshot(root, out / "before", list(state_dirs))
        report["before"] = str(b_path)
        targets = pick(before, container)
        report["reload"] = run_reload(reload or reload_command(root))
        log(f"reload: {report['reload']['command']} exited {report['reload']['exit']}")
        a_path, after = snapshot(root, out / "after", list(state_dirs))
        report["after"] = str(a_path)
        by_id = {r.get("id"): r for r in after}
        rows = [compare(t, by_id.get(t.get("id"))) for t in targets]
        if report["reload"]["exit"] != 0:
            for r in rows:
                r.update(verdict=INCONCLUSIVE, reason=f"the reload command failed (exit {report['reload']['exit']}); "
                         + r["reason"])
        report["containers"] = rows
        verdicts = {r["verdict"] for r in rows}
        report["verdict"] = EXPOSED if EXPOSED in verdicts else FIXED if FIXED in verdicts else INCONCLUSIVE
    finally:
        if fresh and "fresh" in report:
            report["fresh"]["cleanup_problems"] = fresh.remove()
        report["finished"] = iso_z(datetime.now(timezone.utc))
        (out / "drill.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``drill``'s arguments to ``p`` (for wiring into the main CLI's subparsers)."""
    p.add_argument("--yes-reload-systemd", action="store_true",
                   help="consent: the drill runs systemctl daemon-reload on this node")
    p.add_argument("--container", metavar="ID|POD|NAME",
                   help="test this container (default: every usable GPU container; ignored with --fresh-*)")
    p.add_argument("--fresh-image", metavar="IMAGE", help="start a fresh probe container from this (already pulled) image")
    p.add_argument("--fresh-rootfs", metavar="DIR", help="start a fresh probe container on this root file system")
    p.add_argument("--ctr-address", default="/run/containerd/containerd.sock", help="containerd socket for --fresh-*")
    p.add_argument("--ctr-namespace", default=CRI_NAMESPACE, help="containerd namespace for --fresh-*")
    p.add_argument("--runtime-binary", default="/usr/bin/nvidia-container-runtime",
                   help="runtime the fresh container is created with (empty: plain runc)")
    p.add_argument("--runc-root", help="runc state root for the fresh container (default containerd's)")
    p.add_argument("--root", default="/", help="host root (/ on the node, /host in a pod)")
    p.add_argument("--state-dir", action="append", default=[], metavar="DIR", help="extra containerd state directory")
    p.add_argument("--reload-command", metavar="CMD", help="run this instead of systemctl daemon-reload (a test stand-in)")
    p.add_argument("--out", help="folder for drill.json and the before/after bundles (default ./gpu-forensics-drill-<UTC>)")


def run_args(args) -> int:
    """Run ``drill`` from parsed arguments; prints the verdict and returns the exit code."""
    if not args.yes_reload_systemd:
        print("gpu-forensics: drill refused: it runs `systemctl daemon-reload` on this node, which revokes the GPU of "
              "every exposed container; pass --yes-reload-systemd once the fix is in place", file=sys.stderr)
        return EXIT_REFUSED
    if args.fresh_image and args.fresh_rootfs:
        print("gpu-forensics: error: give --fresh-image or --fresh-rootfs, not both", file=sys.stderr)
        return EXIT_REFUSED
    out = Path(args.out or f"gpu-forensics-drill-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}")
    if out.exists():
        print(f"gpu-forensics: error: {out} already exists; choose another --out", file=sys.stderr)
        return EXIT_REFUSED
    fresh = None
    if args.fresh_image or args.fresh_rootfs:
        fresh = Fresh(args.ctr_address, args.ctr_namespace, args.runtime_binary or None, args.runc_root,
                      args.fresh_image, args.fresh_rootfs, _systemd_cgroup(Path(args.root)))
    try:
        report = drill(Path(args.root), out, container=args.container, state_dirs=args.state_dir,
                       reload=shlex.split(args.reload_command) if args.reload_command else None, fresh=fresh,
                       log=lambda m: print(f"gpu-forensics: {m}", file=sys.stderr))
    except Refused as e:
        print(f"gpu-forensics: drill refused: {e}", file=sys.stderr)
        return EXIT_REFUSED
    for r in report["containers"]:
        print(f"{r['verdict']:>13}: {r['container_name'] or r['id']} ({r['pod'] or '-'}): {r['reason']}")
    print(f"verdict: {report['verdict']}\nwrote {out / 'drill.json'}")
    return EXIT[report["verdict"]]


def _systemd_cgroup(root: Path) -> bool:
    """Whether containerd on ``root`` uses the systemd cgroup driver (its runc options), so that the fresh
    container is placed the way pods are."""
    import tomllib
    from collectors.runtime_config import containerd_settings
    from .. import hostfs
    try:
        doc = tomllib.loads(hostfs.read_text(root, "/etc/containerd/config.toml", limit=4 << 20))
    except (OSError, ValueError):
        return False
    return bool(containerd_settings([doc]).get("systemd_cgroup"))


def build_parser() -> argparse.ArgumentParser:
    """The ``drill`` subcommand's parser."""
    p = argparse.ArgumentParser(prog="gpu-forensics drill", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """``gpu-forensics drill`` as a function: parse ``argv`` (without the subcommand) and run it."""
    return run_args(build_parser().parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
