"""The device `pytest -m cuda` runs on, and the marks every module of tests/cuda/ carries.

On a machine where torch sees a GPU the tests run on `cuda`. Elsewhere they are skipped, unless
WANTRAINER_CUDA_TESTS_DEVICE=cpu asks to run their bodies on the CPU (the dry run of benchmarks/gpu/run.sh does,
for a few, so the test code itself is known to work before a GPU is lent); what needs a real GPU (cuDNN or flex
attention, bitsandbytes, inductor) then skips by itself."""
from __future__ import annotations

import os

import pytest
import torch

ENV = "WANTRAINER_CUDA_TESTS_DEVICE"
DEVICE = "cuda" if torch.cuda.is_available() else (os.environ.get(ENV) or None)
ON_GPU = DEVICE == "cuda"

MARKS = [pytest.mark.cuda, pytest.mark.skipif(
    DEVICE is None, reason=f"needs a CUDA GPU (torch.cuda.is_available() is False here; {ENV}=cpu runs the bodies "
                           "on the CPU); benchmarks/gpu/run.sh correct runs them on a lent GPU")]


def needs_gpu(what: str):
    """Skip (with the reason) where the test runs on the CPU."""
    return pytest.mark.skipif(not ON_GPU, reason=f"{what} needs a real CUDA GPU")
