"""Reading one component from a single .safetensors file, as ComfyUI users hold them.

ComfyUI keeps every part of a Wan model in its own file (`diffusion_models/`, `vae/`, `text_encoders/`,
`clip_vision/`), stored in bf16, fp16, plain fp8 (float8_e4m3fn / e5m2) or ComfyUI's "fp8_scaled" format.
This module answers what a file holds (so a VAE given as the text encoder is one clear line), strips
ComfyUI's key prefixes and turns every fp8 weight back into a float one. Key renaming per component
lives with the component loaders (`component_files`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Callable, Literal

import torch
from safetensors import SafetensorError, safe_open

from modules.modelSetup.int8_convrot import dequantize as int8_dequantize
from modules.util.errors import UserError

Kind = Literal["transformer", "vae", "text_encoder", "image_encoder"]

KIND_NAMES: dict[Kind, str] = {
    "transformer": "a Wan transformer (ComfyUI's diffusion_models/)",
    "vae": "a Wan VAE (ComfyUI's vae/)",
    "text_encoder": "a UMT5 text encoder (ComfyUI's text_encoders/umt5_xxl_*)",
    "image_encoder": "a CLIP vision encoder (ComfyUI's clip_vision/)",
}

# A key only that kind of file holds, in original/ComfyUI or diffusers/transformers names (matched as a
# suffix, so any prefix is fine).
_SIGNATURES: dict[Kind, tuple[str, ...]] = {
    "transformer": ("blocks.0.self_attn.q.weight", "blocks.0.attn1.to_q.weight"),
    "vae": ("decoder.middle.0.residual.0.gamma", "decoder.mid_block.resnets.0.norm1.gamma"),
    "text_encoder": ("encoder.block.0.layer.0.SelfAttention.q.weight",),
    "image_encoder": ("embeddings.patch_embedding.weight",),
}

# Prefixes stripped per kind: ComfyUI's checkpoint prefix for diffusion models, and the vision tower's
# own prefix (ComfyUI stores CLIPVisionModelWithProjection names; the tower is what Wan uses).
_PREFIXES: dict[Kind, tuple[str, ...]] = {
    "transformer": ("model.diffusion_model.", "diffusion_model."),
    "vae": (),
    "text_encoder": (),
    "image_encoder": ("vision_model.",),
}

# ComfyUI's fp8_scaled format (comfy/ops.py scaled_fp8_ops, comfy/model_detection.py):
# - `scaled_fp8`: an empty marker tensor whose dtype is the fp8 storage format (two elements: ComfyUI
#   skips fp8 matmuls for this model); it holds no weights.
# - `<layer>.scale_weight`: float32 scalar per Linear; the real weight is fp8 weight (as float32) x scale.
# - `<layer>.scale_input`: float32 scalar ComfyUI divides activations by before an fp8 x fp8 matmul;
#   it is not part of the weight, and training computes in bf16/fp32, so it is dropped.
SCALE_WEIGHT = ".scale_weight"
_SCALE_INPUT = ".scale_input"
_MARKERS = {
    "scaled_fp8",
    "spiece_model",  # ComfyUI keeps UMT5's sentencepiece tokenizer in the file; ours comes from tokenizer/
}
# ComfyUI's quantised layers (comfy/ops.py mixed-precision ops, comfy-kitchen's layouts): `<layer>.weight` stored,
# `<layer>.weight_scale` and `<layer>.comfy_quant`, the layer's format as UTF-8 JSON in a uint8 tensor. We read
# `int8_tensorwise` with `convrot: true` (int8 rotated by a regular Hadamard in groups of `convrot_groupsize`, one
# float32 scale per output row): kept int8 for base_weight_format INT8_CONVROT (CONVROT_GROUP marks those layers
# until the model is built), else dequantised into the load dtype as ComfyUI dequantises it.
COMFY_QUANT = ".comfy_quant"
WEIGHT_SCALE = ".weight_scale"
CONVROT_GROUP = ".convrot_group"
MAX_MARKER_BYTES = 4096  # a `comfy_quant` entry is ~60 bytes of JSON
MAX_HEADER_BYTES = 16 << 20  # a 14B transformer's header is ~0.2 MiB
_FP8_DTYPES = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))


@dataclasses.dataclass(frozen=True)
class SingleFile:
    """A file named by a config key; every error about it names both."""

    key: str
    path: Path

    def error(self, problem: str, fix: str) -> UserError:
        return UserError(f"config key '{self.key}': '{self.path}' {problem}: {fix}")


def detect_kind(names: list[str]) -> Kind | None:
    for kind, signatures in _SIGNATURES.items():
        if any(name.endswith(signature) for name in names for signature in signatures):
            return kind
    return None


def count_indices(names: Container[str], pattern: str) -> int:
    """How many consecutive indices from 0 fill `pattern` ('encoder.block.{}.…'): a model's depth."""
    n = 0
    while pattern.format(n) in names:
        n += 1
    return n


