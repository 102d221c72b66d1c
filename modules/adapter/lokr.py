"""LoKr (peft `LoKrConfig`, factor from `lokr_factor`): ``ΔW = w1 ⊗ w2 · scale`` on Linear layers, each factor
stored whole (``lokr_w1``) or as a rank-r product (``lokr_w1_a @ lokr_w1_b``).

peft scales by alpha / r always; ComfyUI (comfy/weight_adapter/lokr.py, `calculate_weight`) by
``alpha / dim`` where dim is the rank of a factor stored as a product, and by 1.0 when both are whole.
peft's products have rank r, so the two agree unless both factors are whole (r large against the
dimensions): then the scale is baked into ``lokr_w1`` and `load_into` takes it out again.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modules.adapter.spec import AdapterLayer, AdapterOptions, AdapterSpec, copy_parameter, rescaled

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from peft import PeftConfig

KEYS = ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b")
_FIRST = ("lokr_w1", "lokr_w1_a")  # the key that a scale of the whole product goes into, whole or decomposed


def _factor(tensors: dict[str, torch.Tensor], which: str) -> torch.Tensor:
    """Factor `which` ("w1" / "w2") as one float32 matrix."""
    whole = tensors.get(f"lokr_{which}")
    if whole is not None:
        return whole.float()
    return tensors[f"lokr_{which}_a"].float() @ tensors[f"lokr_{which}_b"].float()


def _comfy_scale(layer: AdapterLayer) -> float:
    """ComfyUI's: the rank of w2's product, else w1's, sets dim; no product (or no alpha) means 1.0."""
    rank_from = "lokr_w2_b" if "lokr_w2_b" in layer.tensors else "lokr_w1_b" if "lokr_w1_b" in layer.tensors else None
    if layer.alpha is None or rank_from is None:
        return 1.0
    return layer.alpha / layer.tensors[rank_from].shape[0]


class LoKrSpec(AdapterSpec):
    name = "lokr"
    title = "LoKr"
    file_keys = (*KEYS, "alpha")
    marker_keys = ("lokr_w1", "lokr_w1_a", "lokr_w2", "lokr_w2_a")

    def peft_layer(self) -> type:
        from peft.tuners.lokr import LoKrLayer

        return LoKrLayer

    def peft_config(self, config: AdapterOptions, targets: list[str]) -> "PeftConfig":
        from peft import LoKrConfig

        return LoKrConfig(r=config.lora_rank, alpha=config.lora_alpha, decompose_factor=config.lokr_factor,
                          target_modules=targets, init_weights=True)

    def unsupported(self, module: Any, adapter_name: str) -> str | None:
        return "LoKr on a convolution is not supported" if adapter_name in module.lokr_t2 else None

    @staticmethod
    def _present(module: Any, adapter_name: str) -> list[str]:
        return [key for key in KEYS if adapter_name in getattr(module, key)]

    def extract(self, module: Any, adapter_name: str) -> AdapterLayer:
        tensors = {key: getattr(module, key)[adapter_name].detach() for key in self._present(module, adapter_name)}
        layer = AdapterLayer(tensors, alpha=float(module.alpha[adapter_name]))
        first = next(key for key in _FIRST if key in tensors)
        layer.tensors[first] = rescaled(tensors[first], module.scaling[adapter_name] / _comfy_scale(layer))
        return layer

    def missing_keys(self, tensors: dict[str, torch.Tensor]) -> list[str]:
        missing = []
        for which in ("w1", "w2"):
            whole, a, b = f"lokr_{which}", f"lokr_{which}_a", f"lokr_{which}_b"
            if whole not in tensors and not (a in tensors and b in tensors):
                missing.append(f"{whole} (or {a} + {b})")
        return missing

    def shape_problem(self, module: Any, layer: AdapterLayer, adapter_name: str) -> str | None:
        present = self._present(module, adapter_name)
        if sorted(present) != sorted(layer.tensors):
            return f"LoKr keys {sorted(layer.tensors)}, adapter {sorted(present)} (another lora_rank or lokr_factor)"
        bad = [f"{key} {tuple(layer.tensors[key].shape)}, adapter {tuple(getattr(module, key)[adapter_name].shape)}"
               for key in present if layer.tensors[key].shape != getattr(module, key)[adapter_name].shape]
        return "; ".join(bad) or None

    def load_into(self, module: Any, layer: AdapterLayer, adapter_name: str) -> None:
        factor = _comfy_scale(layer) / module.scaling[adapter_name]
        for key, value in layer.tensors.items():
            copy_parameter(getattr(module, key)[adapter_name], rescaled(value, factor) if key in _FIRST else value)

    def merged_weight(self, weight: torch.Tensor, layer: AdapterLayer, strength: float) -> torch.Tensor:
        import torch

        delta = torch.kron(_factor(layer.tensors, "w1"), _factor(layer.tensors, "w2"))
        weight += (strength * _comfy_scale(layer)) * delta.reshape(weight.shape)
        return weight

    def weight_shape(self, layer: AdapterLayer) -> tuple[int, ...]:
        w1, w2 = _factor(layer.tensors, "w1"), _factor(layer.tensors, "w2")
        return int(w1.shape[0] * w2.shape[0]), int(w1.shape[1] * w2.shape[1])

    def rank(self, layer: AdapterLayer) -> int | None:
        for key in ("lokr_w2_b", "lokr_w1_b"):
            if key in layer.tensors:
                return int(layer.tensors[key].shape[0])
        return None


LOKR = LoKrSpec()
