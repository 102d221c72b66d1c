"""Full fine-tuning: every parameter of the chosen transformer(s) trains."""
from __future__ import annotations

import torch

from modules.modelSetup import sharding
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.WanLoRASetup import EXPERT_PREFIX, load_named_parameters


class WanFineTuneSetup(BaseWanSetup):
    def setup_transformers(self) -> list[torch.nn.Parameter]:
        params = []
        for _, transformer in self.trained_transformers():
            transformer.requires_grad_(True)
            params.extend(transformer.parameters())
        return params

    def transformer_state(self) -> dict[str, torch.Tensor]:
        """Collective when sharded: rank 0 gets the full weights, the other ranks {}."""
        if self.sharded:
            return sharding.gather_parameters(self.trained_root())
        return {EXPERT_PREFIX[expert] + name: p.detach().clone()
                for expert, transformer in self.trained_transformers() for name, p in transformer.named_parameters()}

    def load_transformer_state(self, state: dict[str, torch.Tensor]) -> None:
        """Sharded: rank 0 passes the backup's weights, the other ranks {} (they receive their shards)."""
        if not self.sharded:
            load_named_parameters(self, state, lambda expert, name: True)
            return
        if state:  # the same name check as the unsharded path, on the rank that read the file
            expected = {name for name, _ in self.trained_root().named_parameters()}
            if missing := expected - set(state):
                raise KeyError(f"backup has no weights for '{sorted(missing)[0]}'")
            if extra := set(state) - expected:
                raise KeyError(f"backup has weights the model lacks, e.g. '{sorted(extra)[0]}'")
        sharding.scatter_parameters(self.trained_root(), state)
