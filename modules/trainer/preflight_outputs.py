"""No output of a training run is a file the run reads, whatever `overwrite_output` says: the final model (every
file a save may write, `output_destination.written_paths`) is checked against the base folder, its override files,
the base LoRAs, the LoRA or embedding it continues, the training data (every clip of a concept folder or manifest,
an E2V dataset's folders), the samples' media and the config files the run was started from. One line before any
model loads, with the same helper merge_lora.py and sample.py use (`util/path_checks.check_not_an_input`)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from modules.config.loading import load_concepts
from modules.config.train_config import TrainConfig
from modules.util.path_checks import check_not_an_input

_SAMPLE_MEDIA = ("image", "last_image", "control_video", "control_mask", "driving_video")
_OVERRIDES = ("transformer_override", "transformer_2_override", "vae_override", "text_encoder_override",
              "image_encoder_override")


def run_inputs(config: TrainConfig, config_files: Sequence[str] = ()) -> Iterator[tuple[str, str]]:
    """(config key, path) of every file or folder a run reads."""
    yield "base_model_name", config.base_model_name
    for key in (*_OVERRIDES, "lora_weight_path", "embedding_weight_path", "dataset_config",
                "e2v.image_encoder_model_name"):
        value = config.e2v.image_encoder_model_name if key.startswith("e2v.") else getattr(config, key)
        yield key, value
    for index, entry in enumerate(config.base_loras):
        yield f"base_loras[{index}].path", entry.path
    yield from _data_inputs(config)
    for index, sample in enumerate(config.samples):
        for key in _SAMPLE_MEDIA:
            yield f"samples[{index}].{key}", getattr(sample, key)
        for number, element in enumerate(sample.elements):
            yield f"samples[{index}].elements[{number}]", element
    for path in config_files:
        yield "--config-path", path


def _data_inputs(config: TrainConfig) -> Iterator[tuple[str, str]]:
    """The concepts' folders and manifests (with the files a manifest lists), or an E2V dataset's folders."""
    if config.dataset_config:
        from modules.config.e2v_dataset_config import load_dataset_config

        try:
            datasets = load_dataset_config(config.dataset_config).datasets
        except Exception:  # noqa: BLE001 (the dataset's own check names what is wrong with it)
            return
        for index, dataset in enumerate(datasets):
            yield f"datasets[{index}].data_root", dataset.data_root
        return
    if isinstance(config.concepts, str):
        yield "concepts", config.concepts
    concepts = load_concepts(config.concepts) if isinstance(config.concepts, str) else config.concepts
    key = "concepts" if isinstance(config.concepts, str) else "concepts[{}]"
    for index, concept in enumerate(concepts):
        yield key.format(index) + ".path", concept.path
        if concept.prompt_path:
            yield key.format(index) + ".prompt_path", concept.prompt_path
        if concept.path.lower().endswith(".jsonl") and Path(concept.path).is_file():
            yield from _manifest_files(key.format(index) + ".path", concept.path)


def _manifest_files(key: str, manifest: str) -> Iterator[tuple[str, str]]:
    from modules.dataLoader.discovery import read_jsonl_manifest  # here: the data path's imports

    try:
        samples = read_jsonl_manifest(manifest)
    except Exception:  # noqa: BLE001 (a bad manifest is the data check's to name)
        return
    for sample in samples:
        yield key, str(sample.media_path)
        if sample.mask_path is not None:
            yield key, str(sample.mask_path)


def check_outputs_not_inputs(config: TrainConfig, config_files: Sequence[str] = ()) -> None:
    """One-line `UserError` when the final model would replace an input. Without `overwrite_output` a save never
    replaces an existing file (it numbers its name), so only that case can."""
    if not config.overwrite_output or not config.output_model_destination:
        return
    from modules.trainer.output_destination import written_paths  # here: it imports the savers' file formats

    outputs = written_paths(Path(config.output_model_destination))
    check_not_an_input("config key 'output_model_destination' (overwrite_output true)", outputs,
                       run_inputs(config, config_files))
