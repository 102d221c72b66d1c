#!/usr/bin/env bash
# Installs (first run only) and runs the whole test suite, slow end-to-end tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --locked  # the hashed lock: CI installs exactly what it was made with
exec .venv/bin/python -m pytest "$@"
