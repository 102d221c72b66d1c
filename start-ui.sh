#!/usr/bin/env bash
# Starts the WanTrainer GUI. The first run creates .venv and installs (see README); later runs start at
# once. Arguments go to scripts/train_ui.py, e.g. ./start-ui.sh --config-path my.json
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
exec .venv/bin/python scripts/train_ui.py "$@"
