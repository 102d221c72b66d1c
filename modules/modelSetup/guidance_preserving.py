"""The guidance-preserving target: training a CFG-distilled Wan without undistilling it.

A CFG-distilled base draws at CFG 1 what its teacher drew at CFG s. Plain flow matching fits the conditional
output to the data's velocity, which is what the base would need CFG s on top of to draw: the model drifts back to
an undistilled one. Here each step also runs the current model without gradient on the same noisy latent with the
unconditional prompt (u) and fits the conditional output to u + s·(v − u), the CFG-s combination whose
conditional branch is the data: after training, CFG 1 draws what the data shows with guidance s baked in.

The target is written v + (s − 1)·(v − u): the same value, but exactly v at s = 1 (no rounding), so s = 1 is the
plain loss bit for bit. diffusers-pipe divides the whole loss by s²; we do not, so the loss and the learning rate
keep the plain loss's scale at the data's part of the target (the u part only grows it by (s − 1)·(v − u))."""
from __future__ import annotations

import torch

from modules.config.guidance_preserving_config import GuidancePreservingConfig


def scales_at(config: GuidancePreservingConfig, sigmas: torch.Tensor) -> torch.Tensor:
    """(B,) the scale of each sample: `scale`, falling linearly to 1 at σ = 0 below `taper_below_sigma`."""
    scale = torch.full_like(sigmas, config.scale, dtype=torch.float32)
    if config.taper_below_sigma > 0:
        share = (sigmas.float() / config.taper_below_sigma).clamp(max=1.0)
        scale = 1 + (scale - 1) * share
    return scale


def guided_target(target: torch.Tensor, unconditional: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """u + s·(target − u) per sample (`scales` (B,)), computed as target + (s − 1)·(target − u): exact at s = 1."""
    s = scales.view(-1, *([1] * (target.ndim - 1))).to(target.device, torch.float32)
    target = target.float()
    return target + (s - 1) * (target - unconditional.float())


def distilled_sigmas(config: GuidancePreservingConfig) -> list[float]:
    """The σ of each distilled timestep (σ = t/1000: the timesteps are already shifted), highest first."""
    return sorted((t / 1000.0 for t in config.distilled_timesteps), reverse=True)


def draw(sigmas: list[float], generator: torch.Generator) -> float:
    """One of `sigmas`, uniformly, from `generator`."""
    return sigmas[int(torch.randint(len(sigmas), (1,), generator=generator))]
