"""A container lab: a private containerd (Debian package) and runc under a temporary directory.

Used by tests/test_containers_lab.py; needs root, cgroup v1's devices controller, and the Debian
packages containerd, runc and busybox-static (scripts/lab-deps.sh installs them). Nothing it starts
outlives :meth:`Lab.close`.

- containerd runs with its own ``root``, ``state``, gRPC/ttrpc addresses and no CRI plugin;
  containers are created with ``ctr run --config SPEC`` from a busybox-static root file system, with
  runc's state under ``<lab>/runc`` (``--runc-root``) and their cgroups under a per-lab parent.
- A **legacy** container is started through a runtime wrapper (``--runc-binary``) that, like
  nvidia-container-runtime in legacy mode, adds a ``prestart`` hook to the bundle's on-disk
  ``config.json`` before it execs runc. The hook creates /dev/nvidia0 (195:0) and /dev/nvidiactl
  (195:255) inside the container and allows them in its cgroup v1 ``devices.allow``: runc and
  containerd never hear of the GPU.
- A **spec** container lists the same nodes in ``linux.devices`` and ``linux.resources.devices``.
- :meth:`Lab.reload` rebuilds a container's device rules from its spec, as systemd does on
  ``daemon-reload`` (and runc on a container update): ``a`` into ``devices.deny``, then runc's rules
  (the on-disk spec's ``resources.devices`` followed by runc's default allowlist, as runc recorded them
  in ``state.json``) in order. The real reload is tested on a real systemd (tests/syslab.py); this
  stand-in stays for tests/test_redteam.py's hostile containers (a bait next to a revoked one).

``python3 tests/lab.py collect OUT --state-dir DIR [--probe]`` runs the container collector through a
real CollectContext/BundleWriter against ``/`` (a subprocess, so that a test can put a hard time limit
on it).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
NS = "k8s.io"
DEVICES_V1 = Path("/sys/fs/cgroup/devices")
BINARIES = ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "busybox", "nsenter", "mknod")
GPU_NODES = (("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255))
BUSYBOX_APPLETS = ("sh", "sleep", "ls", "cat", "mkdir", "ln")


def legacy_hook_script() -> str:
    """A stand-in for nvidia-container-runtime-hook in legacy mode, as a prestart hook's shell script: read
    the OCI state on stdin, make the GPU nodes (:data:`GPU_NODES`) inside the container's root and allow them
    in its cgroup v1 devices controller, behind runc's and systemd's back (what the real hook does through
    nvidia-container-cli). Used for containerd (this lab) and Podman (tests/test_podman.py)."""
    return f"""#!/bin/sh
