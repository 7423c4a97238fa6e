"""A node in a box: a real systemd 252 as PID 1 of a private namespace, with dbus, journald,
containerd (``SystemdCgroup = true``) and runc, so that tests run the real ``daemon-reload``.

The namespace is PID + mount + UTS + IPC + net + cgroup (``unshare``); its root is an overlay with
``/`` as the lower layer and a tmpfs upper, so the host is never written (the checkout and its
virtualenv are visible inside through the lower layer; the lab folder is bind-mounted at its own
path). systemd boots a minimal ``lab.target`` (journald, dbus, ``containerd.service``; no
sysinit.target, which would touch the host's clock, sysctls and udev). containerd runs at its default
paths (``/etc/containerd/config.toml``, ``/run/containerd``, ``/var/lib/containerd``); runc asks
systemd for ``cri-containerd-<id>.scope`` units in ``kubepods-besteffort-pod<uid>.slice``.

Layouts: ``v1`` (hybrid: a tmpfs /sys/fs/cgroup with every v1 hierarchy, cgroup2 on ``unified``;
needs a hybrid host) and ``v2`` (cgroup2 at /sys/fs/cgroup: runc and systemd attach BPF device
programs). Containers (:data:`CONTAINERS`), the sandbox first (on v1, the first scope needing the
devices controller in a new slice is migrated into the slice's cgroup): ``pause`` (no GPU),
``hook`` (GPU nodes and allow rules from a prestart hook outside the spec, as the legacy
nvidia-container-runtime-hook: v1 ``devices.allow``; v2 the device program replaced by a copy that
allows the GPU, :mod:`bpfdev`), ``spec`` (``linux.devices`` + ``linux.resources.devices``),
``nogpu``; ``<lab>/bin/nvidia-container-runtime`` is the legacy-mode runtime for containers the tool
starts itself (it adds the same hook to the on-disk config.json).
Other engines' shapes (issue 14): :meth:`SysLab.start_dockerd_containerd` runs a second containerd as
dockerd runs its own (``/run/docker/containerd``, CRI disabled) and :meth:`SysLab.start_docker` a
container in its ``moby`` namespace (runc root ``/run/docker/runtime-runc``, ``docker-<id>.scope``);
:meth:`SysLab.start_runc` a plain ``runc --root /run/custom-runc`` container (``runc-<id>.scope``), kept
in the foreground by a unit; both with the legacy hook. ``/dev/char/195:*`` links exist unless ``dev_char=False``; the journal is volatile
(``/run/log/journal``) unless ``persistent_journal=True`` (``/var/log/journal``).

Developer command (root; LAB is a folder of its own, its name names the lab's cgroups, so two labs
can run side by side)::

    python3 tests/syslab.py up    [--layout v1|v2] [--no-dev-char] [--persistent-journal] LAB
    python3 tests/syslab.py check [--layout v1|v2] [--no-dev-char] LAB  # up, probe, reload, probe, down
    python3 tests/syslab.py sh LAB systemctl status        # any command inside (nsenter)
    python3 tests/syslab.py down LAB                       # also after a crash: kills by the pids in LAB

What runs inside (the namespaces' PID 1 set-up, the legacy hook) is tests/syslab_ns.py. Every wait is
bounded; :meth:`SysLab.down` leaves no process, mount or cgroup (it SIGKILLs the
namespace's PID 1, whose death takes the namespace and its mounts with it, then removes the cgroups).
Needs root, util-linux, and the packages of scripts/lab-deps.sh.
"""
from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from syslab_ns import GPU, HERE, PATH, SOCK, hierarchies  # noqa: E402
from lab import oci_hook_json  # noqa: E402
NS = "k8s.io"
POD_UID = "0b5e1d2a_6c1f_4f0e_9c57_1ab2c3d4e5f6"
POD_SLICE = f"kubepods-besteffort-pod{POD_UID}.slice"
SLICE_DIR = f"kubepods.slice/kubepods-besteffort.slice/{POD_SLICE}"
CONTAINERS = ("pause", "hook", "spec", "nogpu")     #: started in this order
ERRNO_OF = {os.strerror(n): name for n, name in errno.errorcode.items()}
DOCKER_CONF = "/run/docker/containerd/containerd.toml"   #: dockerd writes its containerd's config here
DOCKER_SOCK = "/run/docker/containerd/containerd.sock"
DOCKER_STATE = "/run/docker/containerd/daemon"
DOCKER_RUNC_ROOT = "/run/docker/runtime-runc"
CUSTOM_RUNC_ROOT = "/run/custom-runc"                  #: a plain runc's --root
#: podman with storage of its own inside the namespace (:meth:`SysLab.start_podman`)
PODMAN = ("podman", "--storage-driver", "vfs", "--root", "/var/lib/gf-podman", "--runroot", "/run/gf-podman")


