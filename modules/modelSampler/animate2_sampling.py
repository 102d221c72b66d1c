"""Animate-2's denoising loop of one segment, as diffusers' modular pipeline runs it (`WanAnimate2RefExtractStep`,
`WanAnimate2SegmentDenoiseInner`): the driving pass once, then at every step the generation pass for the prompt and,
with guidance, for the negative prompt (diffusers' unconditional branch, which skips one block), combined by
classifier-free guidance (diffusers' formula) and stepped by the folder's scheduler. The distilled weights sample
with `guidance_scale` 1 (the conditional pass only), as diffusers' distilled pipeline does.

The inputs are encoded by `animate2_inputs.py` (trainer samples and `sample.py` route Animate-2 bases there); not
here yet: segments longer than one clip (diffusers' continuation from the previous segment's last frames).
"""
from __future__ import annotations

import inspect

import torch

from modules.model.animate2 import driving_pass, generation_pass


@torch.no_grad()
def denoise_segment(transformer, scheduler, noise: torch.Tensor, condition: torch.Tensor,
                    driving_latents: torch.Tensor, driving_condition: torch.Tensor, prompt_embeds: torch.Tensor,
                    negative_prompt_embeds: torch.Tensor | None, driving_prompt_embeds: torch.Tensor,
                    clip_embeds: torch.Tensor | None, driving_clip_embeds: torch.Tensor | None, steps: int,
                    guidance_scale: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """One sample, unbatched as diffusers': noise (C, 1 + F, h, w), condition (4 + C, 1 + F, h, w), driving latents
    (C, F, h, w) and condition (4 + C, F, h, w), prompt embeddings (L, D), CLIP embeddings (1, 257, 1280). Returns the
    denoised latents (C, 1 + F, h, w); frame 0 is the reference image's slot, not video."""
    dtype = transformer.dtype
    scheduler.set_timesteps(steps, device=noise.device)
    timesteps = scheduler.timesteps
    cache, grid = driving_pass(transformer, driving_latents[None].to(dtype), driving_condition[None].to(dtype),
                               timesteps[:1].to(dtype), driving_prompt_embeds[None].to(dtype),
                               None if driving_clip_embeds is None else driving_clip_embeds.to(dtype))
    clip = None if clip_embeds is None else clip_embeds.to(dtype)
    # diffusers passes the generator to every step (FlowMatchEulerDiscreteScheduler takes it); UniPC takes none
    extra = {"generator": generator} if "generator" in inspect.signature(scheduler.step).parameters else {}
    latents = noise
    for t in timesteps:
        def predict(embeds: torch.Tensor, unconditional: bool) -> torch.Tensor:
            return generation_pass(transformer, cache, grid, latents[None].to(dtype), condition[None].to(dtype),
                                   t[None], embeds[None].to(dtype), clip, unconditional)[0]

        prediction = predict(prompt_embeds, False)
        if guidance_scale != 1.0:
            unconditional = predict(negative_prompt_embeds, True)
            prediction = unconditional + guidance_scale * (prediction - unconditional)
        latents = scheduler.step(prediction[None], t, latents[None], return_dict=False, **extra)[0][0]
    return latents
