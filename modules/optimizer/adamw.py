"""AdamW (torch) and its 8-bit form (bitsandbytes, optional: CUDA builds only)."""
from __future__ import annotations

import dataclasses

import torch

from modules.optimizer.spec import OptimizerSpec, betas_in_range, positive
from modules.util.config.base_config import BaseConfig, option


@dataclasses.dataclass
class AdamWOptions(BaseConfig):
    beta1: float = option(0.9, "First-moment decay.")
    beta2: float = option(0.999, "Second-moment decay.")
    eps: float = option(1e-8, "Added to the denominator for stability.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "beta1", "beta2")
        positive(self, path, "eps")


def _adamw(params, lr: float, weight_decay: float, o: AdamWOptions) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=weight_decay)


def _adamw_8bit(params, lr: float, weight_decay: float, o: AdamWOptions) -> torch.optim.Optimizer:
    import bitsandbytes

    return bitsandbytes.optim.AdamW8bit(params, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=weight_decay)


ADAMW = OptimizerSpec("ADAMW", AdamWOptions, _adamw, "AdamW (torch).", shards=True)
ADAMW_8BIT = OptimizerSpec(
    "ADAMW_8BIT", AdamWOptions, _adamw_8bit, "AdamW with 8-bit states (bitsandbytes; CUDA): about a quarter of "
    "AdamW's state memory.", module="bitsandbytes",
    install="pip install bitsandbytes==0.50.2 (a CUDA build of torch is needed), or choose ADAMW",
    state_bytes=2.0)  # two 8-bit moments
