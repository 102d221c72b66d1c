"""What the trainer builds for a config, looked up in plain dicts instead of if/else in GenericTrainer: the
model setup of each training method, and per kind of dataset its config check, its model-setup step and its
data loader. A new training method or data kind is an entry here (checkpoint families live in
modules/model/registry.py)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader, validate_e2v_config
from modules.model.WanModel import WanModel
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.e2v_expansion import prepare_e2v_model
from modules.modelSetup.WanFineTuneSetup import WanFineTuneSetup
from modules.modelSetup.WanLoRASetup import WanLoRASetup
from modules.util.config.train_config import TrainConfig
from modules.util.enum import TrainingMethod

SETUPS: dict[TrainingMethod, type[BaseWanSetup]] = {
    TrainingMethod.LORA: WanLoRASetup,
    TrainingMethod.FINE_TUNE: WanFineTuneSetup,
}


@dataclasses.dataclass(frozen=True)
class DataKind:
    loader: type[WanBaseDataLoader]
    check: Callable[[TrainConfig], None]  # config errors, before any model loads
    prepare_model: Callable[[WanModel, TrainConfig], dict[int, list[str]]]  # -> fully trained names per expert


def _no_check(config: TrainConfig) -> None:
    return None


def _as_loaded(model: WanModel, config: TrainConfig) -> dict[int, list[str]]:
    return {}


DATA_KINDS: dict[str, DataKind] = {
    "clips": DataKind(WanBaseDataLoader, _no_check, _as_loaded),  # concepts: videos and images with captions
    "e2v": DataKind(WanE2VDataLoader, validate_e2v_config, prepare_e2v_model),  # dataset_config: E2V elements
}


def data_kind(config: TrainConfig) -> DataKind:
    return DATA_KINDS["e2v" if config.dataset_config else "clips"]
