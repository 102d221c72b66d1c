"""The sampler contract with ComfyUI: its schedulers' sigmas at ModelSamplingSD3's shift, and its euler, dpmpp_2m
and uni_pc updates, each re-derived here in float64 from ComfyUI's code (a125cd84; file and function named at each
formula) and compared with ours. tools/check_comfy_sampler.py compares against ComfyUI's own functions."""
from __future__ import annotations

import math

import mpmath
import pytest
import torch

from modules.config.loading import migrate
from modules.config.sampling_choices import WAN_NEGATIVE_PROMPT
from modules.config.train_config import CONFIG_VERSION, SampleConfig, TrainConfig
from modules.modelSampler.comfy_scheduler import ComfyFlowScheduler, split_step
from modules.modelSampler.comfy_sigmas import ksampler_sigmas, scheduler_sigmas
from modules.util.base_config import ConfigError


def shifted(shift: float, t: float) -> float:
    """comfy/model_sampling.py time_snr_shift, ModelSamplingDiscreteFlow.sigma(timestep) at multiplier 1000."""
    return t if shift == 1.0 else shift * t / (1 + (shift - 1) * t)


def table(shift: float) -> list[float]:
    """ModelSamplingDiscreteFlow.set_parameters: σ at t = 1/1000 … 1000/1000."""
    return [shifted(shift, k / 1000) for k in range(1, 1001)]


def reference_sigmas(scheduler: str, steps: int, shift: float) -> list[float]:
    s = table(shift)
    if scheduler == "simple":  # comfy/samplers.py simple_scheduler
        return [s[-(1 + int(x * len(s) / steps))] for x in range(steps)] + [0.0]
    if scheduler in ("normal", "sgm_uniform"):  # normal_scheduler (sgm: linspace over steps + 1, the last dropped)
        start, end = s[-1] * 1000, s[0] * 1000
        n = steps + 1 if scheduler == "sgm_uniform" else steps
        ts = [start + (end - start) * i / (n - 1) for i in range(n)] if n > 1 else [start]
        ts = ts[:steps]
        return [shifted(shift, t / 1000) for t in ts] + [0.0]
    # beta_scheduler: rint(beta.ppf(1 - i/steps, 0.6, 0.6) · 999), repeated timesteps dropped
    picks, last = [], -1
    for i in range(steps):
        p = 1 - i / steps
        t = 999 if p >= 1 else round(float(mpmath.findroot(
            lambda x: mpmath.betainc(0.6, 0.6, 0, x, regularized=True) - p, (1e-12, 1 - 1e-12), solver="anderson")) * 999)
        if t != last:
            picks.append(s[t])
        last = t
    return picks + [0.0]


@pytest.mark.parametrize("scheduler", ["simple", "normal", "sgm_uniform", "beta"])
@pytest.mark.parametrize("steps, shift", [(1, 8.0), (4, 1.0), (7, 3.0), (12, 5.0), (20, 8.0)])
def test_scheduler_sigmas_are_comfyuis(scheduler, steps, shift):
    ours = scheduler_sigmas(scheduler, steps, shift)
    assert ours.dtype == torch.float32  # ComfyUI's FloatTensor
    expected = torch.tensor(reference_sigmas(scheduler, steps, shift), dtype=torch.float64)
    assert ours.shape == expected.shape
    torch.testing.assert_close(ours.double(), expected, rtol=0, atol=2e-7)


def test_uni_pc_takes_one_step_more_and_drops_the_penultimate_sigma():
    """KSampler.calculate_sigmas: DISCARD_PENULTIMATE_SIGMA_SAMPLERS holds uni_pc."""
    longer = scheduler_sigmas("simple", 5, 8.0)
    assert torch.equal(ksampler_sigmas("uni_pc", "simple", 4, 8.0), torch.cat([longer[:-2], longer[-1:]]))
    assert torch.equal(ksampler_sigmas("euler", "simple", 4, 8.0), scheduler_sigmas("simple", 4, 8.0))


def velocity(x: torch.Tensor, timestep) -> torch.Tensor:
    """A toy Wan velocity of the latent and the timestep 1000 σ."""
    t = float(timestep) / 1000
    return torch.tanh(1.3 * x + 0.7) * (0.5 + t) - 0.8 * x * t + 0.1


