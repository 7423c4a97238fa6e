#!/usr/bin/env bash
# Install what the container lab (tests/lab.py, tests/test_containers_lab.py) needs on Debian 12:
# containerd (with ctr and containerd-shim-runc-v2), runc, and busybox-static for the root file
# systems. Idempotent: installs only what is missing. containerd's own systemd service is left
# alone; the lab starts a private containerd under a temporary directory.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(containerd runc busybox-static util-linux)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for b in containerd ctr runc containerd-shim-runc-v2 busybox nsenter; do
  command -v "$b" >/dev/null || { echo "lab-deps: $b is still missing after install" >&2; exit 1; }
done
