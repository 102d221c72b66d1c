"""LoRA, and DoRA as its `lora_decompose` option (peft's `LoraConfig(use_dora=True)`).

LoRA's neutral layer is `LoRALayer` (down, up, alpha): its file codecs are `modules.modelFile.lora_formats`'
LoRA path, which also serves diffusers and musubi key names and works around diffusers' Wan converter.

DoRA files use ComfyUI's keys: ``lora_down.weight`` / ``lora_up.weight`` / ``alpha`` / ``dora_scale``. For a
``dora_scale`` of shape [out, 1] ComfyUI computes (comfy/weight_adapter/base.py, `weight_decompose`)
``W' = (W + ΔW) · dora_scale / (‖W‖_row + eps)``, the norm of the *base* weight, whereas peft's DoRA is
``W' = (W + ΔW) · m / ‖W + ΔW‖_row``. So the file holds ``dora_scale = m · (‖W‖ + eps) / ‖W + ΔW‖`` (eps of
float32, the dtype ComfyUI patches in): the same W' in ComfyUI, and m comes back from it given the base.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from modules.adapter.spec import AdapterLayer, AdapterOptions, AdapterSpec, base_weight, copy_parameter, rescaled

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from peft import PeftConfig

DOWN, UP, DORA_SCALE = "lora_down.weight", "lora_up.weight", "dora_scale"
_EPS = 2.0 ** -23  # torch.finfo(torch.float32).eps, ComfyUI's eps: it patches weights in float32


@dataclasses.dataclass
class LoRALayer:
    """One LoRA pair; effect ``W += up @ down * alpha / rank`` (conv LoRA: same, on flattened kernels)."""

    down: torch.Tensor  # [r, in] (conv: [r, in, *kernel])
    up: torch.Tensor  # [out, r] (conv: [out, r, 1, ...])
    alpha: float

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    @property
    def scale(self) -> float:
        return float(self.alpha) / self.rank


def lora_delta(layer: LoRALayer) -> torch.Tensor:
    """up @ down · alpha / rank in float32, shaped like the weight (conv LoRA: the kernel's shape)."""
    delta = layer.up.float().flatten(1) @ layer.down.float().flatten(1)
    return delta.view(layer.up.shape[0], *layer.down.shape[1:]) * layer.scale


def peft_scale(module: Any, adapter_name: str) -> float:
    """The configured scale of a peft LoRA layer (not a runtime `set_scale`)."""
    r = module.r[adapter_name]
    alpha = module.lora_alpha[adapter_name]
    return alpha / math.sqrt(r) if module.use_rslora.get(adapter_name, False) else alpha / r


def _lora_config(config: AdapterOptions, targets: list[str], use_dora: bool) -> "PeftConfig":
    from peft import LoraConfig

    extra = {"use_dora": True} if use_dora else {}
    return LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=targets, init_lora_weights=True, **extra)


def _pair_shape_problem(module: Any, down: torch.Tensor, up: torch.Tensor, adapter_name: str, name: str) -> str | None:
    a, b = module.lora_A[adapter_name].weight, module.lora_B[adapter_name].weight
    if tuple(down.shape) == tuple(a.shape) and tuple(up.shape) == tuple(b.shape):
        return None
    return f"{name} {tuple(down.shape)}/{tuple(up.shape)}, adapter {tuple(a.shape)}/{tuple(b.shape)}"


def _load_pair(module: Any, down: torch.Tensor, up: torch.Tensor, scale: float, adapter_name: str) -> None:
    """Sets lora_A/lora_B so that the adapter's own scale gives ``up @ down * scale``."""
    copy_parameter(module.lora_A[adapter_name].weight, down)
    factor = scale / peft_scale(module, adapter_name)
    copy_parameter(module.lora_B[adapter_name].weight, rescaled(up, factor))


class LoRASpec(AdapterSpec):
    name = "lora"
    title = "LoRA"
    file_keys = (DOWN, UP, "alpha")
    diffusers_loadable = True
    up_weights = ("lora_B",)

    def peft_layer(self) -> type:
        from peft.tuners.lora import LoraLayer

        return LoraLayer

    def peft_config(self, config: AdapterOptions, targets: list[str]) -> "PeftConfig":
        return _lora_config(config, targets, use_dora=False)

    def owns(self, module: torch.nn.Module, adapter_name: str) -> bool:
        return (isinstance(module, self.peft_layer()) and not module.use_dora.get(adapter_name, False)
                and (adapter_name in module.lora_A or adapter_name in getattr(module, "lora_embedding_A", {})))

    def unsupported(self, module: Any, adapter_name: str) -> str | None:
        if adapter_name in getattr(module, "lora_embedding_A", {}):
            return "embedding LoRA is not supported"
        if module.lora_bias.get(adapter_name, False):
            return "LoRA with lora_bias is not supported"
        return None

    def extract(self, module: Any, adapter_name: str) -> LoRALayer:
        down = module.lora_A[adapter_name].weight.detach()
        up = module.lora_B[adapter_name].weight.detach()
        return LoRALayer(down=down, up=up, alpha=float(peft_scale(module, adapter_name) * module.r[adapter_name]))

    def shape_problem(self, module: Any, layer: LoRALayer, adapter_name: str) -> str | None:
        return _pair_shape_problem(module, layer.down, layer.up, adapter_name, "LoRA")

    def load_into(self, module: Any, layer: LoRALayer, adapter_name: str) -> None:
        _load_pair(module, layer.down, layer.up, layer.scale, adapter_name)

    def merged_weight(self, weight: torch.Tensor, layer: LoRALayer, strength: float) -> torch.Tensor:
        weight += strength * lora_delta(layer)
        return weight

    def weight_shape(self, layer: LoRALayer) -> tuple[int, ...]:
        return (int(layer.up.shape[0]), *(int(n) for n in layer.down.shape[1:]))

    def rank(self, layer: LoRALayer) -> int | None:
        return layer.rank


