"""ComfyUI's euler and dpmpp_2m updates, one model evaluation at a time.

ComfyUI runs each sampler as a loop that calls the model (`comfy/k_diffusion/sampling.py`, `sample_euler` and
`sample_dpmpp_2m`, a125cd84); a diffusers-style pipeline calls the sampler once per model evaluation instead. A solver
here holds the loop's state between evaluations and does the loop body's arithmetic, in ComfyUI's order of float32
operations. The model's result is ComfyUI's `denoised` (for Wan, CONST: x − σ·v). uni_pc: comfy_unipc.py.
"""
from __future__ import annotations

import torch


class KSolver:
    """One ComfyUI sampler run over `sigmas` (float32, σ_0 … σ_n): `begin(x)` gives the first model input,
    `advance(denoised)` the next model input, or after the last evaluation the run's result."""

    def __init__(self, sigmas: torch.Tensor):
        self.sigmas = sigmas
        self.index = 0
        self.x: torch.Tensor | None = None

    @property
    def evaluations(self) -> int:
        return len(self.sigmas) - 1

    def sigma(self) -> torch.Tensor:
        """The σ of the next model evaluation (what ComfyUI hands the model, and ×1000 its timestep)."""
        return self.sigmas[self.index]

    def begin(self, x: torch.Tensor) -> torch.Tensor:
        self.x = x
        return x

    def advance(self, denoised: torch.Tensor) -> torch.Tensor:
        self.x = self.update(self.index, self.x, denoised)
        self.index += 1
        return self.x

    def update(self, i: int, x: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class EulerSolver(KSolver):
    """sample_euler with s_churn 0: d = (x − denoised)/σ_i (to_d), x + d·(σ_{i+1} − σ_i)."""

    def update(self, i, x, denoised):
        sigma = self.sigmas[i]
        d = (x - denoised) / sigma
        return x + d * (self.sigmas[i + 1] - sigma)


class DPMpp2MSolver(KSolver):
    """sample_dpmpp_2m: DPM-Solver++(2M) in t = −log σ, first order at the first step and into σ = 0."""

    def __init__(self, sigmas: torch.Tensor):
        super().__init__(sigmas)
        self.old_denoised: torch.Tensor | None = None

    def update(self, i, x, denoised):
        sigmas = self.sigmas
        t, t_next = sigmas[i].log().neg(), sigmas[i + 1].log().neg()
        h = t_next - t
        ratio = t_next.neg().exp() / t.neg().exp()
        if self.old_denoised is None or sigmas[i + 1] == 0:
            x = ratio * x - (-h).expm1() * denoised
        else:
            r = (t - sigmas[i - 1].log().neg()) / h
            blended = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * self.old_denoised
            x = ratio * x - (-h).expm1() * blended
        self.old_denoised = denoised
        return x
