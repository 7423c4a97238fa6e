"""Device access from inside a container: what its /dev holds (lstat only, :func:`list_dev`), and,
with the opt-in ``--probe``, whether it can still open its GPU device nodes right now (:func:`probe`).

A device-cgroup denial is not logged anywhere (docs/sources.md "Cases" C15), so the only direct evidence that a
container has lost its GPU is the errno of ``open()`` made from inside it. For one container, a
short-lived child process:

1. sets its own ``oom_score_adj`` to 1000 (if joining pushes a memory-limited cgroup over its limit,
   the OOM killer takes the probe, never the workload), then writes its own pid into the
   container's ``cgroup.procs`` (the devices hierarchy on cgroup v1,
   the unified one on v2) -- the only write the tool makes on the host, undone by the kernel when
   the child exits;
2. joins the container's mount namespace (``setns(fd, CLONE_NEWNS)`` on ``/proc/<pid>/ns/mnt``;
   via ctypes because ``os.setns`` is Python 3.12+), so that every path, including absolute
   symlinks, resolves inside the container's root and never on the host;
3. for each target: ``lstat`` again, and only when it is still a character device with the expected
   NVIDIA major:minor, ``open(path, O_RDWR|O_NOFOLLOW|O_NONBLOCK|O_NOCTTY)``, ``fstat`` the result,
   close it, and report ``ok`` or the errno name (EPERM: device cgroup; ENXIO: allowed but no driver
   behind it; ENOENT; EACCES; ...).

The child is a fresh single-threaded interpreter (``setns`` into a mount namespace fails for a
threaded process) and imports everything before it joins. The parent reads its report line by line
under a hard deadline and kills it when the deadline passes, so a FIFO, a stuck driver or a FUSE
mount cannot hold the collector. Only NVIDIA majors (195 and the ``nvidia*`` entries of
``/proc/devices``) are ever opened: opening an arbitrary character device (a watchdog, a tape) can
have side effects.
"""
from __future__ import annotations

import errno
import json
import os
import selectors
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

from forensics import hostfs
from forensics.artifact import Artifact, Status, from_oserror

NVIDIA_MAJOR = 195            #: Documentation/admin-guide/devices.txt
TIMEOUT_S = 5.0               #: per container
CLONE_NEWNS = 0x00020000
MAX_DEV_ENTRIES = 4096        #: matching entries kept per /dev directory
MAX_DEV_SEEN = 1_000_000      #: directory entries looked at per /dev directory (junk does not hide GPUs)
GPU_DIRS = ("nvidia-caps", "dri")  #: /dev subdirectories listed (one level, never recursed)
#: names lstat'ed directly before the directory is scanned, so that no amount of other entries hides them
WELL_KNOWN = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
              *(f"nvidia{i}" for i in range(64)), *GPU_DIRS)

_CHILD = r'''
import ctypes, errno, json, os, stat, sys
a = json.loads(sys.argv[1])
def out(**kw):
    sys.stdout.write(json.dumps(kw) + "\n"); sys.stdout.flush()
def name(code):
    return errno.errorcode.get(code, "E%d" % code)
libc = ctypes.CDLL(None, use_errno=True)
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
except OSError:
    pass
for procs in a["procs"]:
    try:
        fd = os.open(procs, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    except OSError as e:
        out(stage="cgroup", file=procs, error=name(e.errno)); sys.exit(3)
try:
    ns = os.open(a["mntns"], os.O_RDONLY | os.O_CLOEXEC)
except OSError as e:
    out(stage="setns", error=name(e.errno)); sys.exit(3)
if libc.setns(ns, a["flag"]) != 0:
    out(stage="setns", error=name(ctypes.get_errno())); sys.exit(3)
os.close(ns)
os.chdir("/")
out(stage="joined")
for i, (path, major, minor) in enumerate(a["targets"]):
    try:
        st = os.lstat(path)
    except OSError as e:
        out(i=i, result=name(e.errno)); continue
    if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (major, minor):
        out(i=i, result="not-run", why="no longer the character device that was listed"); continue
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        out(i=i, result=name(e.errno)); continue
    try:
        st2 = os.fstat(fd)
    finally:
        os.close(fd)
    same = stat.S_ISCHR(st2.st_mode) and st2.st_rdev == st.st_rdev
    out(i=i, result="ok" if same else "not-run", why=None if same else "replaced during the probe")
'''


