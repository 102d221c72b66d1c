"""Muon (pytorch-optimizer): orthogonalised momentum for weight matrices; parameters with fewer than two
dimensions (biases, norms, DoRA magnitudes) take the AdamW rule inside the same optimizer. torch's own
`optim.Muon` refuses non-matrix parameters, which a full fine-tune always has."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from modules.optimizer.spec import OptimizerSpec, as_groups, betas_in_range, positive
from modules.util.base_config import BaseConfig, ConfigError, option

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclasses.dataclass
class MuonOptions(BaseConfig):
    momentum: float = option(0.95, "Momentum of the matrix updates.")
    nesterov: bool = option(True, "Nesterov momentum.")
    ns_steps: int = option(5, "Newton-Schulz iterations of the orthogonalisation.")
    adjusted_lr: bool = option(True, "Scale matrix updates by their shape (Moonlight), so AdamW-like learning rates work.")
    adamw_lr_ratio: float = option(1.0, "learning_rate of the non-matrix parameters, relative to learning_rate.")
    adamw_beta1: float = option(0.9, "AdamW beta1 of the non-matrix parameters.")
    adamw_beta2: float = option(0.95, "AdamW beta2 of the non-matrix parameters.")
    adamw_eps: float = option(1e-10, "AdamW epsilon of the non-matrix parameters.")

    def validate(self, path: str) -> None:
        betas_in_range(self, path, "momentum", "adamw_beta1", "adamw_beta2")
        positive(self, path, "adamw_lr_ratio", "adamw_eps")
        if self.ns_steps < 1:
            raise ConfigError(f"config key '{path}.ns_steps' must be at least 1, got {self.ns_steps}")


def _muon(params, lr: float, weight_decay: float, o: MuonOptions) -> torch.optim.Optimizer:
    from pytorch_optimizer import Muon

    groups = []
    for group in as_groups(params, lr):  # each incoming group (its own rate) splits into matrices and the rest
        groups += [dict(params=[p for p in group["params"] if p.ndim >= 2], use_muon=True, lr=group["lr"],
                        weight_decay=weight_decay),
                   dict(params=[p for p in group["params"] if p.ndim < 2], use_muon=False,
                        lr=group["lr"] * o.adamw_lr_ratio, betas=(o.adamw_beta1, o.adamw_beta2), eps=o.adamw_eps,
                        weight_decay=weight_decay)]
    return Muon([g for g in groups if g["params"]], lr=lr, momentum=o.momentum, weight_decay=weight_decay,
                nesterov=o.nesterov, ns_steps=o.ns_steps, use_adjusted_lr=o.adjusted_lr)


MUON = OptimizerSpec("MUON", MuonOptions, _muon,
                     "Muon (pytorch-optimizer): orthogonalised matrix updates; AdamW for the rest.",
                     module="pytorch_optimizer", install="pip install pytorch-optimizer==4.1.0",
                     state_bytes=4.0)  # the momentum of matrices (AdamW's two moments for the few others)
