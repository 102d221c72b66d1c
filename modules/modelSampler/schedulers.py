"""The one place a sampling scheduler is built: one of ComfyUI's samplers × schedulers (the default: uni_pc, simple,
shift 8, as ComfyUI samples Wan: comfy_scheduler.py), or a diffusers solver (`diffusers_*`).

The diffusers solvers are diffusers' classes in the flow configuration diffusers' Wan folders use
(`prediction_type="flow_prediction"`, `use_flow_sigmas=True`); `diffusers_unipc` with shift 8 is the scheduler
SkyReels-A2's infer.py builds, and `diffusers_unipc_a2` the same with the flow sigmas A2 ran on (`A2FlowUniPC`).
Their shift 0 keeps the folder's shift (3 for Wan2.1 480P).
"""
from __future__ import annotations

import numpy as np
from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
from diffusers.schedulers import SchedulerMixin

from modules.config.sampling_choices import COMFY_SAMPLERS, DIFFUSERS_SAMPLERS
from modules.modelSampler.comfy_scheduler import ComfyFlowScheduler
from modules.modelSampler.comfy_sigmas import COMFY_WAN_SHIFT
from modules.util.errors import UserError

_SHIFT_KEYS = ("flow_shift", "shift")  # UniPC / DPM++ call it flow_shift, FlowMatchEuler shift


def _shift_key(scheduler: SchedulerMixin) -> str | None:
    return next((key for key in _SHIFT_KEYS if key in scheduler.config), None)


def folder_shift(scheduler: SchedulerMixin) -> float | None:
    key = _shift_key(scheduler)
    return float(scheduler.config[key]) if key else None


def a2_flow_sigmas(num_inference_steps: int, num_train_timesteps: int) -> np.ndarray:
    """The unshifted flow sigmas of diffusers 0.33's UniPCMultistepScheduler.set_timesteps (v0.33.1, 375ec930,
    scheduling_unipc_multistep.py, the `use_flow_sigmas` branch)::

        alphas = np.linspace(1, 1 / self.config.num_train_timesteps, num_inference_steps + 1)
        sigmas = 1.0 - alphas
        sigmas = np.flip(self.config.flow_shift * sigmas / (1 + (self.config.flow_shift - 1) * sigmas))[:-1].copy()

    i.e. the shift applied to 1 - 1/N ... (1 - 1/N)/n (the flip puts the 0 last, and [:-1] drops it). Every
    diffusers up to 0.36.0 computes this; SkyReels-A2 (7c14e2e3, 2025-04-16) installs diffusers from git, then
    0.34.0.dev0 with the same code (3e59d531). diffusers #12109 (7a02fada, 0.37) starts from
    linspace(1, 1/N, n + 1)[:-1] instead: first sigma 1 - 1e-6, against 0.99987 here at shift 8, N 1000. The
    shift is the same formula in both, so these are handed to it unshifted."""
    alphas = np.linspace(1, 1 / num_train_timesteps, num_inference_steps + 1)
    return np.flip(1.0 - alphas)[:-1].copy()  # the shift is monotone: shifting after the flip is the same


class A2FlowUniPC(UniPCMultistepScheduler):
    """UniPC in the flow configuration with diffusers <= 0.36's sigmas (`a2_flow_sigmas`): SkyReels-A2's infer.py
    on the diffusers of its time. Only the sigmas differ; the solver steps are the installed diffusers' (the same
    50-step result as diffusers 0.33.1's to 0 difference: tools/check_unipc_a2.py)."""

    def set_timesteps(self, num_inference_steps=None, device=None, sigmas=None, mu=None):
        if sigmas is None and num_inference_steps is not None:
            sigmas = a2_flow_sigmas(num_inference_steps, self.config.num_train_timesteps)
        super().set_timesteps(num_inference_steps, device=device, sigmas=sigmas, mu=mu)


def _named(name: str, num_train_timesteps: int, shift: float) -> SchedulerMixin:
    if name in ("unipc", "unipc_a2"):
        solver = A2FlowUniPC if name == "unipc_a2" else UniPCMultistepScheduler
        return solver(num_train_timesteps=num_train_timesteps, prediction_type="flow_prediction",
                      use_flow_sigmas=True, flow_shift=shift)
    if name == "euler":
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=num_train_timesteps, shift=shift)
    if name == "dpmpp":
        return DPMSolverMultistepScheduler(num_train_timesteps=num_train_timesteps, prediction_type="flow_prediction",
                                           use_flow_sigmas=True, flow_shift=shift, algorithm_type="dpmsolver++",
                                           solver_order=2)
    raise UserError(f"unknown sampler 'diffusers_{name}': use one of {', '.join(DIFFUSERS_SAMPLERS)}")


def build_scheduler(folder: SchedulerMixin, sampler: str = "uni_pc", scheduler: str = "simple", shift: float = 0.0,
                    split_sigma: float | None = None) -> SchedulerMixin:
    """A fresh scheduler for one sampling run (never the model's own object, whose timesteps it would change).
    ComfyUI's samplers: shift 0 = ComfyUI's Wan default (8); `split_sigma` (a two-expert model's boundary) runs them
    as the two KSamplerAdvanced nodes of the exported workflow. diffusers' solvers: shift 0 = the folder's."""
    if sampler in COMFY_SAMPLERS:
        return ComfyFlowScheduler(sampler, scheduler, shift or COMFY_WAN_SHIFT,
                                  int(folder.config.get("num_train_timesteps", 1000)), split_sigma)
    if not sampler.startswith("diffusers_"):
        raise UserError(f"unknown sampler '{sampler}': use one of {', '.join(COMFY_SAMPLERS + DIFFUSERS_SAMPLERS)}")
    name = sampler.removeprefix("diffusers_")
    own_shift = folder_shift(folder)
    if name != "default":
        return _named(name, int(folder.config.get("num_train_timesteps", 1000)), shift or own_shift or 1.0)
    key = _shift_key(folder)
    if shift and key is None:
        raise UserError(f"shift {shift:g}: the model's scheduler {type(folder).__name__} has no flow shift; "
                        f"pick a ComfyUI sampler or diffusers_unipc, diffusers_euler ... to set one")
    return type(folder).from_config(folder.config, **({key: shift} if shift else {}))


def sample_scheduler(model, sample) -> SchedulerMixin:
    """The scheduler of one sample (a SampleConfig) on `model` (a WanModel): two-expert models split at their boundary."""
    split = model.variant.boundary_sigma if model.variant.two_experts else None
    return build_scheduler(model.scheduler, sample.sampler, sample.scheduler, sample.shift, split)


def shift_used(folder: SchedulerMixin, sampler: str, shift: float) -> float | None:
    """The flow shift a sample runs at: its own, else ComfyUI's Wan default (the ComfyUI samplers) or the model
    folder's (the diffusers_* ones; None where that scheduler has no shift), as `build_scheduler` applies it."""
    if shift:
        return float(shift)
    return float(COMFY_WAN_SHIFT) if sampler in COMFY_SAMPLERS else folder_shift(folder)
