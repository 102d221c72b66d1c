"""The lean Wan block's arithmetic (lean_block.py): its modulated norms, its affine norm and its gated residuals as
autograd functions that keep only the half-precision input (and each norm's per-token statistics) for the backward.

diffusers' `WanTransformerBlock` runs this arithmetic in float32 on the whole sequence: `norm1(x.float()) * (1 + scale)
+ shift`, `x.float() + attn * gate` and so on, and autograd keeps every norm's float32 input (tokens x width x 4 bytes,
three a block) and makes float32 copies of the gradients on the way back: at 14B and 32,760 tokens 0.6 GiB a tensor.
Here each function computes the same operations in the same order, in token slices of `slice_bytes` of float32, and
its backward recomputes the cheap parts (the float32 upcast, `1 + scale`, the modulation `table + temb`) slice by slice.
The float32 values are the same, so are the results: values and gradients equal diffusers' bit for bit (rows of a
layer norm, and every element-wise op, do not depend on the other rows; tests/test_lean_block.py). The sums over tokens
(the gradients of a modulation that trains, of an affine norm's weight) run once over the whole sequence, as autograd
runs them: the modulation's on a full-size float32 buffer, the affine norm unsliced when its weight trains.

A modulation vector is `table + temb.float()` (diffusers' `scale_shift_table + temb.float()`, chunked): `table` a
(1, 1, D) slice of the block's float32 table, `temb` (B, 1, D) per sample or (B, L, D) per token (Wan 2.2 TI2V,
SkyReels-V2's diffusion forcing), made per slice and never whole.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def slice_rows(x: torch.Tensor, slice_bytes: int) -> int | None:
    """Tokens per slice of `x` (B, L, D): `slice_bytes` of float32, at least one token; None (the whole sequence)
    while compiling (inductor fuses the arithmetic; a loop over symbolic sizes would specialise the graph) or for
    `slice_bytes` 0."""
    if torch.compiler.is_compiling() or slice_bytes <= 0:
        return None
    return max(1, slice_bytes // (x.shape[0] * x.shape[-1] * 4))


def _spans(length: int, rows: int | None) -> list[slice]:
    if rows is None or rows >= length:
        return [slice(None)]
    return [slice(start, min(start + rows, length)) for start in range(0, length, rows)]


def _per_token(temb: torch.Tensor) -> bool:
    return temb.shape[1] != 1


def _modulation(table: torch.Tensor, temb: torch.Tensor, span: slice) -> torch.Tensor:
    """`table + temb.float()` for the tokens of `span` (per token) or for every token (per sample)."""
    return table + (temb[:, span] if _per_token(temb) else temb).float()


class _ModulationGrad:
    """The gradient of one modulation vector, summed over tokens (and samples) as autograd sums it: a per-token
    vector's on a full-size buffer filled slice by slice; a per-sample one's too where the sequence is sliced, so
    the sum runs once, over the same tensor (bit for bit what autograd's `sum_to` gives)."""

    def __init__(self, x: torch.Tensor, table: torch.Tensor, temb: torch.Tensor, needs: tuple[bool, bool],
                 sliced: bool):
        self.table, self.temb, self.needs = table, temb, needs
        self.full = None
        if any(needs) and (sliced or _per_token(temb)):
            self.full = x.new_empty(x.shape, dtype=torch.float32)
        self.whole = None

    def add(self, span: slice, product: torch.Tensor) -> None:
        if not any(self.needs):
            return
        if self.full is not None:
            self.full[:, span] = product
        else:
            self.whole = product  # one slice: the whole sequence

    def grads(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not any(self.needs):
            return None, None
        product = self.full if self.full is not None else self.whole
        shape = torch.broadcast_shapes(self.table.shape, self.temb.shape)
        d_mod = product.sum_to_size(shape)
        d_table = d_mod.sum_to_size(self.table.shape) if self.needs[0] else None
        d_temb = d_mod.sum_to_size(self.temb.shape).to(self.temb.dtype) if self.needs[1] else None
        return d_table, d_temb


def _rows(t: torch.Tensor, span: slice) -> torch.Tensor:
    """The tokens `span` of `t` in float32, contiguous (the layer norm kernels read their statistics and inputs as
    laid out; a token slice of a batch of several is strided)."""
    return t[:, span].float().contiguous()


def _norm(x: torch.Tensor, eps: float, weight=None, bias=None):
    """(out, mean, rstd) of diffusers' FP32LayerNorm on `x` upcast (F.layer_norm's kernel)."""
    return aten.native_layer_norm(x.float(), [x.shape[-1]], weight, bias, eps)


class ModulatedNorm(torch.autograd.Function):
    """`(layer_norm(x.float()) * (1 + scale) + shift).to(x.dtype)`: diffusers' `norm1` / `norm3` lines."""

    @staticmethod
    def forward(ctx, x, eps: float, rows: int, keep_statistics: bool, table_shift, temb_shift, table_scale,
                temb_scale):
        out = x.new_empty(x.shape)  # contiguous, as the layer norm's output (whatever x's layout)
        spans = _spans(x.shape[1], rows)
        means, rstds = [], []
        for span in spans:
            normed, mean, rstd = _norm(x[:, span], eps)
            scale = _modulation(table_scale, temb_scale, span)
            out[:, span] = normed * (1 + scale) + _modulation(table_shift, temb_shift, span)
            means.append(mean)
            rstds.append(rstd)
        ctx.eps, ctx.rows, ctx.keep = eps, rows, keep_statistics
        statistics = (torch.cat(means, dim=1), torch.cat(rstds, dim=1)) if keep_statistics else ()
        ctx.save_for_backward(x, table_shift, temb_shift, table_scale, temb_scale, *statistics)
        return out

    @staticmethod
    def backward(ctx, d_out):
        x, table_shift, temb_shift, table_scale, temb_scale, *statistics = ctx.saved_tensors
        needs = ctx.needs_input_grad
        spans = _spans(x.shape[1], ctx.rows)
        sliced = len(spans) > 1
        shift = _ModulationGrad(x, table_shift, temb_shift, needs[4:6], sliced)
        scale_grad = _ModulationGrad(x, table_scale, temb_scale, needs[6:8], sliced)
        d_x = x.new_empty(x.shape) if needs[0] else None  # contiguous, as the layer norm's backward gives it
        for span in spans:
            grad = d_out[:, span].float()
            x_part = _rows(x, span)
            if statistics:
                mean, rstd = _rows(statistics[0], span), _rows(statistics[1], span)
                normed = None
            else:
                normed, mean, rstd = _norm(x_part, ctx.eps)
            if d_x is not None:
                scale = _modulation(table_scale, temb_scale, span)
                d_x[:, span] = aten.native_layer_norm_backward(grad * (1 + scale), x_part, [x.shape[-1]], mean, rstd,
                                                               None, None, [True, False, False])[0]
            if any(needs[6:8]):
                if normed is None:
                    normed = _norm(x_part, ctx.eps)[0]
                scale_grad.add(span, grad * normed)
            shift.add(span, grad)
        return (d_x, None, None, None, *shift.grads(), *scale_grad.grads())


class AffineNorm(torch.autograd.Function):
    """`layer_norm(x.float(), weight.float(), bias.float()).to(x.dtype)`: diffusers' `norm2` line (cross_attn_norm).
    Sliced only while the weight and bias are frozen (their gradients are sums over every token)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, rows: int, keep_statistics: bool):
        if (weight is not None and weight.requires_grad) or (bias is not None and bias.requires_grad):
            rows = None
        out = x.new_empty(x.shape)
        w = weight.float() if weight is not None else None
        b = bias.float() if bias is not None else None
        means, rstds = [], []
        for span in _spans(x.shape[1], rows):
            normed, mean, rstd = _norm(x[:, span], eps, w, b)
            out[:, span] = normed
            means.append(mean)
            rstds.append(rstd)
        ctx.eps, ctx.rows, ctx.has = eps, rows, (weight is not None, bias is not None)
        statistics = (torch.cat(means, dim=1), torch.cat(rstds, dim=1)) if keep_statistics else ()
        ctx.save_for_backward(x, *(t for t in (weight, bias) if t is not None), *statistics)
        return out

    @staticmethod
    def backward(ctx, d_out):
        x, *rest = ctx.saved_tensors
        weight = rest.pop(0) if ctx.has[0] else None
        bias = rest.pop(0) if ctx.has[1] else None
        needs = ctx.needs_input_grad
        w = weight.float() if weight is not None else None
        b = bias.float() if bias is not None else None
        mask = [needs[0], needs[1] and weight is not None, needs[2] and bias is not None]
        d_x = x.new_empty(x.shape) if needs[0] else None
        d_weight = d_bias = None
        for span in _spans(x.shape[1], ctx.rows):
            x_part = _rows(x, span)
            mean, rstd = (_rows(rest[0], span), _rows(rest[1], span)) if rest else _norm(x_part, ctx.eps, w, b)[1:]
            dx, dw, db = aten.native_layer_norm_backward(_rows(d_out, span), x_part, [x.shape[-1]], mean, rstd,
                                                         w, b, mask)
            if d_x is not None:
                d_x[:, span] = dx
            d_weight, d_bias = dw, db  # only when unsliced (a trained weight)
        d_weight = d_weight.to(weight.dtype) if d_weight is not None else None
        d_bias = d_bias.to(bias.dtype) if d_bias is not None else None
        return d_x, d_weight, d_bias, None, None, None


class GatedResidual(torch.autograd.Function):
    """`(x.float() + a.float() * gate).to(x.dtype)`: diffusers' residual lines after self-attention and the
    feed-forward. Keeps `a` only while the gate trains (for the gate's gradient), nothing of `x`."""

    @staticmethod
    def forward(ctx, x, a, rows: int, table_gate, temb_gate):
        out = torch.empty_like(x)  # in x's layout, as element-wise ops lay out `x.float() + ...`
        for span in _spans(x.shape[1], rows):
            out[:, span] = x[:, span].float() + a[:, span].float() * _modulation(table_gate, temb_gate, span)
        gate_trains = ctx.needs_input_grad[3] or ctx.needs_input_grad[4]
        ctx.rows, ctx.a_dtype = rows, a.dtype
        ctx.save_for_backward(a if gate_trains else None, table_gate, temb_gate)
        return out

    @staticmethod
    def backward(ctx, d_out):
        a, table_gate, temb_gate = ctx.saved_tensors
        needs = ctx.needs_input_grad
        spans = _spans(d_out.shape[1], ctx.rows)
        gate = _ModulationGrad(d_out, table_gate, temb_gate, needs[3:5], len(spans) > 1)
        d_a = torch.empty_like(d_out, dtype=ctx.a_dtype) if needs[1] else None  # laid out as `grad * gate`
        for span in spans:
            grad = d_out[:, span].float()
            if d_a is not None:
                d_a[:, span] = grad * _modulation(table_gate, temb_gate, span)
            if a is not None:
                gate.add(span, grad * a[:, span])
        # x's gradient: d_out upcast and cast back to x's dtype (the output's), the same values
        return (d_out if needs[0] else None), d_a, None, *gate.grads()