def run(sampler: str, steps: int, noise: torch.Tensor, scheduler: str = "simple", shift: float = 8.0,
        split: float | None = None) -> torch.Tensor:
    """Our scheduler called as diffusers' Wan pipeline calls it."""
    ours = ComfyFlowScheduler(sampler, scheduler, shift, split_sigma=split)
    ours.set_timesteps(steps)
    latents = noise
    for t in ours.timesteps:
        latents = ours.step(velocity(latents, t), t, latents, return_dict=False)[0]
    return latents


@pytest.fixture(scope="module")
def noise() -> torch.Tensor:
    return torch.randn((1, 4, 2, 3, 3), generator=torch.Generator().manual_seed(0))


def denoised(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """comfy/model_sampling.py CONST.calculate_denoised: x − v·σ, the model at timestep 1000 σ."""
    return x - velocity(x.float(), torch.tensor(sigma, dtype=torch.float32) * 1000).double() * sigma


def test_euler_step_is_comfyuis(noise):
    """comfy/k_diffusion/sampling.py sample_euler: d = to_d(x, σ, denoised) = (x − denoised)/σ; x + d·(σ' − σ)."""
    s = ksampler_sigmas("euler", "simple", 1, 3.0).double().tolist()
    x = s[0] * noise.double()  # CONST.noise_scaling with an empty latent; σ_0 = 1
    expected = x + (x - denoised(x, s[0])) / s[0] * (s[1] - s[0])
    torch.testing.assert_close(run("euler", 1, noise, shift=3.0).double(), expected, rtol=1e-5, atol=1e-6)


def test_dpmpp_2m_steps_are_comfyuis(noise):
    """sample_dpmpp_2m: t = −log σ, h = t' − t; first order at the first step and into σ = 0, else the 2M blend
    (1 + 1/2r)·D − (1/2r)·D_old with r = h_last / h."""
    s = ksampler_sigmas("dpmpp_2m", "simple", 3, 8.0).double().tolist()
    x, old = noise.double(), None
    for i in range(3):
        d = denoised(x, s[i])
        if s[i + 1] == 0:
            x = d
        else:
            h = math.log(s[i]) - math.log(s[i + 1])
            blend = d if old is None else (1 + 1 / (2 * ((math.log(s[i - 1]) - math.log(s[i])) / h))) * d \
                - (1 / (2 * ((math.log(s[i - 1]) - math.log(s[i])) / h))) * old
            x = (s[i + 1] / s[i]) * x - math.expm1(-h) * blend
        old = d
    torch.testing.assert_close(run("dpmpp_2m", 3, noise).double(), x, rtol=1e-5, atol=1e-5)


def test_uni_pc_run_is_comfyuis(noise):
    """comfy/extra_samplers/uni_pc.py: sample_unipc (σ as a VE σ: α = 1/√(1+σ²), σ_vp = σ α, λ = −log σ, in float32; the last
    σ 0 → 0.001; order min(3, steps − 1)), UniPC.sample (multistep, lower_order_final, corrector on all but the
    last step) and multistep_uni_pc_bh_update (bh1: B(h) = −h; order 1: ρ = ½; order 2 predictor ρ = ½, corrector
    ρ = R⁻¹b); the result ÷ α(0.001), then KSAMPLER's inverse_noise_scaling ÷ (1 − 0.001). 3 steps: orders 1, 2, 1."""
    taus = ksampler_sigmas("uni_pc", "simple", 3, 8.0).tolist()
    taus[-1] = 0.001

    def schedule(tau):  # SigmaConvert, in float32 as ComfyUI runs it: at σ 0.001, 1 − 1/(σ²+1) loses 6% of λ's argument
        t = torch.tensor(tau, dtype=torch.float32)
        log_mean = 0.5 * torch.log(1 / (t * t + 1))
        one_minus = 1. - torch.exp(2. * log_mean)
        return float(torch.exp(log_mean)), float(torch.sqrt(one_minus)), float(log_mean - 0.5 * torch.log(one_minus))

    alpha, std, lam = (lambda tau: schedule(tau)[0]), (lambda tau: schedule(tau)[1]), (lambda tau: schedule(tau)[2])

    def x0(x_vp, tau):  # data_prediction_fn of the model called on x·√(σ²+1) (predict_eps_sigma)
        return denoised(x_vp / alpha(tau), tau)

    def step(x, models, times, tau, order, corrector):
        h = lam(tau) - lam(times[-1])
        hh, m0 = -h, models[-1]
        phi1 = math.expm1(hh)
        b1 = (phi1 / hh - 1) / hh
        b2 = ((phi1 / hh - 1) / hh - 0.5) * 2 / hh
        base = std(tau) / std(times[-1]) * x - alpha(tau) * phi1 * m0
        if order == 2:
            r = (lam(times[-2]) - lam(times[-1])) / h
            d1 = (models[-2] - m0) / r
            predicted = base - alpha(tau) * hh * 0.5 * d1
        else:
            predicted = base
        if not corrector:
            return predicted, None
        m_t = x0(predicted, tau)
        if order == 1:
            return base - alpha(tau) * hh * 0.5 * (m_t - m0), m_t
        rho = torch.linalg.solve(torch.tensor([[1.0, 1.0], [r, 1.0]], dtype=torch.float64),
                                 torch.tensor([b1, b2], dtype=torch.float64))
        return base - alpha(tau) * hh * (rho[0] * d1 + rho[1] * (m_t - m0)), m_t

    x = noise.double() * alpha(taus[0])
    models, times = [x0(x, taus[0])], [taus[0]]
    x, m = step(x, models, times, taus[1], 1, True)
    models, times = models + [m], times + [taus[1]]
    x, m = step(x, models, times, taus[2], 2, True)
    models, times = models[1:] + [m], times[1:] + [taus[2]]
    x, _ = step(x, models, times, taus[3], 1, False)
    expected = x / alpha(taus[3]) / (1 - 0.001)
    torch.testing.assert_close(run("uni_pc", 3, noise).double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sampler", ["uni_pc", "dpmpp_2m"])
def test_a_split_run_is_two_ksampler_advanced_runs(sampler, noise):
    """Two experts: KSamplerAdvanced over σ_0 … σ_k with its leftover noise (÷ (1 − σ_k)), then one from σ_k without
    new noise (CONST.noise_scaling: 0·σ_k + (1 − σ_k)·latent), a fresh multistep history each."""
    full = ksampler_sigmas(sampler, "simple", 6, 8.0)
    k = split_step(full, 0.9)
    assert 0 < k < 6 and bool(full[k - 1] * 1000 >= 900) and not bool(full[k] * 1000 >= 900)  # the pipeline's routing
    from modules.modelSampler.comfy_scheduler import SOLVERS

    x = noise
    for segment, first in ((full[:k + 1], True), (full[k:], False)):
        solver = SOLVERS[sampler](segment)
        model_input = solver.begin(segment[0] * x if first else segment[0] * 0 + (1.0 - segment[0]) * x)
        for _ in range(solver.evaluations):
            sigma = solver.sigma()
            model_input = solver.advance(model_input - velocity(model_input, sigma * 1000) * sigma)
        x = model_input / (1.0 - solver.sigmas[-1])
    torch.testing.assert_close(run(sampler, 6, noise, split=0.9), x, rtol=0, atol=1e-6)
    assert not torch.allclose(run(sampler, 6, noise), x)  # one run differs: the split is real


def test_the_default_sample_is_a_comfyui_users_and_old_scheduler_names_migrate():
    sample = SampleConfig(prompt="a fox")
    assert (sample.sampler, sample.scheduler, sample.shift) == ("uni_pc", "simple", 0.0)
    assert sample.negative_prompt == WAN_NEGATIVE_PROMPT and sample.negative_prompt.startswith("色调艳丽")
    from diffusers import UniPCMultistepScheduler

    from modules.modelSampler.schedulers import build_scheduler

    built = build_scheduler(UniPCMultistepScheduler(flow_shift=3.0), sample.sampler, sample.scheduler, sample.shift)
    assert isinstance(built, ComfyFlowScheduler) and built.config.shift == 8.0  # ComfyUI's Wan default
    old = {"samples": [{"prompt": "a", "scheduler": "unipc_a2"}, {"prompt": "b"}],
           "sample_overrides": {"scheduler": "euler"}}
    for data in (old, {**old, "config_version": 2}):
        config = TrainConfig.from_dict(migrate(data, "old.json"))
        assert [(s.sampler, s.scheduler) for s in config.samples] == [("diffusers_unipc_a2", "simple"),
                                                                        ("uni_pc", "simple")]
        assert (config.sample_overrides.sampler, config.sample_overrides.scheduler) == ("diffusers_euler", None)
    assert CONFIG_VERSION >= 4  # the scheduler migration (3) lies behind the current version
    with pytest.raises(ConfigError, match="samples\\[0\\].scheduler' must be one of simple, normal"):
        TrainConfig.from_dict({"samples": [{"prompt": "a", "scheduler": "unipc"}], "config_version": 3})
