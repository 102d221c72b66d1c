"""Tiny random Wan checkpoints (modules/synthetic/tiny_model.py): diffusers loads them and generates with them."""
from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for a hub

import numpy as np
import pytest
import torch
from PIL import Image


from tests.conftest import REPO_ROOT
from tests.torch_threads import one_torch_thread
from modules.util.errors import UserError
from modules.synthetic.tiny_model import (
    CLIP_HIDDEN_SIZE,
    CLIP_NUM_TOKENS,
    MARKER_KEY,
    TEXT_DIM,
    TOKENIZER_VOCAB_SIZE,
    TinyModelError,
    write_tiny_model,
)

# variant -> (pipeline class, in_channels, out_channels, z_dim, two experts, boundary_ratio,
#             expand_timesteps, CLIP image encoder, flow_shift, WanVariant name)
EXPECTED = {
    "t2v": ("WanPipeline", 16, 16, 16, False, None, False, False, 3.0, "t2v"),
    "i2v": ("WanImageToVideoPipeline", 36, 16, 16, False, None, False, True, 3.0, "i2v"),
    "ti2v": ("WanPipeline", 48, 48, 48, False, None, True, False, 5.0, "ti2v"),
    "a14b": ("WanPipeline", 16, 16, 16, True, 0.875, False, False, 3.0, "a14b_t2v"),
    "a14b_i2v": ("WanImageToVideoPipeline", 36, 16, 16, True, 0.9, False, False, 3.0, "a14b_i2v"),
    "flf2v": ("WanImageToVideoPipeline", 36, 16, 16, False, None, False, True, 3.0, "flf2v"),
    "skyreels_v2": ("SkyReelsV2Pipeline", 16, 16, 16, False, None, False, False, 8.0, "skyreels_v2_t2v"),
    "skyreels_v2_i2v": ("SkyReelsV2ImageToVideoPipeline", 36, 16, 16, False, None, False, True, 5.0,
                        "skyreels_v2_i2v"),
    "vace": ("WanVACEPipeline", 16, 16, 16, False, None, False, False, 3.0, "vace"),
    "a14b_vace": ("WanVACEPipeline", 16, 16, 16, True, 0.875, False, False, 3.0, "a14b_vace"),
}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """These models are tiny: one intra-op thread is faster, and far faster on a busy 2-core box."""
    with one_torch_thread():
        yield


def _count_calls(module: torch.nn.Module, counts: dict[str, int], name: str) -> None:
    counts[name] = 0

    def hook(*_args):
        counts[name] += 1

    module.register_forward_hook(hook)


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_tiny_model_loads_and_generates(variant: str, tmp_path: Path) -> None:
    from diffusers import DiffusionPipeline, UniPCMultistepScheduler
    from transformers import AutoTokenizer

    from modules.model.detection import detect_variant

    pipe_cls, in_ch, out_ch, z_dim, two_experts, boundary, expand, clip, shift, wan_name = EXPECTED[variant]
    path = write_tiny_model(variant, tmp_path / "model", seed=0)
    assert path == (tmp_path / "model").resolve()
    index = json.loads((path / "model_index.json").read_text())
    assert index["_class_name"] == pipe_cls
    assert index[MARKER_KEY] == {"variant": variant, "seed": 0, "mirrors": index[MARKER_KEY]["mirrors"]}
    assert index.get("boundary_ratio") == boundary and index.get("expand_timesteps", False) is expand
    assert (path / "transformer_2").is_dir() == two_experts
    assert (path / "image_encoder").is_dir() == clip and (path / "image_processor").is_dir() == clip
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert size < 6 * 2**20, f"tiny model is {size / 2**20:.1f} MB"

    # The project's own variant detection reads the folder the same way.
    detected = detect_variant(path)
    assert (detected.name, detected.in_channels, detected.vae_z_dim) == (wan_name, in_ch, z_dim)
    assert detected.has_image_encoder == clip and detected.has_clip_branch == clip

    tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer")
    assert len(tokenizer) == TOKENIZER_VOCAB_SIZE
    assert (tokenizer.pad_token, tokenizer.eos_token, tokenizer.unk_token) == ("<pad>", "</s>", "<unk>")
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)

    pipe = DiffusionPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    assert type(pipe).__name__ == pipe_cls
    assert pipe.config.get("boundary_ratio") == boundary and pipe.config.get("expand_timesteps", False) is expand
    assert isinstance(pipe.scheduler, UniPCMultistepScheduler)
    assert pipe.scheduler.config.prediction_type == "flow_prediction" and pipe.scheduler.config.use_flow_sigmas
    assert pipe.scheduler.config.flow_shift == shift
    assert pipe.vae.config.z_dim == z_dim and len(pipe.vae.config.latents_mean) == z_dim
    assert pipe.text_encoder.config.vocab_size == len(tokenizer) and pipe.text_encoder.config.d_model == TEXT_DIM
    for name in ("transformer", "transformer_2"):
        expert = getattr(pipe, name, None)  # (SkyReels-V2's pipeline has no transformer_2)
        if name == "transformer_2" and not two_experts:
            assert expert is None
            continue
        assert (expert.config.in_channels, expert.config.out_channels) == (in_ch, out_ch)
        assert expert.config.text_dim == TEXT_DIM
        assert expert.config.image_dim == (CLIP_HIDDEN_SIZE if clip else None)
    if two_experts:
        assert (path / "transformer/config.json").read_text() == (path / "transformer_2/config.json").read_text()
        assert not torch.equal(pipe.transformer.proj_out.weight, pipe.transformer_2.proj_out.weight)

    # The real prompt path: padding to max_length=512.
    embeds = pipe._get_t5_prompt_embeds("a red circle moving left to right", max_sequence_length=512)
    assert embeds.shape == (1, 512, TEXT_DIM)

    kwargs = dict(prompt="a red circle moving left to right", negative_prompt="blurry, static",
                  num_frames=5, height=32, width=32, num_inference_steps=2, guidance_scale=5.0,
                  max_sequence_length=512, output_type="np", generator=torch.Generator().manual_seed(0))
    if pipe_cls in ("WanImageToVideoPipeline", "SkyReelsV2ImageToVideoPipeline"):
        kwargs["image"] = Image.new("RGB", (48, 32), (200, 40, 40))
    if variant == "flf2v":  # its CLIP branch takes a first and a last frame
        kwargs["last_image"] = Image.new("RGB", (48, 32), (40, 40, 200))
    if clip:
        image_embeds = pipe.encode_image(Image.new("RGB", (32, 32)), torch.device("cpu"))
        assert image_embeds.shape == (1, CLIP_NUM_TOKENS, CLIP_HIDDEN_SIZE)  # 257 tokens, as ViT-H/14 at 224

    if variant == "skyreels_v2":  # its fps embedding: diffusers' non-forcing pipeline feeds no fps (our sampler does)
        return
    calls: dict[str, int] = {}
    _count_calls(pipe.transformer, calls, "transformer")
    if two_experts:
        _count_calls(pipe.transformer_2, calls, "transformer_2")
    frames = pipe(**kwargs).frames
    assert frames.shape == (1, 5, 32, 32, 3)
    assert np.isfinite(frames).all() and frames.min() >= 0.0 and frames.max() <= 1.0
    # 2 steps x (cond + uncond); with two experts the first step (t ~ 1000) goes to the high-noise
    # expert and the second (below the boundary) to the low-noise one.
    assert sum(calls.values()) == 4
    if two_experts:
        assert calls == {"transformer": 2, "transformer_2": 2}


