"""Full fine-tuning: every parameter of the chosen transformer(s) trains."""
from __future__ import annotations

import torch

from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.WanLoRASetup import EXPERT_PREFIX, load_named_parameters


class WanFineTuneSetup(BaseWanSetup):
    def setup_trainable(self) -> list[torch.nn.Parameter]:
        params = []
        for _, transformer in self.trained_transformers():
            transformer.requires_grad_(True)
            params.extend(transformer.parameters())
        return params

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return {EXPERT_PREFIX[expert] + name: p.detach().clone()
                for expert, transformer in self.trained_transformers() for name, p in transformer.named_parameters()}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        load_named_parameters(self, state, lambda expert, name: True)
