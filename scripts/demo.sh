#!/usr/bin/env bash
# Installs (first run only) and runs the demo: tiny Wan model + synthetic videos -> LoRA + sample video.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python scripts/demo.py "$@"