def nvidia_majors(root: str | os.PathLike) -> set[int]:
    """Character majors of the NVIDIA driver: 195 plus every ``nvidia*`` name in the *Character
    devices* section of ``<root>/proc/devices`` (nvidia-uvm, nvidia-caps, nvidia-nvswitch... are
    dynamic; proc(5) /proc/devices). Never raises; an unreadable file gives ``{195}``."""
    majors = {NVIDIA_MAJOR}
    try:
        text = hostfs.read_text(root, "/proc/devices", limit=1 << 16)
    except OSError:
        return majors
    section = None
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            section = line.strip()
            continue
        parts = line.split()
        if section == "Character devices:" and len(parts) == 2 and parts[0].isdigit() \
                and parts[1].startswith("nvidia"):
            majors.add(int(parts[0]))
    return majors


# -- what the container sees in /dev (lstat only) --------------------------------------------------
def list_dev(root: str | os.PathLike, pid: int,
             deadline: float | None = None) -> tuple[list[dict], list[tuple[str, str]], list[Artifact]]:
    """The GPU entries of the container's /dev, read with lstat only: ``/dev/nvidia*``,
    ``/dev/nvidia-caps/*`` and ``/dev/dri/*``, through ``<root>/proc/<pid>/root``.

    Returns ``(entries, raw, problems)``: ``entries`` are ``{"path", "kind" (c, b, fifo, symlink,
    regular, dir, socket, other), "major", "minor", "mode" ("0666"), "target" (a symlink's text)}``
    with undecodable name bytes shown as ``\\xNN``; ``raw`` maps each display path to the real
    path (bytes kept as surrogates) for :func:`probe`; ``problems`` are manifest records for what
    could not be read. /proc/<pid>/root is the kernel's magic link to the container's root and is
    followed on purpose on the live host only (:func:`_container_root`; under a copied root a link
    there is recorded as an ``error`` and nothing is listed); everything below it is opened relative to a directory descriptor with
    ``O_NOFOLLOW``, so a /dev, /dev/nvidia-caps or /dev/dri that is a symlink is recorded as one and
    never entered. Directories are listed one level deep, never recursed: the names of
    :data:`WELL_KNOWN` that exist are always kept (lstat'ed directly when the listing
    stops early), and up to :data:`MAX_DEV_SEEN` entries are looked at
    (until ``deadline``, a ``time.monotonic()`` value, passes) and at most :data:`MAX_DEV_ENTRIES`
    matching ones kept, so junk in /dev cannot hide the GPU nodes. Directories are opened with
    ``O_NOATIME`` (as root), so listing them leaves their atime alone. Never raises ``OSError``.
    """
    entries: list[dict] = []
    raw: list[tuple[str, str]] = []
    problems: list[Artifact] = []
    source = f"/proc/{pid}/root/dev"
    try:
        root_fd = _container_root(root, pid)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.realpath(root) != "/":
            return entries, raw, [_copied_link(root, pid)]
        return entries, raw, [from_oserror(f"/proc/{pid}/root", "lstat", e)]
    try:
        try:
            dev_fd = _open_dir("dev", root_fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            entries.append(_entry(root_fd, "dev", "/dev"))
            return entries, raw, problems
        try:
            for name in _scan(dev_fd, source, lambda n: n.startswith("nvidia") or n in GPU_DIRS, problems,
                              WELL_KNOWN, deadline):
                e = _entry(dev_fd, name, "/dev/" + _display(name))
                entries.append(e)
                raw.append((e["path"], "/dev/" + name))
                if name in GPU_DIRS and e["kind"] == "dir":
                    _subdir(dev_fd, name, entries, raw, problems, deadline)
        finally:
            os.close(dev_fd)
    except OSError as e:
        problems.append(from_oserror(source, "lstat", e))
    finally:
        os.close(root_fd)
    return entries, raw, problems


def _container_root(root, pid: int) -> int:
    """An ``O_PATH`` descriptor of the container's root. On the live host (``root`` is ``/``)
    ``/proc/<pid>/root`` is the kernel's magic link, followed on purpose; under any other root (a
    copied root, a disk image) it is an ordinary symlink whose text would resolve on the collecting
    machine, so every component is opened with ``O_NOFOLLOW`` and must be a real directory inside
    ``root`` (``ELOOP`` / ``ENOTDIR`` otherwise)."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    if os.path.realpath(root) == "/":
        return os.open(f"/proc/{pid}/root", flags)
    fd = os.open(root, flags)
    try:
        for name in ("proc", str(pid), "root"):
            nxt = os.open(name, flags | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _copied_link(root, pid: int) -> Artifact:
    """The record for a ``<root>/proc/<pid>/root`` that is a link (or no directory) in a copied root."""
    try:
        text = os.readlink(os.path.join(root, "proc", str(pid), "root"))
    except OSError:
        text = None
    what = f"a symlink to {text!r}" if text is not None else "not a directory"
    return Artifact(None, f"/proc/{pid}/root", Status.ERROR, "lstat", errno=errno.ELOOP,
                    message=f"/proc/{pid}/root under --root {root} is {what}: outside the live host it would "
                            "resolve on this machine, not the node, so the container's /dev was not read")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "c"), (stat.S_ISBLK, "b"), (stat.S_ISFIFO, "fifo"),
                       (stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular"), (stat.S_ISDIR, "dir"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "other"


def _display(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 become ``\\xNN`` (the name itself is data)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _entry(dir_fd: int, name: str, shown: str) -> dict:
    """One lstat'ed entry; ``ctime`` (ISO UTC) tells when the node was made or last changed, so that a
    node made inside the container after its creation can be told from one the runtime made. Reading a
    symlink's text updates the link's atime: unavoidable (readlinkat has no O_NOATIME)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    kind = _kind(st.st_mode)
    dev = kind in ("c", "b")
    return {"path": shown, "kind": kind, "major": os.major(st.st_rdev) if dev else None,
            "minor": os.minor(st.st_rdev) if dev else None, "mode": f"{stat.S_IMODE(st.st_mode):04o}",
            "target": _display(os.readlink(name, dir_fd=dir_fd)) if kind == "symlink" else None,
            "ctime": _iso_ns(st.st_ctime_ns)}


def _iso_ns(ns: int) -> str | None:
    """Nanoseconds since the epoch as ``2026-01-02T03:04:05.123456Z``; ``None`` out of range."""
    try:
        at = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc) + timedelta(microseconds=ns % 1_000_000_000 // 1000)
        return at.isoformat(timespec="microseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def _open_dir(name: str, dir_fd: int) -> int:
    """Open a directory below ``dir_fd`` without following a symlink (ELOOP/ENOTDIR otherwise); as root
    with ``O_NOATIME``, so that listing it leaves its atime alone."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if os.geteuid() == 0 and getattr(os, "O_NOATIME", 0):
        try:
            return os.open(name, flags | os.O_NOATIME, dir_fd=dir_fd)
        except PermissionError:  # root without CAP_FOWNER (a pod that dropped it): list it all the same
            pass
    return os.open(name, flags, dir_fd=dir_fd)


def _subdir(dev_fd: int, name: str, entries: list, raw: list, problems: list, deadline: float | None = None) -> None:
    try:
        sub_fd = _open_dir(name, dev_fd)
    except OSError as e:
        problems.append(from_oserror(f"/dev/{name}", "lstat", e, ("inside the container",)))
        return
    try:
        for child in _scan(sub_fd, f"/dev/{name}", lambda n: True, problems, (), deadline):
            e = _entry(sub_fd, child, f"/dev/{_display(name)}/{_display(child)}")
            entries.append(e)
            raw.append((e["path"], f"/dev/{name}/{child}"))
    finally:
        os.close(sub_fd)


def _scan(fd: int, source: str, want, problems: list, known=(), deadline: float | None = None) -> list[str]:
    """Names in the directory ``fd`` that ``want`` accepts: the ``known`` names that exist, then those
    found by reading the directory, which stops after :data:`MAX_DEV_SEEN` entries or at ``deadline``; at
    most :data:`MAX_DEV_ENTRIES` found names are kept besides the known ones. A known name is never
    counted against those bounds; when the reading went to the end, the known names it met are the ones
    that exist, and only when it stopped early is each known name lstat'ed directly (so junk in the
    directory cannot hide them)."""
    known_set = set(known)
    met, names, found, seen, whole = [], [], 0, 0, True
    with os.scandir(fd) as it:
        for de in it:
            seen += 1
            if seen > MAX_DEV_SEEN or (deadline is not None and seen % 1024 == 0 and time.monotonic() >= deadline):
                why = (f"only the first {MAX_DEV_SEEN} entries scanned" if seen > MAX_DEV_SEEN
                       else f"the time budget ran out after {seen - 1} entries")
                problems.append(Artifact(None, source, Status.TRUNCATED, "lstat", notes=(f"truncated: {why}",)))
                whole = False
                break
            if de.name in known_set:
                met.append(de.name)
                continue
            if not want(de.name):
                continue
            if found >= MAX_DEV_ENTRIES:
                problems.append(Artifact(None, source, Status.TRUNCATED, "lstat",
                                         notes=(f"truncated: only {MAX_DEV_ENTRIES} matching entries kept",)))
                whole = False
                break
            found += 1
            names.append(de.name)
    if not whole:
        met = [n for n in known if _lstat_ok(n, fd)]
    return sorted(met + names)


def _lstat_ok(name: str, dir_fd: int) -> bool:
    """Whether ``name`` exists in the directory ``dir_fd`` (lstat, never followed)."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


# -- the open() probe ------------------------------------------------------------------------------
def probe(root: str | os.PathLike, pid: int, cgroup_dirs: list[str], targets: list[tuple[str, int, int]],
          timeout: float = TIMEOUT_S) -> tuple[list[str], dict]:
    """Open each target from inside the container whose init is ``pid``.

    ``cgroup_dirs`` are the container's cgroup directories as host paths (runc's ``cgroup_paths``,
    e.g. ``/sys/fs/cgroup/devices/kubepods/...``; read under ``root``); ``targets`` are
    ``(path inside the container, major, minor)``. Returns ``(results, report)``: one result per
    target (``ok``, an errno name such as ``EPERM``/``ENXIO``/``ENOENT``/``EACCES``, ``not-run``
    when the child could not join or the entry changed, ``timeout`` when the deadline of
    ``timeout`` seconds passed first) and the child's raw report (stages, errors, elapsed seconds).
    Never raises for a probe failure.
    """
    results = ["not-run"] * len(targets)
    report: dict = {"pid": pid, "cgroup_dirs": list(cgroup_dirs), "lines": [], "timed_out": False}
    procs = []
    for d in cgroup_dirs:
        real = _cgroup_procs(root, d)
        if real is None:
            report["error"] = f"not a cgroup directory under /sys/fs/cgroup: {d!r}"
            return results, report
        procs.append(real)
    if not procs:
        report["error"] = "no cgroup to join"
        return results, report
    args = {"procs": procs, "mntns": os.path.join(root, "proc", str(pid), "ns", "mnt"), "flag": CLONE_NEWNS,
            "targets": [[p, ma, mi] for p, ma, mi in targets]}
    started = time.monotonic()
    try:
        child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD, json.dumps(args)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env={}, cwd="/", close_fds=True)
    except OSError as e:
        report["error"] = f"cannot start the probe child: {e}"
        return results, report
    lines = _read_lines(child, started + timeout, report)
    report["elapsed_s"] = round(time.monotonic() - started, 3)
    report["exit"] = child.returncode
    for line in lines:
        try:
            msg = json.loads(line)
        except ValueError:
            report["lines"].append({"text": line[:500]})
            continue
        report["lines"].append(msg)
        i = msg.get("i") if isinstance(msg, dict) else None
        if isinstance(i, int) and 0 <= i < len(results) and isinstance(msg.get("result"), str):
            results[i] = msg["result"][:32]
    if report["timed_out"]:
        answered = {m.get("i") for m in report["lines"] if isinstance(m, dict)}
        joined = any(isinstance(m, dict) and m.get("stage") == "joined" for m in report["lines"])
        for i in range(len(results)):
            if i not in answered and joined:
                results[i] = "timeout"
                break  # the one it was stuck on; the rest were never tried
    return results, report


