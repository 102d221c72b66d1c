"""A per-token function run without autograd in the forward pass and again, a token slice at a time, in its backward:
what a non-reentrant activation checkpoint does, with the recompute's working set one slice's.

`sliced_recompute(fn, x, extras, params, slices)` returns `fn(x, *extras)` for `x` (B, L, ...) and per-token `extras`
(L along dim 1, sliced with `x`, never given gradients: rotary tables), keeping `x` and the extras for the backward.
The backward runs `fn` on each slice under autograd, under the forward's autocast and (`dropout`) its random streams,
and returns the gradients of `x` and of `params` (the trained tensors `fn` reads: a parameter's gradient is then the sum
of the slices', the same terms in another order than autograd's sum over the whole sequence; one slice gives autograd's
bit for bit). `fn` must treat tokens independently (norms over the feature dimension, projections, element-wise ops).

`skip_in_recompute`: inside a backward pass (a block's checkpoint recompute) the forward keeps `x` but computes nothing
and returns `x`'s values (detached), for a `fn` whose output has `x`'s shape and a caller that knows nothing the
recompute keeps depends on that output.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch


def in_backward() -> bool:
    """Whether autograd is running a backward pass (e.g. a checkpointed block is being recomputed)."""
    task_id = getattr(torch._C, "_current_graph_task_id", None)  # private; without it: never
    return task_id is not None and task_id() != -1


def spans(length: int, slices: int) -> list[slice]:
    """`slices` (at most `length`) contiguous token ranges of about equal size covering 0..length."""
    size = -(-length // max(1, min(slices, length)))
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


class _RunState:
    """What the backward's recompute must run under, as the forward ran: autocast and, for dropout, the random
    streams (CPU and the device's)."""

    def __init__(self, x: torch.Tensor, dropout: bool):
        self.device = x.device
        self.autocast = [(kind, torch.get_autocast_dtype(kind)) for kind in sorted({x.device.type, "cpu"})
                         if torch.is_autocast_enabled(kind)]
        self.rng = None
        if dropout:
            self.rng = (torch.get_rng_state(), torch.cuda.get_rng_state(x.device) if x.is_cuda else None)

    @contextlib.contextmanager
    def restored(self):
        with contextlib.ExitStack() as stack:
            for kind, dtype in self.autocast:
                stack.enter_context(torch.autocast(kind, dtype=dtype))
            if self.rng is not None:
                cuda = self.rng[1] is not None
                stack.enter_context(torch.random.fork_rng(devices=[self.device] if cuda else [],
                                                          device_type=self.device.type))
                torch.set_rng_state(self.rng[0])
                if cuda:
                    torch.cuda.set_rng_state(self.rng[1], self.device)
            yield


@dataclasses.dataclass(frozen=True)
class _Plan:
    fn: object
    slices: int
    extras: int  # how many per-token tensors follow x
    skip_in_recompute: bool
    dropout: bool


class _SlicedRecompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: _Plan, x, *rest):
        extras, params = rest[:plan.extras], rest[plan.extras:]
        ctx.plan, ctx.params, ctx.state = plan, params, _RunState(x, plan.dropout)
        ctx.save_for_backward(x, *extras)
        if plan.skip_in_recompute and in_backward():
            # no op that a selective checkpoint would count (it ignores detach): the recompute's op sequence
            # stays the forward's up to here, and the skipped ops come last in the block
            return x.detach()
        # detached: a view taken under no_grad of a tensor that requires grad still says requires_grad, without a
        # grad_fn, which module hooks (torch's ModuleTracker under FlopCounterMode) cannot hook
        x_, extras_ = x.detach(), [e.detach() for e in extras]
        with torch.no_grad():
            parts = [plan.fn(x_[:, span], *(e[:, span] for e in extras_)) for span in spans(x.shape[1], plan.slices)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, d_out):
        plan, params = ctx.plan, ctx.params
        x, *extras = ctx.saved_tensors
        needs_x = ctx.needs_input_grad[1]
        trained = [i for i in range(len(params)) if ctx.needs_input_grad[2 + plan.extras + i]]
        d_x = x.new_empty(x.shape) if needs_x else None  # contiguous, as a projection's or a norm's backward gives it
        d_params: list[torch.Tensor | None] = [None] * len(params)
        with torch.enable_grad(), ctx.state.restored():
            for span in spans(x.shape[1], plan.slices):
                leaf = x[:, span].detach().requires_grad_(needs_x)
                # fn sees a view of the leaf, not the leaf: module hooks on fn's input (torch's ModuleTracker under
                # FlopCounterMode) hook a node of the graph, which autograd.grad supports for non-leaves only
                part = leaf.view_as(leaf) if needs_x else leaf
                out = plan.fn(part, *(e[:, span] for e in extras))
                inputs = ([leaf] if needs_x else []) + [params[i] for i in trained]
                grads = list(torch.autograd.grad(out, inputs, d_out[:, span], allow_unused=True))
                if needs_x:
                    d_x[:, span] = grads.pop(0)
                for index, grad in zip(trained, grads):
                    if grad is not None:
                        d_params[index] = grad if d_params[index] is None else d_params[index] + grad
        return (None, d_x, *([None] * plan.extras), *d_params)


def sliced_recompute(fn, x: torch.Tensor, extras: tuple[torch.Tensor, ...] = (), params=(), slices: int = 1,
                     skip_in_recompute: bool = False, dropout: bool = False) -> torch.Tensor:
    """`fn(x, *extras)`, recomputed in `slices` token slices in the backward (see the module doc)."""
    plan = _Plan(fn, max(1, slices), len(extras), skip_in_recompute, dropout)
    return _SlicedRecompute.apply(plan, x, *extras, *params)
