"""Stand-ins for the attention kernels a GPU runs behind diffusers' dispatcher, asserting what the real ones accept,
and a CPU that casts as CUDA autocast does where it matters to attention.

Each stand-in checks its kernel's input contract, then computes the attention with torch's math SDPA in the inputs'
own dtype (real numbers, a backward pass), so the project's training step and samplers run through them:
- `flash_attn_func` (flash-attn 2, flash_attn_interface.py and csrc/flash_attn/flash_api.cpp `mha_fwd`): q fp16 or
  bf16 ("FlashAttention only support fp16 and bf16 data type"), k and v of q's dtype ("query and key must have the
  same dtype"), (batch, seqlen, nheads, headdim), head dim at most 256, k/v heads dividing q's, last dimension
  contiguous (the python wrapper's `maybe_contiguous` makes it so; the kernel checks it).
- `flex_attention` (torch.nn.attention.flex_attention): 4-D (batch, heads, seqlen, headdim), q/k/v of one dtype
  (torch 2.5-2.9's `_validate_sdpa_input`; every version's backward: "Backward pass with mixed query, key, and value
  dtype is not supported"), same heads unless GQA, same embedding dimension.
- `sageattn` (SageAttention 2, core.py): fp16 or bf16 ("Input tensors must be in dtype of torch.float16 or
  torch.bfloat16"), one dtype ("All tensors must have the same dtype."), head dim at most 128 ("Unsupported
  head_dim"), last dimension contiguous ("Last dim of qkv must be contiguous."), layout "NHD" or "HND".
Each also requires q, k and v on one device (the real ones: on CUDA; here the CPU).

`cuda_autocast_norms` gives the CPU CUDA autocast's float32 rule for `rms_norm` (on CUDA's float32 list, not on the
CPU's): Wan's q/k RMSNorm then returns float32 under autocast as on a GPU, which is what makes q/k and v differ.
"""
from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F

LOW_PRECISION = (torch.float16, torch.bfloat16)


class KernelContractError(AssertionError):
    """An input the real kernel refuses."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise KernelContractError(message)


def _one_device_and_dtype(q, k, v, what: str) -> None:
    _require(q.device == k.device == v.device, f"{what}: q, k, v on different devices")
    _require(q.dtype == k.dtype == v.dtype, f"{what}: q, k, v of different dtypes ({q.dtype}, {k.dtype}, {v.dtype})")


def _math(q, k, v, scale, layout_to_bhsd: bool):
    """Attention in the inputs' dtype by torch's math kernel (no autocast: the stand-in is the kernel)."""
    if layout_to_bhsd:
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    with torch.autocast(q.device.type, enabled=False), torch.nn.attention.sdpa_kernel(
            torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, scale=scale)
    return out.transpose(1, 2) if layout_to_bhsd else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    _require(q.dtype in LOW_PRECISION, f"flash_attn_func: FlashAttention only support fp16 and bf16 data type, "
                                       f"got q {q.dtype}")
    _one_device_and_dtype(q, k, v, "flash_attn_func")
    _require(q.dim() == k.dim() == v.dim() == 4, "flash_attn_func: (batch, seqlen, nheads, headdim) tensors")
    _require(q.shape[-1] <= 256, "flash_attn_func: head dimension at most 256")
    _require(q.shape[2] % k.shape[2] == 0 and k.shape[:3] == v.shape[:3], "flash_attn_func: k/v heads and shape")
    q, k, v = (t.contiguous() if t.stride(-1) != 1 else t for t in (q, k, v))  # the wrapper's maybe_contiguous
    _require(not causal and not return_attn_probs, "flash_attn_func: the stand-in covers what Wan calls")
    return _math(q, k, v, softmax_scale, layout_to_bhsd=True)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, **_):
    _one_device_and_dtype(query, key, value, "flex_attention")
    _require(query.dim() == key.dim() == value.dim() == 4, "flex_attention: query, key, and value must be 4D")
    _require(query.size(-1) == key.size(-1), "flex_attention: query and key of one embedding dimension")
    _require(enable_gqa or query.size(-3) == key.size(-3), "flex_attention: same number of heads")
    _require(score_mod is None and block_mask is None and not return_lse,
             "flex_attention: the stand-in covers what Wan calls (no mask)")
    return _math(query, key, value, scale, layout_to_bhsd=False)


def sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, return_lse=False, **_):
    _require(q.dtype in LOW_PRECISION, f"sageattn: Input tensors must be in dtype of torch.float16 or "
                                       f"torch.bfloat16, got q {q.dtype}")
    _one_device_and_dtype(q, k, v, "sageattn")
    _require(tensor_layout in ("NHD", "HND"), f"sageattn: layout {tensor_layout!r}")
    _require(q.size(-1) <= 128, f"sageattn: Unsupported head_dim: {q.size(-1)}")
    _require(all(t.stride(-1) == 1 for t in (q, k, v)), "sageattn: Last dim of qkv must be contiguous.")
    _require(not is_causal and not return_lse, "sageattn: the stand-in covers what Wan calls")
    return _math(q, k, v, sm_scale, layout_to_bhsd=tensor_layout == "NHD")


@contextlib.contextmanager
def kernel_stand_ins():
    """The stand-ins where diffusers' dispatcher calls the kernels (its module globals), the packages counted as
    installed, and cuDNN's `sdpa_kernel` choice left to the CPU (cuDNN runs torch's SDPA, whose autocast cast is
    the contract: the kernel restriction is all the CPU cannot follow)."""
    from diffusers.models import attention_dispatch as dispatch

    real_flex = torch.nn.attention.flex_attention
    flex_module = types.SimpleNamespace(flex_attention=flex_attention, BlockMask=real_flex.BlockMask,
                                        create_block_mask=real_flex.create_block_mask)
    real_sdpa_kernel = torch.nn.attention.sdpa_kernel

    def any_cpu_kernel(backends, set_priority=False):
        wanted = backends if isinstance(backends, list) else [backends]
        if wanted == [torch.nn.attention.SDPBackend.CUDNN_ATTENTION]:
            return contextlib.nullcontext()
        return real_sdpa_kernel(backends, set_priority)

    saved = []

    def patch(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    patch(dispatch, "flash_attn_func", flash_attn_func)
    patch(dispatch, "flex_attention", flex_module)
    patch(dispatch, "sageattn", sageattn)
    patch(dispatch, "_CAN_USE_FLASH_ATTN", True)
    patch(dispatch, "_CAN_USE_SAGE_ATTN", True)
    patch(torch.nn.attention, "sdpa_kernel", any_cpu_kernel)
    # set_attention_backend also sets diffusers' process-wide default: what later models without one would use
    patch(dispatch._AttentionBackendRegistry, "_active_backend", dispatch._AttentionBackendRegistry._active_backend)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


@contextlib.contextmanager
def cuda_autocast_norms():
    """`F.rms_norm` under CPU autocast as under CUDA autocast: input and weight cast to float32, run without
    autocast (its float32 policy). Everything else keeps the CPU's rules."""
    original = F.rms_norm

    def rms_norm(input, normalized_shape, weight=None, eps=None):
        if not torch.is_autocast_enabled(input.device.type):
            return original(input, normalized_shape, weight, eps)
        with torch.autocast(input.device.type, enabled=False):
            return original(input.float(), normalized_shape, None if weight is None else weight.float(), eps)

    F.rms_norm = rms_norm
    try:
        yield
    finally:
        F.rms_norm = original
