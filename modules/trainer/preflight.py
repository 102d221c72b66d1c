"""Checks a training config against the disk before anything loads: every input path is what it should
be and every output location can be created and written, and the dataset's own checks. A mistake costs a second,
not an hour. Light on imports (no model code): scripts/train.py runs `check_before_loading` before it imports the
trainer and diffusers.

`start_up_problems` is the one check: the trainer's start, train.py and the GUI (each problem beside its field,
before Start) all run it. It returns every problem it finds, each as (config key, one-line message); the command
line stops on the first."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from modules.config.train_config import TrainConfig
from modules.dataLoader.concept_selection import check_concepts
from modules.dataLoader.e2v.config_check import validate_e2v_config
from modules.model.folder_facts import is_animate2_base
from modules.trainer.preflight_animate2 import check_animate2
from modules.trainer.preflight_base import (
    check_against_base,
    check_lora_to_continue,
    check_sample_against_base,
    check_sample_files,
    check_sequence_parallel_base,
)
from modules.trainer.preflight_outputs import check_outputs_not_inputs
from modules.util.enum import PromptSource, TrainingMethod, WanExpert
from modules.util.errors import UserError, key_of
from modules.util.path_checks import (
    check_input_file,
    check_input_folder,
    check_writable_file,
    check_writable_folder,
)

if TYPE_CHECKING:
    from modules.dataLoader.verdict import RunVerdict

_MODEL_FOLDER = "a diffusers-format Wan folder (the one holding model_index.json)"


def data_kind_name(config: TrainConfig) -> str:
    """Which kind of dataset a config trains on (the key of the trainer's `DATA_KINDS`)."""
    if config.dataset_config:
        return "e2v"
    return "animate_2" if is_animate2_base(config.base_model_name) else "clips"


def _check_e2v(config: TrainConfig) -> None:
    validate_e2v_config(config)  # the E2V loader judges its samples as it discovers them


def _check_concepts(config: TrainConfig) -> RunVerdict:
    from modules.dataLoader.verdict import check_data  # here: it probes clips (torch, av, cv2)

    return check_data(config)


# Per data kind, its check that needs no model: the concepts' data verdict (the loader trains on its items), or the
# E2V dataset's config
DATA_CHECKS: dict[str, Callable[[TrainConfig], RunVerdict | None]] = {"clips": _check_concepts, "e2v": _check_e2v,
                                                                      "animate_2": _check_concepts}
# The part of each that needs no torch (`check_paths`, before train.py imports the trainer): a concept to train on,
# the E2V dataset's config
QUICK_DATA_CHECKS: dict[str, Callable[[TrainConfig], None]] = {"clips": check_concepts, "e2v": _check_e2v,
                                                               "animate_2": check_concepts}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing start-up refuses: the config key it is about, as the GUI's fields name them ("base_model_name",
    "samples[0].driving_video", "base_loras[1].path"; "" when no one key is to blame) and the one-line message."""

    key: str
    message: str
    error: UserError | None = dataclasses.field(default=None, compare=False, repr=False)  # as raised (its class)


def start_up_problems(config: TrainConfig, data: bool = True, config_files: Sequence[str] = ()) -> list[Problem]:
    """Every error the trainer's start finds without loading a model, in config order. Checks that need the base
    folder are skipped while it is wrong (its own problem says why). `data`: the data check too (the concepts'
    verdict probes every clip, 0.3-0.5 s for 5 s of 832x480, cached with the latents; or the E2V dataset's config).
    `config_files`: the config (and preset) files the run was started from, which no output may replace."""
    return _start_up(config, data, config_files, quick=False)[0]


def check_before_loading(config: TrainConfig, config_files: Sequence[str] = ()) -> RunVerdict | None:
    """What the trainer's start checks before a model loads (`start_up_problems`), for the command line to run
    before the heavy imports: the first problem as a one-line `UserError`. Returns the data verdict (None for E2V),
    whose items the data loader trains on."""
    problems, verdict = _start_up(config, True, config_files, quick=False)
    _raise_first(problems)
    return verdict


def check_paths(config: TrainConfig, config_files: Sequence[str] = ()) -> None:
    """One-line `UserError` naming the first key whose path (or setting against the base) is wrong, in a second and
    without torch (train.py runs it before the trainer's imports), with the data checks that need no torch either;
    the concepts' verdict is `check_before_loading`'s."""
    _raise_first(_start_up(config, False, config_files, quick=True)[0])


def _start_up(config: TrainConfig, data: bool, config_files: Sequence[str],
              quick: bool) -> tuple[list[Problem], RunVerdict | None]:
    """`quick`: only what needs no torch (the samples against the base's variant need diffusers' registry)."""
    problems: list[Problem] = []

    def attempt(check: Callable[..., Any], *args) -> Any:
        try:
            return check(*args) or True
        except UserError as e:
            problems.append(Problem(key_of(e), str(e), e))
            return None

    if attempt(check_base_model, config.base_model_name):
        attempt(check_expert_keys, config)
        attempt(check_against_base, config)
        attempt(check_sequence_parallel_base, config)
        attempt(check_base_lora_files, config)
        attempt(check_animate2, config)
        for index in range(len(config.samples) if not quick else 0):
            attempt(check_sample_against_base, config, index)
    for index in range(len(config.samples)):
        attempt(check_sample_files, config, index)
    attempt(check_lora_to_continue, config)
    attempt(check_other_paths, config)
    attempt(check_outputs_not_inputs, config, config_files)
    verdict = None
    if not problems:  # the data check reads what the paths name
        verdict = attempt((DATA_CHECKS if data else QUICK_DATA_CHECKS)[data_kind_name(config)], config)
    return problems, verdict if verdict is not True else None


def _raise_first(problems: list[Problem]) -> None:
    if problems:
        error = problems[0].error or UserError(problems[0].message)
        error.key = problems[0].key
        raise error


def check_base_lora_files(config: TrainConfig) -> None:
    """Files, their experts and headers against the base's variant."""
    if config.base_loras:
        from modules.model.detection import detect_variant  # here: diffusers' classes come with the registry
        from modules.modelFile.base_loras import check_base_loras

        check_base_loras(config.base_loras, detect_variant(config.base_model_name))


def check_other_paths(config: TrainConfig) -> None:
    """The override files, the embedding to continue, the E2V files, captions, and where outputs go."""
    for key in ("transformer_override", "transformer_2_override", "vae_override", "text_encoder_override",
                "image_encoder_override"):
        if getattr(config, key):
            check_input_file(key, getattr(config, key), f"a .safetensors {key.removesuffix('_override')} file")
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
