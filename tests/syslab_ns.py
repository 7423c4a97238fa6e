"""What runs inside the lab of tests/syslab.py (stdlib only; no import of the lab's host side).

- ``python3 tests/syslab_ns.py init LAYOUT DEV_CHAR PERSISTENT LAB``: run by ``unshare`` as the new
  namespaces' PID 1. Builds the root (overlay of ``/`` with a tmpfs upper; proc; read-only sysfs; the
  cgroup layout: v1 hybrid = a tmpfs with every v1 hierarchy plus cgroup2 on ``unified``, v2 = cgroup2
  at /sys/fs/cgroup; a tmpfs /dev with the GPU nodes 195:255 and 195:0 and, unless DEV_CHAR is 0, their
  /dev/char links; tmpfs /run and /tmp; the checkout bind-mounted read-only at its own path when it lies
  under /tmp or /run, which those tmpfs hide; LAB bind-mounted at its own path), writes the lab's units and
  containerd's config at their default paths, pivot_roots and execs /lib/systemd/systemd.
- ``python3 tests/syslab_ns.py hook LAB prestart``: the legacy prestart hook (as
  nvidia-container-runtime-hook: outside the spec), OCI state on stdin.
- ``python3 tests/syslab_ns.py runtime LAB ARGS...``: the legacy-mode nvidia-container-runtime (adds
  that hook to the on-disk config.json on ``create``, then execs runc), for containers started by
  the tool itself (the drill's ``--fresh-rootfs``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOCK = "/run/containerd/containerd.sock"
GPU = (("nvidiactl", 255), ("nvidia0", 0))     #: node name, minor (major 195)
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def hierarchies() -> list[tuple[str, str, str]]:
    """``(directory name, mount options, base path)`` per line of /proc/self/cgroup (0:: -> unified)."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        idx, names, base = line.split(":", 2)
        if idx == "0":
            out.append(("unified", "", base))
        else:
            out.append((names.removeprefix("name="), "none," + names if names.startswith("name=") else names, base))
    return out



def ns_init(layout: str, dev_char: bool, persistent: bool, lab: str) -> None:
    """Inside the new namespaces (PID 1): build the root, pivot into it, exec systemd."""
    os.umask(0o022)
    R = f"{lab}/root"

    def mount(*a):
        subprocess.run(["mount", *a], check=True, timeout=10)
    mount("-t", "tmpfs", "-o", "mode=755", "lab-rw", f"{lab}/rw")
    for d in ("upper", "work"):
        os.mkdir(f"{lab}/rw/{d}")
    mount("-t", "overlay", "lab-root", "-o", f"lowerdir=/,upperdir={lab}/rw/upper,workdir={lab}/rw/work", R)
    mount("-t", "proc", "proc", f"{R}/proc")
    mount("-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", f"{R}/sys")
    cg = f"{R}/sys/fs/cgroup"
    if layout == "v2":
        mount("-t", "cgroup2", "-o", "nosuid,nodev,noexec", "cgroup2", cg)
    else:
        mount("-t", "tmpfs", "-o", "mode=755,nosuid,nodev,noexec", "cgroup", cg)
        for name, opts, _ in hierarchies():
            os.mkdir(f"{cg}/{name}")
            if name == "unified":
                mount("-t", "cgroup2", "-o", "nosuid,nodev,noexec", "cgroup2", f"{cg}/unified")
            else:
                mount("-t", "cgroup", "-o", f"nosuid,nodev,noexec,{opts}", "cgroup", f"{cg}/{name}")
    dev = f"{R}/dev"
    mount("-t", "tmpfs", "-o", "mode=755,nosuid", "dev", dev)
    os.umask(0)
    for node, major, minor in (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
                               ("urandom", 1, 9), ("tty", 5, 0), ("nvidiactl", 195, 255), ("nvidia0", 195, 0)):
        os.mknod(f"{dev}/{node}", 0o20666, os.makedev(major, minor))   # S_IFCHR | 0666
    os.umask(0o022)
    for d, mode in (("pts", 0o755), ("shm", 0o1777), ("mqueue", 0o755)):
        os.mkdir(f"{dev}/{d}")
        os.chmod(f"{dev}/{d}", mode)
    for link, target in (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "fd/0"), ("stdout", "fd/1"),
                         ("stderr", "fd/2")):
        os.symlink(target, f"{dev}/{link}")
    if dev_char:     # what udev / `nvidia-ctk system create-dev-char-symlinks` leave on a GPU node
        os.mkdir(f"{dev}/char")
        for node, minor in GPU:
            os.symlink(f"../{node}", f"{dev}/char/195:{minor}")
    mount("-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=620,gid=5", "devpts", f"{dev}/pts")
    Path(f"{dev}/console").touch()
    Path(f"{lab}/state/console.log").write_text("")
    mount("--bind", f"{lab}/state/console.log", f"{dev}/console")
    mount("-t", "tmpfs", "-o", "mode=755,nosuid,nodev", "run", f"{R}/run")
    mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmp", f"{R}/tmp")
    project = str(HERE.parent)  # the checkout: the hook, this file and the tool run from it inside
    if any(project == d or project.startswith(d + "/") for d in ("/tmp", "/run")):  # hidden by the tmpfs above
        os.makedirs(f"{R}{project}", exist_ok=True)
        mount("--bind", project, f"{R}{project}")
        mount("-o", "remount,bind,ro", f"{R}{project}")  # the host is never written from inside
    os.makedirs(f"{R}{lab}", exist_ok=True)
    mount("--bind", lab, f"{R}{lab}")
    E = f"{R}/etc/systemd"
    files = {
        "system/dbus.socket.d/lab.conf": "[Unit]\nDefaultDependencies=no\n",
        "system/dbus.service.d/lab.conf": "[Unit]\nDefaultDependencies=no\nAfter=dbus.socket\n",
        "journald.conf.d/lab.conf": f"[Journal]\nStorage={'persistent' if persistent else 'volatile'}\n",
        # with a persistent journal, a node's boot flushes /run/log/journal into /var/log/journal
        "system/lab.target": "[Unit]\nDescription=systemd lab (journald, dbus, containerd)\nWants=systemd-journald"
                             ".socket systemd-journald.service dbus.socket dbus.service containerd.service"
                             + (" systemd-journal-flush.service" if persistent else "") + "\n",
        "system/containerd.service": "[Unit]\nDescription=containerd container runtime (lab)\nDefaultDependencies=no"
                                     "\nAfter=dbus.service systemd-journald.service\n[Service]\nExecStart=/usr/bin/"
                                     "containerd\nType=notify\nDelegate=yes\nKillMode=process\n",
    }
    for rel, text in files.items():
        os.makedirs(os.path.dirname(f"{E}/{rel}"), exist_ok=True)
        Path(f"{E}/{rel}").write_text(text)
    if persistent:
        os.makedirs(f"{R}/var/log/journal", exist_ok=True)
    else:
        subprocess.run(["rm", "-rf", f"{R}/var/log/journal"], check=True, timeout=10)
    os.makedirs(f"{R}/etc/containerd", exist_ok=True)
    Path(f"{R}/etc/containerd/config.toml").write_text(
        'version = 2\nroot = "/var/lib/containerd"\nstate = "/run/containerd"\n[grpc]\n  address = "' + SOCK + '"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n    SystemdCgroup = true\n')
    subprocess.run(["hostname", "syslab"], check=True, timeout=10)
    os.chdir(R)
    os.mkdir(".lab-oldroot")
    subprocess.run(["pivot_root", ".", ".lab-oldroot"], check=True, timeout=10)
    os.chdir("/")
    subprocess.run(["umount", "-l", "/.lab-oldroot"], check=True, timeout=10)
    os.rmdir("/.lab-oldroot")
    os.execve("/lib/systemd/systemd", ["/lib/systemd/systemd", "--unit=lab.target", "--show-status=no"],
              {"container": "syslab", "PATH": PATH, "LANG": "C.UTF-8"})


