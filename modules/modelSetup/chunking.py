"""Smaller working sets inside a transformer block, for more recomputation: `ffn_chunks` and `checkpoint_attention`.

With gradient checkpointing the backward pass of a block first recomputes the whole block and keeps everything its
backward needs: both attentions' float32 norms, rotary and attention tensors and the feed-forward's 4x wider hidden
layer at once. Both options put (non-reentrant, nestable) activation checkpoints inside the block, so only one part's
intermediates are alive at a time, each part being recomputed once more right before its own backward:

- `ffn_chunks: N` runs each block's feed-forward over N slices of the tokens, each under its own checkpoint. Wan's
  FFN is per token (Linear, tanh-GELU, Linear), so the slices give the same rows. Costs about one FFN forward.
- `checkpoint_attention` runs each block's self- and cross-attention under their own checkpoint. Costs about one
  forward of each attention.

Without gradients (validation, samples) the parts run as before (the FFN in slices).
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

_ORIGINAL = "_wan_unsplit_forward"
ATTENTIONS = ("attn1", "attn2", "self_attn", "cross_attn")  # diffusers' Wan blocks, then Animate-2's


def split_blocks(transformer: torch.nn.Module, ffn_chunks: int, checkpoint_attention: bool) -> None:
    """Set both options on every block of `transformer` (off: the modules' own forward again)."""
    for block in getattr(transformer, "blocks", ()):
        _wrap(block.ffn, _sliced if ffn_chunks > 1 else None, ffn_chunks)
        for name in ATTENTIONS:
            if hasattr(block, name):
                _wrap(getattr(block, name), _checkpointed if checkpoint_attention else None)


def _wrap(module: torch.nn.Module, wrapper, *options) -> None:
    original = module.__dict__.pop(_ORIGINAL, None) or module.forward
    if wrapper is None:
        if "forward" in module.__dict__:
            del module.forward  # back to the class's method
        return
    module.__dict__[_ORIGINAL] = original
    module.forward = wrapper(original, *options)


def _checkpointed(forward):
    def checkpointed_forward(*args, **kwargs):
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return checkpointed_forward


def _sliced(forward, chunks: int):
    def sliced_forward(hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if hidden_states.shape[-2] < chunks:
            return forward(hidden_states, *args, **kwargs)
        slices = hidden_states.chunk(chunks, dim=-2)  # (B, L, D): along the tokens
        if torch.is_grad_enabled():
            outputs = [checkpoint(forward, part, *args, use_reentrant=False, **kwargs) for part in slices]
        else:
            outputs = [forward(part, *args, **kwargs) for part in slices]
        return torch.cat(outputs, dim=-2)

    return sliced_forward
