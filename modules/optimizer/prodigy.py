"""Prodigy (prodigyopt, the authors' package): Adam that estimates the learning rate itself; set
learning_rate to 1.0 and scale with d_coef."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, betas_in_range, positive
from modules.util.base_config import BaseConfig, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class ProdigyOptions(BaseConfig):
    beta1: float = option(0.9, "First-moment decay.")
    beta2: float = option(0.999, "Second-moment decay.")
    eps: float = option(1e-8, "Added to the denominator for stability.")
    d0: float = option(1e-6, "Initial estimate of the step size D.")
    d_coef: float = option(1.0, "Multiplies the estimated step size (below 1: more careful).")
    use_bias_correction: bool = option(False, "Adam's bias correction on the estimate.")
    safeguard_warmup: bool = option(False, "Keep D from growing during LR warmup (use with warmup steps).")
    decouple: bool = option(True, "AdamW-style decoupled weight decay.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "beta1", "beta2")
        positive(self, path, "eps", "d0", "d_coef")


def _prodigy(params, lr: float, weight_decay: float, o: ProdigyOptions) -> torch.optim.Optimizer:
    from prodigyopt import Prodigy

    return Prodigy(params, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=weight_decay, d0=o.d0,
                   d_coef=o.d_coef, use_bias_correction=o.use_bias_correction,
                   safeguard_warmup=o.safeguard_warmup, decouple=o.decouple)


PRODIGY = OptimizerSpec("PRODIGY", ProdigyOptions, _prodigy,
                        "Prodigy (prodigyopt): estimates the step size; use learning_rate 1.0.",
                        module="prodigyopt", install="pip install prodigyopt==1.1.2",
                        state_bytes=16.0)  # two moments, s and the initial weights, fp32
