"""Which Linear layers of a Wan transformer get a LoRA (suffix list, block list, regex)."""
from __future__ import annotations

import re

import torch

from modules.util.enum import VaceBlocks
from modules.util.errors import UserError

VACE_PREFIX = "vace_"  # vace_blocks.*, vace_patch_embedding: the control branch of a WanVACETransformer3DModel


def in_vace_scope(name: str, scope: VaceBlocks) -> bool:
    """Whether module or parameter `name` trains under `vace_train_blocks` (a model without VACE branch has no
    `vace_` names, so BASE and BOTH keep everything and VACE nothing: callers apply it to VACE models only)."""
    if scope == VaceBlocks.BOTH:
        return True
    return name.startswith(VACE_PREFIX) == (scope == VaceBlocks.VACE)


def select_lora_targets(transformer: torch.nn.Module, suffixes: list[str], blocks: list[int],
                        layer_filter: str, vace_scope: VaceBlocks | None = None) -> list[str]:
    """Full module names of the Linear layers that match every filter, in model order (`vace_scope`: a VACE
    model's `vace_train_blocks`; `blocks` name base blocks)."""
    pattern = re.compile(layer_filter) if layer_filter else None
    wanted_blocks = {f"blocks.{i}." for i in blocks}
    names = []
    for name, module in transformer.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if not any(name == s or name.endswith("." + s) for s in suffixes):
            continue
        if wanted_blocks and not any(name.startswith(b) for b in wanted_blocks):
            continue
        if pattern is not None and not pattern.search(name):
            continue
        if vace_scope is not None and not in_vace_scope(name, vace_scope):
            continue
        names.append(name)
    if not names:
        raise UserError(
            "no transformer layer matches lora_target_modules / lora_blocks / lora_layer_filter: "
            "loosen them (e.g. lora_layer_filter=\"\", lora_blocks=[]; VACE models: lora_blocks picks base blocks, "
            "so with vace_train_blocks VACE leave it empty)"
        )
    return names
