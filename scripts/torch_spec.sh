#!/usr/bin/env bash
# Prints the pip arguments that install the right torch build for this machine, and says on stderr why:
#   TORCH_SPEC set             -> exactly that (e.g. a nightly, another CUDA version, a local wheel)
#   an NVIDIA GPU (nvidia-smi) -> CUDA 12.8 wheels from download.pytorch.org
#   ROCm (rocminfo, /opt/rocm) -> ROCm 6.4 wheels from download.pytorch.org (Linux)
#   otherwise                  -> torch from PyPI (CPU on Windows and macOS; on Linux PyPI's build runs on the CPU)
# Used by scripts/install.sh; start-ui.bat repeats the NVIDIA rule for Windows.
set -euo pipefail
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
ROCM_ROOT=${ROCM_ROOT:-/opt/rocm}
if [ -n "${TORCH_SPEC:-}" ]; then
  echo "torch: TORCH_SPEC is set, installing: $TORCH_SPEC" >&2
  echo "$TORCH_SPEC"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "torch: NVIDIA GPU found ($(nvidia-smi -L 2>/dev/null | head -n 1)), installing the CUDA 12.8 build" >&2
  echo "torch==$TORCH_VERSION --index-url https://download.pytorch.org/whl/cu128"
elif command -v rocminfo >/dev/null 2>&1 || [ -d "$ROCM_ROOT" ]; then
  echo "torch: ROCm found, installing the ROCm 6.4 build (set TORCH_SPEC for another)" >&2
  echo "torch==$TORCH_VERSION --index-url https://download.pytorch.org/whl/rocm6.4"
else
  echo "torch: no NVIDIA or AMD GPU found, installing torch from PyPI (training runs on the CPU)" >&2
  echo "torch==$TORCH_VERSION"
fi