def hook(lab: str) -> None:
    """The legacy prestart hook (OCI state on stdin): GPU nodes into the container, and allow rules
    outside the spec (v1: devices.allow; v2: device programs replaced, :func:`bpfdev.replace`)."""
    state = json.load(sys.stdin)
    pid, bundle = state["pid"], state["bundle"]
    root = json.loads(Path(bundle, "config.json").read_text())["root"]["path"]
    rootfs = root if root.startswith("/") else os.path.join(bundle, root)
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        sys.path.insert(0, str(HERE))
        import bpfdev
        path = next(ln.split(":", 2)[2] for ln in lines if ln.startswith("0::"))
        ids = bpfdev.replace(f"/sys/fs/cgroup{path}")
        note = f"programs {ids}"
    else:
        path = next(ln.split(":", 2)[2] for ln in lines if ln.split(":")[1] == "devices")
        for minor in (255, 0):
            Path(f"/sys/fs/cgroup/devices{path}/devices.allow").write_text(f"c 195:{minor} rw")
        note = "devices.allow"
    for node, minor in GPU:
        subprocess.run(["/usr/bin/nsenter", "-t", str(pid), "-m", "/bin/mknod", "-m", "666",
                        f"{rootfs}/dev/{node}", "c", "195", str(minor)], check=True, timeout=10)
    with open(f"{lab}/state/hook.log", "a") as log:
        print(f"hook: pid={pid} cgroup={path} {note}", file=log)


def runtime(lab: str, args: list[str]) -> None:
    """The legacy-mode ``nvidia-container-runtime`` (NVIDIA/nvidia-container-toolkit
    internal/modifier/stable.go): on ``create``, add the legacy hook (:func:`hook`) to the bundle's on-disk
    config.json, then exec runc with ``args`` unchanged."""
    if "create" in args:
        cfg = os.path.join(args[args.index("--bundle" if "--bundle" in args else "-b") + 1], "config.json")
        spec = json.loads(Path(cfg).read_text())
        spec.setdefault("hooks", {}).setdefault("prestart", []).append(
            {"path": f"{lab}/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]})
        Path(cfg).write_text(json.dumps(spec))
    runc = next(f"{d}/runc" for d in PATH.split(":") if os.path.exists(f"{d}/runc"))
    os.execv(runc, ["runc", *args])


if __name__ == "__main__":
    if sys.argv[1:2] == ["init"]:
        ns_init(sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1", sys.argv[5])
    elif sys.argv[1:2] == ["hook"]:
        hook(sys.argv[2])
    elif sys.argv[1:2] == ["runtime"]:
        runtime(sys.argv[2], sys.argv[3:])
    else:
        sys.exit("usage: syslab_ns.py init LAYOUT DEV_CHAR PERSISTENT LAB | hook LAB prestart | runtime LAB ARGS...")
