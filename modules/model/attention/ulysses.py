"""Ulysses sequence parallelism inside self-attention, on torch's functional all-to-all.

Outside attention each of the N ranks of a sequence group holds 1/N of a clip's tokens (`SequenceShards.lengths`:
a sequence that does not divide goes to the first ranks one token more, as `torch.tensor_split` cuts). Self-attention
needs every token: q, k and v go through one all-to-all each that trades tokens for heads, (B, S/N, H, D) ->
(B, S, H/N, D), the kernel runs on whole sequences of H/N heads (any backend of diffusers' dispatcher, with its own
backward), and one all-to-all trades back. `all_to_all_single_autograd` is differentiable (its backward is the
reverse all-to-all) and takes uneven split sizes, so no token is padded and no mask is needed: the numbers are those
of one process up to float32 round-off. Cross-attention needs no communication: each rank's query shard attends to
the whole text (and CLIP) keys, which every rank holds.

diffusers' own context parallelism (`ContextParallelConfig`, `TemplatedUlyssesAttention`) was the first choice; it
does not fit training here: its uneven path ("Ulysses anything") has no backward, its even path would need padding
and a key mask (which rules out flash-attn) and re-runs the whole attention forward in its NATIVE backward.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol


def token_counts(total: int, parts: int) -> tuple[int, ...]:
    """How many of `total` tokens each of `parts` ranks holds: `torch.tensor_split`'s cut (the first total % parts
    ranks one more)."""
    base, extra = divmod(total, parts)
    return tuple(base + (index < extra) for index in range(parts))


@dataclasses.dataclass
class SequenceShards:
    """This rank's place in its sequence group, shared by the transformer's hooks and its attention processors."""

    group: dist.ProcessGroup
    size: int  # N, the ranks sharing one clip
    rank: int  # this rank's index in the group: it holds the rank-th slice of the tokens
    lengths: tuple[int, ...] = ()  # tokens per rank of the clip in flight (set as the transformer's forward starts)
    active: bool = True  # off: every rank runs whole sequences alone (samples on rank 0)

    def cut(self, total: int) -> None:
        self.lengths = token_counts(total, self.size)

    @property
    def start(self) -> int:
        return sum(self.lengths[: self.rank])

    @property
    def stop(self) -> int:
        return self.start + self.lengths[self.rank]


def ulysses_attention(attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                      query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      shards: SequenceShards) -> torch.Tensor:
    """`attend` (B, S, h, D) x3 -> (B, S, h, D) over whole sequences, from and back to this rank's token shard:
    (B, S/N, H, D) in, (B, S/N, H, D) out."""
    if query.shape[1] != shards.lengths[shards.rank] or key.shape[1] != query.shape[1]:
        raise RuntimeError(f"sequence parallel: this rank holds {query.shape[1]} query and {key.shape[1]} key tokens, "
                           f"its shard is {shards.lengths[shards.rank]} of {sum(shards.lengths)}")
    query, key, value = (_tokens_for_heads(x, shards) for x in (query, key, value))
    return _heads_for_tokens(attend(query, key, value), shards)


def _tokens_for_heads(x: torch.Tensor, shards: SequenceShards) -> torch.Tensor:
    """(B, S_r, H, D) -> (B, S, H/N, D): rank j receives the j-th group of heads of every rank's tokens."""
    batch, local, heads, dim = x.shape
    n = shards.size
    # (N, S_r, B, H/N, D): the first dimension is the destination rank
    send = x.reshape(batch, local, n, heads // n, dim).permute(2, 1, 0, 3, 4).reshape(n * local, batch, heads // n, dim)
    received = funcol.all_to_all_single_autograd(send.contiguous(), list(shards.lengths), [local] * n, shards.group)
    return received.permute(1, 0, 2, 3)  # (S, B, H/N, D) in rank order = token order -> (B, S, H/N, D)


def _heads_for_tokens(x: torch.Tensor, shards: SequenceShards) -> torch.Tensor:
    """(B, S, H/N, D) -> (B, S_r, H, D): the reverse exchange."""
    batch, _, group_heads, dim = x.shape
    n, local = shards.size, shards.lengths[shards.rank]
    send = x.permute(1, 0, 2, 3).contiguous()  # (S, B, H/N, D): rank j's tokens go to rank j
    received = funcol.all_to_all_single_autograd(send, [local] * n, list(shards.lengths), shards.group)
    # (N, S_r, B, H/N, D), the first dimension the head group -> (B, S_r, H, D)
    return received.reshape(n, local, batch, group_heads, dim).permute(2, 1, 0, 3, 4).reshape(
        batch, local, n * group_heads, dim)