def _dora_parts(layer: AdapterLayer) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(ΔW without strength, in float32, as ComfyUI computes it; dora_scale; the scale it used)."""
    down, up = layer.tensors[DOWN].float(), layer.tensors[UP].float()
    scale = layer.alpha / down.shape[0] if layer.alpha is not None else 1.0  # comfy/weight_adapter/lora.py
    return up @ down * scale, layer.tensors[DORA_SCALE].float(), scale


def _row_norm(weight: torch.Tensor) -> torch.Tensor:
    return weight.norm(dim=1, keepdim=True)  # [out, 1]


class DoRASpec(AdapterSpec):
    name = "dora"
    title = "DoRA"
    file_keys = (DOWN, UP, DORA_SCALE, "alpha")
    marker_keys = (DORA_SCALE,)
    up_weights = ("lora_B",)
    float32_keys = (DORA_SCALE,)

    def peft_layer(self) -> type:
        return LoRASpec().peft_layer()

    def peft_config(self, config: AdapterOptions, targets: list[str]) -> "PeftConfig":
        return _lora_config(config, targets, use_dora=True)

    def owns(self, module: torch.nn.Module, adapter_name: str) -> bool:
        return (isinstance(module, self.peft_layer()) and adapter_name in module.lora_A
                and bool(module.use_dora.get(adapter_name, False)))

    def unsupported(self, module: Any, adapter_name: str) -> str | None:
        return LoRASpec().unsupported(module, adapter_name)

    def extract(self, module: Any, adapter_name: str) -> AdapterLayer:
        down = module.lora_A[adapter_name].weight.detach()
        up = module.lora_B[adapter_name].weight.detach()
        scale = peft_scale(module, adapter_name)
        weight = base_weight(module)
        merged = weight + up.float() @ down.float() * scale
        magnitude = module.lora_magnitude_vector[adapter_name].weight.detach().float().view(-1, 1)
        dora_scale = magnitude * (_row_norm(weight) + _EPS) / _row_norm(merged)
        return AdapterLayer({DOWN: down, UP: up, DORA_SCALE: dora_scale},  # float32 (float32_keys)
                            alpha=float(scale * module.r[adapter_name]))

    def missing_keys(self, tensors: dict[str, torch.Tensor]) -> list[str]:
        return [key for key in (DOWN, UP, DORA_SCALE) if key not in tensors]

    def shape_problem(self, module: Any, layer: AdapterLayer, adapter_name: str) -> str | None:
        problem = _pair_shape_problem(module, layer.tensors[DOWN], layer.tensors[UP], adapter_name, "DoRA")
        out = module.lora_B[adapter_name].weight.shape[0]
        if problem is None and tuple(layer.tensors[DORA_SCALE].shape) != (out, 1):
            problem = (f"dora_scale {tuple(layer.tensors[DORA_SCALE].shape)}, adapter ({out}, 1) (a DoRA on the "
                       "input axis cannot continue as peft's DoRA)")
        return problem

    def load_into(self, module: Any, layer: AdapterLayer, adapter_name: str) -> None:
        delta, dora_scale, scale = _dora_parts(layer)
        _load_pair(module, layer.tensors[DOWN], layer.tensors[UP], scale, adapter_name)
        weight = base_weight(module)
        magnitude = dora_scale * _row_norm(weight + delta) / (_row_norm(weight) + _EPS)
        copy_parameter(module.lora_magnitude_vector[adapter_name].weight, magnitude.view(-1))

    def merged_weight(self, weight: torch.Tensor, layer: AdapterLayer, strength: float) -> torch.Tensor:
        delta, dora_scale, _ = _dora_parts(layer)
        merged = weight + delta
        if dora_scale.shape[0] == weight.shape[0]:  # ComfyUI: the output axis uses the base weight's norm
            norm = _row_norm(weight)
        else:  # LyCORIS's input axis: column norms of the merged weight
            norm = merged.norm(dim=0, keepdim=True)
        import torch

        merged *= dora_scale / (norm + torch.finfo(weight.dtype).eps)
        if strength == 1.0:
            return merged
        weight += strength * (merged - weight)
        return weight

    def weight_shape(self, layer: AdapterLayer) -> tuple[int, ...]:
        return int(layer.tensors[UP].shape[0]), int(layer.tensors[DOWN].shape[1])

    def rank(self, layer: AdapterLayer) -> int | None:
        return int(layer.tensors[DOWN].shape[0])


LORA = LoRASpec()
DORA = DoRASpec()