# Stand-in for nvidia-container-runtime-hook (legacy mode): make the GPU nodes inside the container
# and allow them in its cgroup v1 devices controller, behind runc's and systemd's back.
set -eu
state=$(cat)
pid=$(printf '%s' "$state" | sed -n 's/.*"pid":\\([0-9][0-9]*\\).*/\\1/p')
bundle=$(printf '%s' "$state" | sed -n 's/.*"bundle":"\\([^"]*\\)".*/\\1/p')
rootfs=$({sys.executable} -I -S -c 'import json,sys; print(json.load(open(sys.argv[1] + "/config.json"))["root"]["path"])' "$bundle")
cg=$(sed -n 's/^[0-9]*:devices:\\(.*\\)$/\\1/p' /proc/$pid/cgroup)
""" + "".join(f'nsenter -t "$pid" -m mknod -m 666 "$rootfs{p}" c {ma} {mi}\n'
              f'echo "c {ma}:{mi} rw" > "/sys/fs/cgroup/devices$cg/devices.allow"\n' for p, ma, mi in GPU_NODES)


def oci_hook_json(hook: str, when: dict) -> str:
    """An OCI hooks.d file (Podman's and CRI-O's ``--hooks-dir``) in the shape of the toolkit's
    oci-nvidia-hook.json (real-inputs/nvidia-runtime): ``hook`` as a prestart hook named
    nvidia-container-runtime-hook, run for the containers ``when`` selects (``{"always": True}``, or
    ``{"annotations": {...}}``)."""
    return json.dumps({"version": "1.0.0", "hook": {"path": hook, "args": ["nvidia-container-runtime-hook", "prestart"]},
                       "when": when, "stages": ["prestart"]})


class LabError(RuntimeError):
    """The lab cannot run here (missing package, not root, no cgroup v1 devices controller)."""


def requirements() -> list[str]:
    """What is missing for the lab on this machine (empty when it can run)."""
    missing = [f"binary {b!r} (apt-get install containerd runc busybox-static; scripts/lab-deps.sh)"
               for b in BINARIES if not shutil.which(b)]
    if os.geteuid() != 0:
        missing.append("root (the lab starts containerd and writes cgroup device rules)")
    if not (DEVICES_V1 / "devices.allow").exists():
        missing.append("the cgroup v1 devices controller at /sys/fs/cgroup/devices (the legacy hook and "
                       "the reload emulation write devices.allow/devices.deny)")
    return missing


@dataclass
class Container:
    id: str
    pid: int
    bundle: Path
    rootfs: Path

    @property
    def dev(self) -> Path:
        """The container's /dev as seen from the host (through the init's root magic link)."""
        return Path(f"/proc/{self.pid}/root/dev")


class Lab:
    """A private containerd under ``base`` (a short path: the socket path is limited to 107 bytes)."""

    def __init__(self, base: Path):
        self.base = Path(base)
        self.state = self.base / "state"
        self.address = str(self.base / "c.sock")
        self.runc_root = self.base / "runc"
        self.cg_parent = f"gflab-{os.getpid()}-{secrets.token_hex(3)}"
        self.proc: subprocess.Popen | None = None
        self.containers: list[Container] = []
        self._log = None

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "Lab":
        """Start containerd and wait until it answers. Raises :class:`LabError`."""
        missing = requirements()
        if missing:
            raise LabError("container lab cannot run: missing " + "; ".join(missing))
        for d in ("root", "state", "runc"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        cfg = self.base / "config.toml"
        cfg.write_text(
            'version = 2\n'
            f'root = "{self.base}/root"\nstate = "{self.state}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.address}"\n'
            f'[ttrpc]\n  address = "{self.address}.ttrpc"\n'
            f'[debug]\n  address = "{self.base}/debug.sock"\n')
        self._log = open(self.base / "containerd.log", "wb")
        self.proc = subprocess.Popen(["containerd", "--config", str(cfg)], stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LabError(f"containerd exited: {self.log_tail()}")
            if os.path.exists(self.address) and self.ctr("version", check=False).returncode == 0:
                self._write_runtime()
                return self
            time.sleep(0.1)
        raise LabError(f"containerd did not answer within 20 s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.base / "containerd.log").read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> list[str]:
        """Kill and delete every container, stop containerd, kill any shim it left, remove the cgroups
        and the temporary directory. Returns problems met (empty when all went)."""
        problems = []
        for c in list(self.containers):
            self.ctr("task", "kill", "-s", "SIGKILL", c.id, check=False)
            for _ in range(50):
                done = self.ctr("task", "delete", c.id, check=False)
                if done.returncode == 0 or "not found" in done.stderr:
                    break
                time.sleep(0.1)
            else:
                problems.append(f"task {c.id} not deleted")
            if self.ctr("container", "delete", c.id, check=False).returncode != 0:
                problems.append(f"container {c.id} not deleted")
            self.containers.remove(c)
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log:
            self._log.close()
        for pid in self.leftover_pids():
            problems.append(f"process {pid} left by the lab; killed")
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for hier in Path("/sys/fs/cgroup").iterdir():
            d = hier / self.cg_parent
            if d.is_dir():
                for child in sorted(d.iterdir()):
                    if child.is_dir():
                        _rmdir(child, problems)
                _rmdir(d, problems)
        for mnt in self._mounts_under_base():
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)
        return problems

    def leftover_pids(self) -> list[int]:
        """Processes (other than zombies) whose command line names this lab's directory."""
        out = []
        needle = str(self.base).encode()
        for p in Path("/proc").iterdir():
            if not p.name.isdigit() or int(p.name) == os.getpid():
                continue
            try:
                cmd = (p / "cmdline").read_bytes()
                st = (p / "stat").read_text()
            except OSError:
                continue
            if needle in cmd and st.rsplit(")", 1)[-1].split()[0] != "Z":
                out.append(int(p.name))
        return out

    def _mounts_under_base(self) -> list[str]:
        try:
            lines = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return []
        pts = [ln.split()[4] for ln in lines if len(ln.split()) > 4]
        return sorted((m for m in pts if m.startswith(str(self.base) + "/")), key=len, reverse=True)

    # -- containers ------------------------------------------------------------------------------
    def ctr(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run ``ctr --address <lab> --namespace k8s.io ARGS``; raises ``CalledProcessError`` when
        ``check`` and it fails."""
        cp = subprocess.run(["ctr", "--address", self.address, "--namespace", NS, *args],
                            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and cp.returncode != 0:
            raise subprocess.CalledProcessError(cp.returncode, cp.args, cp.stdout, cp.stderr)
        return cp

    def _write_runtime(self) -> None:
        """The legacy-mode runtime wrapper and the prestart hook it injects."""
        hook = self.base / "nvidia-container-runtime-hook"
        hook.write_text(legacy_hook_script())
        hook.chmod(0o755)
        wrapper = self.base / "nvidia-container-runtime"
        wrapper.write_text(f"""#!{sys.executable} -I
# Stand-in for nvidia-container-runtime in legacy mode: on create, rewrite the bundle's config.json in
# place with a prestart hook (NVIDIA/nvidia-container-toolkit internal/modifier/stable.go), then exec runc.
import json, os, sys
args = sys.argv[1:]
if "create" in args:
    i = args.index("--bundle") if "--bundle" in args else args.index("-b")
    cfg = os.path.join(args[i + 1], "config.json")
    with open(cfg) as f:
        spec = json.load(f)
    spec.setdefault("hooks", {{}}).setdefault("prestart", []).append(
        {{"path": {str(hook)!r}, "args": ["nvidia-container-runtime-hook", "prestart"]}})
    with open(cfg, "w") as f:
        json.dump(spec, f)
os.execv({shutil.which("runc")!r}, ["runc"] + args)
""")
        wrapper.chmod(0o755)

    def base_spec(self) -> dict:
        """containerd's default OCI spec (``ctr oci spec``)."""
        return json.loads(self.ctr("oci", "spec").stdout)

    def make_rootfs(self, name: str) -> Path:
        """A busybox-static root file system under the lab."""
        root = self.base / "rootfs" / name
        for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "run"):
            (root / d).mkdir(parents=True, exist_ok=True)
        shutil.copy2(shutil.which("busybox"), root / "bin" / "busybox")
        for applet in BUSYBOX_APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
        return root

    def run(self, cid: str, *, legacy: bool = False, gpu_in_spec: bool = False, env: list[str] = (),
            annotations: dict | None = None) -> Container:
        """Create and start a container running ``sleep``; returns it once its init is running.

        ``legacy``: start it through the legacy-mode wrapper (GPU via the prestart hook);
        ``gpu_in_spec``: list the GPU nodes in ``linux.devices`` and allow them in
        ``linux.resources.devices``."""
        rootfs = self.make_rootfs(cid)
        spec = self.base_spec()
        spec["process"].update(args=["/bin/sleep", "3600"], terminal=False)
        spec["process"]["env"] = list(spec["process"].get("env") or []) + list(env)
        spec["root"] = {"path": str(rootfs), "readonly": False}
        spec["linux"]["cgroupsPath"] = f"/{self.cg_parent}/{cid}"
        spec["annotations"] = {"io.kubernetes.cri.container-type": "container",
                               "io.kubernetes.cri.sandbox-name": f"pod-{cid}",
                               "io.kubernetes.cri.sandbox-namespace": "lab",
                               "io.kubernetes.cri.container-name": cid,
                               "io.kubernetes.cri.image-name": "lab/busybox:static", **(annotations or {})}
        if gpu_in_spec:
            spec["linux"].setdefault("devices", [])
            res = spec["linux"].setdefault("resources", {}).setdefault("devices", [])
            for path, ma, mi in GPU_NODES:
                spec["linux"]["devices"].append({"path": path, "type": "c", "major": ma, "minor": mi,
                                                 "fileMode": 438, "uid": 0, "gid": 0})
                res.append({"allow": True, "type": "c", "major": ma, "minor": mi, "access": "rw"})
        spec_path = self.base / f"{cid}.spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        args = ["run", "-d", "--config", str(spec_path), "--runc-root", str(self.runc_root)]
        if legacy:
            args += ["--runc-binary", str(self.base / "nvidia-container-runtime")]
        self.ctr(*args, cid, timeout=60)
        bundle = self.state / "io.containerd.runtime.v2.task" / NS / cid
        pid = int((bundle / "init.pid").read_text().strip())
        c = Container(cid, pid, bundle, rootfs)
        self.containers.append(c)
        return c

    def devices_dir(self, c: Container) -> Path:
        """The container's cgroup v1 devices directory (runc's ``cgroup_paths["devices"]``)."""
        return Path(self.runc_state(c)["cgroup_paths"]["devices"])

    def runc_state(self, c: Container) -> dict:
        return json.loads((self.runc_root / NS / c.id / "state.json").read_text())

    def reload(self, c: Container) -> list[str]:
        """Rebuild the container's device rules from its spec, as systemd does on daemon-reload:
        deny everything, then apply runc's rules in order (``state.json`` ``config.cgroups.devices``:
        the on-disk spec's ``resources.devices`` followed by runc's default allowlist). Returns the
        rules written."""
        d = self.devices_dir(c)
        written = []
        (d / "devices.deny").write_text("a")
        for r in self.runc_state(c)["config"]["cgroups"]["devices"]:
            kind = chr(r["type"])
            rule = "a" if kind == "a" else (f"{kind} {'*' if r['major'] < 0 else r['major']}:"
                                            f"{'*' if r['minor'] < 0 else r['minor']} {r['permissions']}")
            (d / ("devices.allow" if r["allow"] else "devices.deny")).write_text(rule)
            written.append(("allow " if r["allow"] else "deny ") + rule)
        return written

    def probe_from_host(self, c: Container, path: str) -> str:
        """Open ``path`` inside the container with this project's probe (ground truth helper)."""
        from collectors.containers import probe
        st = self.runc_state(c)
        res, report = probe.probe("/", c.pid, [st["cgroup_paths"]["devices"]], [(path, *_rdev(c, path))])
        return res[0]


