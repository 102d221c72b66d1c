"""What the trainer builds for a config, looked up in plain dicts instead of if/else in GenericTrainer: per
training method its model setup and what `lora_weight_path` does, and per kind of dataset its model-setup step, its
data loader and the sampling options its samples use (its start-up check is `preflight.DATA_CHECKS`). A new training
method or data kind is an entry here (checkpoint families live in modules/model/registry.py)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from modules.config.train_config import TrainConfig
from modules.dataLoader.e2v.sampling_options import E2VSamplingOptions
from modules.dataLoader.WanAnimate2DataLoader import WanAnimate2DataLoader
from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
from modules.model.WanModel import WanModel
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.e2v_expansion import prepare_e2v_model
from modules.modelSetup.WanEmbeddingSetup import WanEmbeddingSetup
from modules.modelSetup.WanFineTuneSetup import WanFineTuneSetup
from modules.modelSetup.WanLoRASetup import WanLoRASetup
from modules.trainer.initial_weights import continue_from_lora, no_adapter_to_continue
from modules.trainer.preflight import data_kind_name
from modules.util.enum import TrainingMethod


@dataclasses.dataclass(frozen=True)
class Method:
    setup: type[BaseWanSetup]
    continue_from: Callable[[WanModel, BaseWanSetup, str], None]  # loads `lora_weight_path` into the setup


SETUPS: dict[TrainingMethod, Method] = {
    TrainingMethod.LORA: Method(WanLoRASetup, continue_from_lora),
    TrainingMethod.FINE_TUNE: Method(WanFineTuneSetup, no_adapter_to_continue),
    TrainingMethod.EMBEDDING: Method(WanEmbeddingSetup, no_adapter_to_continue),  # the config refuses a LoRA file
}


@dataclasses.dataclass(frozen=True)
class DataKind:
    loader: type[WanBaseDataLoader]
    prepare_model: Callable[[WanModel, TrainConfig], dict[int, list[str]]]  # -> fully trained names per expert
    # The layout and pathways of E2V samples during training; None: the sampler's own (A2's roles, CLIP if any).
    sampling_options: Callable[[WanBaseDataLoader], E2VSamplingOptions | None]


def _as_loaded(model: WanModel, config: TrainConfig) -> dict[int, list[str]]:
    return {}


def _sampler_defaults(data: WanBaseDataLoader) -> None:
    return None


DATA_KINDS: dict[str, DataKind] = {
    # concepts: videos and images with captions
    "clips": DataKind(WanBaseDataLoader, _as_loaded, _sampler_defaults),
    # dataset_config: E2V elements
    "e2v": DataKind(WanE2VDataLoader, prepare_e2v_model, WanE2VDataLoader.sampling_options),
    # concepts on a Wan2.2-Animate-2 base: each clip with its driving video and reference image beside it
    "animate_2": DataKind(WanAnimate2DataLoader, _as_loaded, _sampler_defaults),
}


def data_kind(config: TrainConfig) -> DataKind:
    return DATA_KINDS[data_kind_name(config)]
