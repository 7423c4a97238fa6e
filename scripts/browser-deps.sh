#!/usr/bin/env bash
# Install Debian's chromium (and a font, so screenshots show text) for the real-browser test,
# tests/test_browser.py. Idempotent: installs only what is missing. Needs root or sudo.
#   bash scripts/browser-deps.sh
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
for p in chromium fonts-dejavu-core; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
test -x /usr/bin/chromium
