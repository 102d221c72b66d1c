"""LoRA weights of a `WanTransformer3DModel`: peft adapter <-> neutral form <-> file state dicts.

Pure key/tensor logic, no file I/O (see `modelSaver/WanLoRASaver.save_lora` / `lora_reading.load_lora_file`).

Neutral form
------------
`LoRAWeights.layers` maps the diffusers module path inside the transformer (``blocks.0.attn1.to_q``) to a
`LoRALayer(down [r, in], up [out, r], alpha)`. The effect of a layer is ``W += up @ down * alpha / r``
(kohya/ComfyUI convention; a peft rsLoRA adapter is stored with ``alpha = lora_alpha * sqrt(r)`` so the
same formula holds). `LoRAWeights.full_weights` maps transformer parameter names to full tensors for
modules trained fully (e.g. an expanded ``patch_embedding``); they are stored under the key prefix
``wantrainer_full_weights.`` in every format and only WanTrainer loads them back (diffusers refuses a
file with such keys: "Invalid LoRA checkpoint", which is right, as it cannot reproduce the effect).

Formats
-------
``DIFFUSERS_LORA``
    ``transformer.<module>.lora_A.weight`` / ``.lora_B.weight``, what `WanLoraLoaderMixin.load_lora_weights`
    loads natively. diffusers 0.42.1 passes ``network_alphas=None`` for Wan, and without
    ``lora_adapter_metadata`` in the header `get_peft_kwargs` sets ``lora_alpha = r`` for every module
    (scale 1.0). Alpha is therefore *baked* into the weights: ``lora_B`` is written as
    ``up * alpha / r`` (only ``up`` is scaled, computed in float32). We do not write
    ``lora_adapter_metadata``: it is honoured only by diffusers, whereas baked weights give the trained
    effect in every loader that reads diffusers keys. ComfyUI is not one of them for Wan: it maps only
    ``diffusion_model.<Wan name>`` and ``lora_unet_<...>`` keys, so every key of this format is "lora key
    not loaded" there and a workflow silently runs the base model — hence COMFY_LORA is the default and
    this format an explicit choice for diffusers/PEFT users. So that a WanTrainer file
    can be turned back into the trained parametrisation (for resuming or a COMFY conversion with the real
    alpha), the true alphas are recorded in the header key ``wantrainer.alpha_map`` (JSON:
    ``{"*": most common alpha, "<module>": alpha, ...}``) and `from_state_dict` un-bakes them (only when
    the header's ``wantrainer.format`` is the file's format, i.e. the header belongs to these weights).
    A foreign diffusers file with diffusers' own ``lora_adapter_metadata`` is read with that alpha.
``COMFY_LORA`` (the default output)
    ``diffusion_model.<Wan original name>.lora_down.weight`` / ``.lora_up.weight`` / ``.alpha``: the key
    space of ComfyUI's LoRA loader (comfy/lora.py maps ``diffusion_model.`` + every weight name of its Wan
    model), which diffusers' ``load_lora_weights`` and SkyReels-A2's diffusers-based pipeline convert.
    diffusers loads these through `_convert_non_diffusers_wan_lora_to_diffusers`, which has quirks
    that this writer works around so that ``pipe.load_lora_weights(file)`` gives the trained effect:

    * it only consumes ``.alpha`` keys of block modules (self_attn, cross_attn, ffn); an ``.alpha`` of
      ``time_projection``, ``head.head``, ``text_embedding``, ``time_embedding`` or ``img_emb`` is left over
      and raises. For those modules alpha is baked into ``lora_up`` and no ``.alpha`` is written
      (ComfyUI then uses scale 1.0, i.e. the same effect; the true alphas go to ``wantrainer.alpha_map``
      as for DIFFUSERS_LORA);
    * ``k_img``/``v_img`` are only converted when *both* appear in the file, otherwise they are left over
      and raise: a LoRA with only one of them is refused;
    * it takes ``min()`` over the block numbers, so a LoRA with no block module at all cannot be loaded:
      refused.

    Modules without a Wan original name (e.g. ``patch_embedding`` LoRA) are refused with a hint to use
    DIFFUSERS_LORA.

    VACE blocks: ComfyUI's VaceWanModel names; diffusers loads a VACE-block LoRA only as DIFFUSERS_LORA.
``MUSUBI_LORA`` (reading only)
    musubi-tuner: ``lora_unet_blocks_0_self_attn_q.lora_down.weight`` / ``.lora_up.weight`` / ``.alpha``.

LoHa, LoKr and DoRA (see `modules.adapter`)
-------------------------------------------
Their layers are `AdapterLayer`s (tensors by ComfyUI key suffix + alpha; the adapter type is
`LoRAWeights.adapter`), written only as COMFY_LORA: ``diffusion_model.<Wan name>.<suffix>`` and ``.alpha`` for
every module, exactly the keys ComfyUI's weight adapters read. diffusers loads no such file for Wan, so
DIFFUSERS_LORA refuses them (`scripts/merge_lora.py` makes a model diffusers loads); COMFY_LORA and
musubi-style ``lora_unet_`` files of these types are read back.

A missing ``.alpha`` means ``alpha = rank`` (unless our ``wantrainer.alpha_map`` records a baked alpha).
``.alpha`` is written as a float32 0-dim tensor. Another diffusers quirk, harmless here: loading a LoRA
without ``add_k_proj``/``add_v_proj`` into an i2v transformer adds zero LoRA on them for blocks
``0 .. number_of_blocks_in_the_file - 1``.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import torch

from modules.adapter.lora import LORA, LoRALayer
from modules.adapter.registry import adapter_named, adapter_of_module, adapter_of_suffixes
from modules.adapter.spec import AdapterLayer, AdapterSpec
from modules.modelFile.lora_names import (  # noqa: F401  (re-exported: the names are part of this API)
    BLOCK_CONTAINERS,
    animate2_name,
    diffusers_to_wan_name,
    musubi_to_wan_name,
    wan_to_diffusers_name,
)
from modules.util.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

DIFFUSERS_LORA = "DIFFUSERS_LORA"
COMFY_LORA = "COMFY_LORA"
MUSUBI_LORA = "MUSUBI_LORA"  # reading only
WRITABLE_FORMATS = (DIFFUSERS_LORA, COMFY_LORA)
READABLE_FORMATS = (DIFFUSERS_LORA, COMFY_LORA, MUSUBI_LORA)

FULL_WEIGHTS_PREFIX = "wantrainer_full_weights."
DIFFUSERS_PREFIX = "transformer."
COMFY_PREFIX = "diffusion_model."
MUSUBI_PREFIX = "lora_unet_"
ALPHA_MAP_KEY = "wantrainer.alpha_map"
DIFFUSERS_ADAPTER_METADATA_KEY = "lora_adapter_metadata"

_DOWN_SUFFIXES = (".lora_A.weight", ".lora_down.weight")
_UP_SUFFIXES = (".lora_B.weight", ".lora_up.weight")
_ALPHA_SUFFIX = ".alpha"


class LoRAFormatError(UserError):
    """A LoRA that cannot be written in, read from or applied as the requested format / adapter."""


@dataclass
class LoRAWeights:
    """Adapter layers by diffusers module path, plus full weights by transformer parameter name. `adapter` names
    the type (`modules.adapter`): its layers are `LoRALayer`s for "lora", `AdapterLayer`s otherwise."""

    layers: dict[str, LoRALayer | AdapterLayer] = field(default_factory=dict)
    full_weights: dict[str, torch.Tensor] = field(default_factory=dict)
    adapter: str = LORA.name

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def spec(self) -> AdapterSpec:
        return adapter_named(self.adapter)

    def non_finite(self) -> str | None:
        """The name of the first tensor holding NaN or inf (e.g. 'blocks.0.attn1.to_q.lora_down'), or None."""
        tensors = dict(self.full_weights)
        for module, layer in self.layers.items():
            parts = getattr(layer, "tensors", None) or {"lora_down": layer.down, "lora_up": layer.up}
            alpha = torch.tensor(float(layer.alpha if layer.alpha is not None else 0.0))
            tensors.update({f"{module}.{suffix}": t for suffix, t in {**parts, "alpha": alpha}.items()})
        return next((name for name, t in tensors.items() if not bool(torch.isfinite(t).all())), None)


def expert_lora_paths(dest: str | os.PathLike) -> tuple[str, str]:
    """``out/x.safetensors`` -> (``out/x_high_noise.safetensors``, ``out/x_low_noise.safetensors``)."""
    path = os.fspath(dest)
    if path.lower().endswith(".safetensors"):
        path = path[: -len(".safetensors")]
    return f"{path}_high_noise.safetensors", f"{path}_low_noise.safetensors"


def normalize_format(fmt: Any) -> str:
    """A format name from a string (any case) or a `ModelFormat`-like enum member."""
    name = getattr(fmt, "name", fmt)
    if not isinstance(name, str) or name.upper() not in READABLE_FORMATS:
        raise LoRAFormatError(f"unknown LoRA format {fmt!r}; use one of {', '.join(WRITABLE_FORMATS)}")
    return name.upper()


def _short_list(items: Iterable[str], limit: int = 5) -> str:
    items = list(items)
    text = ", ".join(items[:limit])
    if len(items) > limit:
        text += f", ... ({len(items)} in all)"
    return text


# ---------------------------------------------------------------------------------------------- peft


def _clean_module_name(name: str) -> str:
    for prefix in ("base_model.model.", "_orig_mod."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace("._orig_mod.", ".")


def _peft_adapter_modules(transformer: "nn.Module", adapter_name: str) -> tuple[AdapterSpec, dict[str, Any]]:
    """The adapter type of `adapter_name` in the model and its peft layers by module path."""
    found: dict[str, Any] = {}
    specs: set[str] = set()
    spec = None
    for name, module in transformer.named_modules():
        owner = adapter_of_module(module, adapter_name)
        if owner is None:
            continue
        reason = owner.unsupported(module, adapter_name)
        if reason:
            raise LoRAFormatError(f"{reason} ({name})")
        spec, found[_clean_module_name(name)] = owner, module
        specs.add(owner.title)
    if not found:
        raise LoRAFormatError(f"the model has no LoRA adapter named '{adapter_name}'")
    if len(specs) > 1:
        raise LoRAFormatError(f"adapter '{adapter_name}' mixes adapter types ({', '.join(sorted(specs))})")
    return spec, found


def extract_from_peft(
    transformer: "nn.Module", adapter_name: str = "default", full_weight_names: Iterable[str] = ()
) -> LoRAWeights:
    """Reads the adapter's layers through its type's codec (LoRA: lora_A/lora_B and per-module alpha, rank/alpha
    patterns and rsLoRA included).

    Tensors are detached but may share storage with the model. `full_weight_names` are transformer parameter
    names copied (detached) into `full_weights`.
    """
    spec, modules = _peft_adapter_modules(transformer, adapter_name)
    layers = {name: spec.extract(module, adapter_name) for name, module in modules.items()}
    full = {name: _get_param(transformer, name).detach() for name in full_weight_names}
    return LoRAWeights(layers=layers, full_weights=full, adapter=spec.name)


def _get_param(transformer: "nn.Module", name: str) -> torch.nn.Parameter:
    candidates = [name]
    module_path, _, leaf = name.rpartition(".")
    if module_path:
        candidates.append(f"{module_path}.base_layer.{leaf}")  # a LoRA-wrapped module
    for candidate in candidates:
        try:
            return transformer.get_parameter(candidate)
        except AttributeError:
            continue
    raise LoRAFormatError(f"the model has no parameter '{name}' for the full weights in the LoRA")


def apply_to_peft(transformer: "nn.Module", weights: LoRAWeights, adapter_name: str = "default") -> None:
    """Loads `weights` into an already injected adapter of the same type; the module sets and shapes must match.

    Alpha may differ: the type's codec rescales so the adapter's own scale gives the stored effect (a baked
    DIFFUSERS_LORA file, alpha = rank, loads into an adapter trained with alpha != rank).
    """
    spec, modules = _peft_adapter_modules(transformer, adapter_name)
    if spec.name != weights.adapter:
        raise LoRAFormatError(f"the file holds a {weights.spec.title} adapter, adapter '{adapter_name}' is {spec.title}: "
                              "set peft_type / lora_decompose to the file's type")
    missing = sorted(set(modules) - set(weights.layers))
    extra = sorted(set(weights.layers) - set(modules))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"adapter modules missing from the LoRA: {_short_list(missing)}")
        if extra:
            parts.append(f"LoRA modules not in the adapter: {_short_list(extra)}")
        raise LoRAFormatError(f"LoRA does not match adapter '{adapter_name}': " + "; ".join(parts))
    bad = [f"{name} ({problem})" for name, module in modules.items()
           if (problem := spec.shape_problem(module, weights.layers[name], adapter_name))]
    if bad:
        raise LoRAFormatError(f"LoRA shapes (rank) do not match adapter '{adapter_name}': {_short_list(bad, 3)}")
    full_params = {name: _get_param(transformer, name) for name in weights.full_weights}
    for name, param in full_params.items():
        if tuple(param.shape) != tuple(weights.full_weights[name].shape):
            raise LoRAFormatError(
                f"full weight '{name}' has shape {tuple(weights.full_weights[name].shape)}, "
                f"the model {tuple(param.shape)}"
            )
    with torch.no_grad():
        for name, module in modules.items():
            spec.load_into(module, weights.layers[name], adapter_name)
        for name, param in full_params.items():
            param.copy_(weights.full_weights[name].to(device=param.device, dtype=param.dtype))


# ------------------------------------------------------------------------------------- state dicts


def _scaled(t: torch.Tensor, factor: float) -> torch.Tensor:
    if factor == 1.0:
        return t
    return (t.float() * factor).to(t.dtype)


def common_rank_alpha(weights: LoRAWeights) -> tuple[int | None, float | None]:
    """The most common rank and alpha (None, None for no layers)."""
    ranks = [r for r in map(weights.spec.rank, weights.layers.values()) if r is not None]
    alphas = [float(l.alpha) for l in weights.layers.values() if l.alpha is not None]
    rank = Counter(ranks).most_common(1)[0][0] if ranks else None
    return rank, Counter(alphas).most_common(1)[0][0] if alphas else None


def check_comfy_compatible(weights: LoRAWeights) -> None:
    """Raises `LoRAFormatError` when `weights` cannot be written as a COMFY_LORA that diffusers loads (other
    types: that ComfyUI loads; diffusers loads none of them)."""
    unknown = sorted(n for n in weights.layers if diffusers_to_wan_name(n) is None)
    if unknown and weights.adapter != LORA.name:
        raise LoRAFormatError(f"COMFY_LORA cannot hold {weights.spec.title} on {_short_list(unknown)} "
                              "(no Wan original module name): leave those modules out of lora_target_modules")
    if unknown:
        raise LoRAFormatError(
            f"COMFY_LORA cannot hold LoRA on {_short_list(unknown)} (no Wan original module name); "
            "save as DIFFUSERS_LORA instead"
        )
    if weights.adapter != LORA.name:
        return
    names = [diffusers_to_wan_name(n) for n in weights.layers]
    has_k_img = any(n.endswith(".k_img") for n in names)
    has_v_img = any(n.endswith(".v_img") for n in names)
    if has_k_img != has_v_img:
        raise LoRAFormatError(
            "COMFY_LORA with LoRA on only one of add_k_proj/add_v_proj cannot be loaded by diffusers "
            "(it needs both k_img and v_img); train both or save as DIFFUSERS_LORA"
        )
    if weights.layers and not any(n.startswith(BLOCK_CONTAINERS) for n in names):
        raise LoRAFormatError(
            "COMFY_LORA without LoRA on any transformer block cannot be loaded by diffusers; "
            "save as DIFFUSERS_LORA instead"
        )


def to_state_dict(weights: LoRAWeights, fmt: Any) -> dict[str, torch.Tensor]:
    """The file state dict of `weights` in DIFFUSERS_LORA or COMFY_LORA (see the module docstring)."""
    fmt = normalize_format(fmt)
    sd: dict[str, torch.Tensor] = {}
    if weights.adapter != LORA.name:
        sd.update(_adapter_state_dict(weights, fmt))
    elif fmt == DIFFUSERS_LORA:
        for name in sorted(weights.layers):
            layer = weights.layers[name]
            sd[f"{DIFFUSERS_PREFIX}{name}.lora_A.weight"] = layer.down
            sd[f"{DIFFUSERS_PREFIX}{name}.lora_B.weight"] = _scaled(layer.up, layer.scale)
    elif fmt == COMFY_LORA:
        check_comfy_compatible(weights)
        for name in sorted(weights.layers):
            layer = weights.layers[name]
            wan = diffusers_to_wan_name(name)
            key = f"{COMFY_PREFIX}{wan}"
            sd[f"{key}.lora_down.weight"] = layer.down
            if wan.startswith(BLOCK_CONTAINERS):  # ComfyUI reads the alpha of every block module
                sd[f"{key}.lora_up.weight"] = layer.up
                sd[f"{key}{_ALPHA_SUFFIX}"] = torch.tensor(float(layer.alpha), dtype=torch.float32)
            else:  # diffusers' converter does not consume .alpha of these: bake it
                sd[f"{key}.lora_up.weight"] = _scaled(layer.up, layer.scale)
    else:
        raise LoRAFormatError(f"{fmt} can only be read; write one of {', '.join(WRITABLE_FORMATS)}")
    for name in sorted(weights.full_weights):
        sd[f"{FULL_WEIGHTS_PREFIX}{name}"] = weights.full_weights[name]
    return sd


def _adapter_state_dict(weights: LoRAWeights, fmt: str) -> dict[str, torch.Tensor]:
    """LoHa / LoKr / DoRA as COMFY_LORA: every key its type's codec gives, under ComfyUI's module names."""
    if fmt != COMFY_LORA:
        raise LoRAFormatError(f"{fmt} cannot hold a {weights.spec.title} adapter (diffusers loads only LoRA for Wan): "
                              "write COMFY_LORA, and merge it with scripts/merge_lora.py for a diffusers model")
    check_comfy_compatible(weights)
    sd: dict[str, torch.Tensor] = {}
    for name in sorted(weights.layers):
        key = f"{COMFY_PREFIX}{diffusers_to_wan_name(name)}"
        sd.update({f"{key}.{suffix}": tensor for suffix, tensor in weights.spec.encode(weights.layers[name]).items()})
    return sd


def _is_baked(fmt: str, name: str) -> bool:
    """Whether `to_state_dict` bakes the alpha of module `name` into ``up`` (no ``.alpha`` key) in `fmt`."""
    return fmt == DIFFUSERS_LORA or not (diffusers_to_wan_name(name) or "").startswith(BLOCK_CONTAINERS)


def format_metadata(weights: LoRAWeights, fmt: Any) -> dict[str, str]:
    """Header entries that `from_state_dict` needs to read the file back exactly: the alphas baked into
    the weights, as ``wantrainer.alpha_map`` = ``{"*": most common, "<module>": other alpha, ...}``."""
    fmt = normalize_format(fmt)
    if weights.adapter != LORA.name:
        return {}  # every module has its `.alpha`
    baked = {name: float(layer.alpha) for name, layer in weights.layers.items() if _is_baked(fmt, name)}
    if not baked:
        return {}
    common = Counter(baked.values()).most_common(1)[0][0]
    alpha_map: dict[str, float] = {"*": common}
    alpha_map.update({name: alpha for name, alpha in sorted(baked.items()) if alpha != common})
    return {ALPHA_MAP_KEY: json.dumps(alpha_map, separators=(",", ":"))}


def detect_format(state_dict: Mapping[str, Any]) -> str:
    """DIFFUSERS_LORA, COMFY_LORA or MUSUBI_LORA; `LoRAFormatError` when it is no LoRA we know."""
    keys = [k for k in state_dict if not k.startswith(FULL_WEIGHTS_PREFIX)]
    if not keys:
        if state_dict:
            return DIFFUSERS_LORA  # only full weights
        raise LoRAFormatError("the state dict is empty, not a LoRA")
    if any(k.startswith(COMFY_PREFIX) for k in keys):
        return COMFY_LORA
    if any(k.startswith(MUSUBI_PREFIX) for k in keys):
        return MUSUBI_LORA
    if any(k.endswith(_DOWN_SUFFIXES + _UP_SUFFIXES) for k in keys):
        return DIFFUSERS_LORA
    raise LoRAFormatError(f"not a LoRA: no lora_A/lora_down keys (found e.g. '{sorted(keys)[0]}')")


def _group(keys_to_tensors: Mapping[str, torch.Tensor], bad_keys: list[str]) -> dict[str, dict[str, torch.Tensor]]:
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in keys_to_tensors.items():
        for suffixes, kind in ((_DOWN_SUFFIXES, "down"), (_UP_SUFFIXES, "up"), ((_ALPHA_SUFFIX,), "alpha")):
            suffix = next((s for s in suffixes if key.endswith(s)), None)
            if suffix is not None:
                groups.setdefault(key[: -len(suffix)], {})[kind] = value
                break
        else:
            bad_keys.append(key)
    return groups


def _pattern_value(patterns: Mapping[str, Any], module: str, default: Any) -> Any:
    """peft's `get_pattern_key` matching of rank/alpha patterns."""
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", module):
            return patterns[key]
    return default


