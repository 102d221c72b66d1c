"""The demo and the tiny VAE's training run torch on one CPU thread unless OMP_NUM_THREADS says otherwise
(scripts/_bootstrap.py::one_cpu_thread; benchmarks/demo_threads.py measures why)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

THREADS = "import _bootstrap; _bootstrap.one_cpu_thread(); import torch; print(torch.get_num_threads())"
# runs a script until it calls one_cpu_thread, and prints whether torch was imported by then
CALLED = """import runpy, sys
import _bootstrap
def called():
    print("called; torch imported before:", "torch" in sys.modules)
    raise SystemExit(0)
_bootstrap.one_cpu_thread = called
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO_ROOT / "scripts", capture_output=True,
                          text=True, env={**base, **env}, timeout=120)


def test_one_thread_unless_omp_num_threads_says_otherwise():
    assert _python(THREADS).stdout.split() == ["1"]
    assert _python(THREADS, OMP_NUM_THREADS="2").stdout.split() == ["2"]
    late = _python("import torch, _bootstrap; _bootstrap.one_cpu_thread()")
    assert late.returncode != 0 and "must run before torch is imported" in late.stderr  # OpenMP sized its pool


@pytest.mark.parametrize("script", ["demo.py", "train_tiny_vae.py"])
def test_the_tiny_model_scripts_ask_for_it_before_torch(script):
    result = _python(CALLED, script)
    assert result.stdout.strip() == "called; torch imported before: False", result.stderr[-2000:]
