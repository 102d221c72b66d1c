"""LoHa (peft `LoHaConfig`): ``ΔW = (w1_a @ w1_b) ⊙ (w2_a @ w2_b) · alpha / r`` on Linear layers.

peft's parameters carry ComfyUI's key names and meaning (comfy/weight_adapter/loha.py scales by
``alpha / hada_w1_b.shape[0]``, i.e. alpha / r), so the codec copies them as they are.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modules.adapter.spec import AdapterLayer, AdapterOptions, AdapterSpec, copy_parameter, rescaled

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from peft import PeftConfig

FACTORS = ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")


def _comfy_scale(layer: AdapterLayer) -> float:
    return layer.alpha / layer.tensors["hada_w1_b"].shape[0] if layer.alpha is not None else 1.0


class LoHaSpec(AdapterSpec):
    name = "loha"
    title = "LoHa"
    file_keys = (*FACTORS, "alpha")
    marker_keys = ("hada_w1_a",)
    up_weights = ("hada_w1_a", "hada_w2_a")  # (out, rank): ComfyUI's w1a @ w1b

    def peft_layer(self) -> type:
        from peft.tuners.loha import LoHaLayer

        return LoHaLayer

    def peft_config(self, config: AdapterOptions, targets: list[str]) -> "PeftConfig":
        from peft import LoHaConfig

        return LoHaConfig(r=config.lora_rank, alpha=config.lora_alpha, target_modules=targets, init_weights=True)

    def unsupported(self, module: Any, adapter_name: str) -> str | None:
        return "LoHa on a convolution is not supported" if adapter_name in module.hada_t1 else None

    def extract(self, module: Any, adapter_name: str) -> AdapterLayer:
        tensors = {key: getattr(module, key)[adapter_name].detach() for key in FACTORS}
        return AdapterLayer(tensors, alpha=float(module.alpha[adapter_name]))

    def missing_keys(self, tensors: dict[str, torch.Tensor]) -> list[str]:
        return [key for key in FACTORS if key not in tensors]

    def shape_problem(self, module: Any, layer: AdapterLayer, adapter_name: str) -> str | None:
        bad = [f"{key} {tuple(layer.tensors[key].shape)}, adapter {tuple(getattr(module, key)[adapter_name].shape)}"
               for key in FACTORS if layer.tensors[key].shape != getattr(module, key)[adapter_name].shape]
        return "; ".join(bad) or None

    def load_into(self, module: Any, layer: AdapterLayer, adapter_name: str) -> None:
        factor = _comfy_scale(layer) / module.scaling[adapter_name]  # scaling one factor scales the product
        for key in FACTORS:
            value = layer.tensors[key]
            copy_parameter(getattr(module, key)[adapter_name], rescaled(value, factor) if key == "hada_w1_a" else value)

    def merged_weight(self, weight: torch.Tensor, layer: AdapterLayer, strength: float) -> torch.Tensor:
        w1a, w1b, w2a, w2b = (layer.tensors[key].float() for key in FACTORS)
        weight += (strength * _comfy_scale(layer)) * ((w1a @ w1b) * (w2a @ w2b)).reshape(weight.shape)
        return weight

    def weight_shape(self, layer: AdapterLayer) -> tuple[int, ...]:
        return int(layer.tensors["hada_w1_a"].shape[0]), int(layer.tensors["hada_w1_b"].shape[1])

    def rank(self, layer: AdapterLayer) -> int | None:
        return int(layer.tensors["hada_w1_b"].shape[0])


LOHA = LoHaSpec()