def _diffusers_metadata_alphas(metadata: Mapping[str, str] | None) -> Any:
    """A function module -> alpha (kohya convention) from diffusers' `lora_adapter_metadata`, or None."""
    raw = (metadata or {}).get(DIFFUSERS_ADAPTER_METADATA_KEY)
    if not raw:
        return None
    try:
        meta = json.loads(raw)
    except ValueError:
        return None
    meta = {k[len(DIFFUSERS_PREFIX):]: v for k, v in meta.items() if k.startswith(DIFFUSERS_PREFIX)}
    if "lora_alpha" not in meta:
        return None

    def alpha_for(module: str, rank: int) -> float:
        alpha = float(_pattern_value(meta.get("alpha_pattern") or {}, module, meta["lora_alpha"]))
        return alpha * math.sqrt(rank) if meta.get("use_rslora") else alpha

    return alpha_for


def _strip_prefix(rest: Mapping[str, torch.Tensor], fmt: str, bad: list[str]) -> dict[str, torch.Tensor]:
    """COMFY_LORA / MUSUBI_LORA keys without their prefix; keys without it go to `bad`."""
    prefix = COMFY_PREFIX if fmt == COMFY_LORA else MUSUBI_PREFIX
    stripped = {}
    for key, value in rest.items():
        if key.startswith(prefix):
            stripped[key[len(prefix):]] = value
        else:
            bad.append(key)
    return stripped


