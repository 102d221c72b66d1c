"""W8A8 int8 with a Hadamard rotation ("ConvRot"): the math of ComfyUI's `int8_tensorwise` + `convrot` layers.

The format (what ComfyUI's comfy-kitchen reads and computes, `comfy_kitchen/tensor/int8.py`):
- H is the normalised *regular* Hadamard matrix of size g (a power of 4: the Kronecker powers of the 4x4
  regular Hadamard, divided by sqrt(g)); it is symmetric and orthogonal, so H = Hᵀ = H⁻¹.
- A weight W [N, K] is rotated once, block-diagonally in groups of g along K: W_rot = W·diag(H, ..., H)ᵀ, in
  float32 (a bf16 rotation would round every weight before it is quantised), then stored as int8 with one
  float32 scale per output row (amax / 127).
- An activation x [..., K] is rotated per group the same way (x·H), quantised per token (amax / 127), and
  (x·H)(W·Hᵀ)ᵀ = x·Wᵀ, because H·Hᵀ = I: the rotation spreads outliers across each group, so fewer bits are lost.
- The int8 GEMM accumulates in int32 (int64 in the exact CPU emulation), and the epilogue multiplies by the
  token scale times the row scale.

Backward: only the input gradient (the base is frozen), from the dequantised rotated weight in the gradient's
dtype, rotated back — the straight-through gradient of the unquantised linear x·Wᵀ.
"""
from __future__ import annotations

import math

import torch

DEFAULT_GROUP = 256  # every Wan width divides by it; ComfyUI's files use it
INT8_MAX = 127.0

_HADAMARD: dict[tuple[int, torch.dtype, str], torch.Tensor] = {}


def group_size_for(in_features: int, largest: int = DEFAULT_GROUP) -> int | None:
    """The largest power of 4 up to `largest` that divides `in_features` (None below 4): 256 for every Wan width."""
    group = largest
    while group >= 4:
        if in_features % group == 0:
            return group
        group //= 4
    return None


