"""σ sampling, noising, LR schedule and the I2V frame mask."""
from __future__ import annotations

import math

import pytest
import torch

from modules.model.condition_layout import condition_clip, frame_mask
from modules.modelSetup.flow_matching import SigmaSampler, add_noise, flow_target
from modules.modelSetup.optimization import lr_factor
from modules.util.enum import LearningRateScheduler, TimestepDistribution


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("distribution", list(TimestepDistribution))
def test_sigmas_stay_in_the_configured_range(distribution):
    sampler = SigmaSampler(distribution=distribution, min_sigma=0.2, max_sigma=0.7)
    sigmas = sampler.sample(2000, gen())
    assert sigmas.min() >= 0.2 and sigmas.max() <= 0.7


def test_uniform_sigmas_have_the_uniform_mean():
    assert abs(float(SigmaSampler().sample(20000, gen()).mean()) - 0.5) < 0.01


def test_logit_normal_with_positive_mean_leans_to_high_sigma():
    assert float(SigmaSampler(TimestepDistribution.LOGIT_NORMAL, logit_mean=1.0).sample(5000, gen()).mean()) > 0.65


def test_shift_moves_sigma_as_the_wan_scheduler_does():
    # s·σ/(1+(s−1)σ) with s = 3 maps 0.5 to 0.75
    sampler = SigmaSampler(shift=3.0)
    u = SigmaSampler().sample(8, gen(1))
    assert torch.allclose(sampler.sample(8, gen(1)), 3 * u / (1 + 2 * u))


def test_expert_range_restriction_keeps_every_sigma_inside():
    sigmas = SigmaSampler(TimestepDistribution.LOGIT_NORMAL).sample(500, gen(), low=0.875, high=1.0)
    assert sigmas.min() >= 0.875


def test_same_generator_seed_gives_the_same_sigmas():
    assert torch.equal(SigmaSampler().sample(5, gen(7)), SigmaSampler().sample(5, gen(7)))


def test_noising_and_target_follow_flow_matching():
    x0, noise = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    sigma = torch.tensor([0.0, 1.0])
    x_t = add_noise(x0, noise, sigma)
    assert torch.equal(x_t[0], x0[0]) and torch.equal(x_t[1], noise[1])
    assert torch.equal(flow_target(x0, noise), noise - x0)


@pytest.mark.parametrize("schedule, step, expected", [
    (LearningRateScheduler.CONSTANT, 50, 1.0),
    (LearningRateScheduler.LINEAR, 55, 0.5),
    (LearningRateScheduler.COSINE, 55, 0.5),
    (LearningRateScheduler.COSINE, 100, 0.0),
])
def test_lr_schedule_after_warmup(schedule, step, expected):
    assert math.isclose(lr_factor(step, total_steps=100, warmup_steps=10, schedule=schedule), expected, abs_tol=1e-9)


def test_warmup_is_linear():
    assert lr_factor(4, 100, 10, LearningRateScheduler.CONSTANT) == 5 / 11


def test_frame_mask_matches_diffusers_i2v_mask():
    """One reference frame: exactly the mask WanImageToVideoPipeline.prepare_latents builds."""
    num_frames, h, w = 9, 2, 3
    mask = torch.ones(1, 1, num_frames, h, w)
    mask[:, :, 1:] = 0
    first = torch.repeat_interleave(mask[:, :, 0:1], dim=2, repeats=4)
    mask = torch.cat([first, mask[:, :, 1:]], dim=2).view(1, -1, 4, h, w).transpose(1, 2)[0]
    assert torch.equal(frame_mask(num_frames, 1, h, w), mask)


def test_frame_mask_with_nine_reference_frames_fills_three_latent_frames():
    mask = frame_mask(81, 9, 1, 1)
    assert mask.shape == (4, 21, 1, 1)
    assert mask[:, :3].eq(1).all() and mask[:, 3:].eq(0).all()


def test_condition_clip_pads_with_zero_frames():
    refs = torch.ones(3, 2, 4, 4)
    clip = condition_clip(refs, 9)
    assert clip.shape == (3, 9, 4, 4) and clip[:, :2].eq(1).all() and clip[:, 2:].eq(0).all()
