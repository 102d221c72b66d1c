"""Writes `LoRAWeights` to a .safetensors file, atomically, with model-spec metadata in the header.

The header is built from the template `resources/model_spec/lora.json`; the placeholders are filled from
the caller's metadata (`lora_metadata()` builds it) and the weights, then the caller's own keys are laid
over it. ``wantrainer.format``, ``wantrainer.adapter`` (the adapter type) and the format's own keys
(``wantrainer.alpha_map``, see `lora_formats`) always describe the file as written; a
``lora_adapter_metadata`` of a foreign source file is dropped (diffusers would apply its alpha on top of our
baked weights).
"""
from __future__ import annotations

import dataclasses
import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import torch

from modules.adapter.lora import LORA
from modules.adapter.registry import all_adapters
from modules.modelFile.lora_formats import (  # noqa: F401  (VARIANT_KEY: re-exported)
    ALPHA_MAP_KEY,
    DIFFUSERS_ADAPTER_METADATA_KEY,
    VARIANT_KEY,
    WRITABLE_FORMATS,
    LoRAFormatError,
    LoRAWeights,
    common_rank_alpha,
    format_metadata,
    normalize_format,
    to_state_dict,
)
from modules.modelFile.lora_header import (
    ADAPTER_KEY,
    BASE_CONFIG_HASH_KEY,
    BOUNDARY_KEY,
    EXPERT_KEY,
    EXPERT_NAMES,
)
from modules.util.errors import UserError
from modules.util.safetensors_io import write_safetensors

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "resources" / "model_spec" / "lora.json"


# What `modelspec.implementation` names: the code whose key convention the file uses.
_IMPLEMENTATIONS = {"DIFFUSERS_LORA": "https://github.com/huggingface/diffusers",
                    "COMFY_LORA": "https://github.com/Wan-Video/Wan{version}"}  # Wan's own module names


@dataclasses.dataclass
class LoRAFileInfo:
    """What a trained LoRA file is: written into its header by `lora_metadata`."""

    variant: str  # `wan-2.1-t2v`, ...
    base_model: str = ""
    base_transformer_config: str = ""  # WanVariant.transformer_config_hash of the base
    config_hash: str = ""  # of the whole training config
    expert: int | None = None  # two-expert models: 0 high noise, 1 low noise
    boundary_ratio: float | None = None
    steps: int | None = None
    epochs: int | None = None
    weights: str = ""  # "ema 0.999" when the file holds the moving average of the trained weights
    adapter: str = LORA.name  # build_header sets the type the weights hold
    title: str = ""


def lora_metadata(variant: str | LoRAFileInfo, base_model: str = "", config_hash: str = "",
                  title: str = "") -> dict[str, str]:
    """The caller's part of the header: ``variant`` like ``wan-2.1-t2v`` gives ``wan-2.1-t2v/lora``."""
    info = variant if isinstance(variant, LoRAFileInfo) else LoRAFileInfo(variant, base_model, config_hash=config_hash,
                                                                          title=title)
    meta = {VARIANT_KEY: info.variant, "wantrainer.base_model": info.base_model,
            "wantrainer.config_hash": info.config_hash, ADAPTER_KEY: info.adapter}
    optional = {BASE_CONFIG_HASH_KEY: info.base_transformer_config, "modelspec.title": info.title,
                EXPERT_KEY: EXPERT_NAMES[info.expert] if info.expert is not None else "",
                BOUNDARY_KEY: _number(info.boundary_ratio),
                "wantrainer.steps": "" if info.steps is None else str(info.steps),
                "wantrainer.epochs": "" if info.epochs is None else str(info.epochs),
                "wantrainer.weights": info.weights}
    meta.update({k: v for k, v in optional.items() if v})
    return meta


