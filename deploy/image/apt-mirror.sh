#!/usr/bin/env bash
# Print the Debian mirror this machine's apt uses: the first URI of its sources (deb822 .sources files,
# then one-line sources.list entries) that is not the security archive; http://deb.debian.org/debian
# when apt names none. scripts/build-image.sh (mmdebstrap) and tests/test_chroot.py (debootstrap) build
# from it, so they reach what apt reaches (a proxy or a local mirror included).
set -uo pipefail
m=$({ grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
      grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '$2 !~ /^\[/ {print $2}'; } \
    | grep -v -- '-security' | head -1)
echo "${m:-http://deb.debian.org/debian}"