def _wan_module_names(groups: Iterable[str], fmt: str, skipped: list[str] | None = None) -> dict[str, str]:
    """File module name (Wan original / musubi) -> diffusers module path; unknown names are refused (`skipped`
    given: left out and listed there)."""
    to_wan = (lambda n: n) if fmt == COMFY_LORA else musubi_to_wan_name
    names = {}
    unknown = []
    for g in groups:
        wan = to_wan(g)
        diffusers_name = wan_to_diffusers_name(wan) if wan else None
        if diffusers_name is None:
            unknown.append(g)
        else:
            names[g] = diffusers_name
    if unknown and skipped is None:
        raise LoRAFormatError(f"{fmt} has LoRA on modules unknown to WanTrainer: {_short_list(sorted(unknown))}")
    skipped is None or skipped.extend(unknown)
    return names


def adapter_of_keys(keys: Iterable[str]) -> AdapterSpec:
    """The adapter type of a file from its key suffixes; a file mixing types is refused."""
    specs = adapter_of_suffixes(key.rsplit(".", 1)[-1] for key in keys)
    if len(specs) > 1:
        raise LoRAFormatError(f"the file mixes adapter types ({', '.join(s.title for s in specs)}); one type per file")
    return specs[0]


def _group_by_suffix(keys_to_tensors: Mapping[str, torch.Tensor], suffixes: Iterable[str],
                     bad_keys: list[str]) -> dict[str, dict[str, torch.Tensor]]:
    """module -> {suffix: tensor}; keys with none of `suffixes` go to `bad_keys`."""
    ordered = sorted(suffixes, key=len, reverse=True)  # "lora_up.weight" before a shorter suffix of it
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in keys_to_tensors.items():
        suffix = next((s for s in ordered if key.endswith("." + s)), None)
        if suffix is None:
            bad_keys.append(key)
        else:
            groups.setdefault(key[: -len(suffix) - 1], {})[suffix] = value
    return groups


