"""`checkpointing.policy: KEEP_ATTENTION`: gradient checkpointing that keeps each block's self-attention output from the forward pass
instead of recomputing it in the backward pass.

Under gradient checkpointing the backward pass of a block first runs the block's forward again, self-attention
included; at Wan's sequence lengths that kernel is the most expensive part of the recompute (on an H200, a 1.3B step at
832×480×81 spends ~0.34 of its 2.75 s in the recomputed attention forwards). torch's selective activation checkpoint
(`create_selective_checkpoint_contexts`) marks the fused attention kernels as must-save: the forward's outputs (the
attention output and its log-sum-exp) are kept, and the recompute takes them instead of running the kernel again.
Values and gradients are those of plain checkpointing bit for bit (the same kernel's outputs for the same inputs);
memory grows by each block's self-attention output (tokens × width in the compute dtype, plus a float32 log-sum-exp
per head and token) for every checkpointed block until its backward.

Only self-attention is kept (query and key of the same shape): cross-attention over 512 text tokens is cheap to
recompute. What is matched is torch's own fused SDPA kernels (flash, cuDNN, memory-efficient, the CPU's flash); other
kernels (flash-attn, flex) are recomputed as before, which `KeptAttention.matched` lets the setup report.
The checkpoint function itself is checkpoint_policy.BlockCheckpoint.
"""
from __future__ import annotations

from torch.utils.checkpoint import CheckpointPolicy

SDPA_KERNELS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
                "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu")


def is_self_attention_kernel(op, args) -> bool:
    """One of torch's fused SDPA kernels called with a query and key of the same shape."""
    name = getattr(op, "__name__", str(op)).split(".")[0]
    return name in SDPA_KERNELS and len(args) > 1 and tuple(args[0].shape) == tuple(args[1].shape)


class KeptAttention:
    """The selective checkpoint's policy: the self-attention kernels' outputs saved, everything else recomputed."""

    def __init__(self):
        self.matched = 0  # self-attention kernels kept so far (0 after a step: the backend's kernel is not torch's)

    def policy(self, ctx, op, *args, **kwargs) -> CheckpointPolicy:
        if is_self_attention_kernel(op, args):
            if not ctx.is_recompute:
                self.matched += 1
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
