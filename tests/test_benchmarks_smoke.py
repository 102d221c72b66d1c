"""The GPU benchmarks run end to end in their CPU smoke modes and print the documented JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

GPU_STEP_KEYS = {
    "status", "model", "device", "layers", "size", "frames", "latent_shape", "tokens", "text_tokens",
    "checkpointing", "blocks_to_swap", "fp8", "activation_offload", "lora_rank", "base_params", "trainable_params",
    "s_per_step", "step_times", "peak_vram_gib", "peak_host_rss_gib", "loss", "forward_flops",
    "model_flops_per_step", "recompute_flops_per_step", "counted_flops_per_step", "model_tflops_per_s",
    "peak_tflops", "mfu", "hfu",
}
COMBO_KEYS = {"name", "checkpointing", "activation_offload", "block_swap", "fp8", "status", "losses", "match"}


def run_script(args: list[str], tmp_path, timeout: int = 120) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "result.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, *args, "--json", str(out)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert out.is_file(), proc.stdout + proc.stderr
    return json.loads(out.read_text()), proc


@pytest.mark.slow
def test_gpu_step_smoke_on_cpu(tmp_path):
    result, proc = run_script(["benchmarks/gpu_step.py", "--device", "cpu", "--smoke", "--peak-tflops", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert GPU_STEP_KEYS <= result.keys()
    assert result["status"] == "ok" and result["smoke"] and result["layers"] == 2
    assert result["tokens"] == 3 * 4 * 4  # 64x64x9 -> latent 3x8x8 -> 2x2 patches
    assert len(result["step_times"]) == result["steps"] and result["s_per_step"] > 0
    assert result["model_flops_per_step"] == 3 * result["forward_flops"]
    assert 0 < result["counted_flops_per_step"] < result["model_flops_per_step"]  # LoRA skips frozen weight grads
    assert result["mfu"] > 0 and result["peak_vram_gib"] is None  # no CUDA
    assert result["loss"] is not None


@pytest.mark.slow
def test_memory_features_smoke_on_cpu(tmp_path):
    result, proc = run_script(["benchmarks/memory_features.py"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["smoke"] and result["device"] == "cpu" and result["all_match"]
    names = [c["name"] for c in result["combos"]]
    assert names[0] == "baseline" and "fp8+block_swap+checkpointing+activation_offload" in names
    for combo in result["combos"]:
        assert COMBO_KEYS <= combo.keys()
        assert combo["status"] == "ok" and combo["match"] is True and len(combo["losses"]) == result["steps"]