def _read_adapter(spec: AdapterSpec, fmt: str, rest: Mapping[str, torch.Tensor],
                  full: dict[str, torch.Tensor], skipped: list[str] | None) -> LoRAWeights:
    """A LoHa / LoKr / DoRA file (COMFY_LORA or musubi names) through its type's codec."""
    bad: list[str] = []
    groups = _group_by_suffix(_strip_prefix(rest, fmt, bad), spec.file_keys, bad)
    if bad and skipped is None:
        raise LoRAFormatError(f"unsupported keys in {spec.title} {fmt} file: {_short_list(sorted(bad))}")
    unknown: list[str] | None = None if skipped is None else []
    names = _wan_module_names(groups, fmt, unknown)
    if skipped is not None:
        skipped += bad + [f"{g}.{suffix}" for g in unknown or () for suffix in groups.pop(g)]
    incomplete = sorted(f"{g} ({', '.join(spec.missing_keys(parts))})" for g, parts in groups.items()
                        if spec.missing_keys(parts))
    if incomplete:
        raise LoRAFormatError(f"{spec.title} modules without all their weights: {_short_list(incomplete)}")
    if len(set(names.values())) < len(names):
        raise LoRAFormatError(f"a {spec.title} module appears twice in the file")
    layers = {names[g]: spec.decode(parts) for g, parts in groups.items()}
    return LoRAWeights(layers=layers, full_weights=full, adapter=spec.name)


