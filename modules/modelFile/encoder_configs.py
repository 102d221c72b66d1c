"""Configs for single-file UMT5 and CLIP vision encoders: from a folder's config.json when there is one,
otherwise read off the tensor shapes.

The shapes give every size but a few constants that no weight stores: those are UMT5-XXL's (as ComfyUI's
comfy/text_encoders/umt5_config_xxl.json) and ViT-H/14's (as comfy/clip_vision_config_h.json, the CLIP
every Wan I2V model uses). A CLIP's head count is not in its weights either: only ViT-H/14's (16 heads
of 80 at width 1280) is assumed; any other width needs its config.json.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from transformers import CLIPImageProcessor, CLIPVisionConfig, PretrainedConfig, UMT5Config

from modules.modelFile.single_file import count_indices

Shapes = Mapping[str, tuple[int, ...]]

_T5_BLOCK = "encoder.block.{}.layer.0.SelfAttention.q.weight"
_CLIP_LAYER = "encoder.layers.{}.layer_norm1.weight"
_CLIP_HEADS_BY_WIDTH = {1280: 16}  # ViT-H/14 (clip_vision_h)
# OpenAI CLIP preprocessing, as Wan's I2V image_processor and ComfyUI's clip_preprocess use.
_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def umt5_sizes(shapes: Shapes) -> dict[str, int]:
    """The UMT5 sizes a state dict's shapes fix (transformers' config field names)."""
    vocab_size, d_model = shapes["shared.weight"]
    buckets, heads = shapes["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    inner = shapes["encoder.block.0.layer.0.SelfAttention.q.weight"][0]
    return {"vocab_size": vocab_size, "d_model": d_model, "num_heads": heads, "d_kv": inner // heads,
            "relative_attention_num_buckets": buckets, "num_layers": count_indices(shapes, _T5_BLOCK),
            "d_ff": shapes["encoder.block.0.layer.1.DenseReluDense.wi_0.weight"][0]}


def umt5_config(sizes: dict[str, int]) -> UMT5Config:
    config = UMT5Config(**sizes, num_decoder_layers=sizes["num_layers"], feed_forward_proj="gated-gelu",
                        relative_attention_max_distance=128, layer_norm_epsilon=1e-6, dropout_rate=0.1,
                        tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    config.architectures = ["UMT5EncoderModel"]
    return config


def clip_vision_sizes(shapes: Shapes) -> dict[str, int]:
    """The CLIP vision sizes a state dict's shapes fix (without `vision_model.`)."""
    hidden, channels, patch, _ = shapes["embeddings.patch_embedding.weight"]
    positions = shapes["embeddings.position_embedding.weight"][0]  # patches + the class token
    return {"hidden_size": hidden, "num_channels": channels, "patch_size": patch,
            "image_size": patch * math.isqrt(positions - 1), "num_hidden_layers": count_indices(shapes, _CLIP_LAYER),
            "intermediate_size": shapes["encoder.layers.0.mlp.fc1.weight"][0]}


def clip_vision_heads(hidden_size: int) -> int | None:
    return _CLIP_HEADS_BY_WIDTH.get(hidden_size)


def clip_vision_config(sizes: dict[str, int], heads: int) -> CLIPVisionConfig:
    config = CLIPVisionConfig(**sizes, num_attention_heads=heads, hidden_act="gelu", layer_norm_eps=1e-5,
                              projection_dim=1024)
    config.architectures = ["CLIPVisionModel"]
    return config


def folder_config(cls: type[PretrainedConfig], folder: Path) -> PretrainedConfig | None:
    """`folder/config.json` when it exists."""
    return cls.from_pretrained(folder) if (folder / "config.json").is_file() else None


def size_mismatch(sizes: dict[str, int], config: PretrainedConfig) -> str | None:
    """'num_layers 12 in the file, 24 in config.json' for the first size that differs, else None."""
    for name, value in sizes.items():
        if getattr(config, name) != value:
            return f"{name} {value} in the file, {getattr(config, name)} in config.json"
    return None


def clip_image_processor(folder: Path | None, image_size: int) -> CLIPImageProcessor:
    """`folder`'s processor when it has one, else OpenAI CLIP preprocessing at `image_size`."""
    if folder is not None and (folder / "preprocessor_config.json").is_file():
        return CLIPImageProcessor.from_pretrained(folder)
    return CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                              resample=3, image_mean=_CLIP_MEAN, image_std=_CLIP_STD)
