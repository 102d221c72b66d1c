"""Frozen block Linears stored in ComfyUI's int8 ConvRot format and computed with an int8 GEMM (`int8_convrot`).

`Int8ConvRotLinear` is a `torch.nn.Linear` subclass, so peft wraps it like any Linear (LoRA, LoHa, LoKr, DoRA):
the adapter branch runs in the compute dtype on the unrotated input, the base through the int8 path. Its stored
tensors are frozen Parameters — `qweight` (int8 [N, K], rotated) and `weight_scale` (float32 [N, 1]) — so block
swap and expert offload, which move a block's frozen parameters, move exactly these. `weight` is the dequantised
weight in the model's own basis, made when read: for DoRA's column norm (a rotation keeps it) and peft's shape
and dtype checks, never stored.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re

import torch

from modules.modelSetup.int8_convrot import (
    DEFAULT_GROUP, dequantize, group_size_for, int8_convrot_linear, quantize_weight,
)

logger = logging.getLogger(__name__)

COMFY_FORMAT = "int8_tensorwise"  # ComfyUI's `comfy_quant` format name; `convrot: true` marks the rotation


class Int8ConvRotLinear(torch.nn.Linear):
    def __init__(self, qweight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None, group: int,
                 compute_dtype: torch.dtype):
        torch.nn.Module.__init__(self)  # not Linear's: it would allocate a full-precision weight
        self.out_features, self.in_features = qweight.shape
        self.group = group
        self.compute_dtype = compute_dtype
        self.backend: str | None = None  # None: per device (int8_convrot.default_backend)
        self.qweight = torch.nn.Parameter(qweight, requires_grad=False)
        self.weight_scale = torch.nn.Parameter(weight_scale.reshape(-1, 1).float(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override] - a computed tensor, not a Parameter
        return dequantize(self.qweight, self.weight_scale, self.group, self.compute_dtype)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, compute_dtype: torch.dtype, group: int) -> Int8ConvRotLinear:
        qweight, scale = quantize_weight(linear.weight.data, group)
        bias = None if linear.bias is None else linear.bias.data
        return cls(qweight, scale, bias, group, compute_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in the compute dtype, as autocast feeds a Linear (a custom op is not autocast)
        return int8_convrot_linear(x.to(self.compute_dtype), self.qweight, self.weight_scale, self.bias, self.group,
                                   self.backend)

    def comfy_quant(self) -> dict:
        """This layer's `comfy_quant` entry (ComfyUI reads it as U8 JSON beside `weight` and `weight_scale`)."""
        return {"format": COMFY_FORMAT, "convrot": True, "convrot_groupsize": self.group}

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 ConvRot group={self.group}"


def store_linears_in_int8(model: torch.nn.Module, compute_dtype: torch.dtype, skip_patterns: tuple[str, ...] = (),
                          keep: tuple[str, ...] = (), largest_group: int = DEFAULT_GROUP) -> int:
    """Replace every frozen Linear of `model` (but those matching `skip_patterns`, named in `keep` or too narrow for
    a group of 4) by an Int8ConvRotLinear, one layer at a time (a 14B model never exists twice). Returns the count."""
    count = 0
    for name, module in list(model.named_modules()):
        if type(module) is not torch.nn.Linear or module.weight.requires_grad:
            continue
        if any(re.search(pattern, name) for pattern in skip_patterns):
            continue
        if any(name == k or name.startswith(k + ".") for k in keep):
            continue
        group = group_size_for(module.in_features, largest_group)
        if group is None:
            continue
        set_submodule(model, name, Int8ConvRotLinear.from_linear(module, compute_dtype, group))
        count += 1
    return count


def set_submodule(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def int8_layers(model: torch.nn.Module) -> dict[str, Int8ConvRotLinear]:
    """Module name -> int8 layer (peft's wrapped `base_layer` included), for tests, tools and the fingerprint."""
    return {name: m for name, m in model.named_modules() if isinstance(m, Int8ConvRotLinear)}


def comfy_quant_tensor(layer: Int8ConvRotLinear) -> torch.Tensor:
    """The `comfy_quant` entry as ComfyUI stores it: the JSON's bytes as a uint8 tensor."""
    return torch.tensor(list(json.dumps(layer.comfy_quant()).encode()), dtype=torch.uint8)


def int8_fingerprint(models: list[torch.nn.Module]) -> str:
    """What the int8 base was made of, for backups: sha256 over each int8 layer's name, group and row scales (the
    scales are amax/127 of the rotated rows, so another file or another quantisation changes them; hashing the
    int8 weights themselves would read the whole model). Empty without int8 layers."""
    digest, count = hashlib.sha256(), 0
    for index, model in enumerate(models):
        for name, layer in sorted(int8_layers(model).items()):
            digest.update(f"{index}:{name}:{layer.group}:".encode())
            digest.update(layer.weight_scale.detach().float().cpu().numpy().tobytes())
            count += 1
    return f"{count} int8 layers, sha256 {digest.hexdigest()}" if count else ""
