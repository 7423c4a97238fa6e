#!/usr/bin/env bash
# The test command, in one place: README.md's second command runs this file, and .ci/run runs that line.
# Installs what the tests need (scripts/setup-debian.sh --test), then runs the whole suite under .venv and
# under .venv-deb (Debian 12's own python3). Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh --test
.venv/bin/python -m pytest -q -rs "$@"
.venv-deb/bin/python -m pytest -q -rs -p no:cacheprovider "$@"
