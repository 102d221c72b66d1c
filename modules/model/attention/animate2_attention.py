"""Animate-2's generation self-attention without flex: each generated frame's queries see every generated key plus
the same frame's driving keys. diffusers packs both into one buffer and masks it with a flex `BlockMask` (flex only,
and uncompiled it materialises the whole score matrix); here the two key sets are attended separately, on whatever
backend is set, and the two results merged by their log-sum-exp, which is exactly the softmax over the union:

    out = σ(lse_gen − lse_drv) · o_gen + σ(lse_drv − lse_gen) · o_drv

The LSEs come from a plain matmul in query chunks (differentiable, so gradients are exact on every backend, including
the ones whose kernels return no LSE or no LSE gradient); the outputs from the backend's kernel. Cost: one more QKᵀ.
Frame alignment (diffusers' mask): generated latent frame i ≥ 1 sees driving frame i − 1; frame 0, the reference
image's slot, sees the generated keys only.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (B, L, H, D) x3 -> (B, L, H, D)
_LSE_CHUNK_ELEMENTS = 1 << 26  # scores held at once while computing an LSE (256 MB in float32)


def _accumulation(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)  # float32 for half types, float64 stays


def _chunk_lse(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    acc = _accumulation(query.dtype)
    scores = torch.einsum("blhd,bshd->blhs", query.to(acc), key.to(acc)) * query.shape[-1] ** -0.5
    return torch.logsumexp(scores, dim=-1)


def log_sum_exp(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """(B, L, H) log Σ_s exp(q·k_s / √D), in query chunks; with gradients each chunk's scores are
    recomputed in the backward pass rather than kept."""
    b, _, h, _ = query.shape
    size = max(1, _LSE_CHUNK_ELEMENTS // max(1, b * h * key.shape[1]))
    parts = []
    for chunk in query.split(size, dim=1):
        if torch.is_grad_enabled() and (chunk.requires_grad or key.requires_grad):
            parts.append(checkpoint(_chunk_lse, chunk, key, use_reentrant=False))
        else:
            parts.append(_chunk_lse(chunk, key))
    return torch.cat(parts, dim=1)


def frame_aligned_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, driving_key: torch.Tensor,
                            driving_value: torch.Tensor, frame_tokens: int, attend: Attend) -> torch.Tensor:
    """query/key/value (B, (1 + F)·hw, H, D), the generated tokens (the reference slot, then F frames);
    driving_key/value (B, F·hw, H, D). Returns (B, (1 + F)·hw, H, D) in query's dtype."""
    b, length, h, d = query.shape
    frames = driving_key.shape[1] // frame_tokens
    if length != (frames + 1) * frame_tokens or driving_key.shape[1] != frames * frame_tokens:
        raise ValueError(f"Animate-2 attention: {length} generated and {driving_key.shape[1]} driving tokens at "
                         f"{frame_tokens} a frame; the generated stream must be the driving one plus one leading frame")
    acc = _accumulation(query.dtype)
    out = attend(query, key, value).to(acc)
    lse = log_sum_exp(query, key)
    per_frame = query[:, frame_tokens:].reshape(b * frames, frame_tokens, h, d)
    drv_key = driving_key.reshape(b * frames, frame_tokens, h, d)
    drv_value = driving_value.reshape(b * frames, frame_tokens, h, d)
    drv_out = attend(per_frame, drv_key, drv_value).to(acc).reshape(b, frames * frame_tokens, h, d)
    drv_lse = log_sum_exp(per_frame, drv_key).reshape(b, frames * frame_tokens, h)
    weight = torch.sigmoid(lse[:, frame_tokens:] - drv_lse)[..., None]
    merged = weight * out[:, frame_tokens:] + (1 - weight) * drv_out
    return torch.cat([out[:, :frame_tokens], merged], dim=1).to(query.dtype)


def block_mask_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, driving_key: torch.Tensor,
                         driving_value: torch.Tensor, frame_tokens: int) -> torch.Tensor:
    """The same attention as one masked softmax over [generated | driving] keys (diffusers' block mask, dense): the
    reference the merge is tested against, and nothing else (it holds the whole score matrix)."""
    length, drv_length = query.shape[1], driving_key.shape[1]
    q_frame = torch.arange(length, device=query.device) // frame_tokens
    drv_frame = torch.arange(drv_length, device=query.device) // frame_tokens + 1
    allowed = torch.cat([torch.ones(length, length, dtype=torch.bool, device=query.device),
                         q_frame[:, None] == drv_frame[None, :]], dim=1)
    keys, values = torch.cat([key, driving_key], dim=1), torch.cat([value, driving_value], dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query.transpose(1, 2), keys.transpose(1, 2),
                                                           values.transpose(1, 2), attn_mask=allowed)
    return out.transpose(1, 2)
