#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs WanTrainer's requirements into it. Safe to run again.
#   TORCH_SPEC   what to install for torch when the venv has none (default: torch==2.13.0).
#                CUDA:  TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
#                ROCm:  TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/rocm6.4"
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
VENV_PY=.venv/bin/python
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV_PY" -c "import torch, diffusers" 2>/dev/null; then
  exit 0  # already installed
fi
"$VENV_PY" -m pip install --quiet --upgrade pip
if ! "$VENV_PY" -c "import torch" 2>/dev/null; then
  echo "installing ${TORCH_SPEC:-torch==2.13.0}"
  # shellcheck disable=SC2086
  "$VENV_PY" -m pip install ${TORCH_SPEC:-torch==2.13.0}
fi
echo "installing requirements.txt"
"$VENV_PY" -m pip install -r requirements.txt
echo "$want" > "$stamp"
