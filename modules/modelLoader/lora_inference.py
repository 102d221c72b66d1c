"""Attach a LoRA file to a loaded model for sampling, through diffusers' own `load_lora_weights`.

Going through diffusers (not our reader) means `scripts/sample.py` proves the file works for users of
plain diffusers too. Two-expert models: either expert's file is accepted, its sibling found by name.
"""
from __future__ import annotations

import logging
from pathlib import Path

from modules.model.WanModel import WanModel
from modules.modelSaver.lora_formats import expert_lora_paths
from modules.modelSaver.WanModelSaver import TRANSFORMER_CONFIG_KEY
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
    if _is_expanded_lora(path if model.transformer_2 is None else next(p for p in expert_files(path) if p)):
        attach_expanded_lora(model, path, scale)
        return
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


def _is_expanded_lora(path: Path) -> bool:
    from safetensors import safe_open

    if not path.is_file():
        return False
    with safe_open(str(path), "pt") as f:
        return TRANSFORMER_CONFIG_KEY in (f.metadata() or {})


def attach_expanded_lora(model: WanModel, path: Path, scale: float = 1.0) -> None:
    """A LoRA trained on an E2V-expanded base (T2V + E2V): expand the transformer(s) the same way, then
    load the LoRA and the fully trained new weights with our own loader (diffusers knows no such file)."""
    import json

    from peft import LoraConfig

    from modules.modelLoader.WanLoRALoader import load_lora_file
    from modules.modelSaver.lora_formats import apply_to_peft
    from modules.modelSetup.e2v_expansion import expand_model_for_e2v

    files = {0: path} if model.transformer_2 is None else dict(enumerate(expert_files(path)))
    weights = {expert: load_lora_file(file) for expert, file in files.items() if file is not None}
    config = json.loads(next(iter(weights.values()))[1][TRANSFORMER_CONFIG_KEY])
    expand_model_for_e2v(model, config.get("image_dim") is not None, config.get("image_dim"), seed=0)
    for expert, (lora, _) in weights.items():
        transformer = model.transformer if expert == 0 else model.transformer_2
        ranks = {layer.rank for layer in lora.layers.values()}
        transformer.add_adapter(LoraConfig(r=max(ranks), lora_alpha=max(ranks), target_modules=sorted(lora.layers),
                                           rank_pattern={n: l.rank for n, l in lora.layers.items()}), "default")
        apply_to_peft(transformer, lora, "default")
        if scale != 1.0:
            transformer.set_adapters(["default"], [scale])
    logger.info("E2V-expanded LoRA loaded from %s", path)
