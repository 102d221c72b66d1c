"""The GPU benchmarks run end to end in their CPU smoke modes and print the documented JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

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
def test_lean_block_speed_smoke_on_cpu(tmp_path):
    """benchmarks/lean_block_speed.py on a one-block, 64-wide stack: both forwards timed, the ratio reported."""
    result, proc = run_script(["benchmarks/lean_block_speed.py", "--width", "64", "--layers", "1", "--frames", "1",
                               "--steps", "1", "--repeats", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(result["seconds_per_step"]) == {"lean", "diffusers"} and result["ratio_lean_over_diffusers"] > 0


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


@pytest.mark.parametrize("model", ["1.3b", "14b_i2v", "5b"])
def test_gpu_step_flop_model_equals_torchs_count_of_the_forward(model, monkeypatch):
    """MFU rests on `step_flops`: its forward equals FlopCounterMode's count of the real diffusers forward
    (attention through SDPA's math path, whose matmuls the counter sees) for the Wan 2.1 T2V and I2V layouts
    and the 5B TI2V's (48 channels, 16x VAE, time MLPs on every token)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    import gpu_step

    config = gpu_step.transformer_config(model, smoke=True)
    shape = gpu_step.latent_shape(config, 64, 64, 9)
    tokens = gpu_step.video_tokens(config, shape)
    transformer = gpu_step.build_transformer(config, torch.device("cpu"), torch.float32)
    inputs = gpu_step.make_inputs(config, shape, 1, torch.device("cpu"))
    condition = inputs.payload.condition
    hidden = inputs.x0 if condition is None else torch.cat([inputs.x0, condition], dim=1)
    timestep = torch.full((1, tokens), 500.0) if gpu_step.per_token_timesteps(config) else torch.tensor([500.0])
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        transformer(hidden_states=hidden, timestep=timestep, encoder_hidden_states=inputs.prompt_embeds,
                    encoder_hidden_states_image=inputs.payload.clip_embeds, return_dict=False)
    assert counter.get_total_flops() == gpu_step.step_flops(config, tokens, 1, 0, [], False)["forward"]


@pytest.mark.slow
def test_gpu_step_smoke_of_the_5b_ti2v_on_cpu(tmp_path):
    """The TI2V layout runs through the project's step: 48-channel latents of the 16x VAE, per-token timesteps."""
    result, proc = run_script(["benchmarks/gpu_step.py", "--device", "cpu", "--smoke", "--model", "5b",
                               "--peak-tflops", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "ok" and result["per_token_timesteps"] is True
    assert result["latent_shape"] == [48, 3, 4, 4] and result["tokens"] == 3 * 2 * 2  # 64x64x9 -> 16x -> 2x2 patches
    assert result["loss"] is not None and result["estimate_training_gib"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("source", ["folder", "single file"])
def test_loading_a_transformer_holds_its_weights_once(tmp_path, source):
    """benchmarks/host_memory.py on one real-width block of the 5B (~0.6 GB): the load's resident set, every weight
    read, stays within 1.2x the weights' bytes (a second copy would be 2x); the written folder is deleted."""
    args = ["benchmarks/host_memory.py", "--layers", "1", "--folder", str(tmp_path / "model")]
    result, proc = run_script(args + (["--single-file"] if source == "single file" else []), tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["source"] == source and result["layers"] == 1
    assert result["loaded_bytes"] == result["weights_bytes"] > 2 ** 28
    assert result["load_rss_over_weights"] <= 1.2
    assert not (tmp_path / "model" / "transformer").exists()


@pytest.mark.slow
def test_a_freed_text_encoder_gives_its_host_memory_back(tmp_path):
    """benchmarks/host_memory.py --text-encoder --smoke (UMT5 with its real vocabulary, 0.13 GB): parked as caching on
    a GPU left it, every weight is a private host copy; freed as the trainer frees it, they are gone."""
    result, proc = run_script(["benchmarks/host_memory.py", "--text-encoder", "--smoke", "--folder", str(tmp_path)],
                              tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    held, weights = result["above_baseline_gib"], result["weights_gib"]
    assert result["points"]["parked"]["anon_gib"] - result["points"]["baseline"]["anon_gib"] > 0.9 * weights
    assert held["freed"] - held["loaded"] < 0.05 * weights and result["freed_gib"] == weights
