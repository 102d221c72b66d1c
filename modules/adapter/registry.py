"""Every adapter type by `peft_type` (a plain dict, nothing registers itself), and lookups by what a model or
a file holds. DoRA is LoRA's `lora_decompose` option."""
from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Iterable

from modules.adapter.loha import LOHA
from modules.adapter.lokr import LOKR
from modules.adapter.lora import DORA, LORA
from modules.adapter.spec import AdapterSpec

if TYPE_CHECKING:  # pragma: no cover
    import torch

_TYPES: dict[str, AdapterSpec] = {"LORA": LORA, "LOHA": LOHA, "LOKR": LOKR}

# The config's `peft_type` (OneTrainer's name), made from the dict above: a new type is its module plus one entry.
PeftType = Enum("PeftType", {name: name for name in _TYPES}, module=__name__)
ADAPTERS: dict[PeftType, AdapterSpec] = {PeftType[name]: spec for name, spec in _TYPES.items()}
_OPTIONS = (DORA,)  # variants of a type chosen by an option, not by peft_type


def all_adapters() -> tuple[AdapterSpec, ...]:
    return (*ADAPTERS.values(), *_OPTIONS)


def adapter_for(peft_type: PeftType, decompose: bool = False) -> AdapterSpec:
    """The type a config trains (`peft_type`, `lora_decompose`)."""
    return DORA if decompose else ADAPTERS[peft_type]


def adapter_named(name: str) -> AdapterSpec:
    """The type a file header's `wantrainer.adapter` names; KeyError for an unknown name."""
    for spec in all_adapters():
        if spec.name == name:
            return spec
    raise KeyError(f"unknown adapter type '{name}'; known: {', '.join(s.name for s in all_adapters())}")


def adapter_of_module(module: torch.nn.Module, adapter_name: str) -> AdapterSpec | None:
    """The type of an injected peft layer holding `adapter_name` (None: no adapter layer of ours)."""
    return next((spec for spec in all_adapters() if spec.owns(module, adapter_name)), None)


def adapter_of_suffixes(suffixes: Iterable[str]) -> list[AdapterSpec]:
    """The types whose marker keys occur among a file's key suffixes; none of them: LoRA."""
    present = set(suffixes)
    found = [spec for spec in all_adapters() if present.intersection(spec.marker_keys)]
    return found or [LORA]