def strip_prefixes(name: str, kind: Kind) -> str:
    for prefix in _PREFIXES[kind]:
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def is_fp8(tensor: torch.Tensor) -> bool:
    return tensor.dtype in _FP8_DTYPES


def dequantize(tensor: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """An fp8 weight as `dtype`, computed as ComfyUI does: weight.to(float32) * scale_weight; plain fp8
    (no scale) is upcast. Other tensors are returned as stored: the model loader applies its dtype rules."""
    if scale is not None:
        return (tensor.to(torch.float32) * scale.to(torch.float32)).to(dtype)
    if is_fp8(tensor):
        return tensor.to(dtype)
    return tensor


def read_single_file(source: SingleFile, kind: Kind, dtype: torch.dtype, keep_int8: bool = False) -> dict[str, torch.Tensor]:
    """The file's tensors with prefixes stripped and fp8 weights dequantized to `dtype` (one tensor at a
    time, so a 14B fp8 file never exists in float32). ComfyUI's int8 ConvRot layers are dequantised too, or with
    `keep_int8` stay as stored: `weight` int8, `weight_scale`, and their group size as a `convrot_group` scalar.
    A file of another kind, or a quantisation format we cannot read, is a `UserError`."""
    _check_header_size(source, kind)
    try:
        with safe_open(str(source.path), framework="pt") as f:
            names = list(f.keys())
            _check_kind(source, kind, names)
            scales = {name[: -len(SCALE_WEIGHT)]: f.get_tensor(name) for name in names if name.endswith(SCALE_WEIGHT)}
            groups = {name[: -len(COMFY_QUANT)]: _convrot_group(source, name, _marker(source, f, name))
                      for name in names if name.endswith(COMFY_QUANT)}
            state = {}
            for name in names:
                short = strip_prefixes(name, kind)
                if short in _MARKERS or name.endswith((SCALE_WEIGHT, _SCALE_INPUT, COMFY_QUANT, WEIGHT_SCALE)):
                    continue
                layer = name[: -len(".weight")] if name.endswith(".weight") else None
                if layer in groups:
                    weight, row_scale = f.get_tensor(name), f.get_tensor(layer + WEIGHT_SCALE).float().reshape(-1, 1)
                    _check_int8_layer(source, layer, weight, row_scale, groups[layer])
                    if keep_int8:
                        state[short], state[short[: -len(".weight")] + WEIGHT_SCALE] = weight, row_scale
                        state[short[: -len(".weight")] + CONVROT_GROUP] = torch.tensor(groups[layer])
                    else:
                        state[short] = int8_dequantize(weight, row_scale, groups[layer], torch.float32).to(dtype)
                    continue
                state[short] = dequantize(f.get_tensor(name), scales.get(layer) if layer else None, dtype)
    except (SafetensorError, OSError, ValueError) as e:
        raise source.error(f"is not a readable safetensors file ({str(e).splitlines()[0]})",
                           f"give {KIND_NAMES[kind]} .safetensors file") from None
    return state


def _check_header_size(source: SingleFile, kind: Kind) -> None:
    """The JSON header is read whole: a real one is a few hundred KiB (a 14B transformer's ~1,100 entries)."""
    try:
        with open(source.path, "rb") as f:
            size = struct.unpack("<Q", f.read(8).ljust(8, b"\0"))[0]
        length = source.path.stat().st_size
    except OSError:
        return  # safe_open names it
    if MAX_HEADER_BYTES < size <= length - 8:  # a header past the file's end: no safetensors file (safe_open says)
        raise source.error(f"has a {size / 2 ** 20:.0f} MiB header, more than the {MAX_HEADER_BYTES >> 20} MiB any Wan "
                           "model file needs", f"give {KIND_NAMES[kind]} .safetensors file")


def _marker(source: SingleFile, f, name: str) -> torch.Tensor:
    """A `comfy_quant` entry, read only when it is the few bytes of JSON such an entry is."""
    size = math.prod(f.get_slice(name).get_shape())
    if size > MAX_MARKER_BYTES:
        raise source.error(f"has a '{name}' of {size} bytes, but a layer's format is a short JSON (at most "
                           f"{MAX_MARKER_BYTES})", "give a file ComfyUI wrote")
    return f.get_tensor(name)


def _check_int8_layer(source: SingleFile, layer: str, weight: torch.Tensor, row_scale: torch.Tensor,
                      group: int) -> None:
    """An int8 ConvRot layer is what its format says, before the model is built from it: an int8 matrix whose
    input width is a whole number of rotation groups and one finite scale per output row."""
    if weight.dtype != torch.int8 or weight.ndim != 2:
        raise source.error(f"stores '{layer}.weight' as {weight.dtype} {tuple(weight.shape)}, not an int8 matrix",
                           "give an intact int8 ConvRot file")
    rows, columns = weight.shape
    if columns % group:
        raise source.error(f"stores '{layer}' with convrot_groupsize {group}, but its {columns} input features are not "
                           "a whole number of such groups", "give an intact int8 ConvRot file")
    if row_scale.numel() != rows:
        raise source.error(f"has a '{layer}{WEIGHT_SCALE}' of {row_scale.numel()} values for a layer of {rows} output "
                           "rows (one scale per row)", "give an intact int8 ConvRot file")
    if not bool(torch.isfinite(row_scale).all()):
        raise source.error(f"has NaN or infinite values in '{layer}{WEIGHT_SCALE}': every weight of that layer would be "
                           "NaN", "give an intact int8 ConvRot file")


def _convrot_group(source: SingleFile, name: str, marker: torch.Tensor) -> int:
    """The Hadamard group size of a `comfy_quant` entry; any other format is one line."""
    try:
        entry = json.loads(bytes(marker.to(torch.uint8).tolist()).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        entry = None
    if not isinstance(entry, dict):
        raise source.error(f"has an unreadable '{name}'", "give a file ComfyUI loads")
    group = entry.get("convrot_groupsize", 256)
    power_of_4 = isinstance(group, int) and group >= 4 and not group & (group - 1) and group.bit_length() % 2 == 1
    if entry.get("format") != "int8_tensorwise" or entry.get("convrot") is not True or not power_of_4:
        raise source.error(f"stores '{name[: -len(COMFY_QUANT)]}' as {json.dumps(entry)}, which we cannot read (int8 "
                           "ConvRot, fp8 and fp8_scaled are read)", "give a bf16, fp8, fp8_scaled or int8 ConvRot file")
    return group


def _check_kind(source: SingleFile, kind: Kind, names: list[str]) -> None:
    found = detect_kind(names)
    if found == kind:
        return
    holds = f"holds {KIND_NAMES[found]}" if found else "holds no Wan model part we know"
    raise source.error(f"{holds}, not {KIND_NAMES[kind]}", f"give {KIND_NAMES[kind]} file here")


def shapes(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in state.items()}


def check_matches(source: SingleFile, what: str, found: dict[str, tuple[int, ...]],
                  expected: dict[str, tuple[int, ...]], describe: Callable[[dict[str, tuple[int, ...]]], str]) -> None:
    """The file's names and shapes must be the base model's; otherwise say how the two models differ."""
    missing, unexpected = expected.keys() - found.keys(), found.keys() - expected.keys()
    reshaped = sorted(name for name in expected.keys() & found.keys() if expected[name] != found[name])
    if not (missing or unexpected or reshaped):
        return
    in_file, in_base = describe(found), describe(expected)
    if in_file != in_base:
        detail = f"the file's is {in_file}, base_model_name's config says {in_base}"
    else:
        example = sorted(missing or unexpected)[0] if missing or unexpected else reshaped[0]
        detail = (f"{len(missing)} missing, {len(unexpected)} unexpected, {len(reshaped)} reshaped keys, "
                  f"e.g. '{example}'")
    raise source.error(f"does not match the base model's {what} ({detail})",
                       f"give the {what} of the same Wan model as base_model_name")
