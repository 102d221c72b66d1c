"""Optimizer and learning-rate schedule."""
from __future__ import annotations

import math

import torch

from modules.optimizer.registry import spec_of
from modules.util.config.train_config import TrainConfig
from modules.util.enum import LearningRateScheduler


def create_optimizer(params: list[torch.nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """The configured optimizer (modules/optimizer/registry.py) over `params`, with its own options block."""
    spec = spec_of(config.optimizer)
    return spec.create(params, config.learning_rate, config.weight_decay,
                       getattr(config.optimizer_options, config.optimizer.name))


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: LearningRateScheduler) -> float:
    """Multiplier of the peak LR at optimizer step `step` (0-based)."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == LearningRateScheduler.CONSTANT or total_steps <= warmup_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == LearningRateScheduler.LINEAR:
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def create_lr_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(step, total_steps, config.learning_rate_warmup_steps, config.learning_rate_scheduler),
    )
