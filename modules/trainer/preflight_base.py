"""Start-up checks of a config against what its base is (read from the folder's JSON configs, no weights) and of
the files a run reads only later (the LoRA it continues, the samples' control videos): each a one-line `UserError`
before any model loads, instead of a silent no-op or a failure an hour into the run."""
from __future__ import annotations

import os

from modules.config.train_config import TrainConfig
from modules.model.folder_facts import is_animate2_base, transformer_config
from modules.util.enum import ModelType
from modules.util.errors import UserError
from modules.util.path_checks import check_input_file

_SAMPLE_FILES = {"image": "an image file", "last_image": "an image file", "control_video": "a video file",
                 "control_mask": "a mask video or image", "driving_video": "a video file"}


def check_against_base(config: TrainConfig) -> None:
    """Keys that do nothing on this base are refused like the two-expert keys are (`check_expert_keys`). Read from
    the folder's JSON (torch-free) unless a key needs the registry's variant."""
    from modules.model.vace_e2v import is_vace_folder

    where = f"base_model_name '{config.base_model_name}'"
    if config.model_type != ModelType.AUTO:  # the checkpoint decides; a config may only agree
        from modules.model.detection import detect_variant  # here: the registry imports diffusers' classes

        variant = detect_variant(config.base_model_name)
        if variant.model_type != config.model_type:
            raise UserError(f"config key 'model_type' is {config.model_type.name}, but {where} is a "
                            f"{variant.model_type.name} checkpoint ({variant.name}): set model_type to "
                            f"{variant.model_type.name} or AUTO (the checkpoint's), or choose another base")
    vace = is_vace_folder(config.base_model_name)
    if not vace and config.vace_context_scale != TrainConfig().vace_context_scale:
        raise UserError(f"config key 'vace_context_scale' is {config.vace_context_scale:g}, but it applies to VACE "
                       f"models and {where} has no VACE control blocks: remove it")
    if config.last_frame_condition and not config.dataset_config:
        from modules.model.detection import detect_variant  # here: the registry imports diffusers' classes

        variant = detect_variant(config.base_model_name)
        if not variant.channel_concat_condition:
            raise UserError(f"config key 'last_frame_condition' needs an I2V-layout base, but {where} is "
                           f"{variant.name} (no condition channels): set it false or use an I2V / FLF2V model")


def check_sequence_parallel_base(config: TrainConfig) -> None:
    """`sequence_parallel` N against the processes torchrun started and what the base is: the heads must divide by N
    (Ulysses hands each rank H/N heads), and Animate-2's two-pass attention is not split."""
    n = config.sequence_parallel
    if n <= 1:
        return
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's; the trainer's init_distributed reads it too
    if world_size % n:
        started = f"{world_size} processes" if world_size > 1 else "one process (no torchrun)"
        raise UserError(f"config key 'sequence_parallel' is {n}, but this run has {started}: start it with torchrun "
                        f"--nproc_per_node a multiple of {n} (GPUs in all), or set sequence_parallel to 1")
    where = f"base_model_name '{config.base_model_name}'"
    if is_animate2_base(config.base_model_name):
        raise UserError(f"config key 'sequence_parallel' is {n}, but {where} is Wan2.2-Animate-2, whose two-pass "
                        "attention is not split over GPUs yet: set sequence_parallel to 1")
    heads = transformer_config(config.base_model_name).get("num_attention_heads")
    if isinstance(heads, int) and heads % n:
        divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
        raise UserError(f"config key 'sequence_parallel' is {n}, but the transformer of {where} has {heads} attention "
                        f"heads, which {n} does not divide (each GPU takes heads/N of them): use one of {divisors}")


def check_sample_against_base(config: TrainConfig, index: int) -> None:
    """The inputs sample `index` gives fit what the base generates from (the sampler's own check,
    `model/sample_inputs.py`, from the folder's variant: an I2V sample needs its image, an Animate-2 one its reference
    image and driving video, only Animate-2 follows one); VACE takes a bounded number of references."""
    from modules.model.detection import detect_variant  # here: the registry imports diffusers' classes
    from modules.model.sample_inputs import check_sample_inputs
    from modules.model.vace_e2v import check_vace_references

    sample = config.samples[index]
    if not sample.enabled:
        return
    variant = detect_variant(config.base_model_name)
    if variant.vace_layers:
        check_vace_references(len(sample.elements), f"config key 'samples[{index}].elements'")
    check_sample_inputs(variant, config.sample_overrides.apply(sample),
                        label=lambda field: f"config key 'samples[{index}].{field}'", key=f"samples[{index}]")


def check_sample_files(config: TrainConfig, index: int) -> None:
    """Sample `index`'s media exist (read only when it is generated, maybe hours later)."""
    sample = config.samples[index]
    if not sample.enabled:
        return
    for key, expected in _SAMPLE_FILES.items():
        if getattr(sample, key):
            check_input_file(f"samples[{index}].{key}", getattr(sample, key), expected)
    for number, element in enumerate(sample.elements):
        check_input_file(f"samples[{index}].elements[{number}]", element, "an image file")


def check_lora_to_continue(config: TrainConfig) -> None:
    """The LoRA to continue is a readable LoRA file (its header and key names, not its tensors)."""
    if config.lora_weight_path:
        from modules.modelFile.lora_reading import read_lora_header  # here: it imports torch

        check_input_file("lora_weight_path", config.lora_weight_path, "a .safetensors LoRA file")
        try:
            read_lora_header(config.lora_weight_path)
        except UserError as e:  # the reader names the file and what is wrong with it
            raise UserError(f"config key 'lora_weight_path': {e}; give an intact LoRA file (or clear the key to start "
                            "a new LoRA)") from None
