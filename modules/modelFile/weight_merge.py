"""An adapter merged into a transformer's weights, in float32: LoRA as W' = W + strength · up @ down · alpha / rank,
every type as ComfyUI computes it (`AdapterSpec.merged_weight`), so a merged LoHa / LoKr / DoRA is a model
diffusers loads.

The base weights are read from safetensors one tensor at a time and each merged tensor is computed only
when a writer asks for it, so merging a 14B model holds one tensor in memory, not the model. The LoRA's
full weights (modules an E2V run trained fully: the expanded patch embedding, the added image
cross-attention) replace the base's; `strength` scales the LoRA layers only, as `--lora-scale` does in
our sampler (`attach_expanded_lora`).
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Protocol

import torch

from modules.modelFile.lora_formats import LoRAFormatError, LoRAWeights
from modules.util.errors import UserError
from modules.util.model_folders import WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from modules.util.safetensors_io import TensorSpec, dtype_from_name


class WeightSource(Protocol):
    """Transformer weights by diffusers name, each read when asked for."""

    def names(self) -> list[str]: ...

    def spec(self, name: str) -> TensorSpec: ...

    def tensor(self, name: str) -> torch.Tensor: ...


class SafetensorsSource:
    """Weights in safetensors files (a diffusers folder's)."""

    def __init__(self, files: list[Path]):
        from safetensors import safe_open

        self._files: dict[str, Any] = {}
        for file in files:
            try:
                handle = safe_open(str(file), framework="pt")
            except Exception as e:  # safetensors raises several types for corrupt files
                raise UserError(f"cannot read '{file}': not a valid .safetensors file ({str(e).splitlines()[0]}); "
                                "download or export the model again") from None
            self._files.update(dict.fromkeys(handle.keys(), handle))

    def names(self) -> list[str]:
        return list(self._files)

    def spec(self, name: str) -> TensorSpec:
        part = self._files[name].get_slice(name)
        return TensorSpec(dtype_from_name(part.get_dtype()), tuple(part.get_shape()))

    def tensor(self, name: str) -> torch.Tensor:
        return self._files[name].get_tensor(name)


class StateDictSource:
    """Weights already in memory (an expert expanded for E2V on the fly)."""

    def __init__(self, state: Mapping[str, torch.Tensor]):
        self._state = dict(state)

    def names(self) -> list[str]:
        return list(self._state)

    def spec(self, name: str) -> TensorSpec:
        return TensorSpec(self._state[name].dtype, tuple(self._state[name].shape))

    def tensor(self, name: str) -> torch.Tensor:
        return self._state[name]


def read_config(folder: Path) -> dict[str, Any]:
    """A transformer folder's config.json without diffusers' private (`_`) keys."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read '{folder / 'config.json'}' ({e}): give a diffusers-format Wan folder") from None
    return {key: value for key, value in config.items() if not key.startswith("_")}


def folder_source(folder: Path) -> SafetensorsSource:
    """The weights of a diffusers transformer folder (one file, or shards named by their index)."""
    index = folder / WEIGHTS_INDEX_NAME
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return SafetensorsSource([folder / name for name in sorted(set(weight_map.values()))])
    if (folder / WEIGHTS_NAME).is_file():
        return SafetensorsSource([folder / WEIGHTS_NAME])
    raise UserError(f"'{folder}' holds no {WEIGHTS_NAME} (or its shard index): give a diffusers-format Wan folder "
                    "with safetensors weights")


def merge_into_transformer(transformer: torch.nn.Module, weights: LoRAWeights, strength: float = 1.0) -> None:
    """Merges `weights` into a loaded transformer's own weights, in place (the sampler's way for adapter types
    diffusers cannot attach); full weights replace the module's."""
    spec = weights.spec
    params = {name: _module_weight(transformer, name) for name in weights.layers}
    for name, param in params.items():
        if spec.weight_shape(weights.layers[name]) != tuple(param.shape):
            raise LoRAFormatError(f"the {spec.title} layer '{name}' is {spec.weight_shape(weights.layers[name])}, "
                                  f"the model's weight {tuple(param.shape)}")
    with torch.no_grad():
        for name, layer in weights.layers.items():
            param = params[name]
            weight = param.detach().to("cpu", torch.float32, copy=True)  # where the file's tensors are
            param.copy_(spec.merged_weight(weight, layer, strength).to(param.device, param.dtype))
        for name, tensor in weights.full_weights.items():
            param = transformer.get_parameter(name)
            param.copy_(tensor.to(device=param.device, dtype=param.dtype))


