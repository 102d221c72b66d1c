"""Start-up checks of a config against what its base is (read from the folder's JSON configs, no weights) and of
the files a run reads only later (the LoRA it continues, the samples' control videos): each a one-line `UserError`
before any model loads, instead of a silent no-op or a failure an hour into the run."""
from __future__ import annotations

from modules.config.train_config import TrainConfig
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
