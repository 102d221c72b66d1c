"""Attach a LoRA file to a loaded model for sampling, through diffusers' own `load_lora_weights`.

Going through diffusers (not our reader) means `scripts/sample.py` proves the file works for users of
plain diffusers too. Adapter types diffusers cannot load for Wan (LoHa, LoKr, DoRA) are merged into the
weights by our reader as ComfyUI computes them (`merge_into_transformer`). Which files a LoRA is and whether
they fit the model is checked from their headers first (`modelFile/lora_checks.py`).
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

from modules.model.WanModel import WanModel
from modules.model.WanVariant import WanVariant
from modules.modelFile.lora_checks import LoRAFiles, check_lora_file, expert_candidates
from modules.modelFile.lora_formats import LoRAFormatError, for_animate2
from modules.modelFile.lora_header import TRANSFORMER_CONFIG_KEY
from modules.modelFile.lora_reading import first_line, load_lora_file, read_lora_adapter
from modules.modelFile.weight_merge import merge_into_transformer
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_EXPERTS = ("high", "low")  # expert index -> adapter name / words in messages


def _warn_missing_expert(lora: LoRAFiles, model: WanModel) -> None:
    if model.transformer_2 is None or len(lora.files) == 2:
        return
    missing = next(e for e in range(2) if e not in lora.files)
    logger.warning("the %s-noise expert runs without the LoRA: '%s' is missing next to '%s'",
                   _EXPERTS[missing], expert_candidates(lora.given)[missing], lora.files[1 - missing])


def _reason(error: BaseException) -> str:
    """One line of why a load failed: torch's state-dict report starts with a header line, the useful one follows."""
    lines = [line.strip() for line in str(error).splitlines()]
    return next((line for line in lines if line.startswith("size mismatch for")), first_line(error))


@contextlib.contextmanager
def _quiet_diffusers_load_errors() -> Iterator[None]:
    """diffusers logs (to stderr) the exception it then raises; `_applying` makes that one line instead."""
    peft_logger = logging.getLogger("diffusers.loaders.peft")
    level = peft_logger.level
    peft_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        peft_logger.setLevel(level)


@contextlib.contextmanager
def _applying(file: Path, variant: WanVariant) -> Iterator[None]:
    """Turn a file that does not fit the model (other shapes, unknown modules, bad keys) into one line."""
    try:
        with _quiet_diffusers_load_errors():
            yield
    except RuntimeError as e:
        if "size mismatch" not in str(e):
            raise
        raise UserError(f"LoRA '{file}' does not fit this {variant.name} model ({_reason(e)}): it was made for "
                        "another model size; use a LoRA trained on this base model") from e
    except (ValueError, KeyError, IndexError, LoRAFormatError) as e:  # diffusers/peft/our reader on foreign keys
        raise UserError(f"LoRA '{file}' cannot be applied to this {variant.name} model ({_reason(e)}): "
                        "use a LoRA trained on this base model") from e


def attach_lora_for_inference(model: WanModel, lora: str | Path | LoRAFiles, scale: float = 1.0,
                              force: bool = False) -> None:
    """`lora`: a path, or what `check_lora_file` returned for it (checked before the model loaded)."""
    checked = lora if isinstance(lora, LoRAFiles) else check_lora_file(lora, model.variant, force)
    _warn_missing_expert(checked, model)
    if any(TRANSFORMER_CONFIG_KEY in metadata for metadata in checked.metadata.values()):
        attach_expanded_lora(model, checked, scale)
        return
    # diffusers' converter knows no VACE block keys of a ComfyUI-named file, and its Wan LoRA loader no Animate-2
    # transformer: our codec reads every format
    if model.variant.vace_layers or model.variant.name == "animate_2" or not all(
            read_lora_adapter(file).diffusers_loadable for file in checked.files.values()):
        merge_lora_files(model, checked, scale)
        return
    pipe = model.pipeline()
    if model.transformer_2 is None:
        with _applying(checked.files[0], model.variant):
            pipe.load_lora_weights(str(checked.files[0]), adapter_name="lora")
        pipe.set_adapters(["lora"], [scale])
        return
    for expert, file in checked.files.items():
        with _applying(file, model.variant):
            pipe.load_lora_weights(str(file), adapter_name=_EXPERTS[expert], load_into_transformer_2=expert == 1)
        logger.info("%s-noise expert LoRA: %s", _EXPERTS[expert], file)
    for expert in checked.files:
        model.transformers()[expert].set_adapters([_EXPERTS[expert]], [scale])


def merge_lora_files(model: WanModel, lora: LoRAFiles, scale: float = 1.0) -> None:
    """Merge each expert's file into its transformer's weights (`scale`: ComfyUI's strength)."""
    for expert, file in lora.files.items():
        with _applying(file, model.variant):
            weights, _ = load_lora_file(file)
            if model.variant.name == "animate_2":  # ComfyUI's names are Wan's, header or not
                weights = for_animate2(weights)
            merge_into_transformer(model.transformers()[expert], weights, scale)
        where = "transformer" if model.transformer_2 is None else f"{_EXPERTS[expert]}-noise expert"
        logger.info("%s merged into the %s: %s", weights.spec.title, where, file)


def attach_expanded_lora(model: WanModel, lora: LoRAFiles, scale: float = 1.0) -> None:
    """A LoRA trained on an E2V-expanded base (T2V + E2V): expand the transformer(s) the same way, then merge
    the adapter (any type, through its spec) and set the fully trained new weights (diffusers knows no such file)."""
    import json

    from modules.modelSetup.e2v_expansion import expand_model_for_e2v

    weights = {expert: load_lora_file(file) for expert, file in lora.files.items()}
    config = json.loads(next(iter(weights.values()))[1][TRANSFORMER_CONFIG_KEY])
    expand_model_for_e2v(model, config.get("image_dim") is not None, config.get("image_dim"), seed=0)
    for expert, (layers, _) in weights.items():
        with _applying(lora.files[expert], model.variant):
            merge_into_transformer(model.transformers()[expert], layers, scale)
    logger.info("E2V-expanded %s loaded from %s", next(iter(weights.values()))[0].spec.title, lora.given)
