"""Optimizer and learning-rate schedule."""
from __future__ import annotations

import logging
import math

import torch

from modules.util.config.train_config import TrainConfig
from modules.util.enum import LearningRateScheduler, Optimizer

logger = logging.getLogger(__name__)


def create_optimizer(params: list[torch.nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    kwargs = dict(lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
                  weight_decay=config.weight_decay)
    if config.optimizer == Optimizer.ADAMW_8BIT:
        try:
            import bitsandbytes as bnb  # optional dependency

            return bnb.optim.AdamW8bit(params, **kwargs)
        except ImportError:
            logger.warning("optimizer ADAMW_8BIT needs bitsandbytes (pip install bitsandbytes); using ADAMW")
    return torch.optim.AdamW(params, **kwargs)


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
