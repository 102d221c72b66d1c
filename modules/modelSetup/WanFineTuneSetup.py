"""Full fine-tuning: every parameter of the chosen transformer(s) trains (of a VACE model, those of the blocks
`vace_train_blocks` picks)."""
from __future__ import annotations

import torch

from modules.modelSetup import sharding
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.WanLoRASetup import EXPERT_PREFIX, load_named_parameters
from modules.modelSetup.lora_targets import in_vace_scope


class WanFineTuneSetup(BaseWanSetup):
    def setup_transformers(self) -> list[torch.nn.Parameter]:
        params = []
        for expert, transformer in self.trained_transformers():
            for name, param in transformer.named_parameters():
                param.requires_grad_(self._trains(expert, name))
                if param.requires_grad:
                    params.append(param)
        return params

    def _trains(self, expert: int, name: str) -> bool:
        return not self.model.variant.vace_layers or in_vace_scope(name, self.config.vace_train_blocks)

    def transformer_state(self) -> dict[str, torch.Tensor]:
        """Collective when sharded: rank 0 gets the full weights, the other ranks {}."""
        if self.sharded:
            return sharding.gather_parameters(self.trained_root())
        return {EXPERT_PREFIX[expert] + name: p.detach().clone()
                for expert, transformer in self.trained_transformers() for name, p in transformer.named_parameters()
                if self._trains(expert, name)}

    def load_transformer_state(self, state: dict[str, torch.Tensor]) -> None:
        """Sharded: rank 0 passes the backup's weights, the other ranks {} (they receive their shards)."""
        if not self.sharded:
            load_named_parameters(self, state, self._trains)
            return
        if state:  # the same name check as the unsharded path, on the rank that read the file
            expected = {name for name, _ in self.trained_root().named_parameters()}
            if missing := expected - set(state):
                raise KeyError(f"backup has no weights for '{sorted(missing)[0]}'")
            if extra := set(state) - expected:
                raise KeyError(f"backup has weights the model lacks, e.g. '{sorted(extra)[0]}'")
        sharding.scatter_parameters(self.trained_root(), state)
