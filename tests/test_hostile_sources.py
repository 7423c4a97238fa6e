"""Hostile files where the newer sources are read (issue 27 B): the runtime and plugin configs, OCI hooks.d,
CDI specs, Docker's and CRI-O's container files, the kubelet's config, unit and checkpoints, the kernel log
files, the host driver files and the pod logs. Each source meets each attack on a real file system under a
temporary ``--root``: a real FIFO (``os.mkfifo``) where the file should be, a directory, real symlinks out of
the root (absolute and relative, to the file and to its directory) at a file outside holding a marker, a real
1 GiB sparse file, a file that a writer keeps growing while it is read, documents of the wrong type (a JSON
list where an object belongs, a TOML that is not TOML, YAML that is a list or carries a Python tag) and a
time budget already spent.

Every case must end, quickly, with the source's outcome recorded (collected / absent / unreadable / error /
truncated, with a message or note), the marker nowhere in the bundle, no traceback out of ``acquire`` or
``read``, and what is stored within the source's byte bound. The collectors run directly (``acquire`` then
``read``), in a worker thread the test waits on with a timeout, so that a hang is a failure, not a stuck run.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import collectors.containers as containers
import collectors.kernlog as kernlog
import collectors.kubelet as kubelet
import collectors.nvidia_host as nvidia_host
import collectors.podlogs as podlogs
import collectors.runtime_config as runtime_config
from forensics.artifact import Status
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.source import NOT_READ, CollectContext

MARKER = b"MARKER-7f3a-outside-the-root"
GIB = 1 << 30
HANG_S = 60          #: an acquire that takes longer has hung
QUICK_S = 20         #: what one hostile source may cost (the 1 GiB file included)
BUDGET_S = 10        #: the time budget of the growing-file case
#: the largest byte bound of these sources (kernel logs: bytes read; what is stored adds each line's number)
BIGGEST = 72 << 20

CID, CRIO_ID = "5eed" * 16, "c210" * 16
MOBY = f"run/containerd/io.containerd.runtime.v2.task/moby/{CID}"
CRIO = f"run/containers/storage/overlay-containers/{CRIO_ID}/userdata"
POD = "/var/log/pods/gpu-operator_nvidia-device-plugin-daemonset-x7k2p_0a1b2c3d-1111-2222-3333-444455556666"


@dataclass
class Source:
    """One host file a collector reads: its collector, host path, format (json|toml|yaml|text) and good
    content; ``setup(root)`` writes what else makes the collector look at it."""

    name: str
    mod: object
    path: str
    kind: str
    good: bytes
    setup: Callable[[Path], None] = lambda root: None
    #: the record that says the source was cut by the budget, when it is not the file's own: the containers
    #: the budget left are listed in one record (containers/not-read.json, source "containers"), the roots
    #: discovery did not list in another (source "containers:discovery")
    budget_source: str | None = None
    #: the line another process keeps appending in the growing-file case (default: the good file's last line)
    filler: bytes | None = None


def _w(p: Path, data: bytes | str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data if isinstance(data, bytes) else data.encode())


def _moby(root: Path) -> None:
    """A Docker container under dockerd's containerd (the ``moby`` namespace) with its runc state."""
    _w(root / MOBY / "config.json", json.dumps({"ociVersion": "1.1.0", "process": {"env": []}}))
    _w(root / MOBY / "options.json", json.dumps({"binary_name": "runc", "root": "/run/docker/runtime-runc"}))
    _w(root / f"run/docker/runtime-runc/moby/{CID}/state.json", json.dumps({"id": CID, "init_process_pid": 424242}))


def _crio(root: Path) -> None:
    (root / CRIO).mkdir(parents=True, exist_ok=True)
    _w(root / f"run/runc/{CRIO_ID}/state.json", json.dumps({"id": CRIO_ID, "init_process_pid": 434343}))


