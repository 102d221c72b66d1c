"""Flow-matching noise schedule for training: how σ is drawn and how x_t / the target are built.

x_t = (1 − σ)·x0 + σ·ε, target v = ε − x0, transformer timestep t = 1000·σ (Wan's convention).
"""
from __future__ import annotations

import dataclasses

import torch

from modules.util.enum import TimestepDistribution


@dataclasses.dataclass(frozen=True)
class SigmaSampler:
    distribution: TimestepDistribution = TimestepDistribution.UNIFORM
    logit_mean: float = 0.0
    logit_std: float = 1.0
    sigmoid_scale: float = 1.0
    shift: float = 1.0
    min_sigma: float = 0.0
    max_sigma: float = 1.0

    def _draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        if self.distribution == TimestepDistribution.UNIFORM:
            u = torch.rand(n, generator=generator)
        elif self.distribution == TimestepDistribution.LOGIT_NORMAL:
            u = torch.sigmoid(self.logit_mean + self.logit_std * torch.randn(n, generator=generator))
        else:
            u = torch.sigmoid(self.sigmoid_scale * torch.randn(n, generator=generator))
        if self.shift != 1.0:
            u = self.shift * u / (1 + (self.shift - 1) * u)
        return self.min_sigma + (self.max_sigma - self.min_sigma) * u

    def sample(self, n: int, generator: torch.Generator, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """n sigmas from the configured distribution, restricted to [low, high) by rejection.

        Rejection keeps the distribution's shape inside an expert's range (Wan 2.2 A14B), unlike rescaling.
        """
        low, high = max(low, self.min_sigma), min(high, self.max_sigma)
        if low >= high:
            raise ValueError(f"empty sigma range [{low}, {high})")
        out = torch.empty(0)
        for _ in range(1000):
            draw = self._draw(max(4 * n, 16), generator)
            keep = draw[(draw >= low) & (draw < high)] if high < self.max_sigma else draw[(draw >= low) & (draw <= high)]
            out = torch.cat([out, keep])
            if len(out) >= n:
                return out[:n]
        # The distribution puts (almost) no mass in this range: fall back to uniform inside it.
        return low + (high - low) * torch.rand(n, generator=generator)


def add_noise(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    s = sigma.view(-1, *([1] * (x0.ndim - 1))).to(x0.dtype)
    return (1 - s) * x0 + s * noise


def flow_target(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return noise - x0
