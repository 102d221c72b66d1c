"""CAME (pytorch-optimizer): confidence-guided Adafactor, Adafactor's memory with Adam's stability."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, betas_in_range, positive
from modules.util.base_config import BaseConfig, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class CameOptions(BaseConfig):
    beta1: float = option(0.9, "First-moment decay.")
    beta2: float = option(0.999, "Second-moment decay.")
    beta3: float = option(0.9999, "Confidence decay.")
    eps1: float = option(1e-30, "Stability term of the second moment.")
    eps2: float = option(1e-16, "Stability term of the confidence.")
    clip_threshold: float = option(1.0, "Clipping threshold of the update's RMS.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "beta1", "beta2", "beta3")
        positive(self, path, "eps1", "eps2", "clip_threshold")


def _came(params, lr: float, weight_decay: float, o: CameOptions) -> torch.optim.Optimizer:
    from pytorch_optimizer import CAME

    return CAME(params, lr=lr, betas=(o.beta1, o.beta2, o.beta3), weight_decay=weight_decay, eps1=o.eps1,
                eps2=o.eps2, clip_threshold=o.clip_threshold)


CAME = OptimizerSpec("CAME", CameOptions, _came, "CAME (pytorch-optimizer): Adafactor's memory, Adam's stability.",
                     module="pytorch_optimizer", install="pip install pytorch-optimizer==4.1.0",
                     state_bytes=4.5)  # one full fp32 moment and factored statistics
