"""`checkpointing`: what each transformer block keeps for its backward pass, set up in one place.

diffusers calls every block under gradient checkpointing through the transformer's `_gradient_checkpointing_func`
(block, *args). `BlockCheckpoint` is that function for every policy:
- a kept block (the first `kept_blocks`, or every block under KEEP_ALL_BUT_FFN) runs as it is: autograd keeps what it
  saves, except the lean block's feed-forward, which keeps only its input and runs again in token slices in its own
  backward (lean_ffn.py). That is what a selective checkpoint saving every op but the feed-forward's would keep,
  without a dispatch mode on every op;
- a checkpointed block runs under torch's non-reentrant checkpoint (FULL, SPLIT_ATTENTION), with KEEP_ATTENTION under
  torch's selective activation checkpoint keeping the fused self-attention kernels' outputs (kept_attention.py).

The forward computes the same ops on the same inputs under every policy and a recompute gives back the forward's
values, so the loss and every gradient are those of full checkpointing bit for bit (tests/test_checkpoint_policy.py).
Swapped blocks (block swap) must be checkpointed: autograd would keep a kept block's frozen weights.
"""
from __future__ import annotations

import functools
import logging

import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from modules.config.train_config import TrainConfig
from modules.modelSetup.kept_attention import KeptAttention
from modules.util.enum import CheckpointPolicy
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


class BlockCheckpoint:
    """The checkpoint function a transformer's blocks run under (diffusers' `_gradient_checkpointing_func`)."""

    takes_keywords = True  # Animate-2's blocks are called with keywords (model/animate2.py leaves this one in place)

    def __init__(self, kept: list[torch.nn.Module], keep_attention: bool):
        self.kept = {id(block) for block in kept}
        self.attention = KeptAttention() if keep_attention else None
        self.checked = False  # whether the setup looked at `matched` after a first step

    @property
    def matched(self) -> int:
        """Self-attention kernels kept so far under KEEP_ATTENTION (0: the backend's kernel is not torch's)."""
        return self.attention.matched if self.attention is not None else 0

    def __call__(self, block, *args, **kwargs):
        if id(block) in self.kept:
            return block(*args, **kwargs)
        if self.attention is not None:
            context = functools.partial(create_selective_checkpoint_contexts, self.attention.policy)
            return checkpoint(block.__call__, *args, use_reentrant=False, context_fn=context, **kwargs)
        return checkpoint(block.__call__, *args, use_reentrant=False, **kwargs)


def kept_block_count(config: TrainConfig, layers: int) -> int:
    """How many of `layers` blocks keep their activations (not checkpointed) under `config`'s policy."""
    policy = config.checkpointing.resolved()
    if policy == CheckpointPolicy.KEEP_ALL_BUT_FFN:
        return layers
    if policy in (CheckpointPolicy.FULL, CheckpointPolicy.KEEP_ATTENTION):
        return min(config.checkpointing.kept_blocks, layers)
    return 0


def apply_checkpoint_policy(transformer: torch.nn.Module, config: TrainConfig) -> BlockCheckpoint | None:
    """Set `config`'s checkpointing policy on `transformer` (None under NONE: diffusers' plain forward, nothing
    checkpointed). The kept blocks are the first ones: block swap's are the last."""
    policy = config.checkpointing.resolved()
    if policy == CheckpointPolicy.NONE:
        transformer.disable_gradient_checkpointing()
        return None
    blocks = list(getattr(transformer, "blocks", ()))
    kept = kept_block_count(config, len(blocks))
    unswapped = len(blocks) - config.blocks_to_swap
    if config.blocks_to_swap and kept > unswapped:
        raise UserError(f"config key 'checkpointing.kept_blocks' is {kept}, but with blocks_to_swap "
                        f"{config.blocks_to_swap} only the first {unswapped} of {len(blocks)} blocks can keep their "
                        "activations (a swapped block's weights must leave): lower one of them")
    function = BlockCheckpoint(blocks[:kept], keep_attention=policy == CheckpointPolicy.KEEP_ATTENTION)
    transformer.enable_gradient_checkpointing(gradient_checkpointing_func=function)
    if kept:
        logger.info("checkpointing %s: %d of %d blocks keep their activations, the rest are checkpointed", policy.name,
                    kept, len(blocks))
    return function
