"""The training loss's pieces: the elementwise error (MSE, Huber, pseudo-Huber) and the per-sample weight by σ
(diffusers' SD3 weighting schemes). `BaseWanSetup.loss` reduces them over channels, frames and samples."""
from __future__ import annotations

import torch
from diffusers.training_utils import compute_loss_weighting_for_sd3

from modules.util.enum import HuberSchedule, LossType, LossWeightFn

_WEIGHTING_SCHEMES = {LossWeightFn.SIGMA_SQRT: "sigma_sqrt", LossWeightFn.COSMAP: "cosmap"}


def huber_c_for(sigmas: torch.Tensor, huber_c: float, schedule: HuberSchedule) -> torch.Tensor:
    """(B,) the Huber threshold of each sample: constant, or huber_c^σ (diffusers' exponential schedule, with
    t/T = σ)."""
    if schedule == HuberSchedule.EXPONENTIAL:
        return torch.pow(torch.tensor(huber_c, dtype=torch.float32, device=sigmas.device), sigmas.float())
    return torch.full_like(sigmas, huber_c, dtype=torch.float32)


def elementwise_loss(predicted: torch.Tensor, target: torch.Tensor, loss_type: LossType,
                     huber_c: torch.Tensor | None = None) -> torch.Tensor:
    """(B, C, T, h, w) float32 error; `huber_c` (B,) for the Huber types. Both Huber types equal x² for small
    errors, so learning rates carry over from MSE."""
    difference = predicted.float() - target.float()
    if loss_type == LossType.MSE:
        return difference ** 2
    c = huber_c.view(-1, *([1] * (difference.ndim - 1)))
    if loss_type == LossType.HUBER:  # 2 · torch's huber_loss, with a per-sample delta
        absolute = difference.abs()
        return torch.where(absolute <= c, difference ** 2, 2 * c * absolute - c ** 2)
    return 2 * c * (torch.sqrt(difference ** 2 + c ** 2) - c)


def sigma_weights(sigmas: torch.Tensor, fn: LossWeightFn) -> torch.Tensor | None:
    """(B,) weight of each sample's loss by its σ; None for CONSTANT (no multiplication: the loss stays exact)."""
    if fn == LossWeightFn.CONSTANT:
        return None
    return compute_loss_weighting_for_sd3(_WEIGHTING_SCHEMES[fn], sigmas.float())


def masked_weights(mask: torch.Tensor, unmasked_weight: float) -> torch.Tensor:
    """Loss weight of each latent cell from its masked share m (masked training): unmasked_weight + (1 - it)·m, so
    1 inside the mask and `unmasked_weight` outside."""
    return unmasked_weight + (1.0 - unmasked_weight) * mask.float()
