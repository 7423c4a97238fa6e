#!/usr/bin/env bash
# Build the node image from Debian's packages, no registry: mmdebstrap makes the root (Debian 12 minbase
# + python3 + libsystemd0), the single-file collector goes in, umoci makes it an OCI image layout.
#   bash scripts/build-image.sh [OUT]     # default dist/gpu-forensics-oci; prints the image's sizes
# Two layers: the Debian root (built once, about 3 minutes from the mirror, then kept as an OCI layout
# under $BASE_CACHE, default /var/cache/gpu-forensics/image-base-<hash of its spec and mirror>) and the
# collector's three files (seconds), so a code change rebuilds only the second.
# Run as root (mmdebstrap's root mode; umoci itself could run rootless). Needs mmdebstrap and umoci
# (scripts/setup-debian.sh --test installs them) and a python with the collector's vendored libraries
# ($PYTHON, default .venv/bin/python). The mirror is the one apt uses ($MIRROR to override).
# Reproducible where cheap: SOURCE_DATE_EPOCH (default: the last commit's time) fixes mmdebstrap's tar (the
# base), the collector's layer (deploy/image/layer.py) and the image's created times; the same mirror content gives the same digest.
#
# In the image (the contract of deploy/Dockerfile and the manifests, deploy/base and deploy/jobs):
#   /usr/local/bin/gpu-forensics.pyz         the zipapp (scripts/build-collector.py), collect on python3
#   /usr/local/bin/gpu-forensics             -> gpu-forensics.pyz (ENTRYPOINT)
#   /usr/local/bin/gpu-forensics-collect-once  deploy/collect-once.py (the manifests' command)
#   /host, /bundles                           the read-only host root and the bundle folder (WORKDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-dist/gpu-forensics-oci}")
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
VERSION=$("$PYTHON" -c 'import forensics; print(forensics.__version__)')
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
MIRROR=${MIRROR:-$(bash deploy/image/apt-mirror.sh)}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-forensics-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# the Debian root: minbase (dpkg, apt, coreutils' env and chroot) + python3 + libsystemd0. Docs, man
# pages and locales left out as Debian's -slim images do (copyright files kept); apt's lists removed
SPEC=(--variant=minbase --include=python3,libsystemd0
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --customize-hook='mkdir -p "$1/host" "$1/bundles"'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log "$1"/var/log/apt/*'
  --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"'
  bookworm)
KEY=$(printf '%s\n' "${SPEC[@]}" "$MIRROR" | sha256sum | cut -c1-12)
BASE=${BASE_CACHE:-/var/cache/gpu-forensics}/image-base-$KEY
if [ ! -f "$BASE/index.json" ]; then
  mmdebstrap --quiet --format=tar "${SPEC[@]}" "$work/rootfs.tar" "$MIRROR"
  mkdir -p "$(dirname "$BASE")" && rm -rf "$BASE.tmp"
  umoci init --layout "$BASE.tmp"
  umoci new --image "$BASE.tmp:base"
  umoci raw add-layer --image "$BASE.tmp:base" --history.created "$CREATED" \
    --history.created_by "mmdebstrap --variant=minbase --include=python3,libsystemd0 bookworm $MIRROR" "$work/rootfs.tar"
  stat -c %s "$work/rootfs.tar" > "$BASE.tmp/rootfs-tar-bytes"
  rm -rf "$BASE" && mv "$BASE.tmp" "$BASE" && rm -f "$work/rootfs.tar"
fi

# the collector's layer: /usr/local/bin/{gpu-forensics.pyz, gpu-forensics -> it, gpu-forensics-collect-once}
"$PYTHON" scripts/build-collector.py "$work/gpu-forensics.pyz" >/dev/null
"$PYTHON" deploy/image/layer.py app "$work/gpu-forensics.pyz" deploy/collect-once.py "$work/app.tar"

# the image: the base's layer, the collector's, the config of deploy/Dockerfile's runtime stage
rm -rf "$OUT.tmp" && mkdir -p "$(dirname "$OUT")"
cp -a "$BASE" "$OUT.tmp" && rm -f "$OUT.tmp/rootfs-tar-bytes"
umoci raw add-layer --image "$OUT.tmp:base" --tag "$VERSION" --history.created "$CREATED" \
  --history.created_by "scripts/build-image.sh: the zipapp and collect-once in /usr/local/bin" "$work/app.tar"
umoci rm --image "$OUT.tmp:base"
umoci config --image "$OUT.tmp:$VERSION" --created "$CREATED" --history.created "$CREATED" \
  --author gpu-forensics --architecture amd64 --os linux \
  --config.user 0:0 --config.workingdir /bundles \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONPATH=/usr/local/bin/gpu-forensics.pyz \
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 --config.env LANG=C.UTF-8 \
  --config.entrypoint gpu-forensics --config.cmd --help \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.title=gpu-forensics collector" \
  --config.label "org.opencontainers.image.base.name=debian:bookworm (mmdebstrap minbase)"
umoci gc --layout "$OUT.tmp"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"

read -r digest layers < <("$PYTHON" deploy/image/layer.py sizes "$OUT" "$VERSION")
echo "$OUT:$VERSION manifest $digest (base $BASE, mirror $MIRROR)"
echo "compressed layers: $layers bytes; unpacked: $(cat "$BASE/rootfs-tar-bytes") + $(stat -c %s "$work/app.tar") bytes (the layers as tars)"
