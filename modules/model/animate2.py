"""Animate-2's two passes through one DiT, the one place the training step and the sampler call it: first the
driving stream (its latents with their own mask and condition channels, CLIP of driving frame 0, the driving prompt;
diffusers runs it at a fixed clean-end timestep and a RoPE offset) fills a K/V cache; then the generated stream (the
reference image's latent slot, then the noisy target frames) attends to its own keys and the same frame's cached
driving keys (`model/attention/animate2_processor.py`). Nothing is detached: both passes carry gradient.

The passes are diffusers' `WanAnimate2Transformer3DModel.forward` itself with our self-attention processor installed
(`util/animate2_processor.install`), so embedding, modulation, rotary offsets, the unconditional branch's skipped
block and gradient checkpointing stay diffusers'; the generation pass builds no flex block mask.
"""
from __future__ import annotations

import dataclasses

import torch
from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache, WanAnimate2KVLayerCache
from torch.utils.checkpoint import checkpoint

from modules.model.attention.animate2_processor import install


@dataclasses.dataclass
class DrivingStream:
    """What a batch brings for Animate-2's driving pass (`ConditionPayload.driving`): latents (B, C, F, h, w), their
    mask and condition channels (B, 4 + C, F, h, w), the driving caption's embeddings (B, L, D) and CLIP of driving
    frame 0 (B, 257, 1280), None without a CLIP branch."""

    latents: torch.Tensor
    condition: torch.Tensor
    prompt_embeds: torch.Tensor
    clip_embeds: torch.Tensor | None = None


REFERENCE_SLOTS = 1  # the reference image's leading latent frame of the generated stream, out of the loss


def condition_channels(reference: torch.Tensor, empty: torch.Tensor,
                       driving: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both streams' condition channels, as diffusers' Animate-2 pipeline builds its first segment's: reference
    latents (B, C, 1, h, w), the VAE latents of F black frames (B, C, F, h, w) and the driving latents (B, C, F, h, w)
    -> the generated stream's [mask | reference, black] (B, 4 + C, 1 + F, h, w) with the mask 1 on the reference slot
    only, and the driving stream's [all-ones mask | driving latents] (B, 4 + C, F, h, w)."""
    b, _, frames, h, w = driving.shape
    mask = driving.new_zeros(b, 4, REFERENCE_SLOTS + frames, h, w)
    mask[:, :, :REFERENCE_SLOTS] = 1
    condition = torch.cat([mask, torch.cat([reference, empty], dim=2)], dim=1)
    return condition, torch.cat([driving.new_ones(b, 4, frames, h, w), driving], dim=1)


class _WriteOnceLayer(WanAnimate2KVLayerCache):
    """A layer's driving K/V, kept as first stored: a checkpointed block's recompute in the backward pass runs the
    driving pass's store again, and the generation pass's recompute must read the tensors of the graph that the
    gradients flow through, not the recomputed copies (nor an emptied cache)."""

    def store(self, key: torch.Tensor, value: torch.Tensor):
        if self.key is None:
            super().store(key, value)


def checkpoint_block(block, *args, **kwargs):
    """Gradient checkpointing of one block: diffusers 0.42.1's default checkpoint function takes no keyword
    arguments, which Animate-2's forward passes (kv_cache and the rest), so it fails there."""
    return checkpoint(block.__call__, *args, use_reentrant=False, **kwargs)


def driving_pass(transformer, driving_latents: torch.Tensor, driving_condition: torch.Tensor,
                 timestep: torch.Tensor, driving_prompt_embeds: torch.Tensor,
                 driving_clip_embeds: torch.Tensor | None) -> tuple[WanAnimate2KVCache, torch.Tensor]:
    """The driving stream's pass: its K/V cache (every layer's) and its patch grid (B, 3). The sampler runs it once
    and the generation pass at every step; training runs both at every step."""
    install(transformer)  # (idempotent) a transformer loaded by diffusers has its flex-only processor
    # diffusers' default function takes no keywords; the setup's policy (checkpoint_policy.py) does and stays
    if transformer.gradient_checkpointing and not getattr(transformer._gradient_checkpointing_func, "takes_keywords",
                                                          False):
        transformer._gradient_checkpointing_func = checkpoint_block
    cache = WanAnimate2KVCache(len(transformer.blocks))
    cache.layer_caches = [_WriteOnceLayer() for _ in cache.layer_caches]
    pt, ph, pw = transformer.config.patch_size
    batch, _, frames, height, width = driving_latents.shape
    grid = torch.tensor([[frames // pt, height // ph, width // pw]] * batch, dtype=torch.long)
    transformer(list(driving_latents), timestep=timestep, encoder_hidden_states=list(driving_prompt_embeds),
                encoder_hidden_states_image=driving_clip_embeds, condition_latents=list(driving_condition),
                kv_cache=cache, kv_cache_mode="extract", seq_len=int(grid[0].prod()), offset_grid_sizes=grid)
    return cache, grid


def generation_pass(transformer, cache: WanAnimate2KVCache, grid: torch.Tensor, latents: torch.Tensor,
                    condition: torch.Tensor, timestep: torch.Tensor, prompt_embeds: torch.Tensor,
                    clip_embeds: torch.Tensor | None, unconditional: bool = False) -> torch.Tensor:
    """The generated stream's pass over `driving_pass`'s cache: the prediction (B, C, 1 + F, h, w) in float32."""
    frames, grid_h, grid_w = grid[0].tolist()
    # diffusers' forward keys a flex block mask by the full clip's latent geometry and builds it when missing; our
    # processor needs none, so the key is there (empty) before it looks.
    transformer.block_masks.setdefault((frames, grid_h * grid_w), None)
    out = transformer(list(latents), timestep=timestep, encoder_hidden_states=list(prompt_embeds),
                      encoder_hidden_states_image=clip_embeds, condition_latents=list(condition), kv_cache=cache,
                      kv_cache_mode="cached", seq_len=(frames + 1) * grid_h * grid_w, reference_grid_sizes=grid,
                      origin_len=(frames - 1) * 4 + 1, origin_area=[grid_h * 16, grid_w * 16],
                      is_uncondtion=unconditional).sample
    return torch.stack(out)


def two_pass_forward(transformer, latents: torch.Tensor, condition: torch.Tensor, driving_latents: torch.Tensor,
                     driving_condition: torch.Tensor, timestep: torch.Tensor, prompt_embeds: torch.Tensor,
                     driving_prompt_embeds: torch.Tensor, clip_embeds: torch.Tensor | None,
                     driving_clip_embeds: torch.Tensor | None, unconditional: bool = False) -> torch.Tensor:
    """latents (B, C, 1 + F, h, w) with condition (B, 4 + C, 1 + F, h, w) (mask and reference-image latents in the
    leading slot); driving_latents (B, C, F, h, w) with driving_condition (B, 4 + C, F, h, w); timestep (B,); prompt
    embeddings (B, L, D); CLIP embeddings (B, 257, 1280) of the reference image / driving frame 0 (None without a
    CLIP branch). Returns the prediction (B, C, 1 + F, h, w) in float32; its frame 0 is the reference slot's.
    (The cache goes with the autograd graph: clearing it would break a checkpointed backward.)"""
    cache, grid = driving_pass(transformer, driving_latents, driving_condition, timestep, driving_prompt_embeds,
                               driving_clip_embeds)
    return generation_pass(transformer, cache, grid, latents, condition, timestep, prompt_embeds, clip_embeds,
                           unconditional)
