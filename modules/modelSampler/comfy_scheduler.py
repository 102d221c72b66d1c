"""ComfyUI's KSampler as a diffusers scheduler: diffusers' Wan pipelines and our own loop run it unchanged.

What ComfyUI does around a sampler (comfy/samplers.py `KSAMPLER.sample`, `KSampler.sample`; comfy/model_sampling.py
`CONST`, a125cd84) is done here too: the start latent is `noise_scaling` (σ_0·noise + (1 − σ_0)·latent, the latent
0), the result `inverse_noise_scaling` (÷ (1 − σ_last)), the model's velocity becomes `denoised` = x − σ·v
(`CONST.calculate_denoised`) and its timestep is 1000·σ in float32 (`ModelSamplingDiscreteFlow.timestep`). With a
`split_sigma` (two-expert models) the run is two ComfyUI runs, as the workflow's two KSamplerAdvanced nodes: the
first over σ_0 … σ_k with its leftover noise, the second from σ_k without new noise; k is the first step the
pipeline routes to the low-noise expert.
"""
from __future__ import annotations

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.schedulers.scheduling_utils import SchedulerMixin, SchedulerOutput

from modules.modelSampler.comfy_sigmas import TIMESTEP_MULTIPLIER, ksampler_sigmas
from modules.modelSampler.comfy_solvers import DPMpp2MSolver, EulerSolver, KSolver
from modules.modelSampler.comfy_unipc import UniPCSolver

SOLVERS: dict[str, type[KSolver]] = {"euler": EulerSolver, "dpmpp_2m": DPMpp2MSolver, "uni_pc": UniPCSolver}


def split_step(sigmas: torch.Tensor, split_sigma: float | None) -> int | None:
    """The KSamplerAdvanced boundary step: the first evaluation whose timestep the pipeline routes below the
    boundary (diffusers: t >= boundary · 1000 goes to the high-noise expert); None when every step is on one side."""
    if split_sigma is None:
        return None
    timesteps = sigmas[:-1] * TIMESTEP_MULTIPLIER
    low = [i for i, t in enumerate(timesteps) if not bool(t >= split_sigma * TIMESTEP_MULTIPLIER)]
    return low[0] if low and 0 < low[0] < len(timesteps) else None


class ComfyFlowScheduler(SchedulerMixin, ConfigMixin):
    order = 1

    @register_to_config
    def __init__(self, sampler: str = "uni_pc", scheduler: str = "simple", shift: float = 8.0,
                 num_train_timesteps: int = 1000, split_sigma: float | None = None):
        if sampler not in SOLVERS:
            raise ValueError(f"unknown ComfyUI sampler '{sampler}': use one of {', '.join(SOLVERS)}")
        self.sigmas = torch.zeros(0)
        self.timesteps = torch.zeros(0)
        self._segments: list[torch.Tensor] = []
        self._solver: KSolver | None = None
        self._begin_index = 0

    def set_begin_index(self, begin_index: int = 0) -> None:
        self._begin_index = begin_index

    def set_timesteps(self, num_inference_steps: int, device=None, **_) -> None:
        config = self.config
        sigmas = ksampler_sigmas(config.sampler, config.scheduler, num_inference_steps, config.shift)
        k = split_step(sigmas, config.split_sigma)
        self._segments = [sigmas] if k is None else [sigmas[:k + 1], sigmas[k:]]
        self.sigmas = sigmas
        self.timesteps = (sigmas[:-1] * TIMESTEP_MULTIPLIER).to(device)
        self._solver = None

    def _start(self, noise: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        """A ComfyUI run over the next segment from CONST.noise_scaling(σ_0, noise, latent); its first model input."""
        # on the latent's device, as CFGGuider.outer_sample moves them: uni_pc's per-sample sigma vectors meet x there
        sigmas = self._segments.pop(0).to(noise.device)
        self._solver = SOLVERS[self.config.sampler](sigmas)
        sigma = sigmas[0]
        return self._solver.begin(sigma * noise + (1.0 - sigma) * latent)

    def step(self, model_output: torch.Tensor, timestep, sample: torch.Tensor, return_dict: bool = True, **_):
        sample = sample.float()
        if self._solver is None:
            self._start(sample, torch.zeros_like(sample))
        solver = self._solver
        denoised = sample - model_output.float() * solver.sigma()
        result = solver.advance(denoised)
        if solver.index == solver.evaluations:  # the run is over: KSAMPLER's inverse_noise_scaling
            last = getattr(solver, "last_sigma", solver.sigmas[-1])
            result = result / (1.0 - last)
            if self._segments:  # the second KSamplerAdvanced: no new noise, the first's latent
                result = self._start(torch.zeros_like(result), result)
        return SchedulerOutput(prev_sample=result) if return_dict else (result,)

    def __len__(self) -> int:
        return self.config.num_train_timesteps
