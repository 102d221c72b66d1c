"""Which Linear layers of a Wan transformer get a LoRA (suffix list, block list, regex)."""
from __future__ import annotations

import re

import torch

from modules.util.errors import UserError


def select_lora_targets(transformer: torch.nn.Module, suffixes: list[str], blocks: list[int],
                        layer_filter: str) -> list[str]:
    """Full module names of the Linear layers that match every filter, in model order."""
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
        names.append(name)
    if not names:
        raise UserError(
            "no transformer layer matches lora_target_modules / lora_blocks / lora_layer_filter: "
            "loosen them (e.g. lora_layer_filter=\"\", lora_blocks=[])"
        )
    return names
