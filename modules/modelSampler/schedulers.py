"""The one place a sampling scheduler is built: the model folder's own, or a named flow-matching solver.

Named solvers are diffusers' classes in the flow configuration diffusers' Wan folders use
(`prediction_type="flow_prediction"`, `use_flow_sigmas=True`); `unipc` with shift 8 is exactly the
scheduler SkyReels-A2's infer.py builds. Shift 0 keeps the folder's shift (3 for Wan2.1 480P).
"""
from __future__ import annotations

from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
from diffusers.schedulers import SchedulerMixin

from modules.util.config.sampling_choices import SAMPLE_SCHEDULERS
from modules.util.errors import UserError

_SHIFT_KEYS = ("flow_shift", "shift")  # UniPC / DPM++ call it flow_shift, FlowMatchEuler shift


def _shift_key(scheduler: SchedulerMixin) -> str | None:
    return next((key for key in _SHIFT_KEYS if key in scheduler.config), None)


def folder_shift(scheduler: SchedulerMixin) -> float | None:
    key = _shift_key(scheduler)
    return float(scheduler.config[key]) if key else None


def _named(name: str, num_train_timesteps: int, shift: float) -> SchedulerMixin:
    if name == "unipc":
        return UniPCMultistepScheduler(num_train_timesteps=num_train_timesteps, prediction_type="flow_prediction",
                                       use_flow_sigmas=True, flow_shift=shift)
    if name == "euler":
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=num_train_timesteps, shift=shift)
    if name == "dpmpp":
        return DPMSolverMultistepScheduler(num_train_timesteps=num_train_timesteps, prediction_type="flow_prediction",
                                           use_flow_sigmas=True, flow_shift=shift, algorithm_type="dpmsolver++",
                                           solver_order=2)
    raise UserError(f"unknown scheduler '{name}': use one of {', '.join(SAMPLE_SCHEDULERS)}")


def build_scheduler(folder: SchedulerMixin, name: str = "default", shift: float = 0.0) -> SchedulerMixin:
    """A fresh scheduler for one sampling run (never the model's own object, whose timesteps it would change)."""
    own_shift = folder_shift(folder)
    if name != "default":
        return _named(name, int(folder.config.get("num_train_timesteps", 1000)), shift or own_shift or 1.0)
    key = _shift_key(folder)
    if shift and key is None:
        raise UserError(f"shift {shift:g}: the model's scheduler {type(folder).__name__} has no flow shift; "
                        f"pick scheduler unipc, euler or dpmpp to set one")
    return type(folder).from_config(folder.config, **({key: shift} if shift else {}))
