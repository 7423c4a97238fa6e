"""The built wheel: `gpu-forensics demo` from a wheel installed in a fresh venv outside the checkout
gives the checkout's verdicts; `collect` imports nothing from the laptop's extras (pyproject.toml).

Offline here: the wheel is built with pip's build isolation from the local index (/opt/pypi/simple
holds setuptools and wheel; the shared venv has no ``wheel`` for --no-build-isolation). The fresh venv
gets the wheel with ``--no-deps --no-index`` and its dependencies through a .pth line naming the shared
venv's site-packages: that path is appended after the venv's own site-packages (so ``forensics`` comes
from the wheel, which the test checks) and its own .pth files, the checkout's editable finder among
them, are not run (site(7): only site directories process .pth files).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from forensics.ops.cli import main

PROJECT = Path(__file__).resolve().parents[1]
LOCAL_INDEX = Path("/opt/pypi/simple")


def _copy_source(dst: Path) -> Path:
    """The files a wheel is built from, copied (links kept) so no build/ folder is left in the checkout."""
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("forensics", "collectors", "reports", "samples"):
        shutil.copytree(PROJECT / name, dst / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(PROJECT / name, dst / name)
    return dst


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, wheel path): the wheel built from a copy of the source, installed into a fresh venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = _copy_source(tmp / "src")
    index = ["--index-url", LOCAL_INDEX.as_uri()] if LOCAL_INDEX.is_dir() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *index, "-w", str(tmp / "dist"),
                    str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp / "dist").glob("gpu_forensics-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py, wheel


def test_the_xid_catalog_ships_in_the_wheel(installed):
    """forensics/xid_catalog.csv is package data (pyproject.toml): the installed wheel reads it from its
    own site-packages, not from the checkout."""
    py, wheel = installed
    r = subprocess.run([str(py), "-c", "from forensics import xid; print(len(xid.catalog()), xid.lookup(13).scope, "
                        "xid.__file__)"], capture_output=True, text=True, timeout=60, cwd="/")
    n, scope, path = r.stdout.split()
    assert (n, scope) == ("26", "application"), r.stderr
    assert not path.startswith(str(PROJECT)) and "site-packages" in path


def test_demo_from_the_wheel_gives_the_checkouts_verdicts(installed, tmp_path):
    py, wheel = installed
    with __import__("zipfile").ZipFile(wheel) as z:
        names = z.namelist()
    assert "forensics/ops/sample-node.tar.gz" in names and "reports/templates/report.html.j2" in names
    assert not any(n.startswith("samples/") for n in names)
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(py), "-c", "import forensics; print(forensics.__file__)"], cwd=run_dir, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(py.parents[1])), where
    out = subprocess.run([str(py.parent / "gpu-forensics"), "demo", "--out", str(tmp_path / "w")], cwd=run_dir,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    wheel_a = json.loads((tmp_path / "w" / "analysis.json").read_text())
    assert main(["-q", "demo", "--out", str(tmp_path / "c")]) == 0
    checkout_a = json.loads((tmp_path / "c" / "analysis.json").read_text())
    assert len(wheel_a["incidents"]) == len(checkout_a["incidents"]) == 2
    assert wheel_a["verdicts"] == checkout_a["verdicts"]
    sept = [i for i in wheel_a["incidents"] if i["window"]["end"].startswith("2026-09-02")][0]
    reload = [c for c in sept["causes"] if c["kind"] == "daemon-reload"][0]
    assert reload["verdict"] == "confirmed" and reload["at"].startswith("2026-09-02T04:05:13")
    # the zone comes from the sample's /etc/localtime link, kept by the packed tar
    assert sept["window"]["start_local"] == "2026-09-02T13:04:58+09:00"


def test_collect_imports_nothing_from_the_report_extra(tmp_path):
    code = ("import sys; from forensics.ops.cli import main, SAMPLE_ROOT; "
            f"rc = main(['-q', 'collect', '--root', str(SAMPLE_ROOT), '--out', {str(tmp_path / 'b')!r}]); "
            "print(rc, ' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    r = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    rc, mods = r.stdout.strip().splitlines()[-1].split(" ", 1)
    mods = set(mods.split())
    assert rc == "0"
    assert "collectors" in mods and "yaml" in mods  # it did collect (runtime_config parsed the CDI YAML)
    assert not mods & {"matplotlib", "jinja2", "pandas", "rich", "kubernetes"}, mods
