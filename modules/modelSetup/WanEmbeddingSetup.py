"""Embedding training (textual inversion, `training_method: EMBEDDING`): the transformer(s) stay frozen; only the
embedding's vectors train (`embedding_training.py`), through the frozen transformer's gradients."""
from __future__ import annotations

import torch

from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.memory import store_base_weights
from modules.util.errors import UserError


class WanEmbeddingSetup(BaseWanSetup):
    def setup_transformers(self) -> list[torch.nn.Parameter]:
        if any(self.full_train.values()):  # E2V on a T2V base adds input layers that must train
            raise UserError("config key 'training_method': EMBEDDING leaves the transformer frozen, but this E2V "
                            "dataset on a T2V base needs its new input layers trained: use LORA with "
                            "embedding.placeholder set")
        for _, transformer in self.trained_transformers():  # the experts the step runs through
            transformer.requires_grad_(False)
            store_base_weights(self.config, transformer, self.model.train_dtype)  # frozen: as under a LoRA
        return []

    def _trains(self, expert: int, name: str) -> bool:
        return False

    def transformer_state(self) -> dict[str, torch.Tensor]:
        return {}

    def load_transformer_state(self, state: dict[str, torch.Tensor]) -> None:
        if state:
            raise KeyError(f"backup has weights the model lacks, e.g. '{sorted(state)[0]}'")
