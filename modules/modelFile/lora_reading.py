"""Reads a LoRA .safetensors file (DIFFUSERS_LORA, COMFY_LORA or musubi-tuner; LoRA, DoRA, LoHa or LoKr) into
`LoRAWeights`."""
from __future__ import annotations

import os

import torch

from modules.adapter.spec import AdapterSpec
from modules.modelFile.lora_formats import (
    LoRAFormatError,
    LoRAWeights,
    adapter_of_keys,
    detect_format,
    from_state_dict,
)
from modules.util.errors import UserError


def first_line(error: BaseException) -> str:
    """The first line of an error message (the rest of a library's message is often a long dump)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _check_lora_path(path: str) -> None:
    if not os.path.exists(path):
        raise UserError(f"LoRA file not found: {path}")
    if os.path.isdir(path):
        raise UserError(f"LoRA path is a directory, expected a .safetensors file: {path}")


def _unreadable(path: str, error: BaseException) -> UserError:
    return UserError(f"cannot read LoRA file {path}: not a valid .safetensors file ({first_line(error)}); "
                     "check the path, or download / export the file again")


def _not_a_lora(path: str, error: LoRAFormatError) -> UserError:
    return UserError(f"{path} is not a usable LoRA file: {error}; give a LoRA in ComfyUI, diffusers or musubi format")


def _read_names(path: str) -> tuple[dict[str, str], list[str]]:
    """(header metadata, tensor names) of a LoRA file, without reading its tensors."""
    from safetensors import safe_open

    _check_lora_path(path)
    try:
        with safe_open(path, framework="pt") as f:
            return dict(f.metadata() or {}), list(f.keys())
    except Exception as e:  # safetensors raises several types for corrupt/truncated files
        raise _unreadable(path, e) from e


def read_lora_header(path: str | os.PathLike) -> dict[str, str]:
    """The header metadata of a LoRA file, without reading its tensors: cheap enough to check a file before
    a model loads. `UserError` naming the file when it is missing, corrupt or holds no LoRA keys."""
    path = os.fspath(path)
    metadata, keys = _read_names(path)
    try:
        detect_format(dict.fromkeys(keys))  # decides on key names alone
    except LoRAFormatError as e:
        raise _not_a_lora(path, e) from e
    return metadata


def read_lora_adapter(path: str | os.PathLike) -> AdapterSpec:
    """The adapter type (`modules.adapter`) of a LoRA file from its key names, without reading its tensors."""
    path = os.fspath(path)
    try:
        return adapter_of_keys(_read_names(path)[1])
    except LoRAFormatError as e:
        raise _not_a_lora(path, e) from e


def read_lora_tensors(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(every tensor by key, header metadata) of a .safetensors file; `UserError` naming it when missing or corrupt."""
    from safetensors import safe_open

    path = os.fspath(path)
    _check_lora_path(path)
    try:
        with safe_open(path, framework="pt") as f:
            return {key: f.get_tensor(key) for key in f.keys()}, dict(f.metadata() or {})
    except Exception as e:  # safetensors raises several types for corrupt/truncated files
        raise _unreadable(path, e) from e


def load_lora_file(path: str | os.PathLike, skipped: list[str] | None = None) -> tuple[LoRAWeights, dict[str, str]]:
    """(weights, safetensors header metadata); `UserError` naming the file when it is missing, corrupt or no LoRA.
    `skipped` given: keys WanTrainer cannot use are listed there instead of refused (`from_state_dict`)."""
    path = os.fspath(path)
    state_dict, metadata = read_lora_tensors(path)
    try:
        weights = from_state_dict(state_dict, metadata, skipped)
    except LoRAFormatError as e:
        raise _not_a_lora(path, e) from e
    return weights, metadata