VARIANT_KEY = "wantrainer.variant"  # the header entry naming the variant a file was trained on (`wan-2.1-t2v`, ...)
ANIMATE2_VARIANT_SUFFIX = "-animate-2"  # the end of an Animate-2 file's VARIANT_KEY


def from_state_dict(state_dict: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None,
                    skipped: list[str] | None = None) -> LoRAWeights:
    """Reads any of DIFFUSERS_LORA, COMFY_LORA, MUSUBI_LORA (`metadata`: the safetensors header, optional).

    Keys it cannot use (other suffixes, modules WanTrainer has no name for) are refused; with `skipped` given they
    are left out and listed there instead (a base LoRA from elsewhere: `modules/modelFile/base_loras.py`).
    ComfyUI's Animate-2 names are Wan 2.1's: a file whose header names the Animate-2 variant gets Animate-2's."""
    weights = _from_state_dict(state_dict, metadata, skipped)
    if not (metadata or {}).get(VARIANT_KEY, "").endswith(ANIMATE2_VARIANT_SUFFIX):
        return weights
    return for_animate2(weights)


def for_animate2(weights: LoRAWeights) -> LoRAWeights:
    """`weights` with Wan's block modules renamed to Animate-2's (ComfyUI's names read without an Animate-2 header,
    applied to an Animate-2 transformer); Animate-2's own names stay."""
    return LoRAWeights({animate2_name(name): layer for name, layer in weights.layers.items()}, weights.full_weights,
                       weights.adapter)