def test_same_seed_writes_identical_files(tmp_path: Path) -> None:
    a = write_tiny_model("a14b", tmp_path / "a", seed=7)
    b = write_tiny_model("a14b", tmp_path / "b", seed=7)
    c = write_tiny_model("a14b", tmp_path / "c", seed=8)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    _, mismatch, errors = filecmp.cmpfiles(a, b, [str(f) for f in files], shallow=False)
    assert not mismatch and not errors
    weights = "transformer/diffusion_pytorch_model.safetensors"
    assert (a / weights).read_bytes() != (c / weights).read_bytes()
    assert (a / weights).read_bytes() != (a / "transformer_2/diffusion_pytorch_model.safetensors").read_bytes()
    assert (a / "tokenizer/tokenizer.json").read_bytes() == (c / "tokenizer/tokenizer.json").read_bytes()
    # Writing again over a previous tiny model replaces it in place.
    assert write_tiny_model("a14b", c, seed=7) == c
    assert (c / weights).read_bytes() == (a / weights).read_bytes()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(TinyModelError, match="unknown tiny Wan variant 'wan3'"):
        write_tiny_model("wan3", tmp_path / "x")
    with pytest.raises(UserError, match="seed"):
        write_tiny_model("t2v", tmp_path / "x", seed=-1)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        write_tiny_model("t2v", tmp_path / "busy")
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"
    # A real (unmarked) diffusers folder is never overwritten.
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "model_index.json").write_text('{"_class_name": "WanPipeline"}')
    with pytest.raises(TinyModelError, match="not a tiny model"):
        write_tiny_model("t2v", tmp_path / "real")
    assert (tmp_path / "real" / "model_index.json").read_text() == '{"_class_name": "WanPipeline"}'
    assert not (tmp_path / "x").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "real"]  # no temp folders left behind


def test_cli(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    script = str(REPO_ROOT / "scripts" / "make_tiny_model.py")
    out = tmp_path / "cli_model"
    done = subprocess.run([sys.executable, script, "--variant", "ti2v", "--output", str(out), "--seed", "3"],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out.resolve())
    index = json.loads((out / "model_index.json").read_text())
    assert index["expand_timesteps"] is True
    assert json.loads((out / "vae" / "config.json").read_text())["z_dim"] == 48

    bad = subprocess.run([sys.executable, script, "--variant", "t3v", "--output", str(tmp_path / "bad")],
                         capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert bad.returncode != 0
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "t3v" in lines[0] and lines[0].startswith("error:")
    assert not (tmp_path / "bad").exists()
