"""A tiny, randomly initialised Wan2.2-Animate-2 folder: `WanAnimate2Transformer3DModel` (diffusers' class loads it)
over the tiny I2V folder's text encoder, tokenizer, VAE and scheduler.

Its CLIP tower is 1280 wide, as the real ViT-H/14: the transformer's image projection (`MLPProj(1280, dim)`) has that
width fixed, so the I2V folder's 32-wide tower cannot feed it. One layer keeps it at ~8M parameters.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from modules.synthetic.tiny_model import MARKER_KEY, TEXT_DIM, _seeded, _write_json, write_tiny_model

#: The CLIP width Animate-2's image projection takes (its `img_emb` is MLPProj(1280, dim) in every checkpoint).
ANIMATE2_CLIP_WIDTH = 1280
TINY_ANIMATE2 = dict(in_dim=36, out_dim=16, dim=32, ffn_dim=64, num_heads=2, num_layers=2, text_dim=TEXT_DIM)
#: With the trained VAE (the learning test): the learning size of the other tiny transformers (tiny_model.py), without
#: the CLIP branch: its fixed 1280-wide projection over 257 image tokens, both passes, made a one-thread CPU step 2.4x
#: slower (0.71 s against 0.30 s, side by side), and a random one-layer CLIP tower tells the toy nothing the
#: reference's latent slot does not
LEARNING_ANIMATE2 = dict(dim=128, ffn_dim=256, num_heads=4, num_layers=4, use_img_emb=False)


def tiny_animate2_transformer(seed: int = 0, **overrides):
    """The tiny transformer itself (tests build it without a folder)."""
    from diffusers import WanAnimate2Transformer3DModel

    with _seeded(seed, 3):
        return WanAnimate2Transformer3DModel(**{**TINY_ANIMATE2, **overrides}).eval()


def _image_encoder():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(hidden_size=ANIMATE2_CLIP_WIDTH, intermediate_size=64, projection_dim=32,
                              num_hidden_layers=1, num_attention_heads=16, image_size=224, patch_size=14)
    config.architectures = ["CLIPVisionModel"]
    return CLIPVisionModel(config).eval()


def write_tiny_animate2(output_dir: str | Path, seed: int = 0, i2v_folder: str | Path | None = None,
                        trained_vae: bool = False) -> Path:
    """Write the folder (the tiny I2V one's components, Animate-2's transformer and a 1280-wide CLIP tower);
    `i2v_folder`: a tiny I2V folder already written, copied instead of writing one (the tests' session cache);
    `trained_vae`: the I2V folder's trained VAE and a transformer of the learning size (as `write_tiny_model`)."""
    from transformers.utils import logging as hf_logging

    if i2v_folder is None:
        out = write_tiny_model("i2v", output_dir, seed, trained_vae=trained_vae)
    else:
        out = Path(output_dir).resolve()
        shutil.copytree(i2v_folder, out, dirs_exist_ok=True)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with torch.no_grad():
            for name, build, offset in (("transformer", lambda: tiny_animate2_transformer(
                seed, **(LEARNING_ANIMATE2 if trained_vae else {})), 3),
                                        ("image_encoder", _image_encoder, 5)):
                shutil.rmtree(out / name)
                with _seeded(seed, offset):
                    module = build()
                module.save_pretrained(str(out / name), safe_serialization=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    index = json.loads((out / "model_index.json").read_text(encoding="utf-8"))
    index.update({"_class_name": "WanAnimate2ModularPipeline", "transformer": ["diffusers",
                                                                               "WanAnimate2Transformer3DModel"]})
    index[MARKER_KEY].update(variant="animate_2", mirrors="Wan-AI/Wan2.2-Animate-2-14B (diffusers layout)")
    _write_json(out / "model_index.json", index)
    return out
