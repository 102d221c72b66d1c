"""The self-attention processor of Animate-2's blocks: diffusers' `WanAnimate2AttnProcessor` (same projections, norms,
float64 rotary and K/V cache of pre-rotary driving keys) with the generation pass's flex block mask replaced by the
log-sum-exp merge of `animate2_attention.frame_aligned_attention`, so it runs on every attention backend, trains (its
gradients reach the driving pass through the cached K/V) and works under gradient checkpointing. q, k and v reach
each kernel in one dtype, as `attention_processor.WanAttentionProcessor` does for Wan's other blocks.

Unlike diffusers' processor it takes whole streams only: the generated stream is the driving one plus the reference
image's leading latent frame, at the same resolution (a training clip, or one sampling segment of the full length).
"""
from __future__ import annotations

import torch
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.transformers.transformer_wan_animate_2 import _get_qkv_projections, rope_apply

from modules.model.attention.animate2_attention import frame_aligned_attention
from modules.model.attention.attention_processor import compute_dtype


class Animate2AttentionProcessor:
    _attention_backend = None
    _parallel_config = None

    def _attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return dispatch_attention_fn(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     backend=self._attention_backend, parallel_config=self._parallel_config)

    def __call__(self, attn, hidden_states: torch.Tensor, rotary_emb: torch.Tensor, grid_sizes: torch.Tensor,
                 kv_cache, kv_cache_mode: str, rope_stride: int = 1, reference_rotary_emb: torch.Tensor | None = None,
                 reference_grid_sizes: torch.Tensor | None = None, reference_rope_stride: int = 1,
                 attention_mask=None, origin_latent_frames: int | None = None,
                 origin_latent_hw: int | None = None) -> torch.Tensor:
        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        query = attn.norm_q(query).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(key).unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        dtype = compute_dtype(value)
        if kv_cache_mode == "extract":  # the driving pass: its keys are cached before the rotary, with gradients
            kv_cache.store(key, value)
        rotated_q = rope_apply(query, grid_sizes, rotary_emb, rope_stride).to(dtype)
        rotated_k = rope_apply(key, grid_sizes, rotary_emb, rope_stride).to(dtype)
        value = value.to(dtype)
        if kv_cache_mode == "extract":
            out = self._attend(rotated_q, rotated_k, value)
        elif kv_cache_mode == "cached":
            driving_key, driving_value = kv_cache.get()
            driving_key = rope_apply(driving_key, reference_grid_sizes, reference_rotary_emb,
                                     reference_rope_stride).to(dtype)
            frames, height, width = grid_sizes[0].tolist()
            drv_frames, drv_height, drv_width = reference_grid_sizes[0].tolist()
            if (height, width) != (drv_height, drv_width) or frames != drv_frames + 1:
                raise ValueError(f"Animate-2: a generated grid of {frames}x{height}x{width} for a driving grid of "
                                 f"{drv_frames}x{drv_height}x{drv_width}; it must be one frame longer, same size")
            out = frame_aligned_attention(rotated_q, rotated_k, value, driving_key, driving_value.to(dtype),
                                          height * width, self._attend)
        else:
            raise ValueError(f"kv_cache_mode must be 'extract' or 'cached', got {kv_cache_mode!r}")
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def install(transformer: torch.nn.Module) -> None:
    """Our processor on every Animate-2 self-attention (backend and parallel config kept); its cross-attention keeps
    diffusers' processor, which any backend runs. Other transformers are left as they are."""
    for module in transformer.modules():
        if type(module).__name__ != "WanAnimate2Attention" or module.is_cross_attention:
            continue
        if isinstance(module.processor, Animate2AttentionProcessor):
            continue
        ours = Animate2AttentionProcessor()
        ours._attention_backend = getattr(module.processor, "_attention_backend", None)
        ours._parallel_config = getattr(module.processor, "_parallel_config", None)
        module.set_processor(ours)
