"""What every adapter type gives: its peft config, which weights train, and its codec
(peft module <-> neutral layer <-> the key suffixes of ComfyUI's loader).

The neutral layer of a type holds exactly what ComfyUI reads for one module, and its effect is what ComfyUI
computes from it (`merged_weight` re-states the type's ``calculate_weight`` in comfy/weight_adapter/). So a
file is right by construction: `extract` turns peft's parametrisation into ComfyUI's, `load_into` back.

The config imports the registry (its `peft_type` enum, the types' `up_weights`), so the adapter modules import
torch and peft where they work on tensors, not at module level: a config error comes before the seconds torch
takes (tests/test_cli_startup.py).
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from peft import PeftConfig



class AdapterOptions(Protocol):
    """The config keys an adapter's peft config reads (TrainConfig has them; the adapters sit below the config,
    whose `peft_type` enum is made from their registry, so they name the keys, not the config class)."""

    lora_rank: int
    lora_alpha: float
    lora_dropout: float
    lokr_factor: int


ALPHA = "alpha"  # the `.alpha` key of every type: a float32 0-dim tensor


@dataclasses.dataclass
class AdapterLayer:
    """One module's adapter as ComfyUI reads it: tensors by key suffix (``hada_w1_a``, ``lora_up.weight``,
    ``dora_scale``, ...) and the ``.alpha`` value (None: no such key)."""

    tensors: dict[str, torch.Tensor]
    alpha: float | None


class AdapterSpec(ABC):
    """One adapter type. Subclasses name peft's layer class and implement the codec; the rest is shared."""

    name: ClassVar[str]  # header value of `wantrainer.adapter`: lora, dora, loha, lokr
    title: ClassVar[str]  # for messages: LoRA, DoRA, LoHa, LoKr
    file_keys: ClassVar[tuple[str, ...]] = ()  # the suffixes this type writes and reads (`.alpha` included)
    marker_keys: ClassVar[tuple[str, ...]] = ()  # any of them in a file makes it this type
    diffusers_loadable: ClassVar[bool] = False  # diffusers' load_lora_weights applies it to Wan
    # peft's `adapter_layer_names` that are up (B) matrices, which LoRA+ trains faster; () = LoRA+ does not apply
    up_weights: ClassVar[tuple[str, ...]] = ()
    # file keys written in float32 whatever output_dtype is (DoRA's dora_scale: rounded to bf16 it cost 3-9 % of
    # the trained change in ComfyUI, for a few KB); `.alpha` is always a float32 scalar
    float32_keys: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def peft_layer(self) -> type:
        """peft's layer class; its `adapter_layer_names` are the weights that train."""

    @abstractmethod
    def peft_config(self, config: AdapterOptions, targets: list[str]) -> "PeftConfig":
        """The peft config that injects this type on the `targets` modules."""

    def owns(self, module: torch.nn.Module, adapter_name: str) -> bool:
        """Whether `module` is a peft layer of this type holding `adapter_name`."""
        return isinstance(module, self.peft_layer()) and adapter_name in getattr(module, "_available_adapters", ())

    def unsupported(self, module: torch.nn.Module, adapter_name: str) -> str | None:
        """Why an owned module cannot be written (None: it can)."""
        return None

    @abstractmethod
    def extract(self, module: Any, adapter_name: str) -> Any:
        """The neutral layer of a peft module (tensors detached, possibly sharing storage)."""

    @abstractmethod
    def shape_problem(self, module: Any, layer: Any, adapter_name: str) -> str | None:
        """Why `layer` does not fit the injected `module` (None: it fits)."""

    @abstractmethod
    def load_into(self, module: Any, layer: Any, adapter_name: str) -> None:
        """Sets the peft module so its effect is the layer's (the adapter's own alpha may differ)."""

    @abstractmethod
    def merged_weight(self, weight: torch.Tensor, layer: Any, strength: float) -> torch.Tensor:
        """ComfyUI's result for the float32 `weight` (the caller's own copy, changed in place where possible)."""

    @abstractmethod
    def weight_shape(self, layer: Any) -> tuple[int, ...]:
        """The shape of the weight the layer changes."""

    @abstractmethod
    def rank(self, layer: Any) -> int | None:
        """The layer's rank, for the file header (None: the type has none here)."""

    def trainable_names(self, transformer: torch.nn.Module, adapter_name: str) -> set[str]:
        """Parameter names (as `transformer.named_parameters` gives them) of the adapter's weights, found
        through peft's own `adapter_layer_names`."""
        import torch

        layer_cls = self.peft_layer()
        names: set[str] = set()
        for module_name, module in transformer.named_modules():
            if not isinstance(module, layer_cls):
                continue
            for attr in layer_cls.adapter_layer_names:
                container = getattr(module, attr, None)
                if container is None or adapter_name not in container:
                    continue
                prefix = f"{module_name}.{attr}.{adapter_name}"
                entry = container[adapter_name]
                if isinstance(entry, torch.nn.Parameter):
                    names.add(prefix)
                else:
                    names.update(f"{prefix}.{name}" for name, _ in entry.named_parameters())
        return names

    def is_up_weight(self, parameter_name: str) -> bool:
        """Whether a trained parameter (`...to_q.lora_B.default.weight`) is one of the type's up matrices."""
        return any(f".{attr}." in f".{parameter_name}." for attr in self.up_weights)

    def encode(self, layer: AdapterLayer) -> dict[str, torch.Tensor]:
        """The file tensors of a layer by suffix, `.alpha` included."""
        import torch

        out = dict(layer.tensors)
        if layer.alpha is not None:
            out[ALPHA] = torch.tensor(float(layer.alpha), dtype=torch.float32)
        return out

    def decode(self, tensors: dict[str, torch.Tensor]) -> AdapterLayer:
        """The layer of one module's file tensors (suffixes already checked against `file_keys`)."""
        alpha = tensors.get(ALPHA)
        return AdapterLayer({k: v for k, v in tensors.items() if k != ALPHA},
                            None if alpha is None else float(alpha.float().item()))

    def missing_keys(self, tensors: dict[str, torch.Tensor]) -> list[str]:
        """The suffixes a module of this type needs and `tensors` lacks."""
        return []


def base_weight(module: Any) -> torch.Tensor:
    """The frozen weight under a peft layer, as float32."""
    return module.get_base_layer().weight.detach().float()


def rescaled(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """`tensor` times `factor` in float32 (unchanged, not copied, for 1.0)."""
    return tensor if factor == 1.0 else tensor.float() * factor


def copy_parameter(param: torch.Tensor, value: torch.Tensor) -> None:
    import torch

    with torch.no_grad():
        param.copy_(value.to(device=param.device, dtype=param.dtype))
