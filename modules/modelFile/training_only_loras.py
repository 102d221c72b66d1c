"""LoRAs in the weights for part of a run only, in and out by one context manager (`patched_weights`):
`base_loras[].training_only` (a de-distill "training adapter" on a Lightning-merged base) is merged for training and
taken out wherever the result is used, samples during training and saved full weights; `base_loras[].sample_only`
(the stack users sample with, e.g. a Lightning LoRA) is merged for the trainer's samples only, never trained
through. (The saved LoRA's header leaves both out, `stack_header`, so sample.py and evaluate.py do not apply them.)

Taking out is the same merge at the negative strength, in reverse order (ΔW of LoRA, LoHa, LoKr and `diff` keys is
linear in the strength; training_only files that replace whole weights are refused at load); for samples both go in
one pass (one float32 copy per weight). The weights a block changes are copied to the CPU first and put back
afterwards, so training goes on from bit-identical weights (exact resume). On a LoRA run the names are the frozen
`base_layer` weights, so the trained peft adapter stays active on top. Needs the weights as plain tensors on one
process: fp8 storage, block swap and FSDP shards are refused at start-up (`check_memory_features`)."""
from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Iterator

import torch

from modules.model.WanModel import WanModel
from modules.modelFile.base_loras import checked_patches, merge_stack
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
    """At start-up: the features under which training-only / sample-only LoRAs cannot go in and out of the weights."""
    for loras, which, instead in (
            (model.training_only_loras, "a training_only LoRA is taken out of the weights for samples and saves",
             "merge the LoRA for good (training_only false)"),
            (model.sample_only_loras, "a sample_only LoRA is merged into the weights for the samples only",
             "sample without it (remove the entry)")):
        if not loras:
            continue
        features = ((fp8, "base_weight_format FP8", "set base_weight_format BF16"),
                    (swapped, "blocks_to_swap", "turn blocks_to_swap off"),
                    (sharded, "data_parallel FSDP", "turn data_parallel FSDP off"))
        for on, key, off in features:
            if on:
                raise UserError(f"base_loras: {which}, which {key} does not allow: {off} (memory_preset MANUAL), "
                                f"or {instead}")


def _taken_out(model: WanModel) -> list[tuple]:
    """The training-only LoRAs at the negative strength, last merged first."""
    return [(expert, read, -strength) for expert, read, strength in reversed(model.training_only_loras)]


def without_training_only(model: WanModel) -> contextlib.AbstractContextManager[None]:
    """Saved weights: without the training-only LoRAs."""
    return patched_weights(model, _taken_out(model))


def sampling_weights(model: WanModel) -> contextlib.AbstractContextManager[None]:
    """The trainer's samples: without the training-only LoRAs, with the sample-only ones."""
    return patched_weights(model, _taken_out(model) + list(model.sample_only_loras))


@contextlib.contextmanager
def patched_weights(model: WanModel, loras: list[tuple]) -> Iterator[None]:
    """A block in which the transformers hold their weights with `loras` ((expert, file, strength), in order)
    merged; the weights they change are restored bit for bit afterwards."""
    if not loras:
        yield
        return
    stacks: dict[int, list] = defaultdict(list)
    for expert, read, strength in loras:
        stacks[expert].append((read, strength))
    kept: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    try:
        for expert, stack in stacks.items():
            view = _PlainNames(model.transformers()[expert])
            params = dict(view.named_parameters())
            kept += [(params[name], params[name].detach().to("cpu", copy=True))
                     for name in sorted(checked_patches(view, stack, warn=False))]
            merge_stack(view, stack, warn=False)
        yield
    finally:
        with torch.no_grad():
            for param, copy in kept:
                param.copy_(copy)