def _cgroup_procs(root, d: str) -> str | None:
    """``<root><d>/cgroup.procs`` when ``d`` is a plain path under /sys/fs/cgroup whose
    ``cgroup.procs`` exists as a regular file (a cgroupfs directory); ``None`` otherwise."""
    if not isinstance(d, str) or not d.startswith("/sys/fs/cgroup/") or ".." in d.split("/"):
        return None
    real = os.path.join(root, d.lstrip("/"), "cgroup.procs")
    try:
        st = os.lstat(real)
    except OSError:
        return None
    return real if stat.S_ISREG(st.st_mode) else None


def _read_lines(child: subprocess.Popen, deadline: float, report: dict) -> list[str]:
    """The child's output lines until EOF or ``deadline`` (monotonic); kills it at the deadline and
    never waits more than one further second for it to go."""
    buf = b""
    sel = selectors.DefaultSelector()
    sel.register(child.stdout, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                report["timed_out"] = True
                break
            if not sel.select(left):
                continue
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > 1 << 20:
                report["error"] = "probe child wrote more than 1 MiB"
                break
    finally:
        sel.close()
        if child.poll() is None:
            child.kill()
        try:
            child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            report["error"] = "probe child did not exit after SIGKILL (uninterruptible sleep); left behind"
        child.stdout.close()
    return buf.decode("utf-8", "replace").splitlines()

