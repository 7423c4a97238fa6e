#!/usr/bin/env bash
# Install what the metrics tests and samples/record_prometheus.py need: Debian's prometheus package,
# which ships both `prometheus` and `promtool` (bookworm: 2.42.0+ds), and openssl (the tests make a
# self-signed certificate for the TLS case). Idempotent: does nothing when all are on PATH.
#
# The package's own prometheus.service is never used: on a host with systemd running, the package
# enables and starts it on :9090, so we stop and disable it again (the tests start their own server
# on 127.0.0.1 with a free port). --no-install-recommends keeps prometheus-node-exporter and friends out.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v openssl >/dev/null; then
  exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus openssl >/dev/null
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null || {
  echo "prometheus-deps.sh: prometheus/promtool still missing after apt-get install" >&2; exit 1; }
