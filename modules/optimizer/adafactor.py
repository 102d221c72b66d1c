"""Adafactor (torch's own): factored second moments, so its state is a fraction of AdamW's."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, positive
from modules.util.base_config import BaseConfig, ConfigError, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class AdafactorOptions(BaseConfig):
    beta2_decay: float = option(-0.8, "Decay rate of the second moment (negative: the step count's power).")
    eps: float = option(1e-3, "Relative step-size floor (torch's eps[1]).")
    d: float = option(1.0, "Clipping threshold of the update's RMS.")

    def validate(self, path: str) -> None:
        if self.beta2_decay > 0:
            raise ConfigError(f"config key '{path}.beta2_decay' must not be positive, got {self.beta2_decay}")
        positive(self, path, "eps", "d")


def _adafactor(params, lr: float, weight_decay: float, o: AdafactorOptions) -> torch.optim.Optimizer:
    import torch  # here, not above: the config imports this module for its options

    return torch.optim.Adafactor(params, lr=lr, beta2_decay=o.beta2_decay, eps=(None, o.eps), d=o.d,
                                 weight_decay=weight_decay)


ADAFACTOR = OptimizerSpec("ADAFACTOR", AdafactorOptions, _adafactor, "Adafactor (torch): factored, small state.",
                         state_bytes=0.5)  # row and column statistics of each matrix (about 0 for large ones)