class LabError(RuntimeError):
    """The lab cannot run or did not come up (the message says what, with the log's tail)."""


def cid(name: str) -> str:
    """The container id of lab container ``name``: 64 hex digits, as CRI gives."""
    return hashlib.sha256(f"syslab-{name}".encode()).hexdigest()


def unit(name: str) -> str:
    """The systemd scope runc makes for lab container ``name``."""
    return f"cri-containerd-{cid(name)}.scope"


def _run(argv, timeout=20, check=True, **kw) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timed out after {timeout} s: {argv}") from e
    if check and p.returncode:
        raise LabError(f"{argv} exited {p.returncode}: {p.stderr.strip()[-800:]}")
    return p


def _comm(pid) -> str:
    try:
        return Path(f"/proc/{int(pid)}/comm").read_text().strip()
    except (OSError, ValueError, TypeError):
        return ""


def _alive(pid) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, ValueError, TypeError, IndexError):
        return False


def _wait(pred, timeout: float, step: float = 0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def host_v2() -> Path:
    """The host's cgroup2 mount: /sys/fs/cgroup (unified host) or /sys/fs/cgroup/unified (hybrid)."""
    root = Path("/sys/fs/cgroup")
    return root if (root / "cgroup.controllers").exists() else root / "unified"


class SysLab:
    """One lab in folder ``folder`` (made if missing). Use as a context manager (``down`` on exit, also
    on error) or call :meth:`up` / :meth:`down`. With ``owned`` the namespace is also killed when this
    process dies (SIGKILL included); its empty cgroups then wait for the next ``down``."""

    def __init__(self, folder, layout: str = "v1", dev_char: bool = True, persistent_journal: bool = False,
                 owned: bool = True):
        if layout not in ("v1", "v2"):
            raise ValueError(f"layout {layout!r}: v1 or v2")
        self.folder = Path(folder).resolve()
        self.layout, self.dev_char, self.persistent_journal = layout, dev_char, persistent_journal
        self.owned = owned            # the lab dies with this process (False: `up` from the command line)
        self.state = self.folder / "state"
        self.timings: dict[str, float] = {}
        self._unshare: subprocess.Popen | None = None

    # ------------------------------------------------------------------ life cycle
    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()

    def pid1(self) -> int | None:
        """The host pid of the namespace's systemd, or None when it is not up."""
        try:
            p = int((self.state / "pid1").read_text())
        except (OSError, ValueError):
            return None
        return p if _comm(p) == "systemd" else None

    def requirements(self) -> list[str]:
        """What this machine lacks for the lab (empty when it can run)."""
        missing = [f"{b} (scripts/lab-deps.sh)" for b in ("unshare", "nsenter", "containerd", "ctr", "runc",
                   "containerd-shim-runc-v2", "dbus-daemon", "busybox", "bpftool", "systemd-run")
                   if not any(Path(d, b).exists() for d in PATH.split(":"))]
        if not Path("/lib/systemd/systemd").exists():
            missing.append("/lib/systemd/systemd (apt-get install systemd)")
        if os.geteuid():
            missing.append("root")
        if self.layout == "v1" and not Path("/sys/fs/cgroup/devices/devices.allow").exists():
            missing.append("the cgroup v1 hybrid layout (devices controller at /sys/fs/cgroup/devices)")
        if not (host_v2() / "cgroup.procs").exists():
            missing.append("a cgroup2 hierarchy")
        return missing

    def up(self, containers=CONTAINERS, boot_timeout: float = 30) -> "SysLab":
        """Boot systemd, wait for containerd, start ``containers``. Raises LabError."""
        missing = self.requirements()
        if missing:
            raise LabError("the lab needs: " + "; ".join(missing))
        if self.pid1():
            raise LabError(f"{self.folder} is already up (python3 tests/syslab.py down {self.folder})")
        self.down()
        for d in ("rw", "root", "state", "bb/bin", "bb/dev", "bb/proc", "bb/sys", "bb/tmp", "bin"):
            (self.folder / d).mkdir(parents=True, exist_ok=True)
        Path(self.folder, "bb/bin/busybox").write_bytes(Path("/bin/busybox").read_bytes())
        os.chmod(self.folder / "bb/bin/busybox", 0o755)
        for cmd, name in (("hook", "nvidia-container-runtime-hook"), ("runtime", "nvidia-container-runtime")):
            (self.folder / "bin" / name).write_text(
                f"#!/bin/sh\nexec /usr/bin/python3 {HERE / 'syslab_ns.py'} {cmd} {self.folder} \"$@\"\n")
            (self.folder / "bin" / name).chmod(0o755)
        cgs = []
        for name, _, base in hierarchies():
            top = host_v2() if name == "unified" else Path("/sys/fs/cgroup", name)
            c = Path(str(top) + base.rstrip("/")) / self.folder.name
            c.mkdir(exist_ok=True)
            cgs.append(str(c))
            if name == "cpuset" or name.startswith("cpuset,"):
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (c / f).write_text((c.parent / f).read_text())
        (self.state / "cgroups").write_text("\n".join(cgs) + "\n")
        t0 = time.monotonic()

        def join():
            for c in cgs:
                Path(c, "cgroup.procs").write_text(str(os.getpid()))
            if self.owned:    # PR_SET_PDEATHSIG: our death kills unshare, whose --kill-child kills PID 1
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--uts", "--ipc", "--net",
                "--cgroup", "--propagation", "private", sys.executable, str(HERE / "syslab_ns.py"), "init",
                self.layout, "1" if self.dev_char else "0", "1" if self.persistent_journal else "0", str(self.folder)]
        with open(self.state / "init.log", "wb") as log:
            up = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=join,
                                  start_new_session=True, env={"PATH": PATH})
        self._unshare = up
        (self.state / "unshare.pid").write_text(str(up.pid))

        def child():
            try:
                kids = Path(f"/proc/{up.pid}/task/{up.pid}/children").read_text().split()
            except OSError:
                return None
            return next((int(k) for k in kids if _comm(k) == "systemd"), None)
        p = _wait(child, 10)
        if not p:
            raise LabError(f"systemd did not start: {self._tail('init.log')}")
        (self.state / "pid1").write_text(str(p))
        if not _wait(lambda: self.sh("systemctl", "is-active", "containerd.service", check=False).stdout.strip()
                     == "active", boot_timeout, 0.1):
            st = self.sh("systemctl", "status", "--no-pager", "containerd.service", check=False).stdout
            raise LabError(f"containerd did not start in {boot_timeout} s: {st[-1500:]}")
        self.timings["boot"] = time.monotonic() - t0
        spec = json.loads(self.ctr("oci", "spec").stdout)
        for name in containers:
            self.start(name, spec)
        return self

    def start(self, name: str, base_spec: dict) -> None:
        """Start lab container ``name`` from ``base_spec`` (``ctr oci spec``) with runc's systemd driver."""
        s = json.loads(json.dumps(base_spec))
        s["process"].update(args=["/bin/busybox", "sleep", "100000"], terminal=False, env=["PATH=/bin"])
        s["root"] = {"path": str(self.folder / "bb"), "readonly": False}
        s["hostname"] = name
        cgpath = f"{POD_SLICE}:cri-containerd:{cid(name)}"
        s["linux"]["cgroupsPath"] = cgpath
        s.setdefault("annotations", {}).update({
            "io.kubernetes.cri.container-name": name, "io.kubernetes.cri.sandbox-id": cid("pause"),
            "io.kubernetes.cri.container-type": "sandbox" if name == "pause" else "container",
            "io.kubernetes.pod.name": "gpu-pod", "io.kubernetes.pod.namespace": "default",
            "io.kubernetes.pod.uid": POD_UID.replace("_", "-")})
        if name == "hook":
            s["hooks"] = {"prestart": [{"path": str(self.folder / "bin/nvidia-container-runtime-hook"),
                                        "args": ["nvidia-container-runtime-hook", "prestart"]}]}
            s["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=all")
        elif name == "spec":
            for node, minor in GPU:
                s["linux"].setdefault("devices", []).append({"path": f"/dev/{node}", "type": "c", "major": 195,
                                                             "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0})
                s["linux"]["resources"]["devices"].append({"allow": True, "type": "c", "major": 195,
                                                           "minor": minor, "access": "rw"})
        path = self.state / f"spec-{name}.json"
        path.write_text(json.dumps(s, indent=1))
        t0 = time.monotonic()
        self.ctr("run", "-d", "--runc-systemd-cgroup", "--cgroup", cgpath, "--config", str(path), cid(name),
                 timeout=30)
        self.timings[f"start {name}"] = time.monotonic() - t0

    def down(self) -> list[str]:
        """Kill the namespace and remove its cgroups; idempotent, works from the pid files alone
        (after a crash). Returns what is still left (empty when clean)."""
        p, u, left = self.pid1(), None, []
        try:
            u = int((self.state / "unshare.pid").read_text())
        except (OSError, ValueError):
            pass
        if p:
            os.kill(p, signal.SIGKILL)
            _wait(lambda: not _alive(p), 10)
        if u and _comm(u) == "unshare":
            os.kill(u, signal.SIGKILL)
            _wait(lambda: not _alive(u), 10)
        if self._unshare:                       # ours: reap it (no zombie left in a long test session)
            try:
                self._unshare.wait(timeout=10)
            except subprocess.TimeoutExpired:
                left.append(f"unshare pid {self._unshare.pid}")
            self._unshare = None
        try:
            cgs = (self.state / "cgroups").read_text().split()
        except OSError:
            cgs = []
        for c in cgs:
            def rm(c=c):
                for d, _, _ in sorted(os.walk(c), key=lambda t: -t[0].count("/")):
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
                return not os.path.exists(c)
            if not _wait(rm, 10, 0.1):
                left.append(c)
        if not left:
            for f in ("pid1", "unshare.pid", "cgroups"):
                (self.state / f).unlink(missing_ok=True)
        return left

    # ------------------------------------------------------------------ other engines' shapes
    def start_dockerd_containerd(self, timeout: float = 20) -> None:
        """A second containerd as dockerd runs its own (moby daemon/command/daemon.go: state
        ``<exec-root>/containerd/daemon``, socket ``<exec-root>/containerd/containerd.sock``, the CRI plugin
        disabled), under a unit named ``docker.service``; returns once it answers. Raises LabError."""
        conf = (f'version = 2\nroot = "/var/lib/docker/containerd/daemon"\nstate = "{DOCKER_STATE}"\n'
                'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                f'[grpc]\n  address = "{DOCKER_SOCK}"\n[ttrpc]\n  address = "{DOCKER_SOCK}.ttrpc"\n')
        src = self.state / "docker-containerd.toml"
        src.write_text(conf)
        self.sh("/bin/sh", "-c", f"mkdir -p /run/docker/containerd && cp {src} {DOCKER_CONF}")
        self.sh("systemd-run", "--unit=docker.service", "--property=Delegate=yes", "--property=KillMode=process",
                "/usr/bin/containerd", "--config", DOCKER_CONF)
        if not _wait(lambda: self.sh("ctr", "--address", DOCKER_SOCK, "version", check=False).returncode == 0,
                     timeout, 0.1):
            raise LabError("dockerd's containerd did not answer: " + self.sh(
                "systemctl", "status", "--no-pager", "docker.service", check=False).stdout[-1500:])

    def _gpu_spec(self, name: str, cgroups_path: str) -> dict:
        """``ctr oci spec`` with the legacy prestart hook (as dockerd's ``--gpus`` and nvidia-container-runtime
        put it) and ``NVIDIA_VISIBLE_DEVICES=all``: the GPU outside the spec."""
        s = json.loads(self.ctr("oci", "spec").stdout)
        s["process"].update(args=["/bin/busybox", "sleep", "100000"], terminal=False,
                            env=["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"])
        s["root"] = {"path": str(self.rootfs(name)), "readonly": False}
        s["hostname"] = name
        s["linux"]["cgroupsPath"] = cgroups_path
        s["hooks"] = {"prestart": [{"path": str(self.folder / "bin/nvidia-container-runtime-hook"),
                                    "args": ["nvidia-container-runtime-hook", "prestart"]}]}
        return s

    def start_docker(self, name: str) -> None:
        """A Docker-shaped container: namespace ``moby`` of dockerd's containerd (start it first), runc root
        ``/run/docker/runtime-runc`` (dockerd's ``<exec-root>/runtime-runc``), the systemd driver with
        dockerd's parent ``system.slice:docker:<id>`` (moby daemon/command/daemon_unix.go), the legacy hook."""
        cgpath = f"system.slice:docker:{cid(name)}"
        path = self.state / f"spec-{name}.json"
        path.write_text(json.dumps(self._gpu_spec(name, cgpath), indent=1))
        self.sh("ctr", "--address", DOCKER_SOCK, "-n", "moby", "run", "-d", "--runc-systemd-cgroup", "--runc-root",
                DOCKER_RUNC_ROOT, "--cgroup", cgpath, "--config", str(path), cid(name), timeout=30)

    def start_runc(self, name: str, timeout: float = 20) -> None:
        """A plain runc container, ``runc --root /run/custom-runc --systemd-cgroup run``, kept in the foreground
        by a unit (``runc-<name>-job.service``) as a supervisor does: its command line is what names the
        root on the node; scope ``runc-<id>.scope`` in ``system.slice``; the legacy hook in its config.json."""
        bundle = self.folder / f"bundle-{name}"
        bundle.mkdir(exist_ok=True)
        (bundle / "config.json").write_text(json.dumps(self._gpu_spec(name, f"system.slice:runc:{cid(name)}"), indent=1))
        self.sh("systemd-run", f"--unit=runc-{name}-job.service", "runc", "--root", CUSTOM_RUNC_ROOT,
                "--systemd-cgroup", "run", "--bundle", str(bundle), cid(name))
        if not _wait(lambda: '"running"' in self.sh("runc", "--root", CUSTOM_RUNC_ROOT, "state", cid(name),
                                                     check=False).stdout, timeout, 0.1):
            raise LabError(f"runc container {name} did not start: " + self.sh(
                "journalctl", "--no-pager", "-u", f"runc-{name}-job.service", check=False).stdout[-1500:])

    def start_podman(self, name: str) -> str:
        """A rootful Podman container (forensics/engines/podman.py) named ``name``, run by runc with Podman's
        default systemd cgroup manager (``machine.slice/libpod-<id>.scope``, asked of this systemd over D-Bus)
        and the legacy hook from a hooks dir (the toolkit's oci-nvidia-hook.json shape, for every container);
        storage inside the namespace (the vfs driver: overlay does not stack on the
        lab's overlay root), at roots of its own (:data:`PODMAN`: the host's may hold another driver's
        database), which the collector learns from conmon's command line. Returns the container id. Raises
        LabError."""
        hooks = self.folder / "podman-hooks"
        hooks.mkdir(exist_ok=True)
        (hooks / "oci-nvidia-hook.json").write_text(
            oci_hook_json(str(self.folder / "bin/nvidia-container-runtime-hook"), {"always": True}))
        root = self.rootfs(name)
        pm = [*PODMAN, "--runtime", "runc", "--events-backend", "none", "--log-level", "error", "--hooks-dir",
              str(hooks)]
        self.sh("/bin/sh", "-c", f"tar -C {root} -c . | {' '.join(pm)} import - localhost/{name}:lab", timeout=60)
        n = os.sysconf("SC_OPEN_MAX")  # podman asks for 1048576 open files, more than this machine may give
        out = self.sh(*pm, "run", "-d", "--network", "none", "--ulimit", f"nofile={n}:{n}", "--ulimit",
                      "nproc=4096:4096", "--pids-limit", "-1", "--env", "NVIDIA_VISIBLE_DEVICES=all", "--name", name,
                      f"localhost/{name}:lab", "/bin/busybox", "sleep", "100000", timeout=60)
        return out.stdout.strip().splitlines()[-1]

    def probe_engine(self, name: str, engine: str) -> str:
        """:meth:`probe` for a container of :meth:`start_docker` (``engine="docker"``), :meth:`start_podman`
        (``"podman"``) or :meth:`start_runc`."""
        if engine == "podman":
            return self._probe(lambda: [*PODMAN, "--log-level", "error", "exec", name])
        if engine == "docker":
            return self._probe(lambda: ["ctr", "--address", DOCKER_SOCK, "-n", "moby", "task", "exec", "--exec-id",
                                        f"p{time.monotonic_ns()}", cid(name)])
        return self._probe(lambda: ["runc", "--root", CUSTOM_RUNC_ROOT, "exec", cid(name)])

    # ------------------------------------------------------------------ inside
    def sh(self, *argv, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` inside the namespace (all its namespaces, clean environment). Raises LabError
        on a non-zero exit when ``check``, and on a timeout."""
        p = self.pid1()
        if not p:
            raise LabError(f"{self.folder} is not up")
        return _run(["nsenter", "-t", str(p), "-m", "-u", "-i", "-n", "-p", "-C", "--", "env", "-i", f"PATH={PATH}",
                     "LANG=C.UTF-8", "SYSTEMD_PAGER=", *argv], timeout=timeout, check=check)

    def ctr(self, *argv, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
        """``ctr`` inside, on containerd's default socket, namespace k8s.io."""
        return self.sh("ctr", "--address", SOCK, "-n", NS, *argv, timeout=timeout, check=check)

    def read(self, path: str) -> str:
        """A file of the namespace's root (through /proc/<pid1>/root, no process started)."""
        return Path(f"/proc/{self.pid1()}/root{path}").read_text()

    def probe(self, name: str) -> str:
        """``open("/dev/nvidiactl")`` in container ``name`` (busybox cat): the errno name (ENXIO: the
        device cgroup allows it and no driver answers; EPERM: denied), or "OK"."""
        return self._probe(lambda: ["ctr", "--address", SOCK, "-n", NS, "task", "exec", "--exec-id",
                                    f"probe{time.monotonic_ns()}", cid(name)])

    def _probe(self, exec_argv) -> str:
        """:meth:`probe` through ``exec_argv()`` (a fresh exec command line each try)."""
        for attempt in range(3):  # an exec that printed nothing (ctr lost the race on a loaded machine) is retried
            p = self.sh(*exec_argv(), "/bin/busybox", "cat", "/dev/nvidiactl", check=False)
            if p.returncode == 0:
                return "OK"
            msg = (p.stderr + p.stdout).strip().rsplit(": ", 1)[-1]
            if msg:
                break
            time.sleep(0.5 * (attempt + 1))
        return ERRNO_OF.get(msg, f"? {msg}")

    def reload(self, via_unit: str | None = None, verb: str = "daemon-reload") -> float:
        """A real ``systemctl daemon-reload`` (or ``verb``: ``daemon-reexec``) inside; with ``via_unit``, from a
        transient service of that name (``systemd-run --unit=NAME --wait``), as a requester on a node would.
        Returns seconds."""
        t0 = time.monotonic()
        if via_unit:
            p = self.sh("systemd-run", f"--unit={via_unit}", "--wait", "--quiet", "/bin/systemctl", verb, timeout=30,
                        check=False)
            if p.returncode and not (verb == "daemon-reexec" and "disconnected" in p.stderr):
                raise LabError(f"systemd-run {verb} exited {p.returncode}: {p.stderr.strip()[-800:]}")
            if p.returncode:  # PID 1 re-executed while systemd-run waited on the bus: wait for the unit here
                self._wait_unit_done(f"{via_unit}.service", t0 + 30)
        else:
            self.sh("systemctl", verb, timeout=30)
        self.timings["reload"] = time.monotonic() - t0
        return self.timings["reload"]

    def _wait_unit_done(self, name: str, deadline: float) -> None:
        """Until the service ``name`` inside has run (inactive, or gone: a transient unit is collected), PID 1
        answering again after a re-exec; ``LabError`` when it failed or ``deadline`` (monotonic) passes."""
        while time.monotonic() < deadline:
            p = self.sh("systemctl", "show", "-pActiveState", "-pResult", name, check=False, timeout=10)
            vals = dict(line.partition("=")[::2] for line in p.stdout.splitlines())
            if p.returncode == 0 and vals.get("ActiveState") in ("inactive", "failed"):
                if vals.get("Result") not in ("success", "", None):
                    raise LabError(f"{name} ended with {vals}")
                return
            time.sleep(0.2)
        raise LabError(f"{name} still running after the re-exec")

    def show(self, name: str, *props) -> dict[str, str]:
        """``systemctl show -p ...`` of the container's scope (DeviceAllow joined with '; ')."""
        out = self.sh("systemctl", "show", *[f"-p{p}" for p in props], unit(name)).stdout
        vals: dict[str, list[str]] = {}
        for line in out.splitlines():
            k, _, v = line.partition("=")
            vals.setdefault(k, []).append(v)
        return {k: "; ".join(v) for k, v in vals.items()}

    def cgroup_dir(self, name: str, controller: str = "devices") -> str:
        """The container scope's cgroup inside the namespace (v1: in ``controller``'s hierarchy)."""
        top = "/sys/fs/cgroup" if self.layout == "v2" else f"/sys/fs/cgroup/{controller}"
        return f"{top}/{SLICE_DIR}/{unit(name)}"

    def device_programs(self, name: str) -> list[dict]:
        """v2: the device programs on the scope (``bpftool -j cgroup show``): dicts with id, name."""
        return json.loads(self.sh("bpftool", "-j", "cgroup", "show", self.cgroup_dir(name)).stdout or "[]")

    def rootfs(self, name: str, applets=("sh", "sleep", "cat")) -> Path:
        """A busybox root file system ``<lab>/<name>`` (made if missing) with ``applets`` linked in /bin,
        for a container started by the tool itself (``ctr run --rootfs``)."""
        root = self.folder / name
        for d in ("bin", "dev", "proc", "sys", "tmp"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "bin/busybox").write_bytes(Path("/bin/busybox").read_bytes())
        (root / "bin/busybox").chmod(0o755)
        for a in applets:
            if not (root / "bin" / a).is_symlink():
                (root / "bin" / a).symlink_to("busybox")
        return root

    def _tail(self, log: str) -> str:
        try:
            return (self.state / log).read_text()[-1500:]
        except OSError:
            return "(no log)"


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="syslab.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=("up", "check", "sh", "down"))
    ap.add_argument("--layout", choices=("v1", "v2"), default="v1")
    ap.add_argument("--no-dev-char", action="store_true")
    ap.add_argument("--persistent-journal", action="store_true")
    ap.add_argument("lab")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    lab = SysLab(a.lab, a.layout, not a.no_dev_char, a.persistent_journal, owned=a.cmd != "up")
    if a.cmd == "down":
        left = lab.down()
        print("left: " + " ".join(left) if left else "down")
        return 1 if left else 0
    if a.cmd == "sh":
        p = lab.sh(*a.argv, check=False, timeout=600)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        return p.returncode
    if a.cmd == "up":
        lab.__enter__()
        print(f"up: systemd pid {lab.pid1()}; {', '.join(f'{k} {v:.2f} s' for k, v in lab.timings.items())}")
        return 0
    with lab:
        before = {n: lab.probe(n) for n in ("hook", "spec")}
        lab.reload()
        after = {n: lab.probe(n) for n in ("hook", "spec")}
    for n in before:
        print(f"{n}: {before[n]} -> {after[n]}")
    print(", ".join(f"{k} {v:.2f} s" for k, v in lab.timings.items()))
    return 0 if (before, after) == ({"hook": "ENXIO", "spec": "ENXIO"}, {"hook": "EPERM", "spec": "ENXIO"}) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
