"""The lean block's feed-forward under gradient checkpointing: run without autograd in the forward pass, skipped by the
block's recompute, and run again a token slice at a time in its own backward (util/sliced_recompute.py).

Under gradient checkpointing a block runs its feed-forward twice: in the forward pass (nothing kept) and in the
backward's recompute, which keeps its whole 4x-wide hidden layer (up-projection output, GELU output, and in the
backward their gradients and the adapters' partial sums: at 1.3B and 32,760 tokens five 0.55 GiB tensors at once).
The block's output is all the recompute would use the feed-forward's result for, and nothing the backward needs
depends on it while the residual's gate is frozen (LoRA), so the recompute skips it. Its backward then runs it again
from its bf16 input, slice by slice, and hands autograd the input's and the trained parameters' gradients: the same two
feed-forward passes as before, the hidden layer of one slice at a time. With one slice the gradients are autograd's bit
for bit; with several, a parameter's gradient is the sum of the slices' (the same terms in another order, as
`ffn_chunks` gives them).
"""
from __future__ import annotations

import torch

from modules.util.sliced_recompute import sliced_recompute

_ORIGINAL = "_wan_unsplit_forward"  # chunking.py's name for a module's forward before `ffn_chunks` wrapped it


def hidden_width(ffn: torch.nn.Module) -> int:
    """The feed-forward's hidden width (its widest projection: diffusers' `net.0.proj`, Animate-2's `0`)."""
    return max((m.out_features for m in ffn.modules() if isinstance(getattr(m, "out_features", None), int)),
               default=0)


def _has_dropout(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 and m.training for m in module.modules())


def backward_ffn(ffn: torch.nn.Module, x: torch.Tensor, slice_bytes: int, min_slices: int = 1) -> torch.Tensor:
    """The feed-forward of a checkpointed lean block on `x` (B, L, D), its backward in token slices whose hidden
    layer holds about `slice_bytes` (at least `min_slices`: `ffn_chunks`, whose own per-slice checkpoints this
    replaces: they would recompute each slice once more)."""
    forward = ffn.__dict__.get(_ORIGINAL) or ffn.forward
    params = [p for p in ffn.parameters() if p.requires_grad]
    hidden = x.shape[0] * x.shape[1] * hidden_width(ffn) * x.element_size()
    slices = max(min_slices, -(-hidden // slice_bytes) if slice_bytes > 0 else 1)
    return sliced_recompute(forward, x, params=params, slices=slices, skip_in_recompute=True,
                            dropout=_has_dropout(ffn))
