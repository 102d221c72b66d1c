"""Full models from a base and a LoRA: a diffusers folder, or single files in Wan's original key names for
ComfyUI (`scripts/merge_lora.py`); and the Wan I2V export of an E2V model trained on a T2V base
(`export_e2v_as_i2v`, written by the trainer beside the LoRA).

An E2V LoRA of a T2V base carries the expanded transformer config in its header
(``wantrainer.transformer_config``) and the fully trained new weights. Merged, the network is a Wan I2V
model (36 input channels; with the CLIP pathway also the image cross-attention) of the base's own class, so its
diffusers folder is the I2V pipeline the model registry names for that layout (`WanImageToVideoPipeline`,
`SkyReelsV2ImageToVideoPipeline`) holding the CLIP image encoder the run used. The merged model's class always
comes from the registry (`family_for`): VACE and SkyReels-V2 bases merge into their own classes. A two-expert model's
expert without a LoRA of such a run is expanded the way our sampler expands it (`expand_transformer`
with seed = expert index: the new inputs start as a no-op).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from tqdm import tqdm

from modules.model.detection import detect_variant
from modules.model.registry import family_for
from modules.model.WanVariant import WanVariant
from modules.modelFile.lora_checks import check_lora_file, expert_files
from modules.modelFile.lora_formats import VARIANT_KEY, LoRAWeights, expert_lora_paths
from modules.modelFile.lora_header import EXPERT_KEY, EXPERT_NAMES, TRANSFORMER_CONFIG_KEY
from modules.modelFile.lora_reading import load_lora_file
from modules.modelFile.original_keys import write_original_file
from modules.modelFile.weight_merge import (
    MergedTransformer,
    SafetensorsSource,
    StateDictSource,
    WeightSource,
    folder_source,
    merge_transformer,
    model_dtype,
    read_config,
)
from modules.modelSaver.diffusers_folder import TRANSFORMER_FOLDERS, copy_base_components, write_transformer_folder
from modules.modelSetup.e2v_expansion import expand_transformer, expanded_config
from modules.util.atomic import atomic_dir
from modules.util.errors import UserError
from modules.util.path_checks import check_not_an_input

logger = logging.getLogger(__name__)

DIFFUSERS = "DIFFUSERS"
COMFY = "COMFY"
SINGLE_FILE_DTYPE = torch.bfloat16  # what ComfyUI's own Wan files use
IMAGE_COMPONENTS = {"image_encoder": ["transformers", "CLIPVisionModel"],
                    "image_processor": ["transformers", "CLIPImageProcessor"]}


@dataclasses.dataclass(frozen=True)
class MergeInputs:
    """What is merged: the base folder and a LoRA (either expert's file for two-expert models)."""

    model_dir: Path
    lora: Path | None  # None: the folder's transformers as they are (a fine-tuned output)
    strength: float = 1.0
    image_encoder_dir: Path | None = None  # a folder with image_encoder/ + image_processor/
    image_encoder_option: str = "--image-encoder"  # how the user sets it, for messages
    overrides: tuple[str, str] = ("", "")  # single-file transformers the base was trained with, per expert
    target_config: dict[str, Any] | None = None  # lora None: the (E2V-expanded) config every expert gets
    force: bool = False  # merge a LoRA whose header names another variant
    # the LoRA's weights per expert as trained, in memory (the trainer's I2V export): merged instead of the tensors
    # of `lora`, whose headers still say what it is. The file holds them rounded to output_dtype.
    trained: dict[int, LoRAWeights] | None = None


@dataclasses.dataclass
class MergedModel:
    inputs: MergeInputs
    variant: WanVariant
    experts: dict[int, MergedTransformer]
    lora_metadata: dict[str, str]

    @property
    def config(self) -> dict[str, Any]:
        return self.experts[0].config

    @property
    def merged_variant(self) -> WanVariant:
        """The variant the merged network is (an E2V-expanded T2V base: the I2V layout of its own class)."""
        return dataclasses.replace(self.variant, in_channels=self.config["in_channels"],
                                   has_clip_branch=self.config.get("image_dim") is not None)

    @property
    def channel_concat(self) -> bool:
        """The merged network takes the I2V input layout [x_t, mask, condition]."""
        return self.merged_variant.channel_concat_condition

    @property
    def i2v_pipeline(self) -> str:
        """The diffusers pipeline class of the merged I2V layout (WanImageToVideoPipeline,
        SkyReelsV2ImageToVideoPipeline), from the model registry."""
        return family_for(self.merged_variant).pipeline(True).__name__


# ------------------------------------------------------------------------------------------- merging


def merge_model(inputs: MergeInputs) -> MergedModel:
    """Check the LoRA against the base (variant, shapes) and plan the merge; nothing is computed yet."""
    variant = detect_variant(inputs.model_dir)
    transformer_class = family_for(variant).transformer_class  # the folder's own class: VACE, SkyReels-V2, ...
    checked = check_lora_file(inputs.lora, variant, inputs.force, "--force") if inputs.lora else None
    files = checked.files if checked else {}
    if inputs.trained is not None:
        loras = {expert: (inputs.trained[expert], checked.metadata[expert]) for expert in files}
    else:
        loras = {expert: load_lora_file(file) for expert, file in files.items()}
    for expert, (weights, _) in loras.items():
        bad = weights.non_finite()
        if bad is not None:
            raise UserError(f"LoRA '{files[expert]}' holds NaN or inf values (in '{bad}'): merging it would write a "
                            "broken model; use an intact LoRA (nothing was written)")
    metadata = next(iter(loras.values()))[1] if loras else {}
    template = json.loads(metadata[TRANSFORMER_CONFIG_KEY]) if TRANSFORMER_CONFIG_KEY in metadata \
        else inputs.target_config
    experts = {}
    for expert in range(2 if variant.two_experts else 1):
        weights, _ = loras.get(expert, (LoRAWeights(), {}))
        experts[expert] = _merge_expert(inputs, expert, transformer_class, weights, template, files.get(expert))
    return MergedModel(inputs, variant, experts, metadata)


def _merge_expert(inputs: MergeInputs, expert: int, transformer_class: type, weights: LoRAWeights,
                  template: dict[str, Any] | None, lora_file: Path | None) -> MergedTransformer:
    folder = inputs.model_dir / TRANSFORMER_FOLDERS[expert]
    base_config = read_config(folder)
    override = inputs.overrides[expert]
    source, dtype = _override_source(Path(override), folder) if override else _folder_source(folder)
    config = base_config if template is None else expanded_config(
        base_config, template["in_channels"] - 2 * template["out_channels"], template.get("image_dim"))
    if config != base_config and not weights.full_weights:  # an expert the E2V run did not train
        source = _expanded_source(transformer_class, base_config, source, config, expert)
    if inputs.lora is not None and lora_file is None:
        logger.warning("no LoRA for the %s expert next to '%s': it is written as in the base",
                       EXPERT_NAMES[expert].replace("_", "-"), inputs.lora)
    what = f"LoRA '{lora_file}' and model '{inputs.model_dir}'" if lora_file else f"model '{inputs.model_dir}'"
    return merge_transformer(config, transformer_class, source, weights, inputs.strength, dtype, what)


def _folder_source(folder: Path) -> tuple[WeightSource, torch.dtype]:
    source = folder_source(folder)
    return source, model_dtype(source)


def _override_source(path: Path, folder: Path) -> tuple[WeightSource, torch.dtype]:
    """The weights of a single-file transformer the base was trained with (`transformer_override`), read as
    the model loader reads it (ComfyUI names and fp8 included; fp8 is dequantized to bfloat16, what
    ComfyUI computes in). In memory as a whole: such files are read whole by training too."""
    from modules.modelFile.component_files import load_transformer_file
    from modules.modelFile.single_file import SingleFile

    stored = model_dtype(SafetensorsSource([path]))
    dtype = torch.bfloat16 if stored.itemsize == 1 else stored
    transformer = load_transformer_file(SingleFile(f"{folder.name}_override", path), folder, dtype)
    return StateDictSource(transformer.state_dict()), dtype


def _expanded_source(transformer_class: type, base_config: dict[str, Any], source: WeightSource,
                     config: dict[str, Any], expert: int) -> StateDictSource:
    with torch.device("meta"):
        transformer = transformer_class.from_config(base_config)
    transformer.load_state_dict({name: source.tensor(name) for name in source.names()}, assign=True)
    image_dim = config.get("image_dim") if base_config.get("image_dim") is None else None
    expanded, _ = expand_transformer(transformer, config["in_channels"] - 2 * config["out_channels"], image_dim,
                                     seed=expert)  # the seed our sampler's expand_model_for_e2v(seed=0) gives
    return StateDictSource(expanded.state_dict())


@contextlib.contextmanager
def _progress(produce: Callable[[str], torch.Tensor], total: int, label: str) -> Iterator[Callable[[str], torch.Tensor]]:
    with tqdm(total=total, desc=label, unit="tensor", leave=False) as bar:
        def counted(name: str) -> torch.Tensor:
            bar.update()
            return produce(name)

        yield counted


# ------------------------------------------------------------------------------------------- writing


def _needs_i2v_index(model: MergedModel) -> bool:
    index = json.loads((model.inputs.model_dir / "model_index.json").read_text(encoding="utf-8"))
    return model.channel_concat and index.get("_class_name") != model.i2v_pipeline


def _image_encoder_source(model: MergedModel) -> Path | None:
    """The folder whose image_encoder/ + image_processor/ the I2V folder gets (None: none needed or the base
    has them); checked before anything is written."""
    if not _needs_i2v_index(model) or model.config.get("image_dim") is None or model.variant.has_image_encoder:
        return None
    folder = model.inputs.image_encoder_dir
    option = model.inputs.image_encoder_option
    if folder is None:
        raise UserError(f"the merged model has the image cross-attention of an E2V run, so its diffusers folder needs "
                        f"a CLIP image encoder: set {option} to a folder with image_encoder/ and image_processor/ "
                        "(the I2V checkpoint the run used)")
    if not all((Path(folder) / name).is_dir() for name in IMAGE_COMPONENTS):
        raise UserError(f"{option}: '{folder}' has no image_encoder/ and image_processor/ folders: "
                        "point it at an I2V checkpoint folder")
    return Path(folder)


def _write_i2v_index(model: MergedModel, folder: Path, image_encoder: Path | None) -> None:
    index = json.loads((model.inputs.model_dir / "model_index.json").read_text(encoding="utf-8"))
    index["_class_name"] = model.i2v_pipeline
    has_branch = model.config.get("image_dim") is not None
    for name, entry in IMAGE_COMPONENTS.items():
        index[name] = entry if has_branch else [None, None]
        if image_encoder is not None:
            shutil.copytree(image_encoder / name, folder / name)
    (folder / "model_index.json").write_text(json.dumps(dict(sorted(index.items())), indent=2) + "\n",
                                             encoding="utf-8")


def _folder_problem(model: MergedModel) -> str | None:
    """Why the merged model has no diffusers folder that its pipeline can load (None: it has one)."""
    if _needs_i2v_index(model) and model.config.get("image_dim") is None and model.i2v_pipeline.startswith("SkyReels"):
        return (f"diffusers' {model.i2v_pipeline} requires a CLIP image encoder, and this E2V model (trained without "
                "the CLIP pathway) has no image cross-attention for one")
    return None


def check_outputs(inputs: MergeInputs, outputs: list[Path], option: str = "--output") -> None:
    """No output is (or holds) an input of the merge: the base folder and its files, the LoRA (both experts'
    files), the override files, the image encoder folder; compared by resolved path and by inode."""
    given: list[tuple[str, Path | str | None]] = [("--model", inputs.model_dir), (inputs.image_encoder_option,
                                                                                  inputs.image_encoder_dir)]
    if inputs.lora is not None:
        given += [("--lora", inputs.lora), *(("--lora", f) for f in expert_files(inputs.lora) if f is not None)]
    given += [("transformer_override", override) for override in inputs.overrides]
    check_not_an_input(option, outputs, given)


def _check_replaceable(destination: Path, model_dir: Path) -> None:
    """The output folder is replaced as a whole: never a folder that is no model (inputs: `check_outputs`)."""
    if destination.is_dir() and any(destination.iterdir()) and not (destination / "model_index.json").is_file():
        raise UserError(f"the output '{destination}' is a folder that holds no model (no model_index.json) and would "
                        "be replaced: give a new folder path")


def write_diffusers(model: MergedModel, destination: Path, dtype: torch.dtype | None = None) -> Path:
    """The base folder with the merged transformer(s), atomically; `dtype` None keeps the base's."""
    _check_replaceable(destination, model.inputs.model_dir)
    problem = _folder_problem(model)
    if problem:
        raise UserError(f"{problem}: write it as a ComfyUI single file instead (--format COMFY)")
    image_encoder = _image_encoder_source(model)
    i2v = _needs_i2v_index(model)
    replaced = {TRANSFORMER_FOLDERS[e] for e in model.experts} | ({"model_index.json"} if i2v else set())
    with atomic_dir(destination) as folder:
        copy_base_components(model.inputs.model_dir, folder, replaced)
        for expert, merged in model.experts.items():
            specs = merged.specs(dtype)
            produce = functools.partial(merged.tensor, dtype=dtype)
            with _progress(produce, len(specs), f"merging {TRANSFORMER_FOLDERS[expert]}") as counted:
                write_transformer_folder(folder / TRANSFORMER_FOLDERS[expert], merged.config, specs, counted,
                                         class_name=merged.transformer_class.__name__)
        if i2v:
            _write_i2v_index(model, folder, image_encoder)
    logger.info("merged model written to %s%s", destination, f" ({model.i2v_pipeline})" if i2v else "")
    return destination


def single_file_paths(output: Path, two_experts: bool) -> list[Path]:
    """`out.safetensors`, or `out_high_noise.safetensors` + `out_low_noise.safetensors` for two experts."""
    return [Path(p) for p in expert_lora_paths(output)] if two_experts else [output]


def write_single_files(model: MergedModel, output: Path, dtype: torch.dtype = SINGLE_FILE_DTYPE) -> list[Path]:
    """One file per transformer in Wan's original key names (ComfyUI's models/diffusion_models)."""
    paths = single_file_paths(output, model.variant.two_experts)
    if model.config.get("inject_sample_info"):  # SkyReels-V2 DF 1.3B; tools/check_comfyui_merged.py shows it
        logger.warning("this SkyReels-V2 model has an fps embedding, which ComfyUI's Wan model lacks: ComfyUI loads "
                       "the single file without it (\"unet unexpected: fps_embedding...\") and samples without the fps "
                       "conditioning; the diffusers folder (--format DIFFUSERS) keeps it")
    for (expert, merged), path in zip(model.experts.items(), paths):
        specs = merged.specs(dtype)
        produce = functools.partial(merged.tensor, dtype=dtype)
        with _progress(produce, len(specs), f"merging {path.name}") as counted:
            write_original_file(path, specs, counted, _single_file_metadata(model, expert))
        logger.info("merged model written to %s", path)
    return paths


def _single_file_metadata(model: MergedModel, expert: int) -> dict[str, str]:
    inputs = model.inputs
    metadata = {"wantrainer.base_model": str(inputs.model_dir), "wantrainer.strength": f"{inputs.strength:g}",
                "wantrainer.lora": inputs.lora.name if inputs.lora else ""}
    if model.lora_metadata.get(VARIANT_KEY):
        metadata[VARIANT_KEY] = model.lora_metadata[VARIANT_KEY]
    if model.variant.two_experts:
        metadata[EXPERT_KEY] = EXPERT_NAMES[expert]
    return metadata


def merge_lora_into_model(inputs: MergeInputs, output: Path, fmt: str, dtype: torch.dtype | None = None) -> list[Path]:
    """`scripts/merge_lora.py`: a diffusers folder (DIFFUSERS) or single file(s) (COMFY) at `output`."""
    two_experts = detect_variant(inputs.model_dir).two_experts
    check_outputs(inputs, single_file_paths(output, two_experts) if fmt == COMFY else [output])
    model = merge_model(inputs)
    if fmt == DIFFUSERS:
        return [write_diffusers(model, output, dtype)]
    return write_single_files(model, output, dtype or SINGLE_FILE_DTYPE)


def i2v_export_paths(stem: Path) -> tuple[Path, Path]:
    """(`<stem>-i2v/`, `<stem>-i2v.safetensors`): where the E2V run's I2V export goes."""
    return stem.with_name(f"{stem.name}-i2v"), stem.with_name(f"{stem.name}-i2v.safetensors")


def export_e2v_as_i2v(inputs: MergeInputs, stem: Path) -> list[Path]:
    """An E2V model of a T2V base as an I2V model: `<stem>-i2v/` (diffusers, the family's I2V pipeline) and
    `<stem>-i2v.safetensors` (ComfyUI; two experts: `<stem>-i2v_high_noise` / `_low_noise`); the single file alone
    where that pipeline cannot load the model (`_folder_problem`)."""
    folder, single = i2v_export_paths(stem)
    check_outputs(inputs, [folder, *single_file_paths(single, detect_variant(inputs.model_dir).two_experts)],
                  "the I2V export")
    model = merge_model(inputs)
    problem = _folder_problem(model)
    if problem:
        logger.warning("%s: the I2V export is the ComfyUI single file alone", problem)
        return write_single_files(model, single)
    return [write_diffusers(model, folder), *write_single_files(model, single)]
