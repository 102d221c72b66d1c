"""What `lora_weight_path` does for each training method (looked up in trainer/registry.py `SETUPS`), and what
`embedding_weight_path` does."""
from __future__ import annotations

import logging
from pathlib import Path

from modules.model.WanModel import WanModel
from modules.modelFile.lora_checks import check_lora_file, expert_files
from modules.modelFile.lora_formats import LoRAFormatError, apply_to_peft, for_animate2
from modules.modelFile.lora_reading import load_lora_file
from modules.modelSaver.embedding_file import read_embedding
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


def continue_from_lora(model: WanModel, setup: BaseWanSetup, path: str) -> None:
    """Continue from a LoRA file (ours, ComfyUI or musubi); two-expert models take either expert's file."""
    check_lora_file(path, model.variant)  # a LoRA made for another variant, refused from its header
    files = {0: Path(path)} if model.transformer_2 is None else dict(enumerate(expert_files(path)))
    for expert, transformer in setup.trained_transformers():
        if files.get(expert) is None:
            raise UserError(f"config key 'lora_weight_path': no file for the "
                            f"{'high' if expert == 0 else 'low'}-noise expert next to '{path}'")
        weights, _ = load_lora_file(files[expert])
        if model.variant.name == "animate_2":  # ComfyUI's names are Wan's, header or not
            weights = for_animate2(weights)
        try:  # through the file's adapter type, which must be the one this config trains
            apply_to_peft(transformer, weights, "default")
        except LoRAFormatError as e:
            raise UserError(f"config key 'lora_weight_path': '{files[expert]}': {e}") from None
        logger.info("continuing from %s %s", weights.spec.title, files[expert])


def no_adapter_to_continue(model: WanModel, setup: BaseWanSetup, path: str) -> None:
    """A full fine-tune trains no adapter, so a LoRA file has nowhere to go (as before: not read)."""
    return None


def continue_from_embedding(model: WanModel, setup: BaseWanSetup, path: str) -> None:
    """Start the trained embedding from a file's vectors (ours or ComfyUI's)."""
    option = "config key 'embedding_weight_path'"
    loaded = read_embedding(path, model.text_encoder.config.d_model, option, placeholder=setup.config.embedding.placeholder)
    setup.embedding_training.continue_from(loaded, option)
    logger.info("continuing the embedding from %s", path)
