"""Schedule-free AdamW (schedulefree, Meta's reference package): no decay schedule needed; it trains on y and
averages into x, which is what saves and samples use (see `OptimizerSpec.averaged_weights`)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, betas_in_range, positive
from modules.util.base_config import BaseConfig, ConfigError, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class ScheduleFreeOptions(BaseConfig):
    beta1: float = option(0.9, "Interpolation between the averaged and the trained weights.")
    beta2: float = option(0.999, "Second-moment decay.")
    eps: float = option(1e-8, "Added to the denominator for stability.")
    warmup_steps: int = option(0, "The optimizer's own warmup (keep learning_rate_scheduler CONSTANT).")
    r: float = option(0.0, "Polynomial weighting power of the average.")
    weight_lr_power: float = option(2.0, "How strongly the learning rate weights the average.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "beta1", "beta2")
        positive(self, path, "eps")
        if self.warmup_steps < 0:
            raise ConfigError(f"config key '{path}.warmup_steps' must not be negative, got {self.warmup_steps}")


def _schedule_free(params, lr: float, weight_decay: float, o: ScheduleFreeOptions) -> torch.optim.Optimizer:
    from schedulefree import AdamWScheduleFree

    optimizer = AdamWScheduleFree(params, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=weight_decay,
                                  warmup_steps=o.warmup_steps, r=o.r, weight_lr_power=o.weight_lr_power)
    optimizer.train()  # it starts in eval mode; training steps need train mode
    return optimizer


ADAMW_SCHEDULE_FREE = OptimizerSpec(
    "ADAMW_SCHEDULE_FREE", ScheduleFreeOptions, _schedule_free,
    "Schedule-free AdamW (schedulefree): no LR decay needed; saves and samples use its averaged weights.",
    module="schedulefree", install="pip install schedulefree==1.4.1", schedule_free=True,
    state_bytes=8.0)  # z and the second moment, fp32
