"""The E2V dataset checks that need no model: the dataset JSON, each dataset's frame budget against its reference
frames, and the samples' frames against the layout. Light on imports, so scripts/train.py runs it before the
trainer (and diffusers) is imported: a dataset error in a second or two."""
from __future__ import annotations

from modules.config.e2v_dataset_config import E2VDatasetConfig, load_dataset_config
from modules.config.train_config import TrainConfig
from modules.dataLoader.e2v.sampling_options import E2VSamplingOptions, dataset_layout
from modules.model.layout_frames import SKYREELS_V3_SLOTS, min_num_frames
from modules.model.vace_e2v import check_e2v_on_vace, is_vace_folder
from modules.util.base_config import ConfigError
from modules.util.enum import ConceptType
from modules.util.errors import UserError


def validate_e2v_config(config: TrainConfig) -> None:
    """Dataset JSON and layout checks that need no model (run before loading one)."""
    datasets = load_dataset_config(config.dataset_config).datasets
    v3 = config.e2v.reference_layout == "skyreels_v3"
    if v3:  # first: it refuses a VACE base too
        check_skyreels_v3_data(config, datasets)
    if is_vace_folder(config.base_model_name):  # the elements are VACE references: they take no frames of F
        check_e2v_on_vace(config, datasets)
        datasets_of_type(config, ConceptType.STANDARD, datasets)
        return
    for index, dataset in enumerate(datasets):
        if v3:  # the references are appended after the video, not frames of it: no frame budget to check
            continue
        needed = min_num_frames(config.e2v.target_layout, dataset.reference_frame_count())
        if needed > dataset.max_num_frames:
            raise ConfigError(
                f"datasets[{index}] of '{config.dataset_config}': a '{config.e2v.target_layout}' target with "
                f"{dataset.reference_frame_count()} reference frames needs at least {needed} frames but at most "
                f"{dataset.max_num_frames} are allowed: raise max_frames/frames or lower the element repeats")
    trained = datasets_of_type(config, ConceptType.STANDARD, datasets)
    # samples during training take the first trained dataset's layout (sampling_options)
    options = E2VSamplingOptions(dataset_layout(trained[0]), target_layout=config.e2v.target_layout,
                                 reference_layout=config.e2v.reference_layout)
    for index, sample in enumerate(config.samples):
        if sample.enabled and sample.image_guidance_scale != 1 and not v3:
            raise ConfigError(f"config key 'samples[{index}].image_guidance_scale' is {sample.image_guidance_scale} "
                              "but image guidance applies only to e2v.reference_layout 'skyreels_v3': set it to 1")
        if sample.enabled and sample.elements:
            options.check_frames(sample.frames, len(sample.elements), f"config key 'samples[{index}].frames'",
                                 f"config key 'samples[{index}].elements'")


def check_skyreels_v3_data(config: TrainConfig, datasets: list[E2VDatasetConfig]) -> None:
    """SkyReels-V3's layout (docs/e2v.md §9): at most its 4 reference slots per dataset, each element one latent frame
    (vae.repeat 1), and a base that takes appended latent frames (read from its configs, no weights)."""
    for index, dataset in enumerate(datasets):
        where = f"datasets[{index}] of '{config.dataset_config}'"
        if len(dataset.elements) > SKYREELS_V3_SLOTS:
            raise ConfigError(f"{where} has {len(dataset.elements)} elements but e2v.reference_layout 'skyreels_v3' "
                              f"takes at most {SKYREELS_V3_SLOTS} references (its slots): remove elements")
        for element in dataset.elements:
            if element.vae.repeat != 1:
                raise ConfigError(f"{where}: element '{element.name}' has vae.repeat {element.vae.repeat} but "
                                  "e2v.reference_layout 'skyreels_v3' encodes each reference as one latent frame: "
                                  "set its repeat to 1")
    from modules.model.detection import detect_variant  # here: it reads the base's configs (no weights)
    from modules.model.reference_slots import check_reference_base

    check_reference_base(detect_variant(config.base_model_name), f"base_model_name '{config.base_model_name}'")


def datasets_of_type(config: TrainConfig, concept_type: ConceptType,
                     datasets: list[E2VDatasetConfig] | None = None) -> list[E2VDatasetConfig]:
    """The datasets of `concept_type`; none to train on (only VALIDATION ones) is a one-line UserError."""
    if datasets is None:
        datasets = load_dataset_config(config.dataset_config).datasets
    chosen = [d for d in datasets if d.type == concept_type]
    if not chosen and concept_type == ConceptType.STANDARD:
        raise UserError(f"dataset config '{config.dataset_config}' has no dataset to train on (type STANDARD): "
                        "set one dataset's type to STANDARD")
    return chosen
