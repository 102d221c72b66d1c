"""Lion (pytorch-optimizer): sign updates with one moment; use a learning rate 3-10x below AdamW's."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, betas_in_range
from modules.util.base_config import BaseConfig, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class LionOptions(BaseConfig):
    beta1: float = option(0.9, "Interpolation of the update direction.")
    beta2: float = option(0.99, "Momentum decay.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "beta1", "beta2")


def _lion(params, lr: float, weight_decay: float, o: LionOptions) -> torch.optim.Optimizer:
    from pytorch_optimizer import Lion

    return Lion(params, lr=lr, betas=(o.beta1, o.beta2), weight_decay=weight_decay)


LION = OptimizerSpec("LION", LionOptions, _lion, "Lion (pytorch-optimizer): one moment, sign updates.",
                     module="pytorch_optimizer", install="pip install pytorch-optimizer==4.1.0",
                     state_bytes=4.0)  # one fp32 moment
