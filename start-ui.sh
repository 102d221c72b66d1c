#!/usr/bin/env bash
# Starts WanTrainer. First run: creates .venv and installs (see README). Until the GUI ships this runs
# the command-line trainer with the given arguments, e.g. ./start-ui.sh --config-path my.json
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
if [ -f scripts/train_ui.py ]; then
  exec .venv/bin/python scripts/train_ui.py "$@"
fi
exec .venv/bin/python scripts/train.py "$@"
