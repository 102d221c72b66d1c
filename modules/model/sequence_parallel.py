"""Sequence parallelism on a Wan transformer: each rank of a sequence group runs the blocks on its slice of the
clip's tokens, and the prediction is gathered whole again.

The split follows diffusers' context-parallel plan for Wan (`WanTransformer3DModel._cp_plan`: the rotary tables and
the blocks' hidden states cut along the tokens, the per-token timesteps of Wan 2.2 TI2V too, `proj_out`'s output
gathered), written as torch module hooks so that it holds for the classes that plan does not cover (VACE, whose
control tokens are cut like the video's, and SkyReels-V2) and whatever wraps a block (checkpointing, FSDP2, compile):

- a forward pre-hook on the transformer counts the clip's tokens (frames x height x width after patching) and cuts
  them over the group (`SequenceShards.cut`); with per-token timesteps it keeps this rank's slice of them;
- `patch_embedding` (and VACE's `vace_patch_embedding`) hand on only this rank's tokens, so no rank keeps the whole
  clip's hidden states past the embedding (their (B, C, S_r, 1, 1) shape flattens to the same (B, S_r, C) tokens);
- `rope` hands on this rank's rows of the rotary tables (the positions of its own tokens);
- `proj_out`'s output is gathered along the tokens (`gather_tokens`), so every rank of the group computes the loss of
  the whole clip; the backward hands each rank the gradient of its own tokens.

Every parameter's gradient on a rank is then the part its tokens contribute; summed over the sequence group it is the
whole clip's (DDP and FSDP average over every rank, so the training step weights each rank's loss by N).
"""
from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
from torch.utils.hooks import RemovableHandle

from modules.model.attention.attention_processor import WanAttentionProcessor
from modules.model.attention.ulysses import SequenceShards

_PATCH_EMBEDDINGS = ("patch_embedding", "vace_patch_embedding")  # VACE's control tokens follow the video's


def shard_tokens(transformer: torch.nn.Module, shards: SequenceShards) -> list[RemovableHandle]:
    """Run `transformer` sequence-parallel over `shards`' group (after adapters, checkpointing, compile and sharding
    are set up). Returns the hooks' handles."""
    heads = transformer.config.num_attention_heads
    if heads % shards.size:
        raise ValueError(f"sequence parallel over {shards.size} ranks needs the attention heads ({heads}) to divide")
    for name, module in transformer.named_modules():
        if hasattr(module, "norm_q") and hasattr(module, "processor"):
            if not isinstance(module.processor, WanAttentionProcessor):
                raise ValueError(f"sequence parallel: the attention '{name}' runs {type(module.processor).__name__}, "
                                 "not WanAttentionProcessor")
            module.processor._sequence_shards = shards
    patch = tuple(transformer.config.patch_size)
    handles = [transformer.register_forward_pre_hook(_counting(shards, patch), with_kwargs=True),
               transformer.rope.register_forward_hook(_rotary_rows(shards)),
               transformer.proj_out.register_forward_hook(_gathered(shards))]
    handles += [getattr(transformer, name).register_forward_hook(_own_tokens(shards))
                for name in _PATCH_EMBEDDINGS if hasattr(transformer, name)]
    return handles


def _counting(shards: SequenceShards, patch: tuple[int, int, int]):
    def hook(module, args, kwargs):
        if not shards.active:
            return None
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        _, _, frames, height, width = hidden.shape
        shards.cut((frames // patch[0]) * (height // patch[1]) * (width // patch[2]))
        timestep = kwargs.get("timestep", args[1] if len(args) > 1 else None)
        if timestep is None or timestep.ndim != 2:  # one timestep per sample
            return None
        own = timestep[:, shards.start:shards.stop]  # Wan 2.2 TI2V: one per token
        if "timestep" in kwargs:
            return args, {**kwargs, "timestep": own}
        return (args[0], own, *args[2:]), kwargs

    return hook


def _own_tokens(shards: SequenceShards):
    def hook(module, args, output: torch.Tensor):
        if not shards.active:
            return None
        tokens = output.flatten(2)[:, :, shards.start:shards.stop].contiguous()  # (B, C, S_r): frees the whole clip's
        return tokens[..., None, None]

    return hook


def _rotary_rows(shards: SequenceShards):
    def hook(module, args, output):
        if not shards.active:
            return None
        return tuple(table[:, shards.start:shards.stop].contiguous() for table in output)  # (1, S_r, 1, D)

    return hook


def _gathered(shards: SequenceShards):
    def hook(module, args, output: torch.Tensor):
        if not shards.active:
            return None
        return gather_tokens(output, shards)

    return hook


def gather_tokens(local: torch.Tensor, shards: SequenceShards) -> torch.Tensor:
    """(B, S_r, C) on each rank -> (B, S, C) on every rank of the group. Backward: each rank's own rows of the
    gradient, which is whole and the same on every rank (each computes the same loss from the gathered output)."""
    return _GatherTokens.apply(local, shards)


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local: torch.Tensor, shards: SequenceShards) -> torch.Tensor:
        ctx.rows = (shards.start, shards.stop)
        longest = max(shards.lengths)
        padded = torch.nn.functional.pad(local, (0, 0, 0, longest - local.shape[1])).contiguous()
        gathered = funcol.all_gather_single(padded, 0, shards.group)  # (N·B, longest, C), rank-major
        gathered = funcol.wait_tensor(gathered).unflatten(0, (shards.size, local.shape[0]))
        return torch.cat([gathered[rank, :, :count] for rank, count in enumerate(shards.lengths)], dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        start, stop = ctx.rows
        return grad[:, start:stop].contiguous(), None
