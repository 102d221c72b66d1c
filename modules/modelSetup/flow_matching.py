"""Flow-matching noise schedule for training: how σ is drawn and how x_t / the target are built.

x_t = (1 − σ)·x0 + σ·ε, target v = ε − x0, transformer timestep t = 1000·σ (Wan's convention).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from modules.util.enum import TimestepDistribution


@dataclasses.dataclass(frozen=True)
class SigmaSampler:
    distribution: TimestepDistribution = TimestepDistribution.UNIFORM
    logit_mean: float = 0.0
    logit_std: float = 1.0
    sigmoid_scale: float = 1.0
    mode_scale: float = 1.29  # HEAVY_TAIL
    shift: float = 1.0
    min_sigma: float = 0.0
    max_sigma: float = 1.0

    # σ = T(base) with T monotone increasing (base ~ U(0,1) or N(0,1)), so restricting σ to a range is
    # restricting the base variable to the range's pre-image: exact, and cheap even for narrow ranges.
    def _normal_base(self) -> bool:
        return self.distribution in (TimestepDistribution.LOGIT_NORMAL, TimestepDistribution.SIGMOID)

    def _from_uniform(self, u: torch.Tensor) -> torch.Tensor:
        """The increasing map of a U(0, 1) base for the distributions defined by one."""
        if self.distribution == TimestepDistribution.COSMAP:
            return 1 - 1 / (torch.tan(math.pi / 2 * u) + 1)
        if self.distribution == TimestepDistribution.HEAVY_TAIL:  # diffusers' "mode" at 1 − u: the same law, increasing
            return u - self.mode_scale * (torch.sin(math.pi / 2 * u) ** 2 - u)
        return u

    def _uniform_of(self, t: float) -> float:
        """The inverse of `_from_uniform` (closed form for COSMAP, bisection for HEAVY_TAIL)."""
        if self.distribution == TimestepDistribution.COSMAP:
            return 2 / math.pi * math.atan2(t, 1 - t)
        if self.distribution == TimestepDistribution.HEAVY_TAIL:
            low, high = 0.0, 1.0
            for _ in range(60):
                middle = (low + high) / 2
                if float(self._from_uniform(torch.tensor(middle, dtype=torch.float64))) < t:
                    low = middle
                else:
                    high = middle
            return (low + high) / 2
        return t

    def _to_sigma(self, base: torch.Tensor) -> torch.Tensor:
        if self.distribution == TimestepDistribution.LOGIT_NORMAL:
            u = torch.sigmoid(self.logit_mean + self.logit_std * base)
        elif self.distribution == TimestepDistribution.SIGMOID:
            u = torch.sigmoid(self.sigmoid_scale * base)
        else:
            u = self._from_uniform(base)
        if self.shift != 1.0:
            u = self.shift * u / (1 + (self.shift - 1) * u)
        return self.min_sigma + (self.max_sigma - self.min_sigma) * u

    def _to_base(self, sigma: float) -> float:
        v = min(max((sigma - self.min_sigma) / (self.max_sigma - self.min_sigma), 0.0), 1.0)
        u = v / (self.shift - (self.shift - 1) * v) if self.shift != 1.0 else v
        if not self._normal_base():
            return self._uniform_of(u)
        if u <= 0.0:
            return float("-inf")
        if u >= 1.0:
            return float("inf")
        logit = math.log(u / (1 - u))
        if self.distribution == TimestepDistribution.LOGIT_NORMAL:
            return (logit - self.logit_mean) / self.logit_std
        return logit / self.sigmoid_scale

    def sample(self, n: int, generator: torch.Generator, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """n sigmas from the configured distribution, truncated to [low, high] ∩ [min_sigma, max_sigma].

        Truncation keeps the distribution's shape inside an expert's range (Wan 2.2 A14B), unlike rescaling.
        """
        low, high = max(low, self.min_sigma), min(high, self.max_sigma)
        if low >= high:
            raise ValueError(f"empty sigma range [{low}, {high}]")
        a, b = self._to_base(low), self._to_base(high)
        r = torch.rand(n, generator=generator, dtype=torch.float64)
        if self._normal_base():
            cdf_a = torch.special.ndtr(torch.tensor(a, dtype=torch.float64))
            cdf_b = torch.special.ndtr(torch.tensor(b, dtype=torch.float64))
            base = torch.special.ndtri(cdf_a + (cdf_b - cdf_a) * r)
        else:
            base = a + (b - a) * r
        return self._to_sigma(base).clamp(low, high).float()


# Wan's recommended sampling shifts: 3.0 at 480p (832×480: 1560 tokens a latent frame), 5.0 at 720p (3600).
_SHIFT_POINTS = ((1560, 3.0), (3600, 5.0))


def resolution_shift(tokens_per_frame: int) -> float:
    """The shift for a bucket's resolution: Wan's 480p / 720p shifts, linear in the tokens of a latent frame
    through them (about 1.5 for tiny buckets; never below 1, no shift)."""
    (t0, s0), (t1, s1) = _SHIFT_POINTS
    return max(1.0, s0 + (tokens_per_frame - t0) * (s1 - s0) / (t1 - t0))


def add_noise(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    s = sigma.view(-1, *([1] * (x0.ndim - 1))).to(x0.dtype)
    return (1 - s) * x0 + s * noise


def flow_target(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return noise - x0
