"""AdamW (torch) and its 8-bit form (bitsandbytes, optional: CUDA builds only)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, betas_in_range, positive
from modules.util.base_config import BaseConfig, ConfigError, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class AdamW8bitOptions(BaseConfig):
    beta1: float = option(0.9, "First-moment decay.")
    beta2: float = option(0.999, "Second-moment decay.")
    eps: float = option(1e-8, "Added to the denominator for stability.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "beta1", "beta2")
        positive(self, path, "eps")


@dataclasses.dataclass
class AdamWOptions(AdamW8bitOptions):
    fused: str = option("auto", "auto | on | off: torch's fused AdamW step (one kernel for every parameter); auto = on when the parameters are on a CUDA GPU.")

    def validate(self, path: str) -> None:
        super().validate(path)
        if self.fused not in ("auto", "on", "off"):
            raise ConfigError(f"config key '{path}.fused' must be auto, on or off, got '{self.fused}'")


def _on_cuda(params) -> bool:
    tensors = [p for group in params for p in group["params"]] if params and isinstance(params[0], dict) else params
    return bool(tensors) and all(p.device.type == "cuda" for p in tensors)


def _adamw(params, lr: float, weight_decay: float, o: AdamWOptions) -> torch.optim.Optimizer:
    import torch  # here, not above: the config imports this module for its options

    params = list(params)
    fused = o.fused == "on" or (o.fused == "auto" and _on_cuda(params))
    # unfused: torch's foreach step (one call per operation for all tensors, not a Python loop over them; the
    # same arithmetic bit for bit), which torch picks by itself only on CUDA
    return torch.optim.AdamW(params, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=weight_decay,
                             fused=fused or None, foreach=None if fused else True)


def _adamw_8bit(params, lr: float, weight_decay: float, o: AdamW8bitOptions) -> torch.optim.Optimizer:
    import bitsandbytes

    return bitsandbytes.optim.AdamW8bit(params, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=weight_decay)


ADAMW = OptimizerSpec("ADAMW", AdamWOptions, _adamw, "AdamW (torch).", shards=True)
ADAMW_8BIT = OptimizerSpec(
    "ADAMW_8BIT", AdamW8bitOptions, _adamw_8bit, "AdamW with 8-bit states (bitsandbytes; CUDA): about a quarter of "
    "AdamW's state memory.", module="bitsandbytes",
    install="pip install bitsandbytes==0.50.2 (a CUDA build of torch is needed), or choose ADAMW",
    state_bytes=2.0)  # two 8-bit moments
