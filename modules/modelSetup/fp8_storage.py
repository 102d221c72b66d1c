"""Frozen Linear weights stored as float8 (e4m3) and turned back into the compute dtype inside each forward.

Three ways to map a weight into e4m3's range (`fp8_scale`):

- NONE: a plain cast (`weight.to(float8_e4m3fn)`), as diffusers' layerwise casting does. Weights of a trained
  model are small (|w| ~ 0.01-0.1), so many fall below e4m3's normal range (2^-6) and keep fewer bits.
- TENSOR: one float32 scale per weight, `amax / 448`, so the largest value maps to e4m3's largest; stored
  `weight / scale` in e4m3. This is ComfyUI's `fp8_scaled` format (comfy/ops.py `scaled_fp8_ops`: `weight` in
  float8_e4m3fn and a scalar `scale_weight`; the real weight is `weight.to(dtype) * scale_weight.to(dtype)`).
- CHANNEL: one scale per output channel (row), `amax(row) / 448`: rows with small weights keep their bits too.

The stored tensor is the Linear's parameter (`parametrizations.weight.original`, frozen, what block swap and
expert offload move); `module.weight` is a parametrization that dequantizes it, so the forward, peft's adapters
and anything reading `weight` see the real values, and torch.compile traces it as plain tensor code (diffusers'
layerwise-casting hooks re-cast module parameters inside forward, which compiled, checkpointed blocks reject).
Biases and the skipped modules stay in their dtype.
"""
from __future__ import annotations

import re

import torch
from torch.nn.utils import parametrize

from modules.util.enum import Fp8Scale

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448


class Fp8Dequantize(torch.nn.Module):
    """The parametrization of a Linear's weight: stored e4m3 (times its scale) in the compute dtype, computed as
    ComfyUI computes it (`weight.to(dtype) * scale.to(dtype)`)."""

    def __init__(self, scale: torch.Tensor | None, compute_dtype: torch.dtype):
        super().__init__()
        self.compute_dtype = compute_dtype
        self.scale: torch.Tensor | None
        if scale is None:
            self.scale = None
        else:
            self.register_buffer("scale", scale)

    def forward(self, stored: torch.Tensor) -> torch.Tensor:
        return dequantize(stored, self.scale, self.compute_dtype)


def dequantize(stored: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    weight = stored.to(dtype)
    return weight if scale is None else weight * scale.to(dtype)


def quantize(weight: torch.Tensor, mode: Fp8Scale) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(e4m3 tensor, float32 scale or None): NONE a plain cast; TENSOR a scalar scale; CHANNEL an (out, 1) scale."""
    if mode == Fp8Scale.NONE:
        return weight.to(FP8), None
    magnitude = weight.detach().float().abs()
    amax = magnitude.amax() if mode == Fp8Scale.TENSOR else magnitude.amax(dim=1, keepdim=True)
    scale = (amax / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)  # an all-zero weight: any scale works
    stored = (weight.detach().float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return stored, scale


def is_fp8_linear(module: torch.nn.Module) -> bool:
    return parametrize.is_parametrized(module, "weight") and any(
        isinstance(p, Fp8Dequantize) for p in module.parametrizations["weight"])


def store_linears_in_fp8(model: torch.nn.Module, compute_dtype: torch.dtype, mode: Fp8Scale,
                         skip_patterns: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> int:
    """Quantize every frozen Linear weight of `model` one layer at a time (a 14B model never exists twice); skip
    modules whose name a pattern of `skip_patterns` matches (re.search, as diffusers' skip patterns) and those
    named in `keep` (and their children: fully trained modules). Returns how many Linears now store e4m3."""
    count = 0
    for name, module in list(model.named_modules()):
        if not isinstance(module, torch.nn.Linear) or is_fp8_linear(module) or module.weight.requires_grad:
            continue
        if any(re.search(pattern, name) for pattern in skip_patterns):
            continue
        if any(name == k or name.startswith(k + ".") for k in keep):
            continue
        stored, scale = quantize(module.weight.data, mode)
        module.weight = torch.nn.Parameter(stored, requires_grad=False)
        # unsafe: the stored dtype (e4m3) differs from what the parametrization returns
        parametrize.register_parametrization(module, "weight", Fp8Dequantize(scale, compute_dtype), unsafe=True)
        count += 1
    return count


def store_text_encoder_in_fp8(encoder: torch.nn.Module) -> int:
    """`text_encoder_fp8`: UMT5's Linear weights in e4m3 with one scale per output channel (the smallest rounding
    error), computed in the encoder's own dtype; its embedding table and norms stay as they are."""
    dtype = next(p.dtype for p in encoder.parameters() if p.dtype.is_floating_point and p.dtype != FP8)
    return store_linears_in_fp8(encoder, dtype, Fp8Scale.CHANNEL)


def stored_weights(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """Module name -> (stored e4m3 tensor, scale or None) of every fp8 Linear (for tests and tools)."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and is_fp8_linear(module):
            dequant = next(p for p in module.parametrizations["weight"] if isinstance(p, Fp8Dequantize))
            out[name] = (module.parametrizations["weight"].original, dequant.scale)
    return out
