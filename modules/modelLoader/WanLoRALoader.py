"""Reads a LoRA .safetensors file (DIFFUSERS_LORA, COMFY_LORA or musubi-tuner) into `LoRAWeights`."""
from __future__ import annotations

import os

from modules.modelSaver.lora_formats import LoRAFormatError, LoRAWeights, from_state_dict
from modules.util.errors import UserError


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_lora_file(path: str | os.PathLike) -> tuple[LoRAWeights, dict[str, str]]:
    """(weights, safetensors header metadata); `UserError` naming the file when it is missing, corrupt or no LoRA."""
    from safetensors import safe_open

    path = os.fspath(path)
    if not os.path.exists(path):
        raise UserError(f"LoRA file not found: {path}")
    if os.path.isdir(path):
        raise UserError(f"LoRA path is a directory, expected a .safetensors file: {path}")
    try:
        with safe_open(path, framework="pt") as f:
            metadata = dict(f.metadata() or {})
            state_dict = {key: f.get_tensor(key) for key in f.keys()}
    except Exception as e:  # safetensors raises several types for corrupt/truncated files
        raise UserError(f"cannot read LoRA file {path}: not a valid .safetensors file ({_first_line(e)})") from e
    try:
        weights = from_state_dict(state_dict, metadata)
    except LoRAFormatError as e:
        raise UserError(f"{path} is not a usable LoRA file: {e}") from e
    return weights, metadata
