"""The node image built for real (scripts/build-image.sh: mmdebstrap's Debian 12 minbase + python3 +
libsystemd0 from Debian's packages, the zipapp, umoci's OCI layout) and run for real: ``umoci unpack``
into a runtime bundle, ``runc run`` with the DaemonSet's command, arguments and security context
(read-only root file system, capabilities dropped but the three it adds), the sample node bind-mounted
read-only at /host and the bundle folder the only writable mount. The bundle it wrote verifies and,
analysed here, gives the demo's verdicts.

The Debian root is built once (about 3 minutes from the mirror apt uses; scripts/setup-debian.sh
--test does it) and kept under /var/cache/gpu-forensics (``BASE_CACHE``); the collector's layer is
rebuilt from this checkout on every run (seconds). A missing mmdebstrap, umoci, runc or mirror fails.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from forensics import __version__
from forensics.bundle import verify
from forensics.ops import cli
from forensics.ops.cli import main

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "samples"))
import build as sample_build  # noqa: E402  samples/build.py

NODE = "node3-gpu"


def _tree_digest(root: Path) -> str:
    """SHA-256 over every path, type, mode, size, mtime and content (links: their target) under ``root``."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = Path(dirpath, name)
            st = p.lstat()
            h.update(f"{p.relative_to(root)}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def _collect_container() -> tuple[list[str], dict]:
    """The DaemonSet's collecting container (deploy/base/daemonset.yaml): command + args, securityContext."""
    docs = list(yaml.safe_load_all((PROJECT / "deploy" / "base" / "daemonset.yaml").read_text()))
    c = [d for d in docs if d and d["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]["initContainers"][0]
    argv = [a.replace("$(NODE_NAME)", NODE) for a in c["command"] + c["args"]]
    return argv, c["securityContext"]


def _runc(bundle: Path, state: Path, name: str, args: list[str], mounts: list[dict]) -> subprocess.CompletedProcess:
    """Run ``args`` in the unpacked image at ``bundle`` as the DaemonSet would: the config umoci wrote,
    with the manifest's securityContext applied, ``mounts`` added and a tmpfs /tmp (its emptyDir)."""
    _, sc = _collect_container()
    umoci_cfg = bundle / "config.umoci.json"  # the config umoci unpack wrote, kept for the next run
    if not umoci_cfg.exists():
        (bundle / "config.json").rename(umoci_cfg)
    cfg = json.loads(umoci_cfg.read_text())
    cfg["process"]["args"], cfg["process"]["terminal"] = args, False
    cfg["process"]["user"] = {"uid": sc["runAsUser"], "gid": sc["runAsGroup"]}
    cfg["process"]["noNewPrivileges"] = not sc["allowPrivilegeEscalation"]
    caps = [f"CAP_{c}" for c in sc["capabilities"]["add"]]
    cfg["process"]["capabilities"] = {"bounding": caps, "effective": caps, "permitted": caps}
    cfg["root"]["readonly"] = sc["readOnlyRootFilesystem"]
    cfg["mounts"] += [*mounts, {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                                "options": ["nosuid", "nodev", "size=65536k"]}]
    (bundle / "config.json").write_text(json.dumps(cfg))
    return subprocess.run(["runc", "--root", str(state), "run", "--bundle", str(bundle), name],
                          capture_output=True, text=True, timeout=600)


def _bind(src: Path, dest: str, ro: bool) -> dict:
    return {"destination": dest, "type": "bind", "source": str(src), "options": ["rbind", "ro" if ro else "rw"]}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """(OCI layout, build-image.sh's output, unpacked runtime bundle)."""
    tmp = tmp_path_factory.mktemp("image")
    r = subprocess.run(["bash", str(PROJECT / "scripts" / "build-image.sh"), str(tmp / "oci")], capture_output=True,
                       text=True, timeout=1800, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr[-3000:]
    u = subprocess.run(["umoci", "unpack", "--image", f"{tmp / 'oci'}:{__version__}", str(tmp / "bundle")],
                       capture_output=True, text=True, timeout=300)
    assert u.returncode == 0, u.stderr[-3000:]
    return tmp / "oci", r.stdout, tmp / "bundle"


@pytest.fixture(scope="module")
def collected(image, tmp_path_factory):
    """The DaemonSet's collection run in the image over the sample node: (runc result, output folder,
    sample tree digest before, after)."""
    sample_build.ensure_journal()
    out = tmp_path_factory.mktemp("bundles")
    argv, _ = _collect_container()
    before = _tree_digest(sample_build.ROOT)
    r = _runc(image[2], tmp_path_factory.mktemp("runc"), f"gpu-forensics-test-{os.getpid()}",
              [*argv, "--prometheus", "file:///prometheus"],
              [_bind(sample_build.ROOT, "/host", True), _bind(sample_build.PROMETHEUS, "/prometheus", True),
               _bind(out, "/bundles", False)])
    return r, out, before, _tree_digest(sample_build.ROOT)


def test_the_image_is_debian_12_minbase_with_python3_and_the_zipapp_only(image):
    layout, built, bundle = image
    root = bundle / "rootfs"
    assert (root / "etc" / "debian_version").read_text().startswith("12.")
    assert list((root / "usr" / "lib" / "x86_64-linux-gnu").glob("libsystemd.so.0"))
    assert os.readlink(root / "usr/local/bin/gpu-forensics") == "gpu-forensics.pyz"
    assert (root / "usr/local/bin/gpu-forensics-collect-once").read_bytes() == \
        (PROJECT / "deploy" / "collect-once.py").read_bytes()
    assert not [p for p in ("usr/bin/gcc", "usr/bin/cc", "usr/bin/pip3", "usr/lib/python3/dist-packages/matplotlib",
                            "usr/lib/python3/dist-packages/jinja2") if (root / p).exists()]
    assert list((root / "usr/local/lib/python3.11/dist-packages").iterdir()) == []  # nothing pip-installed
    cfg = json.loads((bundle / "config.json").read_text())  # as umoci wrote it from the image's config
    assert cfg["process"]["args"] == ["gpu-forensics", "--help"] and cfg["process"]["cwd"] == "/bundles"
    assert "PYTHONPATH=/usr/local/bin/gpu-forensics.pyz" in cfg["process"]["env"]
    # two layers: the Debian root and the collector; compressed as build-image.sh printed them
    m = re.search(r"compressed layers: (\d+) \+ (\d+) bytes; unpacked: (\d+) \+ (\d+) bytes", built)
    base, app, base_tar, app_tar = map(int, m.groups())
    blobs = {p.stat().st_size for p in (layout / "blobs" / "sha256").iterdir()}
    assert {base, app} <= blobs
    assert 40e6 < base < 70e6 and app < 1.5e6 and base_tar < 200e6 and app_tar < 1.5e6, built


def test_the_daemonsets_collection_in_the_image_verifies_and_gives_the_demos_verdicts(collected, tmp_path):
    r, out, _, _ = collected
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "gpu-forensics exited 1" in r.stderr  # done with one gap (below), which collect-once maps to 0
    assert "not analysed here" in r.stderr
    bundles = sorted(out.glob(f"gpu-forensics-{NODE}-*"))
    assert len(bundles) == 1 and bundles[0].is_dir()  # the default --out, in the WORKDIR /bundles
    b = bundles[0]
    assert verify(b) == []
    assert main(["-q", "analyze", str(b), "--json", str(tmp_path / "a.json"), "--html", str(tmp_path / "r.html"),
                 "--markdown", str(tmp_path / "r.md")]) == 1
    a = json.loads((tmp_path / "a.json").read_text())
    # --kube (the DaemonSet's) run here outside a pod (no KUBERNETES_SERVICE_HOST) and without the kubernetes
    # client: one error artifact saying what --kube needs (in a pod it reads the API with the standard
    # library: tests/test_collector_zipapp.py, tests/test_kube.py)
    assert [(m["source"], m["status"]) for m in a["bundle"]["missing"]] == [("kube:config", "error")]
    kube_error = a["bundle"]["missing"][0]["message"]
    assert kube_error.startswith("no Kubernetes configuration: not in a pod (KUBERNETES_SERVICE_HOST is not set)")
    assert "in-cluster ServiceAccount credentials" in kube_error and "Traceback" not in kube_error
    sept = [i for i in a["incidents"] if i["window"]["end"].startswith("2026-09-02")][0]
    reload = [c for c in sept["causes"] if c["kind"] == "daemon-reload"][0]
    assert reload["verdict"] == "confirmed" and reload["at"].startswith("2026-09-02T04:05:13")
    assert reload["requested_by"] == {"unit": "snapd.service", "pid": 48211, "comm": "systemctl",
                                      "basis": "caller-line"}
    july = [i for i in a["incidents"] if i["window"]["start"].startswith("2026-07")][0]
    assert [c["verdict"] for c in july["causes"] if c["kind"] == "daemon-reload"] == ["inferred"]
    trainer = [c for c in a["exposure"]["containers"] if (c["namespace"], c["pod"]) == ("ml", "trainer-0")][0]
    assert trainer["id"].startswith("6a1f0c2e9b7d") and (trainer["broken"], trainer["at_risk"]) == (True, True)
    # the journal came through the image's libsystemd 252 (ctypes), entry for entry as this checkout reads it
    assert main(["-q", "collect", "--root", str(sample_build.ROOT), "--prometheus", f"file://{sample_build.PROMETHEUS}",
                 "--out", str(tmp_path / "v")]) == 0
    assert (b / "journal" / "entries.jsonl").read_bytes() == (tmp_path / "v" / "journal" / "entries.jsonl").read_bytes()


def test_the_collector_wrote_nothing_outside_its_output(image, collected, tmp_path):
    _, out, before, after = collected
    assert before == after  # the sample node, mounted read-only at /host, is as it was
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(f"gpu-forensics-{NODE}-")) == []
    # and a write there, or anywhere but /bundles and /tmp, is refused by the mounts, not by politeness
    probe = ("import json, os\nres = {}\nfor p in ('/host/etc/x', '/host/var/log/x', '/usr/local/bin/x', '/x', "
             "'/bundles/x', '/tmp/x'):\n    try:\n        open(p, 'w').close(); res[p] = 0\n"
             "    except OSError as e:\n        res[p] = e.errno\nprint(json.dumps(res))")
    r = _runc(image[2], tmp_path / "runc", f"gpu-forensics-probe-{os.getpid()}", ["python3", "-c", probe],
              [_bind(sample_build.ROOT, "/host", True), _bind(tmp_path, "/bundles", False)])
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == {"/host/etc/x": errno.EROFS, "/host/var/log/x": errno.EROFS,
                                    "/usr/local/bin/x": errno.EROFS, "/x": errno.EROFS, "/bundles/x": 0, "/tmp/x": 0}
    assert (tmp_path / "x").exists() and not (sample_build.ROOT / "etc" / "x").exists()


def test_the_pool_jobs_run_parses_with_its_collection_and_upload_options():
    # deploy/jobs/job-pool.yaml's arguments as the image hands them to the CLI: `run` there collects
    # (no report libraries: tests/test_collector_zipapp.py) and uploads with these options
    job = yaml.safe_load((PROJECT / "deploy" / "jobs" / "job-pool.yaml").read_text())
    argv = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert argv[:2] == ["--quiet", "run"] and "--upload-url" in argv
    args = cli.build_parser().parse_args(argv)
    assert (args.root, args.node, args.kube) == ("/host", "$(NODE_NAME)", True)
    assert (args.upload_url, args.upload_auth_file) == ("$(UPLOAD_URL)", "/etc/gpu-forensics-upload/authorization")