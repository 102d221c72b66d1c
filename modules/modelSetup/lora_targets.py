"""Which Linear layers of a Wan transformer get a LoRA (suffix list, block list, regex)."""
from __future__ import annotations

import re

import torch

from modules.config.train_config import DEFAULT_LORA_TARGETS
from modules.util.enum import VaceBlocks
from modules.util.errors import UserError

# Animate-2's default: its self-attention's q, k and v (DiffSynth-Studio's and NeMo's choice); its module names are
# not Wan's (`self_attn.to_q`, not `attn1.to_q`), so Wan's default list would match nothing there.
ANIMATE2_LORA_TARGETS = ["self_attn.to_q", "self_attn.to_k", "self_attn.to_v"]
VACE_PREFIX = "vace_"  # vace_blocks.*, vace_patch_embedding: the control branch of a WanVACETransformer3DModel


def in_vace_scope(name: str, scope: VaceBlocks) -> bool:
    """Whether module or parameter `name` trains under `vace_train_blocks` (a model without VACE branch has no
    `vace_` names, so BASE and BOTH keep everything and VACE nothing: callers apply it to VACE models only)."""
    if scope == VaceBlocks.BOTH:
        return True
    return name.startswith(VACE_PREFIX) == (scope == VaceBlocks.VACE)


def target_suffixes(transformer: torch.nn.Module, configured: list[str]) -> list[str]:
    """`lora_target_modules`, with its default read as the family's own default (Animate-2's q/k/v)."""
    if configured == DEFAULT_LORA_TARGETS and type(transformer).__name__ == "WanAnimate2Transformer3DModel":
        return ANIMATE2_LORA_TARGETS
    return configured


def select_lora_targets(transformer: torch.nn.Module, suffixes: list[str], blocks: list[int],
                        layer_filter: str, vace_scope: VaceBlocks | None = None) -> list[str]:
    """Full module names of the Linear layers that match every filter, in model order (`vace_scope`: a VACE
    model's `vace_train_blocks`; `blocks` name base blocks)."""
    pattern = re.compile(layer_filter) if layer_filter else None
    wanted_blocks = {f"blocks.{i}." for i in blocks}
    names = []
    suffixes = target_suffixes(transformer, suffixes)
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