def _module_weight(transformer: torch.nn.Module, name: str) -> torch.nn.Parameter:
    try:
        return transformer.get_submodule(name).weight
    except AttributeError:
        raise LoRAFormatError(f"the file changes '{name}', which the model does not have") from None


@dataclasses.dataclass
class MergedTransformer:
    """One transformer's merged weights, computed a tensor at a time and cast to `dtype` on the way out."""

    config: dict[str, Any]  # the merged model's transformer config (E2V-expanded when the LoRA expanded it)
    transformer_class: type  # its diffusers class, from the model registry (WanVACETransformer3DModel, ...)
    base: WeightSource
    lora: LoRAWeights
    strength: float
    dtype: torch.dtype
    shapes: dict[str, tuple[int, ...]]

    def specs(self, dtype: torch.dtype | None = None) -> dict[str, TensorSpec]:
        return {name: TensorSpec(dtype or self.dtype, shape) for name, shape in sorted(self.shapes.items())}

    def merged(self, name: str) -> torch.Tensor:
        """The float32 merged tensor `name`."""
        full = self.lora.full_weights.get(name)
        weight = (full if full is not None else self.base.tensor(name)).to(torch.float32, copy=True)
        layer = self.lora.layers.get(name.removesuffix(".weight")) if name.endswith(".weight") else None
        if layer is not None:
            weight = self.lora.spec.merged_weight(weight, layer, self.strength)
        return weight

    what: str = ""  # the pair merged, for messages ("LoRA 'x.safetensors' and model 'models/wan'")

    def tensor(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The merged tensor in the output dtype; one that is not finite there (a NaN LoRA, a strength that
        overflows) stops the write, which is atomic, so nothing is left behind."""
        tensor = self.merged(name).to(dtype or self.dtype)
        if not bool(torch.isfinite(tensor).all()):
            raise UserError(f"merging {self.what or 'the model'} gives non-finite values (NaN or inf) in '{name}' "
                            f"at strength {self.strength:g}: the LoRA holds NaN/inf or the strength is too large; "
                            "nothing was written")
        return tensor


def expected_shapes(config: Mapping[str, Any], transformer_class: type) -> dict[str, tuple[int, ...]]:
    """Parameter shapes of a `transformer_class` with `config` (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = transformer_class.from_config(dict(config))
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def model_dtype(source: WeightSource) -> torch.dtype:
    """The dtype most of the model's weights are stored in."""
    return Counter(source.spec(name).dtype for name in source.names()).most_common(1)[0][0]


def merge_transformer(config: Mapping[str, Any], transformer_class: type, base: WeightSource, lora: LoRAWeights,
                      strength: float, dtype: torch.dtype, what: str) -> MergedTransformer:
    """Check that `lora` fits `base` as a `transformer_class` with `config`, then return the lazily merged model.

    `what` names the pair for messages ("LoRA 'x.safetensors' and model 'models/wan'")."""
    shapes = expected_shapes(config, transformer_class)
    problems = _fit_problems(shapes, base, lora)
    if problems:
        raise UserError(f"{what} do not fit: {problems[0]}"
                        f"{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; "
                        "use a LoRA trained on this base model")
    return MergedTransformer(dict(config), transformer_class, base, lora, strength, dtype, shapes, what)


def _fit_problems(shapes: Mapping[str, tuple[int, ...]], base: WeightSource, lora: LoRAWeights) -> list[str]:
    base_names = set(base.names())
    problems = [f"the model has a weight '{name}' the merged model does not"
                for name in sorted(base_names - set(shapes))]
    problems += [f"the LoRA's full weight '{name}' is no weight of the model"
                 for name in sorted(set(lora.full_weights) - set(shapes))]
    for name, shape in sorted(shapes.items()):
        full = lora.full_weights.get(name)
        have = tuple(full.shape) if full is not None else base.spec(name).shape if name in base_names else None
        if have is None:
            problems.append(f"weight '{name}' is in neither the model nor the LoRA")
        elif have != shape:
            problems.append(f"weight '{name}' is {have}, the merged model needs {shape}")
    for module, layer in sorted(lora.layers.items()):
        shape = shapes.get(f"{module}.weight")
        if shape is None:
            problems.append(f"the LoRA changes '{module}', which the model does not have")
        elif lora.spec.weight_shape(layer) != shape:
            problems.append(f"the LoRA layer '{module}' is {lora.spec.weight_shape(layer)}, the model's weight {shape}")
    return problems