def _kubelet_unit(root: Path) -> None:
    _w(root / "etc/systemd/system/kubelet.service",
       "[Service]\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml "
       "--config-dir=/etc/kubernetes/kubelet.conf.d\n")


def _fabric(root: Path) -> None:
    _w(root / "usr/share/nvidia/nvswitch/fabricmanager.cfg", "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\n")


SOURCES = [
    Source("containerd-config", runtime_config, "/etc/containerd/config.toml", "toml",
           b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'),
    Source("toolkit-config", runtime_config, "/etc/nvidia-container-runtime/config.toml", "toml",
           b'[nvidia-container-runtime]\nmode = "auto"\n'),
    Source("cdi-spec", runtime_config, "/etc/cdi/nvidia.yaml", "yaml",
           b"cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n  containerEdits:\n"
           b"    deviceNodes:\n    - path: /dev/nvidia0\n"),
    Source("cdi-spec-json", runtime_config, "/var/run/cdi/nvidia.json", "json",
           b'{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}'),
    Source("oci-hook", runtime_config, "/etc/containers/oci/hooks.d/oci-nvidia-hook.json", "json",
           b'{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-toolkit", "args": '
           b'["nvidia-container-toolkit", "prestart"]}, "when": {"always": true}, "stages": ["prestart"]}'),
    Source("docker-daemon", runtime_config, "/etc/docker/daemon.json", "json",
           b'{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, '
           b'"exec-opts": ["native.cgroupdriver=systemd"]}'),
    Source("crio-conf", runtime_config, "/etc/crio/crio.conf", "toml", b'[crio.runtime]\ncgroup_manager = "systemd"\n'),
    Source("crio-drop-in", runtime_config, "/etc/crio/crio.conf.d/99-nvidia.toml", "toml",
           b'[crio.runtime]\nhooks_dir = ["/etc/containers/oci/hooks.d"]\n',
           setup=lambda root: _w(root / "etc/crio/crio.conf", '[crio]\n')),
    Source("plugin-settings", runtime_config, "/etc/nvidia-k8s-device-plugin/settings.yaml", "yaml",
           b"version: v1\nflags:\n  plugin:\n    passDeviceSpecs: false\n"),
    Source("docker-container-config", containers, f"/var/lib/docker/containers/{CID}/config.v2.json", "json",
           b'{"Name": "/trainer", "Config": {"Image": "nvcr.io/nvidia/pytorch:24.08-py3", "Labels": {}}}', setup=_moby,
           budget_source="containers"),
    Source("crio-container-config", containers, f"/{CRIO}/config.json", "json",
           b'{"ociVersion": "1.1.0", "annotations": {"io.kubernetes.pod.name": "job-0"}}', setup=_crio,
           budget_source="containers:discovery"),  # a budget long spent: the CRI-O run root is not even listed
    Source("kubelet-config", kubelet, "/var/lib/kubelet/config.yaml", "yaml",
           b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n"),
    Source("kubelet-drop-in", kubelet, "/etc/kubernetes/kubelet.conf.d/10-gpu.conf", "yaml",
           b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: none\n"),
    Source("kubelet-unit", kubelet, "/etc/systemd/system/kubelet.service", "text",
           b"[Service]\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml\n"),
    Source("kubelet-checkpoint", kubelet, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "json",
           b'{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {"nvidia.com/gpu": ["GPU-0"]}}, "Checksum": 1}',
           setup=_kubelet_unit),
    Source("cpu-manager-state", kubelet, "/var/lib/kubelet/cpu_manager_state", "json",
           b'{"policyName": "static", "defaultCpuSet": "0-3", "checksum": 1}', setup=_kubelet_unit),
    Source("k3s-config", kubelet, "/etc/rancher/k3s/config.yaml", "yaml", b"kubelet-arg:\n- cpu-manager-policy=static\n"),
    Source("kern-log", kernlog, "/var/log/kern.log", "text",
           b"Sep  2 04:05:13 gpu-node-3 kernel: [  123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, "
           b"name=python3, GPU has fallen off the bus.\n",
           filler=b"Sep  2 04:05:14 gpu-node-3 systemd[1]: Started session-7.scope - Session 7 of User ubuntu.\n"),
    Source("nvidia-version", nvidia_host, "/proc/driver/nvidia/version", "text",
           b"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
           b"(dvs-builder@U16-I3-B03-4-3)  Tue May 13 22:09:03 UTC 2025\nGCC version:  gcc version 12.2.0\n"),
    Source("fabricmanager-cfg", nvidia_host, "/usr/share/nvidia/nvswitch/fabricmanager.cfg", "text",
           b"LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\n"),
    Source("fabricmanager-log", nvidia_host, "/var/log/fabricmanager.log", "text",
           b"[Sep 02 2026 04:05:13] [ERROR] [tid 1] NVLink training failed\n", setup=_fabric),
    Source("dpkg-status", nvidia_host, "/var/lib/dpkg/status", "text",
           b"Package: nvidia-driver-570\nStatus: install ok installed\nVersion: 570.158.01-0ubuntu1\n\n"),
    Source("pod-log", podlogs, f"{POD}/nvidia-device-plugin/0.log", "text",
           b"2026-09-02T04:05:13.123456789Z stderr F failed to initialize NVML: Unknown Error\n"),
]

#: a document of the wrong type for each format, and one that is not of the format at all
WRONG = {"json": [b'["a", 1, {"b": null}]', b'{"runtimes": [1], "hook": "x", "Data": 5, "Config": [], "exec-opts": 7,'
                  b' "devices": {"x": 1}, "annotations": [], "policyName": {}, "entries": "x"}', b"{not json"],
         "toml": [b"this is not = [toml", b'version = "two"\nplugins = 5\nimports = 3\n[crio]\nruntime = [1, 2]\n'
                  b'[nvidia-container-runtime]\nmodes = "x"\n'],
         "yaml": [b"- a\n- b\n", b"!!python/object/apply:os.system ['touch /tmp/pwned']\n", b"key: [unclosed\n",
                  b"cpuManagerPolicy: [1, 2]\nflags: 5\ndevices: {a: b}\ncontainerEdits: 3\n"],
         "text": [b"\x00\xff\xfe" * 4096 + b"\n" + b"\xc3\x28" * 100]}


# -- running one collector -------------------------------------------------------------------------
def run(mod, root: Path, out: Path, deadline: float | None = None) -> tuple[Bundle, object, float]:
    """``mod.acquire`` over ``root`` into a bundle at ``out`` (in a worker thread; a hang fails the test), then
    ``mod.read`` of it. Returns ``(bundle, reading, seconds acquire took)``; an exception of either fails."""
    w = BundleWriter(out)
    ctx = CollectContext(root=root, writer=w, deadline=deadline)
    failed: list[BaseException] = []

    def work():
        try:
            mod.acquire(ctx)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            failed.append(e)
    t0 = time.monotonic()
    th = threading.Thread(target=work, daemon=True)
    th.start()
    th.join(HANG_S)
    took = time.monotonic() - t0
    assert not th.is_alive(), f"{mod.NAME}.acquire hung for {HANG_S} s"
    if failed:
        raise failed[0]
    w.meta.update({"collection": {"start": "2026-09-02T05:00:00Z", "end": "2026-09-02T05:00:09Z"}})
    w.finish()
    b = Bundle.open(out)
    return b, mod.read(b, NodeFacts()), took


def records(b: Bundle, path: str) -> list:
    """The manifest records of the host source ``path``."""
    return [a for a in b.artifacts() if a.source == path]


def assert_marker_absent(bundle_dir: Path) -> None:
    for p in bundle_dir.rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert MARKER not in p.read_bytes(), f"the marker from outside the root reached {p}"


def assert_stored_within_bound(b: Bundle) -> None:
    for a in b.artifacts():
        if a.path:
            assert (a.size or 0) <= BIGGEST, (a.path, a.size)


def _root(tmp_path: Path, src: Source) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    src.setup(root)
    return root


def _ids(srcs):
    return [s.name for s in srcs]


# -- the attacks -----------------------------------------------------------------------------------
@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_good_file_is_collected(tmp_path, src):
    """The baseline the attacks are measured against: the good file is read and recorded collected."""
    root = _root(tmp_path, src)
    _w(root / src.path.lstrip("/"), src.good)
    b, _reading, _ = run(src.mod, root, tmp_path / "b")
    recs = records(b, src.path)
    assert recs and all(a.status is Status.COLLECTED for a in recs), recs


class Opens:
    """Counts the opens of one path with inotify(7) ``IN_OPEN`` (which the kernel raises for a FIFO or a device
    node opened through that path, however briefly): the proof that the collector never opened it."""

    IN_OPEN = 0x20

    def __init__(self, path: Path):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0 and libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN) >= 0

    def count(self) -> int:
        try:
            return len(os.read(self.fd, 1 << 16)) // 16  # struct inotify_event, no name for a watched file
        except BlockingIOError:
            return 0
        finally:
            os.close(self.fd)


@pytest.mark.parametrize("kind", ["fifo", "char device"])
@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_a_fifo_or_device_is_refused_never_opened(tmp_path, src, kind):
    """A FIFO (no writer ever comes: opening it to read would block) or a character device where the file should
    be: the collector returns at once, never opens it (inotify sees no open), and records it as an error that
    names what it is."""
    import stat
    root = _root(tmp_path, src)
    p = root / src.path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(p) if kind == "fifo" else os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    opens = Opens(p)
    b, _reading, took = run(src.mod, root, tmp_path / "b")
    assert took < QUICK_S
    assert opens.count() == 0, f"{src.path} ({kind}) was opened"
    recs = records(b, src.path)
    assert recs and all(a.status is Status.ERROR and kind in (a.message or "") for a in recs), recs


@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_a_directory_where_the_file_should_be_is_an_error(tmp_path, src):
    root = _root(tmp_path, src)
    (root / src.path.lstrip("/")).mkdir(parents=True)
    b, _reading, _ = run(src.mod, root, tmp_path / "b")
    recs = records(b, src.path)
    assert recs and all(a.status is Status.ERROR and "directory" in (a.message or "") for a in recs), recs


@pytest.mark.parametrize("how", ["absolute", "relative", "directory"])
@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_a_symlink_out_of_the_root_is_not_followed(tmp_path, src, how):
    """The file (or its directory) is a symlink to a file outside the root that holds a marker: read as the
    node would see it from its own root (``chroot`` semantics), the target is not there; the marker must not
    reach the bundle, and the source is recorded (absent, or refused as a link)."""
    root = _root(tmp_path, src)
    outside = tmp_path / "outside"
    _w(outside / "file", src.good.rstrip(b"\n") + b"\n" + MARKER + b"\n")
    _w(outside / "dir" / Path(src.path).name, src.good.rstrip(b"\n") + b"\n" + MARKER + b"\n")
    p = root / src.path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if how == "absolute":
        p.symlink_to(outside / "file")
    elif how == "relative":
        p.symlink_to("../" * (len(p.parts) + 2) + str(outside / "file").lstrip("/"))
    else:  # the file's directory links out (CRI-O's userdata directory is made empty by its set-up)
        p.parent.rmdir()
        p.parent.symlink_to(outside / "dir")
    b, _reading, _ = run(src.mod, root, tmp_path / "b")
    assert_marker_absent(tmp_path / "b")
    recs = records(b, src.path)
    assert all(a.status in (Status.ABSENT, Status.ERROR) for a in recs), recs
    if how != "directory":
        assert recs, f"nothing recorded for {src.path}"


@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_a_1_gib_sparse_file_is_cut_at_the_bound(tmp_path, src):
    """A good head, then a 1 GiB hole: read only to the source's byte bound, quickly, and recorded as cut
    (truncated, or an error saying it is over the bound), never stored whole."""
    root = _root(tmp_path, src)
    p = root / src.path.lstrip("/")
    _w(p, src.good)
    os.truncate(p, GIB)
    b, _reading, took = run(src.mod, root, tmp_path / "b")
    assert took < QUICK_S, took
    assert_stored_within_bound(b)
    recs = records(b, src.path)
    assert recs and all(a.status in (Status.TRUNCATED, Status.ERROR) for a in recs), recs
    assert all(any(w in " ".join((a.message or "", *a.notes)) for w in ("bytes", "bound", "larger"))
               for a in recs), recs


GROW = r"""
import sys
path, line, most = sys.argv[1], sys.argv[2].encode().decode("unicode_escape").encode("latin-1"), int(sys.argv[3])
chunk, written = line * max(1, (1 << 16) // len(line)), 0
with open(path, "ab", buffering=0) as f:
    print("go", flush=True)
    while written < most:
        written += f.write(chunk)
"""


@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_a_file_that_grows_while_read_is_bounded(tmp_path, src):
    """Another process appends to the file as fast as it can while the collector reads it, under a time budget
    as every run has one: the read ends at the byte bound or the budget, the collector returns, what is stored
    is within the bound, and the outcome is recorded."""
    import subprocess
    import sys
    root = _root(tmp_path, src)
    p = root / src.path.lstrip("/")
    _w(p, src.good)
    filler = src.filler or src.good.splitlines(keepends=True)[-1]
    writer = subprocess.Popen([sys.executable, "-c", GROW, str(p), filler.decode("latin-1").encode("unicode_escape"),
                               str(1 << 30)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline() == b"go\n"
        time.sleep(0.2)
        b, _reading, took = run(src.mod, root, tmp_path / "b", deadline=time.monotonic() + BUDGET_S)
    finally:
        writer.kill()
        writer.wait()
    assert took < BUDGET_S + 5, took
    assert_stored_within_bound(b)
    recs = records(b, src.path)
    assert recs and all(a.status in (Status.COLLECTED, Status.TRUNCATED, Status.ERROR) for a in recs), recs


#: how a record's note says that a stored document was not used
REFUSED = ("not parsed", "not a ", "not valid", "not JSON", "not TOML", "not YAML")
WRONG_CASES = [(s, i) for s in SOURCES for i in range(len(WRONG[s.kind]))]


@pytest.mark.parametrize("src,i", WRONG_CASES, ids=[f"{s.name}-{i}" for s, i in WRONG_CASES])
def test_a_document_of_the_wrong_type_is_refused_with_a_note(tmp_path, src, i):
    """A JSON list where an object belongs, a TOML that is not TOML, a YAML list or a Python tag, values of
    the wrong types, binary junk in a text file: neither ``acquire`` nor ``read`` raises, the source is
    recorded, and a document that could not be used says so (an error record, or a reading problem)."""
    root = _root(tmp_path, src)
    _w(root / src.path.lstrip("/"), WRONG[src.kind][i])
    b, reading, _ = run(src.mod, root, tmp_path / "b")
    recs = records(b, src.path)
    assert recs, f"nothing recorded for {src.path}"
    assert not Path("/tmp/pwned").exists()
    said = [a for a in recs if a.status is Status.ERROR or any(w in " ".join(a.notes) for w in REFUSED)] + [
        p for p in reading.problems if Path(src.path).name in f"{p.get('artifact')} {p.get('message')}"]
    assert src.kind == "text" or said or _used_as_nothing(src, i), (recs, reading.problems)


def _used_as_nothing(src: Source, i: int) -> bool:
    """Valid documents whose wrong-typed values are read as unset (a documented rule of those parsers: "a value
    of the wrong type counts as absent"), where no problem is owed."""
    return (src.kind, i) in {("json", 1), ("toml", 1), ("yaml", 3)}


@pytest.mark.parametrize("src", SOURCES, ids=_ids(SOURCES))
def test_a_spent_budget_reads_nothing_and_says_so(tmp_path, src):
    """The time budget ran out before the collector reached the source: it is not read, and recorded as
    truncated with the budget's message (what ``collect`` lists at its end as cut by the budget)."""
    root = _root(tmp_path, src)
    _w(root / src.path.lstrip("/"), src.good + MARKER)
    b, _reading, took = run(src.mod, root, tmp_path / "b", deadline=time.monotonic() - 1)
    assert took < QUICK_S
    assert_marker_absent(tmp_path / "b")
    # the file's own record, or the record of the directory (pod logs) or collection (containers) it is part of
    recs = [a for a in b.artifacts() if (a.source == (src.budget_source or src.path) and a.status is not
                                         Status.COLLECTED) or (src.budget_source is None and src.path.startswith(a.source + "/"))]
    assert recs and all(a.status is Status.TRUNCATED and "time budget" in " ".join((a.message or "", *a.notes))
                        for a in recs), recs


# -- arbitrary values in every config these collectors parse -------------------------------------------
KEYS = ["version", "plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "nvidia", "runtime_type",
        "options", "SystemdCgroup", "BinaryName", "default_runtime_name", "imports", "cdi_spec_dirs", "enable_cdi",
        "nvidia-container-runtime", "mode", "modes", "cdi", "spec-dirs", "exec-opts", "default-runtime", "features",
        "cdi-spec-dirs", "data-root", "exec-root", "crio", "runtime", "hooks_dir", "cgroup_manager", "runtime_root",
        "runroot", "cdiVersion", "kind", "devices", "containerEdits", "deviceNodes", "hooks", "path", "args", "stages",
        "when", "always", "hook", "flags", "plugin", "passDeviceSpecs", "deviceListStrategy", "cpuManagerPolicy",
        "featureGates", "Data", "PodDeviceEntries", "RegisteredDevices", "AllocResp", "Checksum", "policyName",
        "defaultCpuSet", "entries", "Name", "Config", "Image", "Labels", "annotations", "process", "env", "linux",
        "kubelet-arg", "major", "minor", "hostPath", "type", "DeviceIDs", "ResourceName", "PodUID", "ContainerName"]
_key = st.sampled_from(KEYS) | st.text(max_size=8)
_scalar = st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=20)
JSONV = st.recursive(st.none() | _scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(_key, c, max_size=5),
                     max_leaves=25)
TOMLV = st.dictionaries(_key, st.recursive(_scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(_key, c, max_size=5),
                                           max_leaves=25), max_size=6)
#: the sources whose parsers meet the values, by format (the rest are text)
PARSED = [s for s in SOURCES if s.kind in ("json", "toml", "yaml")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(docs=st.fixed_dictionaries({s.name: TOMLV if s.kind == "toml" else JSONV for s in PARSED}))
def test_arbitrary_values_in_every_parsed_config_never_raise(tmp_path_factory, docs):
    """Any JSON, TOML or YAML value (hypothesis), in every config, spec, checkpoint and container file at once:
    each collector's ``acquire`` and ``read`` return without an exception and record every one of them."""
    import tomli_w
    import yaml
    tmp = tmp_path_factory.mktemp("values")
    root = tmp / "root"
    root.mkdir()
    for s in PARSED:
        s.setup(root)
        v = docs[s.name]
        data = (tomli_w.dumps(v).encode() if s.kind == "toml" else json.dumps(v).encode() if s.kind == "json"
                else yaml.safe_dump(v).encode())
        _w(root / s.path.lstrip("/"), data)
    for i, mod in enumerate(dict.fromkeys(s.mod for s in PARSED)):
        b, reading, _ = run(mod, root, tmp / f"b{i}")
        assert isinstance(reading.problems, list)
        for s in (s for s in PARSED if s.mod is mod):
            assert records(b, s.path), f"nothing recorded for {s.path}"
