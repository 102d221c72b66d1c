"""ComfyUI's sigma schedules for Wan, computed as ComfyUI computes them (float32 tensors, the same operations).

Read from ComfyUI a125cd84: `comfy/model_sampling.py` (`time_snr_shift`, `ModelSamplingDiscreteFlow`: a table of
1000 sigmas at t = 1/1000 … 1000/1000, timestep = 1000 σ), which the ModelSamplingSD3 node builds with its shift
(`comfy_extras/nodes_model_advanced.py`), and `comfy/samplers.py` (`simple_scheduler`, `normal_scheduler` and
`sgm_uniform`, `beta_scheduler`, and `KSampler.calculate_sigmas`, which gives uni_pc one step more and drops the
penultimate sigma). Every Wan family's default shift in ComfyUI is 8 (`comfy/supported_models.py`, WAN21_T2V's
sampling_settings, inherited by I2V, VACE, Wan 2.2 and the rest).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from modules.config.sampling_choices import SAMPLE_SCHEDULERS

COMFY_WAN_SHIFT = 8.0
DISCARD_PENULTIMATE = ("uni_pc",)  # KSampler.DISCARD_PENULTIMATE_SIGMA_SAMPLERS, of our samplers
TIMESTEP_MULTIPLIER = 1000


def time_snr_shift(shift: float, t):
    return t if shift == 1.0 else shift * t / (1 + (shift - 1) * t)


def sigma_table(shift: float, timesteps: int = 1000) -> torch.Tensor:
    """ModelSamplingDiscreteFlow.sigmas: float32, index 0 = the smallest sigma."""
    ts = (torch.arange(1, timesteps + 1, 1) / timesteps) * TIMESTEP_MULTIPLIER
    return time_snr_shift(shift, ts / TIMESTEP_MULTIPLIER)


def _simple(table: torch.Tensor, steps: int) -> torch.Tensor:
    stride = len(table) / steps
    return torch.FloatTensor([float(table[-(1 + int(x * stride))]) for x in range(steps)] + [0.0])


def _normal(table: torch.Tensor, steps: int, shift: float, sgm: bool) -> torch.Tensor:
    start, end = table[-1] * TIMESTEP_MULTIPLIER, table[0] * TIMESTEP_MULTIPLIER
    append_zero = True
    if sgm:
        timesteps = torch.linspace(start, end, steps + 1)[:-1]
    else:
        if math.isclose(float(time_snr_shift(shift, end / TIMESTEP_MULTIPLIER)), 0, abs_tol=0.00001):
            steps, append_zero = steps + 1, False
        timesteps = torch.linspace(start, end, steps)
    sigmas = [float(time_snr_shift(shift, t / TIMESTEP_MULTIPLIER)) for t in timesteps]
    return torch.FloatTensor(sigmas + ([0.0] if append_zero else []))


def beta_ppf(p: float, alpha: float, beta: float) -> float:
    """The inverse of the regularised incomplete beta function (scipy.stats.beta.ppf, which ComfyUI calls), by
    bisection on mpmath's betainc to float precision; ComfyUI rounds the result times 999 to an integer."""
    import mpmath

    if p <= 0.0 or p >= 1.0:
        return float(p > 0)
    low, high = 0.0, 1.0
    for _ in range(64):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if float(mpmath.betainc(alpha, beta, 0, middle, regularized=True)) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _beta(table: torch.Tensor, steps: int, alpha: float = 0.6, beta: float = 0.6) -> torch.Tensor:
    total = len(table) - 1
    ts = 1 - np.linspace(0, 1, steps, endpoint=False)
    ts = np.rint(np.array([beta_ppf(float(p), alpha, beta) for p in ts]) * total)
    sigmas, last = [], -1
    for t in ts:
        if t != last:  # repeated timesteps are dropped: fewer steps than asked, as in ComfyUI
            sigmas.append(float(table[int(t)]))
        last = t
    return torch.FloatTensor(sigmas + [0.0])


def scheduler_sigmas(scheduler: str, steps: int, shift: float) -> torch.Tensor:
    """comfy.samplers.calculate_sigmas for a ModelSamplingSD3 model at `shift` (float32, ends with 0)."""
    table = sigma_table(shift)
    if scheduler == "simple":
        return _simple(table, steps)
    if scheduler in ("normal", "sgm_uniform"):
        return _normal(table, steps, shift, sgm=scheduler == "sgm_uniform")
    if scheduler == "beta":
        return _beta(table, steps)
    raise ValueError(f"unknown ComfyUI scheduler '{scheduler}': use one of {', '.join(SAMPLE_SCHEDULERS)}")


def ksampler_sigmas(sampler: str, scheduler: str, steps: int, shift: float) -> torch.Tensor:
    """KSampler.calculate_sigmas: what the KSampler node (and KSamplerAdvanced, before its start/end slicing) runs."""
    if sampler not in DISCARD_PENULTIMATE:
        return scheduler_sigmas(scheduler, steps, shift)
    sigmas = scheduler_sigmas(scheduler, steps + 1, shift)
    return torch.cat([sigmas[:-2], sigmas[-1:]])
