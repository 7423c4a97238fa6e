#!/usr/bin/env bash
# Install what the container labs need on Debian 12: containerd (with ctr and containerd-shim-runc-v2),
# runc, and busybox-static for the root file systems (tests/lab.py, tests/test_containers_lab.py), plus
# systemd, dbus and bpftool for the node in a box (tests/syslab.py, tests/test_syslab.py: a real
# systemd as PID 1 of a private namespace; bpftool lists the cgroup v2 device programs), and podman
# (with conmon) for tests/test_podman.py: Podman's own layout, at roots of its own.
# Idempotent: installs only what is missing. containerd's and systemd's own services on this machine
# are left alone; the labs start private ones (under a temporary directory, or inside a namespace).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(containerd runc busybox-static util-linux systemd dbus bpftool podman)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for b in containerd ctr runc containerd-shim-runc-v2 busybox nsenter unshare systemd-run dbus-daemon bpftool podman conmon; do
  command -v "$b" >/dev/null || { echo "lab-deps: $b is still missing after install" >&2; exit 1; }
done
