"""ComfyUI's `uni_pc` sampler (UniPC, B(h) = h: "bh1"), one model evaluation at a time.

Read from ComfyUI a125cd84, `comfy/extra_samplers/uni_pc.py`: `sample_unipc` treats the flow σ as a
variance-exploding σ (`SigmaConvert`: α = 1/√(1+σ²), λ = −log σ), replaces a last σ of 0 by 0.001 (in the sigmas
tensor itself, so KSAMPLER's inverse_noise_scaling then divides by 1 − 0.001), runs `UniPC.sample` multistep with
order min(3, steps − 1), lower_order_final, data prediction, the corrector on every step but the last
(`multistep_uni_pc_bh_update`), and divides the result by α(σ_last). The model is called on x·√(σ²+1) and its
denoised output turned into ε (`predict_eps_sigma`) and back into x0 (`data_prediction_fn`): those roundings are
kept here. ComfyUI evaluates the model at the predictor before correcting, so one evaluation per step; the
correction of step j is finished when evaluation j arrives.
"""
from __future__ import annotations

import torch

from modules.modelSampler.comfy_solvers import KSolver

LAST_SIGMA = 0.001


def _log_mean_coeff(sigma: torch.Tensor) -> torch.Tensor:
    return 0.5 * torch.log(1 / ((sigma * sigma) + 1))


def _alpha(sigma: torch.Tensor) -> torch.Tensor:
    return torch.exp(_log_mean_coeff(sigma))


def _std(sigma: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(1. - torch.exp(2. * _log_mean_coeff(sigma)))


def _lambda(sigma: torch.Tensor) -> torch.Tensor:
    log_mean = _log_mean_coeff(sigma)
    return log_mean - 0.5 * torch.log(1. - torch.exp(2. * log_mean))


def _dims(v: torch.Tensor, ndim: int) -> torch.Tensor:
    return v[(...,) + (None,) * (ndim - 1)]


class UniPCSolver(KSolver):
    def __init__(self, sigmas: torch.Tensor):
        timesteps = sigmas.clone()
        if timesteps[-1] == 0:
            timesteps[-1] = LAST_SIGMA
        super().__init__(timesteps)
        self.steps = len(timesteps) - 1
        self.order = min(3, len(timesteps) - 2)
        self.models: list[torch.Tensor] = []
        self.times: list[torch.Tensor] = []
        self.pending = None  # (x_t_, D1s, rhos_c, alpha_t·B_h, model_prev_0) of the step awaiting its corrector

    @property
    def evaluations(self) -> int:
        return self.steps

    @property
    def last_sigma(self) -> torch.Tensor:
        """The σ KSAMPLER's inverse_noise_scaling reads after this run (0.001 where the schedule ended at 0)."""
        return self.sigmas[-1]

    def _vec(self, j: int) -> torch.Tensor:
        return self.sigmas[j].expand(self.x.shape[0])

    def _model_input(self, j: int) -> torch.Tensor:
        sigma = self._vec(j).view(-1, *([1] * (self.x.ndim - 1)))
        return self.x * ((sigma ** 2 + 1.0) ** 0.5)

    def begin(self, x: torch.Tensor) -> torch.Tensor:
        self.x = x / torch.sqrt(1.0 + self.sigmas[0] ** 2.0)
        return self._model_input(0)

    def advance(self, denoised: torch.Tensor) -> torch.Tensor:
        j, t = self.index, self._vec(self.index)
        sigma = t.view(-1, *([1] * (denoised.ndim - 1)))
        eps = (self._model_input(j) - denoised) / sigma
        x0 = (self.x - _dims(_std(t), self.x.ndim) * eps) / _dims(_alpha(t), self.x.ndim)
        if self.pending is not None:  # the corrector of the step into σ_j, with the model at its predictor
            x_t_, d1s, rhos_c, scale, model_prev_0 = self.pending
            corr_res = torch.tensordot(d1s, rhos_c[:-1], dims=([1], [0])) if d1s is not None else 0
            self.x = x_t_ - _dims(scale, self.x.ndim) * (corr_res + rhos_c[-1] * (x0 - model_prev_0))
            self.pending = None
        self.models, self.times = (self.models + [x0])[-max(self.order, 1):], (self.times + [t])[-max(self.order, 1):]
        self.index = j + 1
        target = j + 1
        if self.order == 0 or target > self.steps:  # one step: ComfyUI's loop only evaluates
            return self.x / _alpha(self.sigmas[-1])
        order = target if target < self.order else min(self.order, self.steps + 1 - target)
        corrector = target != self.steps
        self._update(self._vec(target), order, corrector)
        if not corrector:
            return self.x / _alpha(self.sigmas[-1])
        return self._model_input(target)

    def _update(self, t: torch.Tensor, order: int, corrector: bool) -> None:
        """multistep_uni_pc_bh_update (bh1, predict_x0) up to its corrector; the corrector waits for the model."""
        x, dims = self.x, self.x.ndim
        t_prev_0, model_prev_0 = self.times[-1], self.models[-1]
        lambda_prev_0, lambda_t = _lambda(t_prev_0), _lambda(t)
        sigma_prev_0, sigma_t = _std(t_prev_0), _std(t)
        alpha_t = torch.exp(_log_mean_coeff(t))
        h = lambda_t - lambda_prev_0
        rks, d1s = [], []
        for i in range(1, order):
            rk = ((_lambda(self.times[-(i + 1)]) - lambda_prev_0) / h)[0]
            rks.append(rk)
            d1s.append((self.models[-(i + 1)] - model_prev_0) / rk)
        rks.append(1.)
        rks = torch.tensor(rks, device=x.device)
        hh = -h[0]
        h_phi_1 = torch.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        factorial_i, big_r, b = 1, [], []
        b_h = hh  # bh1
        for i in range(1, order + 1):
            big_r.append(torch.pow(rks, i - 1))
            b.append(h_phi_k * factorial_i / b_h)
            factorial_i *= (i + 1)
            h_phi_k = h_phi_k / hh - 1 / factorial_i
        big_r, b = torch.stack(big_r), torch.tensor(b, device=x.device)
        stacked = torch.stack(d1s, dim=1) if d1s else None
        x_t_ = _dims(sigma_t / sigma_prev_0, dims) * x - _dims(alpha_t * h_phi_1, dims) * model_prev_0
        if stacked is not None:
            rhos_p = torch.tensor([0.5], device=b.device) if order == 2 else torch.linalg.solve(big_r[:-1, :-1], b[:-1])
            pred_res = torch.tensordot(stacked, rhos_p, dims=([1], [0]))
        else:
            pred_res = 0
        self.x = x_t_ - _dims(alpha_t * b_h, dims) * pred_res
        if corrector:
            rhos_c = torch.tensor([0.5], device=b.device) if order == 1 else torch.linalg.solve(big_r, b)
            self.pending = (x_t_, stacked, rhos_c, alpha_t * b_h, model_prev_0)
