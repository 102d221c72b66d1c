#!/usr/bin/env bash
# Installs (first run only) and runs the demo: a tiny Wan learns moving shapes on the CPU, samples them and
# prints what the samples show (--e2v, --plain: the LoRA demos).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python scripts/demo.py "$@"