def _creation_date() -> str:
    """Now, or SOURCE_DATE_EPOCH when set (the reproducible-builds convention: byte-identical outputs)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch and epoch.isdigit() else datetime.now(timezone.utc)
    return moment.isoformat(timespec="seconds")


def _number(value: float | int | None) -> str:
    if value is None:
        return ""
    return f"{float(value):g}"


def build_header(weights: LoRAWeights, path: str | os.PathLike, fmt: Any, metadata: Mapping[str, Any] | None) -> dict[str, str]:
    """The safetensors ``__metadata__`` for `weights` written to `path` in `fmt`."""
    fmt = normalize_format(fmt)
    given = {str(k): str(v) for k, v in (metadata or {}).items()}
    for key in (DIFFUSERS_ADAPTER_METADATA_KEY, ALPHA_MAP_KEY, "format", "modelspec.implementation"):
        given.pop(key, None)  # they describe the file as written (a converted file's source said otherwise)
    rank, alpha = common_rank_alpha(weights)
    context = {
        "variant": given.get("wantrainer.variant") or "wan",
        "title": given.get("modelspec.title") or Path(os.fspath(path)).stem,
        "date": _creation_date(),
        "rank": given.get("wantrainer.rank") or ("" if rank is None else str(rank)),
        "alpha": given.get("wantrainer.alpha") or _number(alpha),
        "base_model": given.get("wantrainer.base_model", ""),
        "config_hash": given.get("wantrainer.config_hash", ""),
        "format": fmt,
        "implementation": _implementation(fmt, given.get(VARIANT_KEY, "")),
    }
    with open(TEMPLATE_PATH, encoding="utf-8") as f:
        template = json.load(f)
    header = {"format": "pt"}
    header.update({k: str(v).format_map(context) for k, v in template.items()})
    header.update(given)
    if ADAPTER_KEY in given or weights.adapter != LORA.name:  # the type the file holds, whatever the caller said
        header[ADAPTER_KEY] = weights.adapter
    header["wantrainer.format"] = fmt
    header.update(format_metadata(weights, fmt))
    return header


def _implementation(fmt: str, variant: str) -> str:
    return _IMPLEMENTATIONS[fmt].format(version="2.2" if variant.startswith("wan-2.2") else "2.1")


def _prepare_tensors(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """The tensors as written: cast to `dtype`, except the alphas and each adapter's `float32_keys`."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    float32 = tuple(sorted({f".{key}" for spec in all_adapters() for key in spec.float32_keys}))
    for key, tensor in state_dict.items():
        t = tensor.detach()
        if t.is_floating_point() and key.endswith(float32):
            t = t.float()
        elif dtype is not None and t.is_floating_point() and not key.endswith(".alpha"):
            t = t.to(dtype)
        t = t.to("cpu").contiguous()
        storage = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if storage in seen:  # safetensors refuses tensors sharing memory
            t = t.clone()
        else:
            seen.add(storage)
        out[key] = t
    return out


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_lora(
    weights: LoRAWeights,
    path: str | os.PathLike,
    fmt: Any,
    metadata: Mapping[str, Any] | None = None,
    dtype: torch.dtype | None = None,
) -> None:
    """Writes `weights` as `fmt` (DIFFUSERS_LORA / COMFY_LORA) to `path`: temp file, fsync, os.replace.

    `dtype` casts the LoRA tensors (not the alphas); None keeps their dtype.
    """
    fmt = normalize_format(fmt)
    if fmt not in WRITABLE_FORMATS:
        raise LoRAFormatError(f"{fmt} can only be read; write one of {', '.join(WRITABLE_FORMATS)}")
    if not weights.layers and not weights.full_weights:
        raise LoRAFormatError(f"nothing to save to {os.fspath(path)}: the LoRA has no layers")
    state_dict = to_state_dict(weights, fmt)
    header = build_header(weights, path, fmt, metadata)
    tensors = _prepare_tensors(state_dict, dtype)

    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as f:  # sorted header: the same training gives the same bytes
            write_safetensors(f, tensors, header)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _remove_quietly(tmp)
        raise UserError(f"cannot write LoRA file {path}: {e.strerror or e}") from e
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_dir(directory)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
