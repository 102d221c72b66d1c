"""A model of a training step's time, to compare plans (memory_plan.py): what each checkpointing policy recomputes,
and what block swap, activation offload and kept blocks under offload copy between host and GPU.

- compute: 3 x the forward's FLOPs (forward, and a backward of about twice it), plus what is run twice: under every
  policy but NONE the feed-forward once more (the lean block's sliced backward), and per checkpointed block its
  attentions and their projections (FULL), all but the self-attention kernel (KEEP_ATTENTION), or both attentions twice
  more (SPLIT_ATTENTION); a kept block recomputes nothing else. FLOPs are counted as benchmarks/gpu_step.py counts them
  (2 per multiply-add; attention 4·L·Lk·D), over the achieved rate `ACHIEVED_TFLOPS`.
- transfers: swapped blocks' frozen weights twice a step (the forward and the backward's recompute), offloaded
  activations out and back, over `HOST_GBPS`. They run on a side stream beside the compute, so a step takes the longer
  of the two.
Only the differences between plans matter; the absolute figures are the H200's.
"""
from __future__ import annotations

import dataclasses

from modules.util.enum import CheckpointPolicy

# The kernels' achieved rate on the 1.3B step, counted FLOPs over time: 42.6 % of 989 TFLOP/s on an H200 (eager,
# docs/performance.md, "GPU: first measurements"). Other cards: not measured; their transfers weigh less against
# slower compute than this models, so the model leans toward fewer transfers there.
ACHIEVED_TFLOPS = 421.0
HOST_GBPS = 25.0  # pinned host <-> GPU copies on PCIe 4.0 x16 (a measured rate is about 25 GB/s); what swap costs
TEXT_TOKENS = 512


@dataclasses.dataclass(frozen=True)
class BlockFlops:
    """One block's forward FLOPs by part, for `tokens` video tokens."""

    self_attention_kernel: float
    self_attention_linear: float
    cross_attention: float  # its kernel and projections (text, and an I2V model's image keys)
    feed_forward: float

    @property
    def forward(self) -> float:
        return self.self_attention_kernel + self.self_attention_linear + self.cross_attention + self.feed_forward

    def recompute(self, policy: CheckpointPolicy) -> float:
        """What a checkpointed block runs again in its backward under `policy`, beyond the feed-forward."""
        attentions = self.self_attention_kernel + self.self_attention_linear + self.cross_attention
        if policy == CheckpointPolicy.KEEP_ATTENTION:
            return attentions - self.self_attention_kernel
        if policy == CheckpointPolicy.SPLIT_ATTENTION:
            return 2 * attentions
        return attentions


def block_flops(tokens: int, dim: int, ffn: int, image_tokens: int = 0) -> BlockFlops:
    context = TEXT_TOKENS + image_tokens
    return BlockFlops(self_attention_kernel=4.0 * tokens * tokens * dim, self_attention_linear=8.0 * dim * dim * tokens,
                      cross_attention=4.0 * dim * dim * tokens + 4.0 * dim * dim * context + 4.0 * tokens * context * dim,
                      feed_forward=4.0 * dim * ffn * tokens)


@dataclasses.dataclass(frozen=True)
class StepTime:
    compute_s: float
    transfer_s: float
    recompute_flops: float  # what the policy runs twice, beyond one forward and backward

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.transfer_s)


def step_time(flops: BlockFlops, layers: int, policy: CheckpointPolicy, kept: int, transfer_bytes: float,
              batch: int = 1) -> StepTime:
    """The modelled step of `layers` blocks under `policy` with `kept` blocks not checkpointed, copying
    `transfer_bytes` between host and GPU."""
    if policy == CheckpointPolicy.NONE:
        recompute = 0.0
    else:
        checkpointed = 0 if policy == CheckpointPolicy.KEEP_ALL_BUT_FFN else layers - kept
        recompute = layers * flops.feed_forward + checkpointed * flops.recompute(policy)
    compute = batch * (3 * layers * flops.forward + recompute) / (ACHIEVED_TFLOPS * 1e12)
    return StepTime(compute, transfer_bytes / (HOST_GBPS * 1e9), batch * recompute)
