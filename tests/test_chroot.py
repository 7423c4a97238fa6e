"""The single-file collector in a minimal Debian 12 built here: ``debootstrap --variant=minbase
--include=systemd,python3 bookworm`` from Debian's packages (no gcc, no pip; checked), the zipapp and
the sample node copied in, ``collect`` run by the chroot's own python3, the bundle analysed outside
with the checkout's code to the verdicts of a collection by the venv's code.

The chroot is built once under :data:`CACHE` (about 3 minutes, from the mirror apt uses:
deploy/image/apt-mirror.sh; ``GPU_FORENSICS_CHROOT`` names another folder), by scripts/setup-debian.sh
--test (``python tests/test_chroot.py``), else by the first run of these tests; then reused. Without
debootstrap or a reachable mirror they fail: nothing here is skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.bundle import verify
from forensics.ops.cli import main

PROJECT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GPU_FORENSICS_CHROOT", "/var/cache/gpu-forensics-tests/bookworm-minbase"))
sys.path.insert(0, str(PROJECT / "samples"))
import build as sample_build  # noqa: E402  samples/build.py

pytestmark = pytest.mark.chroot


def build_chroot(dest: Path = CACHE) -> Path:
    """Build the minimal Debian 12 root at ``dest`` (into ``dest.tmp``, renamed when complete).
    Raises ``subprocess.CalledProcessError`` when debootstrap fails (no mirror, no root)."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    mirror = subprocess.run(["bash", str(PROJECT / "deploy" / "image" / "apt-mirror.sh")], check=True,
                            capture_output=True, text=True).stdout.strip()
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", "--include=systemd,python3", "bookworm", str(tmp), mirror],
                   check=True, capture_output=True, timeout=1800)
    tmp.rename(dest)
    return dest


@pytest.fixture(scope="module")
def chroot_bundle(tmp_path_factory):
    """(chroot root, bundle collected inside it, bundle collected by the venv's code)."""
    if not CACHE.is_dir():
        build_chroot()
    tmp = tmp_path_factory.mktemp("chroot")
    sample_build.ensure_journal()
    work = CACHE / "tmp" / f"gpu-forensics-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        subprocess.run([sys.executable, str(PROJECT / "scripts" / "build-collector.py"), str(work / "c.pyz")],
                       check=True, capture_output=True, timeout=120)
        shutil.copytree(sample_build.ROOT, work / "node3-gpu", symlinks=True)
        shutil.copytree(sample_build.PROMETHEUS, work / "prometheus")
        inside = "/" + str(work.relative_to(CACHE))
        args = ["-q", "collect", "--root", f"{inside}/node3-gpu", "--prometheus", f"file://{inside}/prometheus"]
        r = subprocess.run(["chroot", str(CACHE), "/usr/bin/python3", "-I", f"{inside}/c.pyz", *args,
                            "--out", f"{inside}/bundle"], capture_output=True, text=True, timeout=300,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
        assert r.returncode == 0, r.stderr[-3000:]
        shutil.copytree(work / "bundle", tmp / "z")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert main([*args[:2], "--root", str(sample_build.ROOT), "--prometheus", f"file://{sample_build.PROMETHEUS}",
                 "--out", str(tmp / "v")]) == 0
    return CACHE, tmp / "z", tmp / "v"


def test_the_chroot_is_minimal_debian_12_without_compiler_or_pip(chroot_bundle):
    root = chroot_bundle[0]
    assert (root / "etc" / "debian_version").read_text().startswith("12.")
    assert not [p for p in ("usr/bin/gcc", "usr/bin/cc", "usr/bin/pip3", "usr/bin/pip") if (root / p).exists()]
    r = subprocess.run(["chroot", str(root), "/usr/bin/python3", "-c",
                        "import importlib.util as u, sys; print(sys.version_info[:2], "
                        "[m for m in ('pip', 'systemd', 'yaml', 'dateutil', 'requests') if u.find_spec(m)])"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "(3, 11) []"
    assert list((root / "usr" / "lib" / "x86_64-linux-gnu").glob("libsystemd.so.0"))


def test_bundle_from_the_chroot_gives_the_venvs_verdicts(chroot_bundle, tmp_path):
    _, z, v = chroot_bundle
    assert verify(z) == []
    for n, b in (("z", z), ("v", v)):
        assert main(["-q", "analyze", str(b), "--json", str(tmp_path / f"{n}.json")]) == 0
    za, va = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("z", "v"))
    assert za["verdicts"] == va["verdicts"] and len(za["incidents"]) == 2
    assert (z / "journal" / "entries.jsonl").read_bytes() == (v / "journal" / "entries.jsonl").read_bytes()
    sept = [i for i in za["incidents"] if i["window"]["end"].startswith("2026-09-02")][0]
    reload = [c for c in sept["causes"] if c["kind"] == "daemon-reload"][0]
    assert reload["verdict"] == "confirmed" and reload["requested_by"]["unit"] == "snapd.service"


if __name__ == "__main__":  # scripts/setup-debian.sh --test: build the root once, reuse it after
    print(f"{CACHE} {'reused' if CACHE.is_dir() else 'built'}")
    if not CACHE.is_dir():
        build_chroot()
