#!/usr/bin/env bash
# Set up gpu-forensics on a fresh Debian 12 (bookworm) machine: Debian packages, then a virtual
# environment in .venv with the project installed in editable mode.
#   bash scripts/setup-debian.sh          # what the demo needs
#   bash scripts/setup-debian.sh --test   # plus what the tests need, and .venv-deb (Debian's /usr/bin/python3),
#                                         # and the two Debian 12 roots the chroot and image tests run in
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# no compiler: the journal is read through libsystemd0 with ctypes (collectors/journal/sdjournal.py)
pkgs=(python3 python3-venv libsystemd0 systemd-journal-remote)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(zstd util-linux)
  # rpm and rpmbuild write the real rpmdb.sqlite the nvidia_host tests read
  pkgs+=(rpm)
  # the chroot test's root (debootstrap) and the image (mmdebstrap, umoci; runc runs it: lab-deps.sh)
  pkgs+=(debootstrap mmdebstrap umoci)
  # real components the tests drive: chromium, containerd + runc, prometheus + promtool
  for dep in scripts/browser-deps.sh scripts/lab-deps.sh scripts/prometheus-deps.sh; do
    [ -f "$dep" ] && bash "$dep"
  done
fi
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install -q -e '.[test]'
else
  .venv/bin/python -m pip install -q -e '.[all]'
fi
if [ "${1:-}" = "--test" ]; then
  # the suite runs a second time under Debian 12's own python3 (3.11.2: tarfile without filter=),
  # the interpreter a node has; same install, its own venv
  [ -x .venv-deb/bin/python ] || /usr/bin/python3 -m venv .venv-deb
  .venv-deb/bin/python -m pip install -q --upgrade pip
  .venv-deb/bin/python -m pip install -q -e '.[test]'
fi
.venv/bin/python samples/build.py >/dev/null
if [ "${1:-}" = "--test" ]; then
  # the Debian 12 roots, from the mirror apt uses, built once outside the tree and reused after (each
  # about 3 minutes the first time): tests/test_chroot.py's debootstrap minbase + systemd + python3 under
  # /var/cache/gpu-forensics-tests, and the image's mmdebstrap base under /var/cache/gpu-forensics; the
  # image itself (seconds once its base is there) into dist/gpu-forensics-oci; the two roots in parallel
  t0=$(date +%s)
  $SUDO .venv/bin/python tests/test_chroot.py & chroot_pid=$!
  $SUDO env PYTHON=.venv/bin/python bash scripts/build-image.sh dist/gpu-forensics-oci
  wait "$chroot_pid"
  echo "test roots and image: $(( $(date +%s) - t0 )) s"
fi
# `sudo gpu-forensics ...` (README): sudo runs commands from its secure_path (Debian: /usr/local/bin
# among them), not from the caller's PATH, so link the venv's command there
$SUDO ln -sfn "$PWD/.venv/bin/gpu-forensics" /usr/local/bin/gpu-forensics
echo "gpu-forensics: /usr/local/bin/gpu-forensics -> $PWD/.venv/bin/gpu-forensics"
