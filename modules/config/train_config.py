"""The training configuration: every key a user, a preset or the GUI can set.

Top-level names follow OneTrainer so presets and habits carry over (docs/architecture.md, contracts).
`CONFIG_VERSION` goes up whenever a key is renamed or its meaning changes; `migrations.py` then
upgrades older files.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

from modules.adapter.registry import ADAPTERS, PeftType
from modules.config.base_weight_keys import upgrade_fp8_flag
from modules.config.checkpointing_config import CheckpointingConfig, upgrade_old_keys
from modules.config.guidance_preserving_config import GuidancePreservingConfig
from modules.config.limits import check_frame_count, check_lora_strength, check_resolution_side
from modules.config.sample_config import SampleConfig, SampleOverrides
from modules.config.sampling_choices import REFERENCE_LAYOUTS
from modules.optimizer.registry import Optimizer, OptimizerOptions, spec_of
from modules.util.attention_kernels import device_type_of, unavailable
from modules.util.base_config import BaseConfig, ConfigError, option
from modules.util.enum import (
    AttentionBackend,
    BalancingStrategy,
    BaseWeightFormat,
    CompileMode,
    ConceptType,
    DataParallel,
    DataType,
    EmaMode,
    EncoderDevice,
    Fp8Scale,
    FrameSampleStrategy,
    HuberSchedule,
    LearningRateScheduler,
    LossType,
    LossWeightFn,
    MemoryPreset,
    ModelFormat,
    ModelType,
    PromptSource,
    TimestepDistribution,
    TimeUnit,
    TrainingMethod,
    VaceBlocks,
    WanExpert,
)
from modules.util.run_folder import run_name_problem

CONFIG_VERSION = 6  # 6: fp8_base_weights -> base_weight_format FP8; 5: gradient_checkpointing/checkpoint_attention/keep_self_attention -> checkpointing; 2: adam_beta1/adam_beta2/adam_epsilon moved into optimizer_options.ADAMW(_8BIT); 3: samples' scheduler -> sampler diffusers_*; 4: model_type AUTO

# Modules that both diffusers and ComfyUI know by name (see modules/modelFile/lora_formats.py), so a
# LoRA on them loads everywhere. Suffixes of module paths inside WanTransformer3DModel.
DEFAULT_LORA_TARGETS = [
    "attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
    "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0",
    "attn2.add_k_proj", "attn2.add_v_proj",
    "ffn.net.0.proj", "ffn.net.2",
]

WHITE = (255, 255, 255)  # what transparent pixels are composited on unless a config says otherwise

# Range checks of TrainConfig.validate: a value outside them would train nothing useful or crash late.
# A frame's pixel budget (8192 x 8192, 192 MB as RGB): more than 8K video (7680 x 4320) and 61 MP photos.
DEFAULT_MAX_FRAME_PIXELS = 8192 * 8192
_AT_LEAST_ONE = ("max_frame_pixels", "epochs", "batch_size", "gradient_accumulation_steps", "lora_rank", "validation_sigma_count")
_NOT_NEGATIVE = ("max_steps", "learning_rate_warmup_steps", "learning_rate_high_noise", "learning_rate_low_noise",
                 "lora_plus_ratio", "backup_after", "sample_after", "ram_cache_mb",
                 "rolling_backup_count", "validate_after", "cache_variations", "save_every", "save_skip_first", "rolling_save_count", "weight_decay", "max_grad_norm", "blocks_to_swap",
                 "ffn_chunks", "gpu_memory_gib", "vace_context_scale")
_POSITIVE = ("learning_rate", "huber_c", "learning_rate_cycles", "lora_alpha", "timestep_shift", "logit_std", "sigmoid_scale")
_FRACTION_BELOW_ONE = ("lora_dropout", "learning_rate_min_factor")


def frame_lengths(frames: int | list[int]) -> list[int]:
    """The window lengths of a `frames` value (one length or a list)."""
    return [frames] if isinstance(frames, int) else list(frames)


def resolutions(resolution: list[int] | list[list[int]]) -> list[list[int]]:
    """The [height, width] pairs of a `resolution` value (one pair or a list of pairs), each once (in the given
    order: a repeated pair would train every item twice, as a repeated `frames` length would)."""
    pairs = [list(resolution)] if resolution and isinstance(resolution[0], int) else [list(r) for r in resolution]
    return [list(pair) for pair in dict.fromkeys(tuple(p) for p in pairs)]


def check_clip_options(path: str, config) -> None:
    """The window and resolution keys a concept shares with the run (None: not set on the concept)."""
    def key(name: str) -> str:
        return f"{path}.{name}" if path else name

    if config.frames is not None:
        if not frame_lengths(config.frames):
            raise ConfigError(f"config key '{key('frames')}' is an empty list: give at least one length")
        for length in frame_lengths(config.frames):
            check_frame_count(key("frames"), length)
    if config.max_frames is not None:
        check_frame_count(key("max_frames"), config.max_frames)
    if config.resolution is not None:
        pairs = resolutions(config.resolution)
        if not pairs or any(len(p) != 2 or any(v < 16 or v % 16 for v in p) for p in pairs):
            raise ConfigError(f"config key '{key('resolution')}' must be [height, width] (or a list of them), "
                              f"multiples of 16, got {config.resolution}")
        for side in (v for pair in pairs for v in pair):
            check_resolution_side(f"config key '{key('resolution')}'", side)
    for name in ("fps", "frame_stride"):
        value = getattr(config, name)
        if value is not None and value < 0:
            raise ConfigError(f"config key '{key(name)}' must not be negative, got {value}")
    if config.frame_windows is not None and config.frame_windows < 1:
        raise ConfigError(f"config key '{key('frame_windows')}' must be at least 1, got {config.frame_windows}")
    dropout = config.caption_dropout_probability
    if dropout is not None and not 0.0 <= dropout <= 1.0:
        raise ConfigError(f"config key '{key('caption_dropout_probability')}' must be between 0 and 1, got {dropout}")


@dataclasses.dataclass
class ConceptConfig(BaseConfig):
    path: str = option("", "A folder of videos/images with same-name .txt captions, or a .jsonl manifest of "
                           '{"path", "prompt"} lines (mp4 or npz frame arrays).')
    name: str = option("", "Display name (defaults to the folder name).")
    enabled: bool = option(True, "Disabled concepts are skipped.")
    include_subdirectories: bool = option(False, "Also read files in sub-folders.")
    balancing: float = option(1.0, "REPEATS: how many times each sample is seen per epoch (a fraction, e.g. 1.5, draws that share of the samples anew each epoch); SAMPLES: how many of the concept's samples an epoch holds. Old configs' `repeats` is read as this.")
    balancing_strategy: BalancingStrategy = option(BalancingStrategy.REPEATS, "REPEATS or SAMPLES: how balancing is read (OneTrainer's names).")
    loss_weight: float = option(1.0, "Multiplies the loss of this concept's samples (e.g. 0.5 for a regularisation set).")
    type: ConceptType = option(ConceptType.STANDARD, "STANDARD (trained on) or VALIDATION (never trained on: its loss at fixed σ and noise is logged every validate_after units).")
    prompt_source: PromptSource = option(PromptSource.SAMPLE, "Where captions come from: SAMPLE (each sample's .txt; a manifest's \"prompt\"), CONCEPT (the file prompt_path for every sample) or FIELD (a .jsonl manifest's field prompt_field).")
    prompt_path: str = option("", "prompt_source CONCEPT: the text file whose text captions every sample of the concept.")
    prompt_field: str = option("prompt", "prompt_source FIELD: the manifest field that holds each sample's caption.")
    caption_prefix: str = option("", "Text put before every caption of this concept (e.g. a trigger word and a comma).")
    caption_suffix: str = option("", "Text put after every caption of this concept.")
    caption_dropout_probability: float | None = option(None, "This concept's caption dropout (null = the run's caption_dropout_probability).")
    fps: float | None = option(None, "This concept's frame rate (null = the run's fps).")
    frames: int | list[int] | None = option(None, "This concept's window length(s), 4k+1 (null = the run's frames).")
    resolution: list[int] | list[list[int]] | None = option(None, "This concept's [height, width] or list of them (null = the run's resolution).")
    frame_sample_strategy: FrameSampleStrategy | None = option(None, "This concept's frame windows (null = the run's frame_sample_strategy).")
    frame_stride: int | None = option(None, "SLIDE: this concept's stride (null = the run's frame_stride).")
    frame_windows: int | None = option(None, "UNIFORM / KEYFRAME: this concept's window count (null = the run's frame_windows).")
    max_frames: int | None = option(None, "FULL: this concept's longest window (null = the run's max_frames).")

    @classmethod
    def upgrade(cls, data: dict, path: str = "") -> dict:
        """`repeats` (before balancing existed) is read as `balancing` with the REPEATS strategy."""
        if "repeats" not in data:
            return data
        if "balancing" in data:
            raise ConfigError(f"config key '{path}.repeats' is the old name of '{path}.balancing': keep one")
        data = dict(data)
        data["balancing"] = data.pop("repeats")
        return data

    def display_name(self) -> str:
        """The name in logs and tensorboard tags: `name`, else the folder's (or manifest's) name."""
        return self.name or Path(self.path).stem or "concept"

    def validate(self, path: str) -> None:
        if self.enabled and not self.path:
            raise ConfigError(f"config key '{path}.path' is empty: set it to a dataset folder or .jsonl file")
        if self.prompt_source == PromptSource.CONCEPT and not self.prompt_path:
            raise ConfigError(f"config key '{path}.prompt_path' is empty but prompt_source is CONCEPT: give the "
                              "caption file")
        if self.prompt_source == PromptSource.FIELD and self.path and not self.path.lower().endswith(".jsonl"):
            raise ConfigError(f"config key '{path}.prompt_source' is FIELD, which reads a .jsonl manifest's field, "
                              f"but path is '{self.path}': use SAMPLE for a folder")
        if self.prompt_source == PromptSource.FIELD and not self.prompt_field:
            raise ConfigError(f"config key '{path}.prompt_field' is empty: name the manifest field")
        if self.balancing <= 0:
            raise ConfigError(f"config key '{path}.balancing' must be greater than 0, got {self.balancing}")
        if self.loss_weight < 0:
            raise ConfigError(f"config key '{path}.loss_weight' must not be negative, got {self.loss_weight}")
        check_clip_options(path, self)


@dataclasses.dataclass
class BaseLoRAConfig(BaseConfig):
    """A LoRA merged into the frozen base before training (a distilled "Lightning" / lightx2v / CausVid speed LoRA)."""

    path: str = option("", "A LoRA .safetensors file: ComfyUI (diffusion_model.*), musubi / sd-scripts (lora_unet_*), diffusers / PEFT (transformer.*) keys; LoRA, LoHa, LoKr or DoRA.")
    strength: float = option(1.0, "Its strength (ComfyUI's strength_model, -100 to 100): W + strength · ΔW.")
    expert: WanExpert = option(WanExpert.BOTH, "Two-expert models (Wan 2.2 A14B): HIGH (transformer), LOW (transformer_2) or BOTH. Must be BOTH for one-transformer models.")
    training_only: bool = option(False, "Merged for training only (a de-distill training adapter): taken out again for samples, for the saved model's weights and from the saved LoRA's header, so scripts/sample.py and evaluate.py do not apply it either.")
    sample_only: bool = option(False, "Merged for the trainer's samples only (e.g. a Lightning LoRA the trained LoRA will be used with, beside sample_overrides for its steps and CFG): never trained through, not in the saved model or the saved LoRA's header; stacked after the other base LoRAs and before the trained LoRA, in the samples' weights and in each sample's ComfyUI workflow.")

    def validate(self, path: str) -> None:
        if not self.path:
            raise ConfigError(f"config key '{path}.path' is empty: set it to a LoRA .safetensors file (or remove the entry)")
        check_lora_strength(f"config key '{path}.strength'", self.strength)
        if self.training_only and self.sample_only:
            raise ConfigError(f"config key '{path}.sample_only': an entry is training_only or sample_only, not both: "
                              "set one of them to false")


@dataclasses.dataclass
class E2VConfig(BaseConfig):
    """Elements-to-Video options (docs/e2v.md). The element layout itself lives in `dataset_config`."""

    e2v_type: str = option("auto", "auto | dual | vae | clip: which conditioning pathways are used.")
    vae_posterior: str = option("mode", "sample | mode: how the cached VAE posterior becomes the condition.")
    reference_layout: str = option("a2", "a2 | skyreels_v3: where the references enter the transformer. a2: SkyReels-A2's CLIP tokens and leading VAE reference frames in the condition channels (T2V bases are expanded to 36 input channels). skyreels_v3: SkyReels-V3's reference-to-video, each reference one VAE latent frame appended after the video's latents, zero-padded to 4 slots, their prediction left out of the loss, no CLIP; T2V-layout bases take it as they are (docs/e2v.md §9).", structural=True)
    reference_dropout_probability: float = option(0.0, "skyreels_v3 layout: the share of samples (drawn per sample and epoch) that train with all-zero reference slots, the condition image guidance steers away from, as caption_dropout_probability does for the text (0 to 1; e.g. 0.1 to sample with image_guidance_scale > 1).")
    target_layout: str = option("separate", "separate | joint: how x0 of the reference slots is built (a2 layout only).")
    loss_on_reference_frames: bool = option(True, "Keep the reference latent frames in the loss (a2 layout only; skyreels_v3 always leaves the references' prediction out).")
    image_encoder_model_name: str = option("", "Folder with image_encoder/ for bases that have none.")
    export_i2v: bool = option(True, "E2V on a T2V base: also write the trained model as a Wan I2V model (<stem>-i2v/ diffusers folder and <stem>-i2v.safetensors single file) that ComfyUI, diffusers and SkyReels-A2 load.")

    def validate(self, path: str) -> None:
        allowed = {"e2v_type": ("auto", "dual", "vae", "clip"), "vae_posterior": ("sample", "mode"),
                   "target_layout": ("separate", "joint"), "reference_layout": REFERENCE_LAYOUTS}
        for key, values in allowed.items():
            if getattr(self, key) not in values:
                raise ConfigError(f"config key '{path}.{key}' must be one of {', '.join(values)}, got '{getattr(self, key)}'")
        if not 0 <= self.reference_dropout_probability <= 1:
            raise ConfigError(f"config key '{path}.reference_dropout_probability' must be between 0 and 1, got "
                              f"{self.reference_dropout_probability}")
        if self.reference_dropout_probability and self.reference_layout != "skyreels_v3":
            raise ConfigError(f"config key '{path}.reference_dropout_probability' applies to reference_layout "
                              "'skyreels_v3' only: set it to 0 or choose that layout")
        if self.reference_layout == "skyreels_v3":  # VAE references only, appended after the video's latents
            if self.e2v_type in ("dual", "clip"):
                raise ConfigError(f"config key '{path}.e2v_type' is '{self.e2v_type}' but reference_layout "
                                  "'skyreels_v3' has no CLIP pathway: set e2v_type to 'vae' (or 'auto')")
            if self.target_layout != "separate":
                raise ConfigError(f"config key '{path}.target_layout' is '{self.target_layout}' but reference_layout "
                                  "'skyreels_v3' trains on the whole video (its references are appended, not part of "
                                  "the target): remove target_layout")


@dataclasses.dataclass
class EmbeddingConfig(BaseConfig):
    """A textual-inversion embedding of UMT5 (training_method EMBEDDING, or beside a LoRA when `placeholder` is
    set): new input vectors that the placeholder word stands for in captions and prompts."""

    placeholder: str = option("", "The word captions use for the concept, e.g. <sks> (one word, no spaces; matched as a whole word: after whitespace or the start, before whitespace, punctuation or the end, so 'cat' never fires inside 'scattered'). EMBEDDING: required; LORA: set it to train an embedding beside the LoRA.")
    token_count: int = option(1, "How many input vectors the placeholder stands for (1 to 75).")
    initial_embedding_text: str = option("*", "Text whose token embeddings start the vectors (each vector the mean of its share of the tokens; tiled when there are fewer tokens than vectors), e.g. a word close to the concept.")
    learning_rate: float = option(0.0, "Peak learning rate of the vectors (0 = learning_rate); beside a LoRA often higher than the LoRA's, e.g. 1e-3.")

    def validate(self, path: str) -> None:
        if any(c.isspace() for c in self.placeholder):
            raise ConfigError(f"config key '{path}.placeholder' must be one word without spaces, got '{self.placeholder}'")
        if not 1 <= self.token_count <= 75:
            raise ConfigError(f"config key '{path}.token_count' must be between 1 and 75, got {self.token_count}")
        if not self.initial_embedding_text.strip():
            raise ConfigError(f"config key '{path}.initial_embedding_text' is empty: give a word close to the concept, e.g. 'person'")
        if self.learning_rate < 0:
            raise ConfigError(f"config key '{path}.learning_rate' must be 0 (= learning_rate) or more, got {self.learning_rate}")


def upgrade_compile_flag(data: dict) -> dict:
    """`compile` was true / false before AUTO: ON / OFF."""
    if isinstance(data.get("compile"), bool):
        data = {**data, "compile": "ON" if data["compile"] else "OFF"}
    return data


@dataclasses.dataclass
class TrainConfig(BaseConfig):
    config_version: int = option(CONFIG_VERSION, "Version of this file's layout; older files are migrated.")

    # --- model -------------------------------------------------------------------------------
    model_type: ModelType = option(ModelType.AUTO, "AUTO (the checkpoint's), WAN_2_1 or WAN_2_2: the model type and variant are read from the checkpoint; a value that disagrees with it is refused at start-up.")
    training_method: TrainingMethod = option(TrainingMethod.LORA, "LORA, FINE_TUNE or EMBEDDING (textual inversion of UMT5: see the embedding block).", structural=True)
    base_model_name: str = option("", "A diffusers-format Wan folder (e.g. Wan2.1-T2V-1.3B-Diffusers).")
    transformer_override: str = option("", "Optional single-file transformer (.safetensors, diffusers or original/ComfyUI key names) that replaces the folder's transformer.")
    transformer_2_override: str = option("", "Like transformer_override, for the low-noise expert of two-expert models.")
    vae_override: str = option("", "Optional single-file VAE (.safetensors: ComfyUI's vae/wan_2.1_vae or wan2.2_vae, or diffusers key names) that replaces the folder's VAE.")
    text_encoder_override: str = option("", "Optional single-file UMT5 text encoder (.safetensors: ComfyUI's text_encoders/umt5_xxl_*, bf16/fp16/fp8/fp8_scaled) that replaces the folder's.")
    image_encoder_override: str = option("", "Optional single-file CLIP vision encoder (.safetensors: ComfyUI's clip_vision/clip_vision_h) that replaces the folder's (or e2v.image_encoder_model_name's).")
    base_loras: list[BaseLoRAConfig] = option([], "LoRAs merged into the frozen base at load time, in order, before fp8 / block swap / the trained adapter (e.g. a Lightning speed LoRA the trained LoRA will be used with); recorded in the saved LoRA's header (file name, sha256, strength) so scripts/sample.py and evaluate.py apply the same stack. Entries marked sample_only are merged for the trainer's samples only.")
    transformer_dtype: DataType = option(DataType.AUTO, "Weight dtype of the transformer(s).")
    text_encoder_dtype: DataType = option(DataType.AUTO, "Weight dtype of the UMT5 text encoder.")
    vae_dtype: DataType = option(DataType.FLOAT32, "Weight dtype of the VAE.")
    image_encoder_dtype: DataType = option(DataType.FLOAT32, "Weight dtype of the CLIP image encoder.")
    train_dtype: DataType = option(DataType.AUTO, "Autocast dtype of the training step.")
    train_device: str = option("auto", "auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")

    # --- paths -------------------------------------------------------------------------------
    workspace_dir: str = option("workspace/run", "Folder of the runs: each run writes its backups, samples, tensorboard curves, logs, snapshots and a copy of its config to its own folder <workspace_dir>/<run_name>/.")
    run_name: str = option("", "The run's folder name in workspace_dir ('' = the output's name and the start's date and time, e.g. lora-20260301-142530). A new run never writes into another run's folder: a name that is taken gets <name>-2, <name>-3, ... With continue_last_backup: the run to resume, also when renamed by hand since ('' = the newest unfinished run).")
    cache_dir: str = option("workspace/cache", "Folder of the latent/text-embedding cache (shared between runs).")
    output_model_destination: str = option("output/lora.safetensors", "Where the final model is written; when a file it would write exists already, the run writes <name>-2 (then -3, ...) instead and says so, unless overwrite_output is true.")
    overwrite_output: bool = option(False, "Replace existing files at output_model_destination instead of writing a numbered name beside them.")
    output_model_format: ModelFormat = option(ModelFormat.COMFY_LORA, "COMFY_LORA (loads in ComfyUI, diffusers and SkyReels-A2), DIFFUSERS_LORA (diffusers/PEFT key names: diffusers only) or DIFFUSERS (full model folder). EMBEDDING runs always write the embedding file (key umt5xxl).")
    output_dtype: DataType = option(DataType.BFLOAT16, "Tensor dtype of written LoRA files and snapshots: BFLOAT16 (half the size of FLOAT32, what ComfyUI computes in), FLOAT16 or FLOAT32 (exact).")

    # --- data --------------------------------------------------------------------------------
    concepts: list[ConceptConfig] | str = option([], "A list of concepts, or the path of a JSON file holding that list.")
    dataset_config: str = option("", "An E2V dataset JSON (seed format: datasets[].elements[] ...).")
    resolution: list[int] | list[list[int]] = option([480, 832], "Target [height, width] (multiples of 16, at most 4096), or a list of them (e.g. [[480, 832], [720, 1280]]: each clip trains at every one); with aspect bucketing each one's area is kept.")
    aspect_bucketing: bool = option(True, "Group samples by aspect ratio instead of cropping all to one shape.")
    frames: int | list[int] = option(81, "Frames per training window (4k+1), or a list of lengths (e.g. [17, 33, 81]): each clip gives its windows at every length it holds. Clips shorter than a length train on the largest 4k+1 they hold.")
    frame_sample_strategy: FrameSampleStrategy = option(FrameSampleStrategy.HEAD, "Which windows of each clip train: HEAD (the first frames), SLIDE (every frame_stride frames), UNIFORM (frame_windows spread evenly), RANDOM (a new window each epoch; cache_variations of them cached), KEYFRAME (from each scene cut; none: UNIFORM) or FULL (the whole clip up to max_frames).")
    frame_stride: int = option(0, "SLIDE: frames between window starts (0 = the window's length: consecutive chunks).")
    frame_windows: int = option(4, "UNIFORM (and KEYFRAME without cuts): windows per clip.")
    max_frames: int = option(81, "FULL: the longest window (4k+1); a longer clip is cut at the largest 4k+1 up to it.")
    cache_variations: int = option(4, "RANDOM windows and augmentation: how many variants per clip are cached (epoch e uses e mod N), so later epochs run no encoder; 0 = augmentation off and one RANDOM window while caching.")
    random_flip: bool = option(False, "Augmentation: mirror half of the clips' variants horizontally (every frame of a clip alike; E2V: the video and its reference images together).")
    random_crop: float = option(0.0, "Augmentation: the crop window shrinks by up to this share (0 to 0.5) and moves within the frame, alike for every frame of a clip (concepts; E2V datasets take random_flip only).")
    color_jitter: float = option(0.0, "Augmentation: brightness, contrast and saturation change by up to this share (0 to 0.5, e.g. 0.1), alike for every frame of a clip (concepts; E2V datasets take random_flip only).")
    fps: float = option(0.0, "Frame rate videos are resampled to; 0 = the variant's own (16 for Wan 2.1 and Wan 2.2 A14B, 24 for Wan 2.2 TI2V 5B).")
    latent_caching: bool = option(True, "Cache VAE latents and text embeddings on disk; epoch 2+ runs no encoder, and the text encoder and CLIP are freed after caching (the samples' prompts and images are encoded ahead).")
    clear_cache_before_training: bool = option(False, "Delete this run's cache entries first.")
    ram_cache_mb: int = option(2048, "Keep up to this many MB of cached latents/embeddings in RAM between epochs (0 = off).")
    caption_dropout_probability: float = option(0.0, "Probability of training a sample with an empty caption (for CFG).")
    max_frame_pixels: int = option(DEFAULT_MAX_FRAME_PIXELS, "Skip (and count) an image or video whose header declares frames of more than this many pixels (width x height), before decoding it: a 1 MB PNG may declare 20000x20000 pixels and take GBs of RAM. 67108864 = 8192x8192 takes 8K video and camera photos.")
    transparent_background: list[int] = option(list(WHITE), "RGB colour [r, g, b] (0-255) that transparent pixels of images (RGBA, LA, palette PNGs) are composited on; white as E2V's pad_white.")

    # --- training ----------------------------------------------------------------------------
    epochs: int = option(10, "Passes over the data.")
    max_steps: int = option(0, "Stop after this many optimizer steps (0 = no limit).")
    batch_size: int = option(1, "Samples per step (a batch never mixes shapes).")
    gradient_accumulation_steps: int = option(1, "Micro-batches per optimizer step.")
    learning_rate: float = option(1e-4, "Peak learning rate.")
    learning_rate_scheduler: LearningRateScheduler = option(LearningRateScheduler.CONSTANT, "CONSTANT, LINEAR, COSINE, COSINE_WITH_RESTARTS or REX (after warm-up).")
    learning_rate_warmup_steps: int = option(0, "Linear warm-up steps.")
    learning_rate_cycles: float = option(1.0, "COSINE_WITH_RESTARTS: how many cosine decays the run holds (each restarts at the peak).")
    learning_rate_min_factor: float = option(0.0, "LINEAR, COSINE, COSINE_WITH_RESTARTS and REX decay to this fraction of the peak, not to 0.")
    learning_rate_high_noise: float = option(0.0, "Two-expert models: the high-noise expert's peak learning rate (0 = learning_rate).", structural=True)
    learning_rate_low_noise: float = option(0.0, "Two-expert models: the low-noise expert's peak learning rate (0 = learning_rate).", structural=True)
    expert_step_share: float = option(0.0, "Two-expert models, train_expert BOTH: the fraction of steps that train the high-noise expert (0 = as the σ distribution falls).")
    lora_plus_ratio: float = option(0.0, "LoRA+: the up (B) matrices learn this many times faster (e.g. 4 to 16; 0 = off). LORA, DoRA and LOHA.", structural=True)
    optimizer: Optimizer = option(Optimizer.ADAMW, "The optimizer; its own options are under optimizer_options.<NAME>.", structural=True)
    optimizer_options: OptimizerOptions = option(OptimizerOptions(), "Options of each optimizer by name; only the chosen optimizer's are used.")
    weight_decay: float = option(0.01, "Weight decay (decoupled where the optimizer supports it).")
    max_grad_norm: float = option(1.0, "Gradient clipping norm (0 = off).")
    checkpointing: CheckpointingConfig = option(CheckpointingConfig(), "Gradient checkpointing: what each transformer block keeps for its backward pass (policy, kept_blocks). Every policy trains bit for bit alike; more kept is faster and needs more memory.")
    attention_backend: AttentionBackend = option(AttentionBackend.AUTO, "Attention kernel for training, through diffusers' dispatcher: AUTO (the first available of FLASH, CUDNN, NATIVE on a GPU; NATIVE on the CPU), NATIVE (torch SDPA), FLASH (flash-attn), CUDNN, FLEX (GPU). SAGE has no backward pass.")
    sample_attention_backend: AttentionBackend = option(AttentionBackend.AUTO, "Attention kernel for samples during training (SAGE allowed).")
    compile: CompileMode = option(CompileMode.AUTO, "torch.compile each transformer block (regional compilation, dynamic shapes: a new bucket reuses the graphs; the graph count is logged per new shape): AUTO (on a CUDA GPU with triton installed, where the compile tests pass; off on the CPU, ROCm and with an int8 ConvRot base, not yet compiled on a GPU), ON (also on the CPU, with a C++ compiler) or OFF. The compiled graphs are cached across runs (in ~/.cache/wantrainer/torch_compile, or TORCHINDUCTOR_CACHE_DIR), so the first step's compilation is paid once per shape, not per run. true / false are read as ON / OFF.")
    memory_preset: MemoryPreset = option(MemoryPreset.AUTO, "AUTO: before the model loads, pick the cheapest memory features that make the estimate fit both the GPU (gpu_memory_gib, else the detected card) and the machine's RAM: vae_tiling, text_encoder_caching_device CPU, then vae_dtype BFLOAT16 while caching does not fit; for training, of activation_offload, checkpointing SPLIT_ATTENTION, base_weight_format FP8 (INT8_CONVROT instead on a card where int8 was measured faster, by compute capability: docs/base_weights.md), offload_inactive_expert and the fewest blocks_to_swap, the cheapest combination that fits both (offload and swapped blocks spend RAM: with little RAM AUTO swaps blocks or splits instead); then, with checkpointing.policy AUTO, the memory left is spent on speed: the checkpointing policy and kept_blocks that fit with the least modelled step time; refused only where no plan fits the RAM (one line: the plan needing the least and what would run it); the choice, its cost and why are logged. A memory key set away from its default is kept as set. MANUAL: the keys exactly as set.")
    gpu_memory_gib: float = option(0.0, "The GPU memory to plan for, in GiB (0 = the detected GPU's; without a GPU AUTO changes nothing): memory_preset AUTO's plan, and when caching tiles the VAE.")
    blocks_to_swap: int = option(0, "Keep the frozen weights of the last N transformer blocks on the CPU and stream them in (LoRA only; needs checkpointed blocks: a checkpointing policy other than NONE and KEEP_ALL_BUT_FFN, and kept_blocks only among the others).")
    activation_offload: bool = option(False, "Keep activations saved for the backward pass in CPU memory.")
    ffn_chunks: int = option(0, "Run each block's feed-forward over this many token slices. Under checkpointing (every policy but NONE) the feed-forward runs its backward in token slices anyway (at no cost: the block's recompute skips it), and this sets the least number of slices; with policy NONE each slice is recomputed right before its backward: a smaller working set per block for about one extra feed-forward pass per step (0 or 1 = off; e.g. 8).")
    base_weight_format: BaseWeightFormat = option(BaseWeightFormat.BF16, "How the frozen transformer's block Linears are stored (LORA and EMBEDDING; embedders, modulation, head and norms stay as loaded): BF16 (as loaded, in transformer_dtype), FP8 (float8 e4m3, upcast per layer, scaled as fp8_scale says; saves memory in checkpointed blocks, whose recompute frees the upcast copies; was fp8_base_weights true), FP8_SCALED (float8 with one scale per weight, ComfyUI's fp8_scaled: FP8 with fp8_scale TENSOR, by its ComfyUI name) or INT8_CONVROT (ComfyUI's int8 with a Hadamard rotation, int8 matmuls: half of bf16's weight memory, faster on consumer GPUs, slower than bf16 on Hopper; a ComfyUI int8 ConvRot file as transformer_override trains as stored). See docs/base_weights.md.", structural=True)
    fp8_scale: Fp8Scale = option(Fp8Scale.NONE, "base_weight_format FP8: NONE (a plain e4m3 cast), TENSOR (one scale per weight, amax/448: ComfyUI's fp8_scaled format, the same as base_weight_format FP8_SCALED) or CHANNEL (one scale per output channel: the smallest rounding error). Scales cost 4 bytes each.")
    offload_inactive_expert: bool = option(False, "Two-expert models (Wan 2.2 A14B), train_expert BOTH: keep the frozen weights of the expert the step does not route to in (pinned) CPU memory; one expert's weights on the GPU at a time, copied in when the σ routes to the other (LoRA and EMBEDDING).")
    data_parallel: DataParallel = option(DataParallel.DDP, "Under torchrun: DDP (each GPU holds the whole model) or FSDP (FINE_TUNE only: weights, gradients and optimizer state sharded across the GPUs, for full fine-tunes that do not fit one GPU).")
    sequence_parallel: int = option(1, "Under torchrun: split each clip's tokens over this many GPUs (Ulysses sequence parallelism: each GPU runs the blocks on 1/N of the tokens, and self-attention on 1/N of the heads over all of them), for clips whose activations do not fit one GPU. The GPUs form groups of N (consecutive ranks: keep a group on one node); batch_size counts per group; works with DDP and FSDP. The transformer's attention heads must divide by N (1.3B: 12, 14B: 40, 5B: 24). 1 = off.")
    vae_tiling: bool = option(False, "Encode/decode with the VAE in tiles (less memory at large resolutions). Off: caching still tiles when the largest clip's encode would not fit gpu_memory_gib (logged).")
    text_encoder_caching_device: EncoderDevice = option(EncoderDevice.GPU, "Where UMT5 encodes the captions while the cache is filled: GPU (the train device, 10.6 GiB in bf16 for UMT5-XXL, one encoder at a time) or CPU (slow, no device memory). A trained embedding still moves it to the GPU for training.")
    text_encoder_fp8: bool = option(False, "Store UMT5's Linear weights as float8 (e4m3, one scale per output channel), dequantized per layer: about half the memory of bf16; its embeddings differ slightly, so cached captions are encoded again.")
    seed: int = option(42, "Seed of everything random in a run (data order, noise, sigma).")
    ema: EmaMode = option(EmaMode.OFF, "Keep an exponential moving average of the trained weights: OFF, GPU (on the train device) or CPU (host memory).")
    ema_decay: float = option(0.999, "EMA: weight of the old average at each update.")
    ema_update_step_interval: int = option(1, "EMA: update every N optimizer steps.")
    ema_save_raw: bool = option(False, "EMA: also save the raw (not averaged) weights, as <name>-raw beside each output.")
    sample_with_ema: bool = option(True, "EMA: samples during training use the averaged weights (false: the raw ones).")
    loss_type: LossType = option(LossType.MSE, "MSE, HUBER or PSEUDO_HUBER (robust to outlier errors; see huber_c).")
    huber_c: float = option(0.1, "HUBER / PSEUDO_HUBER: where the loss turns from quadratic to linear.")
    huber_schedule: HuberSchedule = option(HuberSchedule.CONSTANT, "CONSTANT huber_c, or EXPONENTIAL: huber_c^σ (1 at σ 0, huber_c at σ 1).")
    masked_training: bool = option(False, "Weight the loss by each sample's mask: <name>-masklabel.png (every frame) or <name>-masklabel.mp4 (per frame) beside it (a manifest line's \"mask\"); samples without one are skipped and counted.")
    unmasked_weight: float = option(0.1, "Masked training: the loss weight outside the mask (0 = the unmasked region does not train; 1 = as without masks).")
    normalize_masked_area_loss: bool = option(False, "Masked training: divide each sample's loss by its mean weight, so a small mask trains as hard as a large one.")
    loss_weight_fn: LossWeightFn = option(LossWeightFn.CONSTANT, "Weight of each sample's loss by its σ: CONSTANT, SIGMA_SQRT (σ^-2) or COSMAP (SD3's).")
    timestep_distribution: TimestepDistribution = option(TimestepDistribution.UNIFORM, "How sigma is drawn: UNIFORM, LOGIT_NORMAL, SIGMOID, COSMAP or HEAVY_TAIL.")
    logit_mean: float = option(0.0, "Mean of LOGIT_NORMAL.")
    logit_std: float = option(1.0, "Std of LOGIT_NORMAL.")
    sigmoid_scale: float = option(1.0, "Scale of SIGMOID.")
    mode_scale: float = option(1.29, "HEAVY_TAIL: SD3's mode scale s (-1 to 1.75; 0 = uniform, larger = more mass mid-range).")
    dynamic_timestep_shifting: bool = option(False, "Shift σ per batch by its resolution (Wan's 3.0 at 480p, 5.0 at 720p, linear in tokens per frame) instead of timestep_shift.")
    timestep_shift: float = option(1.0, "Shift s applied to the drawn sigma: s*σ / (1 + (s-1)*σ). 1 = none.")
    min_sigma: float = option(0.0, "Lower end of the sigma range.")
    max_sigma: float = option(1.0, "Upper end of the sigma range.")
    train_expert: WanExpert = option(WanExpert.BOTH, "Two-expert models: BOTH, HIGH (transformer) or LOW (transformer_2).", structural=True)
    guidance_preserving: GuidancePreservingConfig = option(GuidancePreservingConfig(), "The guidance-preserving target for CFG-distilled bases (docs/distilled_bases.md): off unless scale is set.")

    # --- LoRA --------------------------------------------------------------------------------
    peft_type: PeftType = option(PeftType.LORA, "Adapter type: LORA, LOHA (Hadamard product) or LOKR (Kronecker product); lora_rank/lora_alpha apply to all.", structural=True)
    lora_decompose: bool = option(False, "DoRA: train a per-output-channel magnitude next to the LoRA direction (LORA only).", structural=True)
    lokr_factor: int = option(-1, "LOKR: the Kronecker factor of each dimension (-1 = as balanced as possible).", structural=True)
    lora_rank: int = option(16, "LoRA rank.", structural=True)
    lora_alpha: float = option(16.0, "LoRA alpha (effective scale alpha/rank).")
    lora_dropout: float = option(0.0, "LoRA dropout.")
    lora_target_modules: list[str] = option(DEFAULT_LORA_TARGETS, "Module-name suffixes that get a LoRA.", structural=True)
    lora_layer_filter: str = option("", "Regex on the full module name; only matches get a LoRA ('' = all).", structural=True)
    lora_blocks: list[int] = option([], "Transformer block indices that get a LoRA ([] = all).", structural=True)
    lora_weight_path: str = option("", "A LoRA file (ours, ComfyUI or musubi) to continue training from.")
    last_frame_condition: bool = option(False, "I2V-layout bases: condition on the clip's first AND last frame (first-last-frame, FLF2V; samples give last_image). Always on for FLF2V models.", structural=True)
    vace_train_blocks: VaceBlocks = option(VaceBlocks.VACE, "VACE models: which blocks train (LORA and FINE_TUNE): VACE (the control blocks, as DiffSynth and VideoX-Fun train), BASE (the Wan blocks) or BOTH.", structural=True)
    vace_context_scale: float = option(1.0, "VACE models: the weight of the control blocks' hints in the training step (diffusers' conditioning_scale, ComfyUI's VACE strength; samples take their own vace_scale).")

    # --- embedding (textual inversion) -----------------------------------------------------------
    embedding: EmbeddingConfig = option(EmbeddingConfig(), "Textual-inversion embedding of UMT5: trained by EMBEDDING, or beside a LoRA when embedding.placeholder is set; written as <name>.safetensors (key umt5xxl) for ComfyUI's models/embeddings (with the node in comfyui/wantrainer_nodes: stock ComfyUI ignores embeddings for Wan).")
    embedding_weight_path: str = option("", "An embedding file (ours or ComfyUI's, key umt5xxl) to continue training from.")

    # --- sampling, backups, logging ------------------------------------------------------------
    samples: list[SampleConfig] = option([], "Prompts sampled during training.")
    sample_overrides: SampleOverrides = option(SampleOverrides(), "Steps, CFG, shift, sampler and scheduler every training sample takes instead of its own (a distilled base: 4 steps, CFG 1).")
    sample_after: int = option(0, "Sample every N units (0 = never).")
    sample_after_unit: TimeUnit = option(TimeUnit.NEVER, "STEP, EPOCH, MINUTE or NEVER.")
    sample_at_end: bool = option(True, "Sample every enabled sample once more with the final weights.")
    sample_metrics: bool = option(False, "Log each sample's metrics to tensorboard (sample_metrics/<index>/...): motion, and with the checkpoint's CLIP image encoder temporal consistency and E2V element fidelity (docs/evaluation.md).")
    save_every: int = option(0, "Write a snapshot of the output model to the run folder's save/ every N units (0 = never); separate from resumable backups.")
    save_every_unit: TimeUnit = option(TimeUnit.NEVER, "STEP, EPOCH, MINUTE or NEVER.")
    save_skip_first: int = option(0, "No snapshot during the first N units (of save_every_unit).")
    rolling_save_count: int = option(0, "How many of the newest snapshots are kept (0 = keep every snapshot).")
    backup_after: int = option(0, "Write a resumable backup every N units (0 = never).")
    backup_after_unit: TimeUnit = option(TimeUnit.NEVER, "STEP, EPOCH, MINUTE or NEVER.")
    rolling_backup_count: int = option(3, "How many of the newest backups are kept (0 = keep every backup).")
    backup_before_save: bool = option(True, "Write a backup when training ends.")
    continue_last_backup: bool = option(False, "Resume the newest backup of the run named run_name, or of the newest unfinished run (stopped, failed or killed) when run_name is empty; the log names the run. A finished run is not resumed unless the config trains it further (more epochs, or a higher max_steps): the start is refused in one line saying how to train more. Workspaces of older WanTrainers (workspace_dir/backup/step-*) are moved into a run folder, nothing deleted.")
    resume_changed_config: bool = option(False, "With continue_last_backup: resume the newest backup although training settings changed since it was written (a warning names them). Without it such a resume is refused, naming the backup and the changes.")
    resume_fresh_optimizer: bool = option(False, "With continue_last_backup: resume the newest backup's weights, EMA, LR schedule and position but start the optimizer state fresh; the way out when its optimizer files are damaged.")
    tensorboard: bool = option(True, "Write tensorboard scalars to the run folder's tensorboard/.")
    validate_after: int = option(1, "With concepts of type VALIDATION: measure their loss every N units (0 = never).")
    validate_after_unit: TimeUnit = option(TimeUnit.EPOCH, "STEP, EPOCH, MINUTE or NEVER.")
    validation_sigma_count: int = option(4, "Validation: how many fixed σ values each sample's loss is measured at (evenly spaced over the trained σ range; one forward pass each).")

    e2v: E2VConfig = option(E2VConfig(), "Elements-to-Video options.")

    @classmethod
    def upgrade(cls, data: dict, path: str = "") -> dict:
        """Old keys, in any record (a GUI row, a test's dict): the checkpointing keys read as the `checkpointing` group,
        fp8_base_weights as base_weight_format."""
        return upgrade_fp8_flag(upgrade_compile_flag(upgrade_old_keys(data, path)), path)

    def fp8_base(self) -> bool:
        """Whether the frozen block weights are stored in float8 (base_weight_format FP8 / FP8_SCALED)."""
        return self.base_weight_format in (BaseWeightFormat.FP8, BaseWeightFormat.FP8_SCALED)

    def fp8_scale_mode(self) -> Fp8Scale:
        """The fp8 scale in use: FP8_SCALED means TENSOR (ComfyUI's fp8_scaled); otherwise fp8_scale."""
        return Fp8Scale.TENSOR if self.base_weight_format == BaseWeightFormat.FP8_SCALED else self.fp8_scale

    def int8_base(self) -> bool:
        return self.base_weight_format == BaseWeightFormat.INT8_CONVROT

    def _check_base_weight_format(self, fail) -> None:
        fmt = self.base_weight_format
        if fmt != BaseWeightFormat.BF16 and self.training_method == TrainingMethod.FINE_TUNE:
            fail("base_weight_format", f"{fmt.name} stores frozen base weights: it works with LORA and EMBEDDING "
                                       "training, not FINE_TUNE (set it BF16)")
        if fmt == BaseWeightFormat.FP8_SCALED and self.fp8_scale not in (Fp8Scale.NONE, Fp8Scale.TENSOR):
            fail("fp8_scale", f"is {self.fp8_scale.name}, but base_weight_format FP8_SCALED scales per weight "
                              "(TENSOR): use base_weight_format FP8 with fp8_scale CHANNEL, or fp8_scale NONE")
        if fmt == BaseWeightFormat.INT8_CONVROT and self.base_loras:
            fail("base_loras", "cannot be merged into an int8 base (base_weight_format INT8_CONVROT): merge them "
                               "into a bf16 model first (scripts/merge_lora.py), then train on that with INT8_CONVROT")

    def trains_embedding(self) -> bool:
        """Whether a textual-inversion embedding trains: EMBEDDING runs, and LORA runs with embedding.placeholder."""
        return self.training_method == TrainingMethod.EMBEDDING or (
            self.training_method == TrainingMethod.LORA and bool(self.embedding.placeholder))

    def validate(self, path: str) -> None:
        def fail(key: str, message: str) -> None:
            raise ConfigError(f"config key '{key}' {message}")

        check_clip_options("", self)
        if run_name_problem(self.run_name):
            fail("run_name", run_name_problem(self.run_name))
        missing = spec_of(self.optimizer).missing()
        if missing:  # before any model loads, not at the first step
            fail("optimizer", f"is {self.optimizer.name}, which {missing}")
        if self.output_dtype == DataType.AUTO:
            fail("output_dtype", "must be FLOAT32, BFLOAT16 or FLOAT16, got AUTO")
        for key in _AT_LEAST_ONE:
            if getattr(self, key) < 1:
                fail(key, f"must be at least 1, got {getattr(self, key)}")
        for key in _NOT_NEGATIVE:
            if getattr(self, key) < 0:
                fail(key, f"must not be negative, got {getattr(self, key)}")
        for key in _POSITIVE:
            if getattr(self, key) <= 0:
                fail(key, f"must be greater than 0, got {getattr(self, key)}")
        for key in _FRACTION_BELOW_ONE:
            if not 0.0 <= getattr(self, key) < 1.0:
                fail(key, f"must be at least 0 and below 1, got {getattr(self, key)}")
        if not 0.0 <= self.min_sigma < self.max_sigma <= 1.0:
            fail("min_sigma", f"and max_sigma must satisfy 0 <= min_sigma < max_sigma <= 1, got {self.min_sigma}, {self.max_sigma}")
        if not 0.0 <= self.unmasked_weight <= 1.0:
            fail("unmasked_weight", f"must be between 0 and 1, got {self.unmasked_weight}")
        for key, training in (("attention_backend", True), ("sample_attention_backend", False)):
            # the device only where the answer needs it: train_device auto asks torch, which a config error
            # should not wait for
            problem = unavailable(getattr(self, key), lambda: device_type_of(self.train_device), training) \
                if getattr(self, key) != AttentionBackend.AUTO else None
            if problem:
                fail(key, f"is {getattr(self, key).name}, which {problem}: choose AUTO or NATIVE")
        for key in ("random_crop", "color_jitter"):
            if not 0.0 <= getattr(self, key) <= 0.5:
                fail(key, f"must be between 0 and 0.5, got {getattr(self, key)}")
        if not -1.0 <= self.mode_scale <= 1.75:  # outside, SD3's map is not monotone (not a distribution of σ)
            fail("mode_scale", f"must be between -1 and 1.75, got {self.mode_scale}")
        if not 0.0 < self.ema_decay < 1.0:
            fail("ema_decay", f"must be between 0 and 1 (e.g. 0.999), got {self.ema_decay}")
        if self.ema_update_step_interval < 1:
            fail("ema_update_step_interval", f"must be at least 1, got {self.ema_update_step_interval}")
        if self.ema != EmaMode.OFF and self.data_parallel == DataParallel.FSDP:
            fail("ema", "does not work with data_parallel FSDP yet (the average would need sharding too): set it OFF")
        if self.ema != EmaMode.OFF and spec_of(self.optimizer).schedule_free:  # else saves would hold the EMA of y, not x
            fail("ema", f"is not needed with optimizer {self.optimizer.name}, whose saves and samples already use "
                        "its own average of the weights: set ema OFF")
        if not 0.0 <= self.expert_step_share <= 1.0:
            fail("expert_step_share", f"must be between 0 and 1, got {self.expert_step_share}")
        if self.save_every and self.save_every_unit == TimeUnit.NEVER:  # else no snapshot is written, silently
            fail("save_every_unit", f"is NEVER, so save_every {self.save_every} writes no snapshot: set it to STEP, "
                                    "EPOCH or MINUTE (or save_every to 0)")
        if self.sample_metrics and not self.tensorboard:  # tensorboard is where they go: else it would do nothing
            fail("sample_metrics", "writes to tensorboard: set tensorboard true (or sample_metrics false)")
        if self.lora_plus_ratio and not ADAPTERS[self.peft_type].up_weights:
            fail("lora_plus_ratio", f"applies to adapters with up (B) matrices: LORA, DoRA or LOHA, not {self.peft_type.name}")
        if len(self.transparent_background) != 3 or any(not 0 <= v <= 255 for v in self.transparent_background):
            fail("transparent_background", f"must be [r, g, b] with values 0-255, got {self.transparent_background}")
        if self.lora_layer_filter:
            try:
                re.compile(self.lora_layer_filter)
            except re.error as e:
                fail("lora_layer_filter", f"is not a valid regex: {e}")
        if self.training_method == TrainingMethod.FINE_TUNE and self.blocks_to_swap:
            fail("blocks_to_swap", "works with LORA training only (it assumes frozen base weights)")
        if self.blocks_to_swap and not self.checkpointing.checkpoints():
            fail("blocks_to_swap", f"needs checkpointed blocks: with checkpointing.policy "
                                   f"{self.checkpointing.policy.name} autograd keeps each block's weights for the "
                                   "backward pass, so they cannot go back to the CPU: set the policy to FULL or AUTO")
        self._check_base_weight_format(fail)
        if self.fp8_scale != Fp8Scale.NONE and not self.fp8_base():
            fail("fp8_scale", f"is {self.fp8_scale.name}, which scales a float8 base: set base_weight_format FP8 (or fp8_scale NONE)")
        if self.offload_inactive_expert and self.training_method == TrainingMethod.FINE_TUNE:
            fail("offload_inactive_expert", "moves frozen weights: it works with LORA and EMBEDDING training, not FINE_TUNE")
        if self.offload_inactive_expert and self.train_expert != WanExpert.BOTH:
            fail("offload_inactive_expert", f"applies to train_expert BOTH (with {self.train_expert.name} the other expert "
                                            "is not trained and stays off the GPU anyway): set it false")
        if self.compile == CompileMode.ON and importlib.util.find_spec("triton") is None \
                and device_type_of(self.train_device) == "cuda":
            fail("compile", "is ON, which needs the 'triton' package on a GPU (pip install triton; triton-windows on "
                            "Windows): "
                            "install it or set compile AUTO or OFF")
        if self.sequence_parallel < 1:
            fail("sequence_parallel", f"must be 1 (off) or more GPUs per clip, got {self.sequence_parallel}")
        if self.data_parallel == DataParallel.FSDP:
            if self.training_method != TrainingMethod.FINE_TUNE:
                fail("data_parallel", "FSDP shards full fine-tunes only: use DDP for LORA training")
            if not spec_of(self.optimizer).shards:
                fail("data_parallel", f"FSDP cannot shard the state of optimizer {self.optimizer.name}: use ADAMW")
        if self.lora_decompose and self.peft_type != PeftType.LORA:
            fail("lora_decompose", f"(DoRA) works with peft_type LORA only, got {self.peft_type.name}")
        if self.lora_decompose and self.fp8_base():
            fail("lora_decompose", "(DoRA) needs the base weights' norms in full precision: set base_weight_format BF16")
        if self.lora_dropout and self.peft_type != PeftType.LORA:
            fail("lora_dropout", f"applies to peft_type LORA only: set it to 0 for {self.peft_type.name}")
        if self.lokr_factor == 0 or self.lokr_factor < -1:
            fail("lokr_factor", f"must be -1 (as balanced as possible) or a positive integer, got {self.lokr_factor}")
        if self.output_model_format == ModelFormat.DIFFUSERS_LORA and (self.peft_type != PeftType.LORA or self.lora_decompose):
            fail("output_model_format", "DIFFUSERS_LORA holds plain LoRA only (diffusers loads no LoHa/LoKr/DoRA for Wan): "
                 "use COMFY_LORA, and scripts/merge_lora.py for a model diffusers loads")
        if self.training_method == TrainingMethod.LORA and not self.output_model_format.is_lora():
            fail("output_model_format", f"must be DIFFUSERS_LORA or COMFY_LORA for LORA training, got {self.output_model_format.name}")
        if self.training_method == TrainingMethod.EMBEDDING and not self.embedding.placeholder:
            fail("embedding.placeholder", "is required for EMBEDDING training: the word captions use for the concept, e.g. <sks>")
        if self.training_method == TrainingMethod.FINE_TUNE and (self.embedding.placeholder or self.embedding_weight_path):
            fail("embedding.placeholder", "trains with LORA or EMBEDDING, not FINE_TUNE: clear embedding.placeholder "
                 "and embedding_weight_path")
        if self.embedding_weight_path and not self.trains_embedding():
            fail("embedding_weight_path", "continues an embedding: set embedding.placeholder too (or clear it)")
        if self.lora_weight_path and self.training_method == TrainingMethod.EMBEDDING:
            fail("lora_weight_path", "EMBEDDING training has no LoRA to continue: clear it, or use training_method LORA")
        if self.training_method == TrainingMethod.FINE_TUNE and self.output_model_format.is_lora():
            fail("output_model_format", f"must be DIFFUSERS for FINE_TUNE training, got {self.output_model_format.name}")
        self._check_merged_samples()

    def _check_merged_samples(self) -> None:
        """Each sample as it runs, sample_overrides applied: an override may not make a sample invalid (a diffusers
        sampler from the overrides with a sample's beta scheduler)."""
        overrides = {f.name: getattr(self.sample_overrides, f.name) for f in dataclasses.fields(self.sample_overrides)
                     if getattr(self.sample_overrides, f.name) is not None}
        for index, sample in enumerate(self.samples):
            if overrides and sample.enabled:
                try:
                    self.sample_overrides.apply(sample).validate(f"samples[{index}]")
                except ConfigError as e:
                    shown = ", ".join(f"{key} {value!r}" for key, value in overrides.items())
                    raise ConfigError(f"{e} (with sample_overrides' {shown})") from None
