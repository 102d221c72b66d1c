"""Final model output: LoRA files (one per trained expert), a full diffusers folder, or an embedding file (alone, or
beside a LoRA)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import torch
from huggingface_hub import save_torch_state_dict

from modules.config.train_config import TrainConfig
from modules.model.reference_slots import REFERENCE_LAYOUT_KEY
from modules.model.WanModel import WanModel
from modules.modelFile.lora_formats import LoRAWeights, expert_lora_paths, extract_from_peft
from modules.modelFile.lora_header import TRANSFORMER_CONFIG_KEY, stack_header
from modules.modelFile.training_only_loras import without_training_only
from modules.modelSaver.diffusers_folder import TRANSFORMER_FOLDERS, copy_base_components
from modules.modelSaver.embedding_file import embedding_path_beside, save_embedding
from modules.modelSaver.WanLoRASaver import LoRAFileInfo, lora_metadata, save_lora
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.util.atomic import atomic_write_dir
from modules.util.dtypes import torch_dtype
from modules.util.enum import ModelFormat, TrainingMethod
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


def variant_tag(model: WanModel) -> str:
    """`wan-2.1-t2v`, `wan-2.2-ti2v`, ... for model-spec metadata."""
    version = "2.2" if model.variant.model_type.name == "WAN_2_2" else "2.1"
    return f"wan-{version}-{model.variant.name.replace('_', '-')}"


@dataclasses.dataclass(frozen=True)
class TrainedAmount:
    """How long the saved weights trained (LoRA headers record it)."""

    steps: int
    epochs: int  # completed epochs
    weights: str = ""  # which weights: "" the trained ones, "ema 0.999" their moving average


class WanModelSaver:
    def __init__(self, model: WanModel, setup: BaseWanSetup, config: TrainConfig):
        self.model = model
        self.setup = setup
        self.config = config

    def save(self, destination: str | Path,
             transformer_weights: dict[int, dict[str, torch.Tensor]] | None = None,
             trained: TrainedAmount | None = None, exports: bool = True) -> list[Path]:
        """`transformer_weights`: full weights per expert gathered from an FSDP-sharded run (whose modules
        hold only shards); None reads the modules. `trained` goes into LoRA headers. `exports` False
        writes the output format alone (snapshots), without derived exports."""
        if self.config.training_method == TrainingMethod.EMBEDDING:
            return [self.save_embedding(destination, trained)]
        lora_weights = None
        if self.config.output_model_format.is_lora():
            lora_weights = self.lora_weights()
            written = self.save_lora(destination, self.config.output_model_format, trained, lora_weights)
        else:
            with without_training_only(self.model):  # saved weights are used without a training adapter
                written = [self.save_diffusers(destination, transformer_weights)]
        if self.setup.embedding_training is not None:  # LoRA + embedding: both files
            written.append(self.save_embedding(embedding_path_beside(destination), trained))
        return written + (self.export_i2v(destination, written[:1], lora_weights) if exports else [])

    def save_embedding(self, destination: str | Path, trained: TrainedAmount | None = None) -> Path:
        """The trained embedding as `<name>.safetensors` (key umt5xxl), for ComfyUI's models/embeddings."""
        metadata = {"wantrainer.steps": str(trained.steps) if trained else "",
                    "wantrainer.epochs": str(trained.epochs) if trained else "",
                    "wantrainer.weights": trained.weights if trained else "", "wantrainer.variant": variant_tag(self.model)}
        path = save_embedding(self.setup.embedding_training.embedding, destination, str(self.config.base_model_name),
                              metadata)
        logger.info("embedding %s written to %s (in ComfyUI: models/embeddings, the text encoder through the node in "
                    "comfyui/wantrainer_nodes, prompt 'embedding:%s')",
                    self.setup.embedding_training.embedding.placeholder, path, path.stem)
        return path

    def export_i2v(self, destination: str | Path, written: list[Path],
                   lora_weights: dict[int, LoRAWeights] | None = None) -> list[Path]:
        """E2V on a T2V base (`e2v.export_i2v`): the trained model also as a Wan I2V model beside the output,
        `<stem>-i2v/` + `<stem>-i2v.safetensors` (`merged_model.export_e2v_as_i2v`), built from the trained
        weights (`lora_weights`, as `lora_weights()` extracts them), not from the file rounded to output_dtype.
        A failed export is logged, not raised: the LoRA is written, and `scripts/merge_lora.py` makes the same
        export from it."""
        if not (self.setup.full_train and self.config.e2v.export_i2v):
            return []
        from modules.modelSaver.merged_model import MergeInputs, export_e2v_as_i2v
        from modules.util.write_errors import is_write_failure, write_failure

        config, lora = self.config, self.config.output_model_format.is_lora()
        transformer = self.model.transformer
        inputs = MergeInputs(
            model_dir=Path(config.base_model_name) if lora else written[0], lora=written[0] if lora else None,
            image_encoder_dir=Path(config.e2v.image_encoder_model_name) if config.e2v.image_encoder_model_name else None,
            image_encoder_option="config key 'e2v.image_encoder_model_name'",
            overrides=(config.transformer_override, config.transformer_2_override) if lora else ("", ""),
            target_config={k: v for k, v in transformer.config.items() if not k.startswith("_")},
            trained=lora_weights if lora else None)
        stem = Path(destination)
        stem = stem.with_suffix("") if stem.suffix == ".safetensors" else stem
        try:
            exported = export_e2v_as_i2v(inputs, stem)
        except Exception as e:
            if not isinstance(e, UserError) and not is_write_failure(e):
                raise
            logger.error("the Wan I2V export of this E2V run failed (%s); the trained model is written to %s",
                         e if isinstance(e, UserError) else write_failure(e), written[0])
            return []
        for path in exported:
            logger.info("Wan I2V export written to %s", path)
        return exported

    def lora_paths(self, destination: str | Path) -> dict[int, Path]:
        """Expert index -> file; two-expert models get `<name>_high_noise` / `<name>_low_noise` files."""
        if self.model.transformer_2 is None:
            return {0: Path(destination)}
        high, low = expert_lora_paths(destination)
        return {0: Path(high), 1: Path(low)}

    def lora_weights(self) -> dict[int, LoRAWeights]:
        """The trained adapter (and fully trained weights) of each expert, in the dtype they trained in."""
        full = self.setup.full_train
        return {expert: extract_from_peft(transformer, "default", full_weight_names=full.get(expert, []))
                for expert, transformer in self.setup.trained_transformers()}

    def save_lora(self, destination: str | Path, fmt: ModelFormat, trained: TrainedAmount | None = None,
                  lora_weights: dict[int, LoRAWeights] | None = None) -> list[Path]:
        paths = self.lora_paths(destination)
        written = []
        lora_weights = self.lora_weights() if lora_weights is None else lora_weights
        for expert, transformer in self.setup.trained_transformers():
            full = self.setup.full_train.get(expert, [])
            weights = lora_weights[expert]
            metadata = lora_metadata(self.file_info(expert, trained))
            metadata.update(stack_header(self.model.base_loras, expert))  # so samples apply the same base
            if self.config.dataset_config and self.config.e2v.reference_layout != "a2":  # samplers read it back
                metadata[REFERENCE_LAYOUT_KEY] = self.config.e2v.reference_layout
            if full:  # an E2V-expanded transformer: loading needs its new shape
                metadata[TRANSFORMER_CONFIG_KEY] = json.dumps(
                    {k: v for k, v in transformer.config.items() if not k.startswith("_")})
            save_lora(weights, paths[expert], fmt.name, metadata, dtype=torch_dtype(self.config.output_dtype))
            logger.info("LoRA written to %s", paths[expert])
            written.append(paths[expert])
        return written

    def file_info(self, expert: int, trained: TrainedAmount | None) -> LoRAFileInfo:
        """What the LoRA file of `expert` is (its header): variant, expert, base, how long it trained."""
        variant = self.model.variant
        config_hash = hashlib.sha256(json.dumps(self.config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
        return LoRAFileInfo(
            variant=variant_tag(self.model), base_model=str(self.config.base_model_name),
            base_transformer_config=variant.transformer_config_hash, config_hash=config_hash,
            expert=expert if variant.two_experts else None,
            boundary_ratio=variant.boundary_ratio if variant.two_experts else None,
            steps=trained.steps if trained else None, epochs=trained.epochs if trained else None,
            weights=trained.weights if trained else "")

    def save_diffusers(self, destination: str | Path,
                       transformer_weights: dict[int, dict[str, torch.Tensor]] | None = None) -> Path:
        """The base folder with the trained transformer(s) swapped in, written atomically."""
        destination = Path(destination)
        trained = dict(self.setup.trained_transformers())

        def write(folder: Path) -> None:
            copy_base_components(self.model.model_dir, folder, {TRANSFORMER_FOLDERS[e] for e in trained})
            for expert, transformer in trained.items():
                target = folder / TRANSFORMER_FOLDERS[expert]
                if transformer_weights is None:
                    transformer.save_pretrained(target, safe_serialization=True)
                    continue
                # the layout save_pretrained writes: config.json, 10 GB shards and their index
                transformer.save_config(target)
                save_torch_state_dict(transformer_weights[expert], target, max_shard_size="10GB",
                                      filename_pattern="diffusion_pytorch_model{suffix}.safetensors")

        atomic_write_dir(destination, write)
        logger.info("model written to %s", destination)
        return destination