def hadamard(size: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The normalised regular Hadamard matrix of `size` (a power of 4), cached per dtype and device."""
    if size < 4 or math.log(size, 4) % 1:
        raise ValueError(f"a regular Hadamard matrix has a power of 4 as its size, got {size}")
    key = (size, dtype, str(device))
    if key not in _HADAMARD:
        # the 4x4 regular Hadamard (every row and column sums to 2); its Kronecker powers stay regular
        base = torch.ones(4, 4, dtype=torch.float64) - 2 * torch.eye(4, dtype=torch.float64).flip(1)
        matrix = base
        while matrix.shape[0] < size:
            matrix = torch.kron(matrix, base)
        _HADAMARD[key] = (matrix / math.sqrt(size)).to(dtype=dtype, device=device)
    return _HADAMARD[key]


def rotate(x: torch.Tensor, group: int) -> torch.Tensor:
    """x·diag(H, ..., H) along the last dimension, in x's dtype (H is symmetric, so this also rotates back)."""
    shape = x.shape
    grouped = x.reshape(-1, shape[-1] // group, group)
    return torch.matmul(grouped, hadamard(group, x.dtype, x.device)).reshape(shape)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row int8 (round to nearest): (int8 [..., K], float32 scale [..., 1]), scale = amax / 127 computed as
    comfy-kitchen does (the division in x's dtype, an all-zero row scaled by the smallest normal number)."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / INT8_MAX).clamp(min=1e-30)
    divisor = scale.to(x.dtype)
    divisor = torch.where(divisor == 0, torch.full_like(divisor, torch.finfo(x.dtype).tiny), divisor)
    return (x / divisor).round_().clamp_(-128.0, INT8_MAX).to(torch.int8), scale


def quantize_weight(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A Linear weight [N, K] into ConvRot int8: (rotated int8 [N, K], float32 row scales [N, 1])."""
    return quantize_rows(rotate(weight.detach().float(), group))


def dequantize_rotated(qweight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The stored weight in the rotated basis, W_rot ≈ q·scale, in `dtype`."""
    return (qweight.float() * scale.float()).to(dtype)


def dequantize(qweight: torch.Tensor, scale: torch.Tensor, group: int, dtype: torch.dtype) -> torch.Tensor:
    """The weight in the model's own basis, W ≈ (q·scale)·H (rotated back in float32)."""
    return rotate(qweight.float() * scale.float(), group).to(dtype)


def int_matmul(a: torch.Tensor, b_t: torch.Tensor, backend: str) -> torch.Tensor:
    """a [M, K] int8 times b_t [N, K] int8 transposed: the exact integer products, as int32 or int64.

    `emulate`: int64 accumulation (exact for any K; the CPU reference). `int_mm`: torch._int_mm (cuBLASLt's int8
    GEMM, int32 accumulation: exact while K·127·128 < 2³¹, K < 131,000), where its shape rules hold (M > 16,
    K and N multiples of 8 on CUDA); elsewhere the integer values are multiplied in float32 (ComfyUI's own fallback
    for such shapes dequantises too)."""
    if backend == "emulate":
        return a.long() @ b_t.long().T
    if backend != "int_mm":
        raise ValueError(f"unknown int8 GEMM backend {backend!r}")
    m, k = a.shape
    if a.device.type != "cuda" or (m > 16 and k % 8 == 0 and b_t.shape[0] % 8 == 0):
        return torch._int_mm(a, b_t.T)
    return (a.float() @ b_t.float().T).round_().to(torch.int32)


def default_backend(device: torch.device) -> str:
    """torch._int_mm on a GPU; the exact emulation elsewhere (CPU runs are tests and tiny models)."""
    return "int_mm" if device.type == "cuda" else "emulate"


EPILOGUE_BYTES = 256 * 2**20  # the int32/float32 transients of one slice of rows (a video has ~30k tokens)


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, group: int,
                backend: str | None = None) -> torch.Tensor:
    """The W8A8 forward: rotate x per group, quantise per token, int8 GEMM, dequantise, add the bias; x's dtype.
    Rows go through the GEMM and its epilogue in slices, so its int32 and float32 transients stay near
    EPILOGUE_BYTES (whole, 30k tokens x a 13824-wide FFN would be 1.7 GB each)."""
    shape, n = x.shape, qweight.shape[0]
    backend = backend or default_backend(x.device)
    xq, xscale = quantize_rows(rotate(x, group).reshape(-1, shape[-1]))
    row_scale = scale.float().reshape(1, -1)
    out = torch.empty(xq.shape[0], n, dtype=x.dtype, device=x.device)
    step = max(1, EPILOGUE_BYTES // (4 * n))
    for start in range(0, xq.shape[0], step):
        rows = slice(start, start + step)
        out[rows] = (int_matmul(xq[rows], qweight, backend).float() * (xscale[rows] * row_scale)).to(x.dtype)
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out.reshape(*shape[:-1], n)


# Ops of their own, not an autograd.Function: torch.compile keeps each as one opaque call, shaped by its fake (meta)
# function. Traced, the Function's body failed inside dynamo ("lift_tracked_freevar_to_input should not be called on
# root SubgraphTracer", torch 2.13), and a traced backward met the cached Hadamard matrix, a real tensor among fake
# ones. Their implementations serve every device (the fake CUDA device included).
@torch.library.custom_op("wantrainer::int8_convrot_linear", mutates_args=())
def int8_convrot_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                        group: int, backend: str | None) -> torch.Tensor:
    """y = int8_linear(x), differentiable in x (and in the bias if it trains): dx = (dy·W_rot)·H, with W_rot
    dequantised in dy's dtype (the base is frozen: no weight gradient)."""
    return int8_linear(x, qweight, scale, bias, group, backend)


@int8_convrot_linear.register_fake
def _int8_convrot_linear_shape(x, qweight, scale, bias, group, backend):
    return x.new_empty((*x.shape[:-1], qweight.shape[0]))


@torch.library.custom_op("wantrainer::int8_convrot_input_grad", mutates_args=())
def int8_convrot_input_grad(grad_out: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
                            group: int) -> torch.Tensor:
    """dx = (dy·W_rot)·H, W_rot dequantised in dy's dtype."""
    return rotate(grad_out @ dequantize_rotated(qweight, scale, grad_out.dtype), group)


@int8_convrot_input_grad.register_fake
def _int8_convrot_input_grad_shape(grad_out, qweight, scale, group):
    return grad_out.new_empty((*grad_out.shape[:-1], qweight.shape[1]))


def _save_for_backward(ctx, inputs, output) -> None:
    _, qweight, scale, _, group, _ = inputs
    ctx.save_for_backward(qweight, scale)
    ctx.group = group


def _int8_convrot_linear_backward(ctx, grad_out):
    qweight, scale = ctx.saved_tensors
    grad_x = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_x = int8_convrot_input_grad(grad_out, qweight, scale, ctx.group)
    if ctx.needs_input_grad[3]:
        grad_bias = grad_out.reshape(-1, grad_out.shape[-1]).sum(0)
    return grad_x, None, None, grad_bias, None, None


int8_convrot_linear.register_autograd(_int8_convrot_linear_backward, setup_context=_save_for_backward)
