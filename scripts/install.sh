#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs WanTrainer's requirements into it. Safe to run again.
# When the venv has no torch, scripts/torch_spec.sh picks the build for this machine and says which: CUDA
# wheels with an NVIDIA GPU, ROCm wheels with ROCm, else PyPI's.
#   TORCH_SPEC   install exactly this instead, e.g.
#                TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
# --locked: install requirements.lock instead of requirements.txt, every file checked against its sha256
#           (pip --require-hashes): the exact packages the lock was made with (scripts/lock_requirements.sh);
#           then torch as above (the lock leaves it out: its build differs per machine).
set -euo pipefail
cd "$(dirname "$0")/.."
locked=0
for arg in "$@"; do
  case "$arg" in
    --locked) locked=1 ;;
    *) echo "install.sh: unknown option '$arg' (the one option is --locked)" >&2; exit 2 ;;
  esac
done
requirements=requirements.txt
[ "$locked" = 1 ] && requirements=requirements.lock
PYTHON=${PYTHON:-python3}
# The pins need Python 3.11 or newer (diffusers, transformers, numpy, pillow and av each require it).
needs_python_3_11() {  # $1: an interpreter; $2: what to do when it is older
  local version major minor
  version=$("$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) || version=""
  major=${version%%.*}
  minor=${version#*.}
  minor=${minor%%.*}
  if ! [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || ((major < 3 || (major == 3 && minor < 11))); then
    echo "install.sh: WanTrainer needs Python 3.11 or newer, and $1 is ${version:-not a Python that runs}: $2" >&2
    exit 1
  fi
}
if [ ! -x .venv/bin/python ]; then
  needs_python_3_11 "$PYTHON" "install one and run PYTHON=python3.11 bash scripts/install.sh (or a newer one)"
  echo "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
VENV_PY=.venv/bin/python
needs_python_3_11 "$VENV_PY" "delete .venv and run again with PYTHON=python3.11 bash scripts/install.sh (or newer)"
# The stamp holds one "<sha256> <file>" line per requirements file the venv satisfies. The lock is generated from
# requirements.txt and pins all it pins, so a locked install satisfies both files: start-ui.sh / demo.sh (which
# ask for requirements.txt) then start at once after test.sh (the lock), and test.sh after them installs the lock
# only once. A plain requirements.txt install satisfies that file alone.
stamp=.venv/.requirements.sha256
stamp_line() { echo "$(sha256sum "$1" | cut -d' ' -f1) $1"; }
stamped() {
  [ -f "$stamp" ] || return 1
  local line
  while IFS= read -r line; do [ "$line" = "$1" ] && return 0; done < "$stamp"
  return 1
}
want="$(stamp_line "$requirements")"
if stamped "$want"; then
  # Importing torch and diffusers takes seconds (~12 on a cold disk): say so, rather than sit silent.
  echo "checking .venv: $requirements was installed; importing torch and diffusers to be sure (a few seconds)..."
  if "$VENV_PY" -c "import torch, diffusers" 2>/dev/null; then
    echo ".venv is up to date: nothing to install"
    exit 0
  fi
  echo "torch or diffusers does not import: installing again"
fi
"$VENV_PY" -m pip install --quiet --upgrade pip
install_torch() {
  if ! "$VENV_PY" -c "import torch" 2>/dev/null; then
    spec=$(bash scripts/torch_spec.sh)
    # shellcheck disable=SC2086
    "$VENV_PY" -m pip install $spec
  else
    echo "torch: keeping the installed $("$VENV_PY" -c 'import torch; print(torch.__version__)')"
  fi
}
if [ "$locked" = 1 ]; then
  # The lock first, so that every package but torch comes hash-checked: it holds torch's own dependencies
  # (filelock, sympy, jinja2, ...) but not torch, whose build differs per machine. --no-deps: the lock is complete.
  echo "installing requirements.lock (pip --require-hashes)"
  "$VENV_PY" -m pip install --require-hashes --no-deps -r requirements.lock
  # then torch (pinned by torch_spec.sh, not hash-checked): its dependencies are already there, so all it adds
  # is the build's own runtime (CUDA's nvidia-* packages and triton) from its index
  install_torch
  "$VENV_PY" -m pip check
else
  install_torch
  echo "installing requirements.txt"
  "$VENV_PY" -m pip install -r requirements.txt
fi
if [ "$locked" = 1 ]; then
  { stamp_line requirements.lock; stamp_line requirements.txt; } > "$stamp"
else
  echo "$want" > "$stamp"
fi