def _rdev(c: Container, path: str) -> tuple[int, int]:
    st = os.lstat(f"/proc/{c.pid}/root{path}")
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def _rmdir(d: Path, problems: list[str]) -> None:
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    problems.append(f"cgroup {d} not removed")


def make_socket(path: str) -> None:
    """Leave a UNIX socket inode at ``path`` (bound, then closed)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
    finally:
        s.close()


# -- the collector, run as a bounded subprocess ----------------------------------------------------
def collect(out: Path, state_dirs: list[str], probe: bool, timeout: float = 20) -> Path:
    """Run the container collector against ``/`` into a new bundle at ``out`` in a subprocess; raises
    ``subprocess.TimeoutExpired`` (after killing it) when it takes longer than ``timeout`` seconds,
    ``RuntimeError`` when it fails."""
    argv = [sys.executable, str(Path(__file__).resolve()), "collect", str(out)]
    for d in state_dirs:
        argv += ["--state-dir", d]
    if probe:
        argv.append("--probe")
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=PROJECT,
                        stdin=subprocess.DEVNULL)
    if cp.returncode != 0:
        raise RuntimeError(f"collector failed ({cp.returncode}): {cp.stderr[-3000:]}")
    return out


@contextmanager
def running(prefix: str = "gfl-"):
    """A started :class:`Lab` for a test module. A missing containerd/runc/busybox FAILS the test
    (never skips); on exit the lab is closed and must leave no process, cgroup or mount behind."""
    import pytest
    missing = requirements()
    if missing:
        pytest.fail("container lab cannot run: missing " + "; ".join(missing))
    lb = Lab(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")))
    try:
        lb.start()
    except LabError as e:
        lb.close()
        pytest.fail(str(e))
    yield lb
    problems = lb.close()
    assert not problems, problems
    assert not lb.leftover_pids()


def _collect_main(argv: list[str]) -> int:
    import argparse
    from datetime import datetime, timezone

    sys.path.insert(0, str(PROJECT))
    from collectors import containers
    from forensics.bundle import BundleWriter
    from forensics.source import CollectContext
    from forensics.timeutil import iso_z

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--state-dir", action="append", default=[])
    ap.add_argument("--probe", action="store_true")
    a = ap.parse_args(argv)
    started = datetime.now(timezone.utc)
    writer = BundleWriter(a.out)
    ctx = CollectContext(root=Path("/"), writer=writer,
                         options={"containerd_state_dirs": a.state_dir, "probe": a.probe})
    containers.acquire(ctx)
    writer.meta["collection"] = {"start": iso_z(started), "end": iso_z(datetime.now(timezone.utc)), "root": "/"}
    writer.finish()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "collect":
        sys.exit(_collect_main(sys.argv[2:]))
    print(__doc__)
