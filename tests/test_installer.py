"""scripts/torch_spec.sh: which torch build the installer picks, and that it says so (fake GPU tools on PATH)."""
from __future__ import annotations

import shutil
import subprocess

from tests.conftest import REPO_ROOT


def pick(tmp_path, tools: dict[str, str], **env) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, script in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    head = bin_dir / "head"  # the one outside tool the script uses; nothing else of this machine is on PATH
    if not head.exists():
        head.symlink_to(shutil.which("head"))
    base = {"PATH": str(bin_dir), "ROCM_ROOT": str(tmp_path / "no-rocm"), **env}
    return subprocess.run([shutil.which("bash"), str(REPO_ROOT / "scripts" / "torch_spec.sh")], capture_output=True,
                          text=True, env=base, timeout=30, check=True)


def test_an_nvidia_gpu_gets_the_cuda_build(tmp_path):
    result = pick(tmp_path, {"nvidia-smi": "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'"})
    assert result.stdout.strip() == "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    assert "NVIDIA GPU found (GPU 0: NVIDIA H100" in result.stderr


def test_rocm_gets_the_rocm_build_and_a_broken_nvidia_smi_is_no_gpu(tmp_path):
    result = pick(tmp_path, {"nvidia-smi": "exit 9", "rocminfo": "echo gfx942"})
    assert result.stdout.strip().endswith("/whl/rocm6.4") and "ROCm found" in result.stderr
    (tmp_path / "rocm").mkdir()
    result = pick(tmp_path / "other", {}, ROCM_ROOT=str(tmp_path / "rocm"))
    assert result.stdout.strip().endswith("/whl/rocm6.4")


def test_no_gpu_gets_pypi_and_says_so_and_torch_spec_wins(tmp_path):
    result = pick(tmp_path, {})
    assert result.stdout.strip() == "torch==2.13.0" and "no NVIDIA or AMD GPU found" in result.stderr
    result = pick(tmp_path, {"nvidia-smi": "echo GPU 0"}, TORCH_SPEC="torch==2.12.0 --pre")
    assert result.stdout.strip() == "torch==2.12.0 --pre" and "TORCH_SPEC is set" in result.stderr
