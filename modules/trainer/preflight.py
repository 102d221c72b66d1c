"""Checks a training config against the disk before anything loads: every input path is what it should
be and every output location can be created and written, and the dataset's own checks. A mistake costs a second,
not an hour. Light on imports (no model code): scripts/train.py runs `check_before_loading` before it imports the
trainer and diffusers."""
from __future__ import annotations

from collections.abc import Callable

from modules.config.train_config import TrainConfig
from modules.dataLoader.concept_selection import check_concepts
from modules.dataLoader.e2v.config_check import validate_e2v_config
from modules.model.folder_facts import is_animate2_base
from modules.trainer.preflight_animate2 import check_animate2
from modules.trainer.preflight_base import check_against_base, check_input_files, check_sequence_parallel_base
from modules.util.enum import PromptSource, TrainingMethod, WanExpert
from modules.util.errors import UserError
from modules.util.path_checks import (
    check_input_file,
    check_input_folder,
    check_writable_file,
    check_writable_folder,
)

_MODEL_FOLDER = "a diffusers-format Wan folder (the one holding model_index.json)"


def data_kind_name(config: TrainConfig) -> str:
    """Which kind of dataset a config trains on (the key of the trainer's `DATA_KINDS`)."""
    if config.dataset_config:
        return "e2v"
    return "animate_2" if is_animate2_base(config.base_model_name) else "clips"


# Per data kind, its config errors that need no model (the trainer's `DATA_KINDS[...].check`)
DATA_CHECKS: dict[str, Callable[[TrainConfig], None]] = {"clips": check_concepts, "e2v": validate_e2v_config,
                                                         "animate_2": check_concepts}


def check_before_loading(config: TrainConfig) -> None:
    """What the trainer's start checks before a model loads (`check_paths`, then the data kind's check), for the
    command line to run before the heavy imports."""
    check_paths(config)
    DATA_CHECKS[data_kind_name(config)](config)


def check_paths(config: TrainConfig) -> None:
    """One-line `UserError` naming the first key whose path is wrong."""
    check_base_model(config.base_model_name)
    check_expert_keys(config)
    check_against_base(config)
    check_sequence_parallel_base(config)
    check_input_files(config)
    for key in ("transformer_override", "transformer_2_override", "vae_override", "text_encoder_override",
                "image_encoder_override"):
        if getattr(config, key):
            check_input_file(key, getattr(config, key), f"a .safetensors {key.removesuffix('_override')} file")
    if config.base_loras:  # files, their experts and headers against the base's variant
        from modules.model.detection import detect_variant  # here: diffusers' classes come with the registry
        from modules.modelFile.base_loras import check_base_loras

        check_base_loras(config.base_loras, detect_variant(config.base_model_name))
    if config.embedding_weight_path:
        check_input_file("embedding_weight_path", config.embedding_weight_path, "an embedding .safetensors file")
        from modules.modelSaver.embedding_file import read_embedding_vectors  # here: it imports diffusers

        read_embedding_vectors(config.embedding_weight_path, "config key 'embedding_weight_path'")  # e.g. NaN
    if config.dataset_config:
        check_input_file("dataset_config", config.dataset_config, "an E2V dataset .json file")
    if config.e2v.image_encoder_model_name:
        check_input_folder("e2v.image_encoder_model_name", config.e2v.image_encoder_model_name,
                           "a folder with image_encoder/ and image_processor/ (e.g. an I2V checkpoint)")
    if isinstance(config.concepts, list):
        for index, concept in enumerate(config.concepts):
            if concept.enabled and concept.prompt_source == PromptSource.CONCEPT:
                check_input_file(f"concepts[{index}].prompt_path", concept.prompt_path, "a caption .txt file")
    check_writable_folder("workspace_dir", config.workspace_dir)
    if config.latent_caching:
        check_writable_folder("cache_dir", config.cache_dir)
    if config.output_model_format.is_lora() or config.training_method == TrainingMethod.EMBEDDING:
        check_writable_file("output_model_destination", config.output_model_destination)
    else:  # a folder is swapped in beside it
        check_writable_folder("output_model_destination", config.output_model_destination)
    check_animate2(config)  # the keys it cannot use, its triplets and the copying trap


def check_base_model(path: str) -> None:
    if not path:
        raise UserError(f"config key 'base_model_name' is empty: set it to {_MODEL_FOLDER}")
    folder = check_input_folder("base_model_name", path, _MODEL_FOLDER + "; a single .safetensors transformer "
                                "goes in transformer_override")
    if not (folder / "model_index.json").is_file():
        raise UserError(f"config key 'base_model_name': '{folder}' has no model_index.json: set it to "
                        f"{_MODEL_FOLDER}")


# Keys only two-expert models (Wan 2.2 A14B) use (the GUI hides them on a one-expert base).
TWO_EXPERT_KEYS = ("transformer_2_override", "learning_rate_high_noise", "learning_rate_low_noise",
                   "expert_step_share", "offload_inactive_expert", "train_expert")


def check_expert_keys(config: TrainConfig) -> None:
    """Keys of two-expert models (Wan 2.2 A14B) set for a one-expert base would be ignored: refuse them. The base's
    experts are read from its model_index.json, without loading weights."""
    defaults = TrainConfig()
    keys = TWO_EXPERT_KEYS
    if all(getattr(config, key) == getattr(defaults, key) for key in keys):
        return  # nothing to check (and the registry, which imports diffusers, stays unimported)
    from modules.model.detection import detect_variant

    if detect_variant(config.base_model_name).two_experts:
        return
    for key in keys:
        if getattr(config, key) != getattr(defaults, key):
            value = getattr(config, key)
            shown = value.name if isinstance(value, WanExpert) else value
            raise UserError(f"config key '{key}' is {shown!r}, but it applies to two-expert models (Wan 2.2 A14B) "
                            f"and base_model_name '{config.base_model_name}' has one transformer: clear it (or use "
                            f"learning_rate / transformer_override for the one expert)")
