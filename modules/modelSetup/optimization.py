"""Optimizer and learning-rate schedule."""
from __future__ import annotations

import math

import torch

from modules.config.train_config import TrainConfig
from modules.optimizer.registry import spec_of
from modules.util.enum import LearningRateScheduler


def create_optimizer(params: list[torch.nn.Parameter] | list[dict], config: TrainConfig) -> torch.optim.Optimizer:
    """The configured optimizer (modules/optimizer/registry.py) over `params` (or parameter groups with their
    own "lr", see `BaseWanSetup.parameter_groups`), with its own options block."""
    spec = spec_of(config.optimizer)
    return spec.create(params, config.learning_rate, config.weight_decay,
                       getattr(config.optimizer_options, config.optimizer.name))


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: LearningRateScheduler,
              cycles: float = 1.0, min_factor: float = 0.0) -> float:
    """Multiplier of the peak LR at optimizer step `step` (0-based): a linear warm-up of `warmup_steps` steps below
    the peak (1/(W+1), ..., W/(W+1): no step at 0), then the schedule's decay from 1 at step W to `min_factor` over
    the remaining steps. COSINE_WITH_RESTARTS peaks exactly at steps W + k·(total − W)/cycles."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == LearningRateScheduler.CONSTANT or total_steps <= warmup_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_factor + (1.0 - min_factor) * _decay(schedule, progress, cycles)


def _decay(schedule: LearningRateScheduler, progress: float, cycles: float) -> float:
    """1 at progress 0, 0 at progress 1 (restarts: each cycle starts again at 1)."""
    if schedule == LearningRateScheduler.LINEAR:
        return 1.0 - progress
    if schedule == LearningRateScheduler.REX:
        return (1.0 - progress) / (1.0 - 0.5 * progress)
    if schedule == LearningRateScheduler.COSINE_WITH_RESTARTS:
        if progress >= 1.0:
            return 0.0
        return 0.5 * (1.0 + math.cos(math.pi * ((cycles * progress) % 1.0)))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def create_lr_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int):
    """One factor for every parameter group: each keeps its own peak (LoRA+, per-expert rates)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(step, total_steps, config.learning_rate_warmup_steps, config.learning_rate_scheduler,
                               config.learning_rate_cycles, config.learning_rate_min_factor),
    )
