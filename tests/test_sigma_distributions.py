"""σ options (issue #13, deliverable 5): the COSMAP and HEAVY_TAIL distributions (each against its CDF, also when
truncated to an expert's range) and per-batch shifting by resolution."""
from __future__ import annotations

import math

import pytest
import torch
from diffusers.training_utils import compute_density_for_timestep_sampling

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSetup.flow_matching import SigmaSampler, resolution_shift
from modules.modelSetup.WanLoRASetup import WanLoRASetup
from modules.util.base_config import ConfigError
from modules.util.enum import TimestepDistribution
from tests.conftest import train_config_dict

N = 40_000


def draws(sampler: SigmaSampler, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
    return sampler.sample(N, torch.Generator().manual_seed(0), low, high).double()


def cosmap_cdf(t: float) -> float:
    return 2 / math.pi * math.atan(t / (1 - t))  # u of t = 1 − 1 / (tan(πu/2) + 1)


def heavy_tail_map(u: float, s: float) -> float:
    return u - s * (math.sin(math.pi * u / 2) ** 2 - u)


@pytest.mark.parametrize("t", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_cosmap_follows_its_cdf(t):
    sigmas = draws(SigmaSampler(TimestepDistribution.COSMAP))
    assert abs(float((sigmas <= t).double().mean()) - cosmap_cdf(t)) < 0.01


@pytest.mark.parametrize("u", [0.1, 0.3, 0.5, 0.7, 0.9])
@pytest.mark.parametrize("scale", [1.29, -0.5])
def test_heavy_tail_follows_its_cdf(u, scale):
    sigmas = draws(SigmaSampler(TimestepDistribution.HEAVY_TAIL, mode_scale=scale))
    assert abs(float((sigmas <= heavy_tail_map(u, scale)).double().mean()) - u) < 0.01


def test_heavy_tail_is_diffusers_mode_sampling():
    ours = draws(SigmaSampler(TimestepDistribution.HEAVY_TAIL, mode_scale=1.29)).sort().values
    theirs = compute_density_for_timestep_sampling("mode", N, mode_scale=1.29,
                                                   generator=torch.Generator().manual_seed(1)).double().sort().values
    grid = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    ks = (torch.searchsorted(ours, grid).double() - torch.searchsorted(theirs, grid).double()).abs().max() / N
    assert ks < 0.015  # two-sample Kolmogorov–Smirnov distance of the same law


@pytest.mark.parametrize("distribution", [TimestepDistribution.COSMAP, TimestepDistribution.HEAVY_TAIL])
def test_truncation_to_an_experts_range_keeps_the_shape(distribution):
    sampler = SigmaSampler(distribution)
    low, high = 0.875, 1.0
    sigmas = draws(sampler, low, high)
    assert float(sigmas.min()) >= low and float(sigmas.max()) <= high
    # conditional CDF at the middle of the range: F(m) − F(low) over F(high) − F(low)
    whole = draws(sampler)
    middle = (low + high) / 2
    inside = whole[(whole >= low) & (whole <= high)]
    assert abs(float((sigmas <= middle).double().mean()) - float((inside <= middle).double().mean())) < 0.03


def test_resolution_shift_is_wans_480p_and_720p_shift():
    assert resolution_shift(30 * 52) == 3.0 and resolution_shift(45 * 80) == 5.0
    assert 1.0 <= resolution_shift(4) < resolution_shift(1000) < 3.0 < resolution_shift(5000)  # linear in tokens


def test_dynamic_shifting_draws_each_batch_at_its_resolutions_shift(tiny_model, video_dataset, tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                     dynamic_timestep_shifting=True))
    setup = WanLoRASetup(WanModelLoader().load_for_config(config, torch.device("cpu")), config)
    random = lambda: StepRandom.for_micro_step(0, 3, 4)  # noqa: E731
    for h, w, tokens in [(60, 104, 1560), (90, 160, 3600)]:
        sigmas, _ = setup.sample_sigmas(random(), (4, 16, 3, h, w))
        expected = torch.cat([SigmaSampler(shift=resolution_shift(tokens)).sample(1, g) for g in random().samples])
        assert torch.equal(sigmas, expected), tokens
    assert not torch.equal(setup.sample_sigmas(random(), (4, 16, 3, 60, 104))[0],
                           setup.sample_sigmas(random(), (4, 16, 3, 90, 160))[0])


def test_mode_scale_outside_the_monotone_range_is_refused(tiny_model, video_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'mode_scale' must be between -1 and 1.75, got 2.0"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, mode_scale=2.0))