def _from_state_dict(state_dict: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None,
                     skipped: list[str] | None = None) -> LoRAWeights:
    fmt = detect_format(state_dict)
    full = {k[len(FULL_WEIGHTS_PREFIX):]: v for k, v in state_dict.items() if k.startswith(FULL_WEIGHTS_PREFIX)}
    rest = {k: v for k, v in state_dict.items() if not k.startswith(FULL_WEIGHTS_PREFIX)}

    bad: list[str] = []
    if fmt == DIFFUSERS_LORA:
        prefixed = {}
        for key, value in rest.items():
            for prefix in (DIFFUSERS_PREFIX, "base_model.model."):
                if key.startswith(prefix):
                    key = key[len(prefix):]
                    break
            prefixed[key] = value
        groups = _group(prefixed, bad)
        names = {g: g for g in groups}
    else:
        spec = adapter_of_keys(rest)
        if spec is not LORA:
            return _read_adapter(spec, fmt, rest, full, skipped)
        groups = _group(_strip_prefix(rest, fmt, bad), bad)
        unknown: list[str] | None = None if skipped is None else []
        names = _wan_module_names(groups, fmt, unknown)
        if skipped is not None:
            skipped += [f"{g}.{kind}" for g in unknown or () for kind in groups.pop(g)]
    if skipped is not None:
        skipped += bad
        bad = []
    if bad:
        raise LoRAFormatError(f"unsupported keys in {fmt} file: {_short_list(sorted(bad))}")

    incomplete = sorted(g for g, parts in groups.items() if "down" not in parts or "up" not in parts)
    if incomplete:
        raise LoRAFormatError(f"LoRA modules without both down and up weights: {_short_list(incomplete)}")

    metadata = metadata or {}
    diffusers_alpha = _diffusers_metadata_alphas(metadata) if fmt == DIFFUSERS_LORA else None
    alpha_map = None
    if metadata.get(ALPHA_MAP_KEY) and metadata.get("wantrainer.format") == fmt:
        try:
            alpha_map = {str(k): float(v) for k, v in json.loads(metadata[ALPHA_MAP_KEY]).items()}
        except (ValueError, TypeError, AttributeError):
            alpha_map = None

    layers: dict[str, LoRALayer] = {}
    for group, parts in groups.items():
        name = names[group]
        down, up = parts["down"], parts["up"]
        rank = int(down.shape[0])
        if "alpha" in parts:
            alpha = float(parts["alpha"].float().item())
        elif diffusers_alpha is not None:
            alpha = diffusers_alpha(name, rank)
        elif alpha_map is not None and ("*" in alpha_map or name in alpha_map):
            # alpha baked by WanTrainer: undo the baking so the trained parametrisation comes back
            alpha = alpha_map.get(name, alpha_map.get("*"))
            up = _scaled(up, rank / alpha)
        else:
            alpha = float(rank)
        if name in layers:
            raise LoRAFormatError(f"LoRA module {name} appears twice in the file")
        layers[name] = LoRALayer(down=down, up=up, alpha=alpha)
    return LoRAWeights(layers=layers, full_weights=full)
