"""Attach a LoRA file to a loaded model for sampling, through diffusers' own `load_lora_weights`.

Going through diffusers (not our reader) means `scripts/sample.py` proves the file works for users of
plain diffusers too. Two-expert models: either expert's file is accepted, its sibling found by name.
"""
from __future__ import annotations

import logging
from pathlib import Path

from modules.model.WanModel import WanModel
from modules.modelSaver.lora_formats import expert_lora_paths
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_HIGH, _LOW = "_high_noise.safetensors", "_low_noise.safetensors"


def expert_files(path: str | Path) -> tuple[Path | None, Path | None]:
    """(high-noise file, low-noise file) for a two-expert LoRA given either of them (or the base name)."""
    text = str(path)
    for suffix in (_HIGH, _LOW):
        if text.endswith(suffix):
            text = text[: -len(suffix)] + ".safetensors"
    high, low = (Path(p) for p in expert_lora_paths(text))
    return (high if high.is_file() else None), (low if low.is_file() else None)


def attach_lora_for_inference(model: WanModel, path: str | Path, scale: float = 1.0) -> None:
    path = Path(path)
    pipe = model.pipeline()
    if model.transformer_2 is None:
        if not path.is_file():
            raise UserError(f"LoRA file '{path}' does not exist")
        pipe.load_lora_weights(str(path), adapter_name="lora")
        pipe.set_adapters(["lora"], [scale])
        return
    high, low = expert_files(path)
    if high is None and low is None:
        raise UserError(f"no expert LoRA found for '{path}': expected <name>{_HIGH} and/or <name>{_LOW}")
    names, weights = [], []
    if high is not None:
        pipe.load_lora_weights(str(high), adapter_name="high")
        names.append("high")
        weights.append(scale)
        logger.info("high-noise expert LoRA: %s", high)
    if low is not None:
        pipe.load_lora_weights(str(low), adapter_name="low", load_into_transformer_2=True)
        names.append("low")
        weights.append(scale)
        logger.info("low-noise expert LoRA: %s", low)
    for transformer, name in ((model.transformer, "high"), (model.transformer_2, "low")):
        if name in names:
            transformer.set_adapters([name], [scale])
