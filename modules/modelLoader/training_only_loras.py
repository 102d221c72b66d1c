"""`base_loras[].training_only`: a LoRA merged into the base for training only (a de-distill "training adapter" on a
Lightning-merged base), taken out again wherever the result is used: samples during training and saved full
weights. (The saved LoRA's header leaves it out, `stack_header`, so sample.py and evaluate.py do not apply it.)

Taking out is the same merge at the negative strength, in reverse order (ΔW of LoRA, LoHa, LoKr and `diff` keys is
linear in the strength; files that replace whole weights are refused at load). The weights it changes are copied
to the CPU first and put back afterwards, so training goes on from bit-identical weights (exact resume). Needs the
weights as plain tensors on one process: fp8 storage, block swap and FSDP shards are refused at start-up
(`check_memory_features`)."""
from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Iterator

import torch

from modules.model.WanModel import WanModel
from modules.modelLoader.base_loras import _diff_names, _patches, merge_stack
from modules.util.errors import UserError

_PEFT_BASE = ".base_layer"  # peft's wrapped linear keeps the frozen weight as <module>.base_layer.weight


class _PlainNames(torch.nn.Module):
    """A transformer's parameters under their names without peft's `.base_layer` (the names LoRA files use)."""

    def __init__(self, transformer: torch.nn.Module):
        super().__init__()
        self._params = {name.replace(_PEFT_BASE, ""): p for name, p in transformer.named_parameters()
                        if ".lora_" not in name and ".hada_" not in name and ".lokr_" not in name}

    def named_parameters(self, *args, **kwargs):  # noqa: D102 (what merge_stack reads)
        return iter(self._params.items())

    def state_dict(self, *args, **kwargs):  # noqa: D102
        return dict(self._params)


def check_memory_features(model: WanModel, fp8: bool, swapped: bool, sharded: bool) -> None:
    """At start-up: the features under which the training-only LoRAs cannot be taken out for samples and saves."""
    if not model.training_only_loras:
        return
    for on, key in ((fp8, "fp8_base_weights (base_weight_format FP8)"), (swapped, "blocks_to_swap"), (sharded, "data_parallel FSDP")):
        if on:
            raise UserError(f"base_loras: a training_only LoRA is taken out of the weights for samples and saves, "
                            f"which {key} does not allow: turn {key} off (memory_preset MANUAL), or merge the LoRA "
                            "for good (training_only false)")


@contextlib.contextmanager
def without_training_only(model: WanModel) -> Iterator[None]:
    """A block in which the transformers hold the weights without the training-only LoRAs; restored exactly."""
    if not model.training_only_loras:
        yield
        return
    stacks: dict[int, list] = defaultdict(list)
    for expert, read, strength in model.training_only_loras:
        stacks[expert].append((read, -strength))
    kept: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    try:
        for expert, stack in stacks.items():
            view = _PlainNames(model.transformers()[expert])
            names = _diff_names(view)
            changed = {name for read, strength in stack for name in _patches(read, strength, view, names)[0]}
            params = dict(view.named_parameters())
            kept += [(params[name], params[name].detach().to("cpu", copy=True)) for name in sorted(changed)]
            merge_stack(view, stack[::-1])
        yield
    finally:
        with torch.no_grad():
            for param, copy in kept:
                param.copy_(copy)
