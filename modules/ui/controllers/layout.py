"""Which config fields each tab shows, in which section. Widgets are generated from the fields'
metadata (modules/ui/controllers/fields.py); this table only places them.

A field that no section names still gets a widget: it lands in the "Other" section of the general
tab, so a key added to TrainConfig is never unreachable from the GUI.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Iterable

from modules.optimizer.registry import OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class Section:
    title: str
    keys: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Tab:
    name: str
    sections: tuple[Section, ...] = ()


def _tab(name: str, *sections: tuple[str, tuple[str, ...]]) -> Tab:
    return Tab(name, tuple(Section(title, keys) for title, keys in sections))


TOP_BAR = ("model_type", "training_method")
# Every optimizer's options (`optimizer_options.<NAME>.<option>`); the form shows the chosen optimizer's only.
OPTIMIZER_OPTION_KEYS = tuple(f"optimizer_options.{name}.{field.name}" for name, spec in OPTIMIZERS.items()
                              for field in dataclasses.fields(spec.options))


# Fields that mean something only for some values of other fields: key -> a test of the config (`value(key)`).
Value = Callable[[str], Any]
Shown = Callable[[Value], bool]


def _when(other: str, values: Iterable[str]) -> Shown:
    allowed = set(values)
    return lambda value: str(value(other)) in allowed


def _all(*tests: Shown) -> Shown:
    return lambda value: all(test(value) for test in tests)


_DECAYING = {"LINEAR", "COSINE", "COSINE_WITH_RESTARTS", "REX"}
_FROZEN_BASE = _when("training_method", {"LORA", "EMBEDDING"})  # frozen base weights: not FINE_TUNE
_LORA = _when("training_method", {"LORA"})
_A2, _V3 = _when("e2v.reference_layout", {"a2"}), _when("e2v.reference_layout", {"skyreels_v3"})
SHOWN_WHEN: dict[str, Shown] = {
    "huber_c": _when("loss_type", {"HUBER", "PSEUDO_HUBER"}),
    "huber_schedule": _when("loss_type", {"HUBER", "PSEUDO_HUBER"}),
    "learning_rate_cycles": _when("learning_rate_scheduler", {"COSINE_WITH_RESTARTS"}),
    "learning_rate_min_factor": _when("learning_rate_scheduler", _DECAYING),
    "logit_mean": _when("timestep_distribution", {"LOGIT_NORMAL"}),
    "logit_std": _when("timestep_distribution", {"LOGIT_NORMAL"}),
    "sigmoid_scale": _when("timestep_distribution", {"SIGMOID"}),
    "mode_scale": _when("timestep_distribution", {"HEAVY_TAIL"}),
    "frame_stride": _when("frame_sample_strategy", {"SLIDE"}),
    "unmasked_weight": _when("masked_training", {"True"}),
    "normalize_masked_area_loss": _when("masked_training", {"True"}),
    "frame_windows": _when("frame_sample_strategy", {"UNIFORM", "KEYFRAME"}),
    "max_frames": _when("frame_sample_strategy", {"FULL"}),
    # One control for the frozen base's format: base_weight_format; the fp8 scale where a plain FP8 base has one to
    # choose (FP8_SCALED is its TENSOR scale by name).
    "fp8_scale": _all(_FROZEN_BASE, _when("base_weight_format", {"FP8"})),
    "base_weight_format": _FROZEN_BASE,
    "blocks_to_swap": _FROZEN_BASE,
    "offload_inactive_expert": _all(_FROZEN_BASE, _when("train_expert", {"BOTH"})),
    **{key: _when("ema", {"GPU", "CPU"}) for key in ("ema_decay", "ema_update_step_interval", "ema_save_raw",
                                                     "sample_with_ema")},
    # the LoRA tab: the adapter for LORA, the embedding for LORA and EMBEDDING; nothing of it for FINE_TUNE
    **{key: _LORA for key in ("peft_type", "lora_rank", "lora_alpha", "lora_dropout", "lora_weight_path",
                              "lora_target_modules", "lora_layer_filter", "lora_blocks")},
    "lora_decompose": _all(_LORA, _when("peft_type", {"LORA"})),
    "lokr_factor": _all(_LORA, _when("peft_type", {"LOKR"})),
    "lora_plus_ratio": _all(_LORA, _when("peft_type", {"LORA", "LOHA"})),
    **{key: _FROZEN_BASE for key in ("embedding.placeholder", "embedding.token_count",
                                     "embedding.initial_embedding_text", "embedding.learning_rate",
                                     "embedding_weight_path")},
    # the pathways tab: each E2V reference layout's own options
    "e2v.reference_dropout_probability": _V3,
    **{key: _A2 for key in ("e2v.e2v_type", "e2v.target_layout", "e2v.loss_on_reference_frames",
                            "e2v.image_encoder_model_name", "e2v.export_i2v")},
}


def shown(key: str, value: Value) -> bool:
    """Whether a placed field is shown now (`value(key)` reads the config): only the chosen optimizer's options,
    and the options of the chosen loss, schedule, method, adapter and E2V layout."""
    if key.startswith("optimizer_options."):
        return key.split(".")[1] == value("optimizer")
    return SHOWN_WHEN[key](value) if key in SHOWN_WHEN else True


# Keys with an editor of their own (list editors, the E2V dataset file) rather than a plain field.
SPECIAL = {"concepts": "concepts", "samples": "sampling", "dataset_config": "E2V elements", "base_loras": "model"}

TABS: tuple[Tab, ...] = (
    _tab("general",
         ("Workspace", ("workspace_dir", "run_name", "cache_dir", "tensorboard")),
         ("Devices", ("train_device", "train_dtype")),
         ("Reproducibility", ("seed",))),
    _tab("model",
         ("Base model", ("base_model_name", "transformer_override", "transformer_2_override", "vae_override",
                         "text_encoder_override", "image_encoder_override")),
         ("Weight dtypes", ("transformer_dtype", "text_encoder_dtype", "vae_dtype", "image_encoder_dtype",
                            "text_encoder_fp8")),
         ("Output", ("output_model_format", "output_model_destination", "overwrite_output", "output_dtype"))),
    _tab("data",
         ("Clips", ("resolution", "frames", "fps", "aspect_bucketing", "transparent_background", "max_frame_pixels")),
         ("Frame windows", ("frame_sample_strategy", "frame_stride", "frame_windows", "max_frames")),
         ("Augmentation (cached as variants)", ("random_flip", "random_crop", "color_jitter", "cache_variations")),
         ("Caching", ("latent_caching", "clear_cache_before_training", "ram_cache_mb", "text_encoder_caching_device")),
         ("Captions", ("caption_dropout_probability",)),
         ("Image conditioning (I2V layouts)", ("last_frame_condition",))),
    _tab("concepts"),
    _tab("dataset"),  # the clips with their captions and elements (dataset_view.py)
    _tab("tools"),  # the data tools (tools_controller.py)
    _tab("training",
         ("Length and batches", ("epochs", "max_steps", "batch_size", "gradient_accumulation_steps")),
         ("Optimizer", ("optimizer", "learning_rate", "learning_rate_scheduler", "learning_rate_warmup_steps",
                        "learning_rate_cycles", "learning_rate_min_factor", "weight_decay", "max_grad_norm",
                        *OPTIMIZER_OPTION_KEYS)),
         ("Loss", ("loss_type", "huber_c", "huber_schedule", "loss_weight_fn")),
         ("Masked training", ("masked_training", "unmasked_weight", "normalize_masked_area_loss")),
         ("EMA of the weights", ("ema", "ema_decay", "ema_update_step_interval", "ema_save_raw", "sample_with_ema")),
         ("Distilled base (guidance-preserving target)",
          ("guidance_preserving.scale", "guidance_preserving.unconditional_prompt",
           "guidance_preserving.taper_below_sigma", "guidance_preserving.distilled_timesteps")),
         ("σ sampling", ("timestep_distribution", "logit_mean", "logit_std", "sigmoid_scale", "mode_scale",
                         "timestep_shift", "dynamic_timestep_shifting", "min_sigma", "max_sigma")),
         ("Validation (concepts of type VALIDATION)", ("validate_after", "validate_after_unit",
                                                       "validation_sigma_count")),
         ("Speed", ("attention_backend", "compile", "checkpointing.policy", "checkpointing.kept_blocks")),
         ("Memory", ("memory_preset", "gpu_memory_gib", "blocks_to_swap", "activation_offload", "ffn_chunks",
                     "base_weight_format", "fp8_scale", "offload_inactive_expert", "vae_tiling")),
         ("Multi-GPU (torchrun)", ("data_parallel", "sequence_parallel")),
         ("Wan 2.2 experts", ("train_expert", "learning_rate_high_noise", "learning_rate_low_noise",
                              "expert_step_share")),
         ("VACE models (control video beside each clip: <name>_control.mp4, <name>_control_mask.mp4)",
          ("vace_train_blocks", "vace_context_scale"))),
    _tab("sampling",
         ("Schedule", ("sample_after", "sample_after_unit", "sample_at_end", "sample_metrics",
                       "sample_attention_backend")),
         ("Every sample (empty: each sample's own; a distilled base: 4 steps, CFG 1)",
          ("sample_overrides.steps", "sample_overrides.cfg_scale", "sample_overrides.shift",
           "sample_overrides.sampler", "sample_overrides.scheduler"))),
    _tab("backup",
         ("Schedule", ("backup_after", "backup_after_unit", "rolling_backup_count", "backup_before_save")),
         ("Resume", ("continue_last_backup", "resume_changed_config", "resume_fresh_optimizer")),
         ("Snapshots (the run folder's save/)", ("save_every", "save_every_unit", "save_skip_first", "rolling_save_count"))),
    _tab("LoRA",
         ("Adapter", ("peft_type", "lora_rank", "lora_alpha", "lora_dropout", "lora_decompose", "lokr_factor",
                      "lora_plus_ratio", "lora_weight_path")),
         ("Targets", ("lora_target_modules", "lora_layer_filter", "lora_blocks")),
         ("Embedding (textual inversion: EMBEDDING, or beside the LoRA)",
          ("embedding.placeholder", "embedding.token_count", "embedding.initial_embedding_text",
           "embedding.learning_rate", "embedding_weight_path"))),
    _tab("E2V elements"),
    _tab("pathways",
         ("Training (train config: e2v)", ("e2v.reference_layout", "e2v.reference_dropout_probability",
                                           "e2v.e2v_type", "e2v.vae_posterior", "e2v.target_layout",
                                           "e2v.loss_on_reference_frames", "e2v.image_encoder_model_name",
                                           "e2v.export_i2v"))),
    _tab("visualization"),
    _tab("runs"),  # the workspace's runs (the run browser), then the selected run's results
    _tab("samples"),  # the run's results: the sample viewer and the curves
    _tab("curves"),
)

# Dataset-JSON fields (modules/ui/controllers/e2v_dataset.py DATASET_SPECS) per tab.
DATASET_SECTIONS: dict[str, tuple[Section, ...]] = {
    "E2V elements": (
        Section("Dataset", ("data_root", "target_resolution", "auto_frame_buckets", "max_frames", "frames",
                            "reshape_mode", "remove_common_llm_caption_prefixes", "dataset_type", "type")),
        Section("Frame windows", ("frame_sample_strategy", "frame_stride", "frame_windows")),),
    "pathways": (
        Section("VAE processor (dataset JSON)", ("processors.vae.resolution", "processors.vae.combine",
                                                 "processors.vae.default_preprocess",
                                                 "processors.vae.frame_conditioning", "processors.vae.frame_index",
                                                 "processors.vae.concatenate_mask")),
        Section("CLIP processor (dataset JSON)", ("processors.clip.resolution",
                                                  "processors.clip.default_preprocess"))),
    "visualization": (
        Section("Visualization (dataset JSON)", ("visualization.enabled", "visualization.output_dir",
                                                 "visualization.frequency")),),
}

TAB_NAMES = tuple(tab.name for tab in TABS)


def placed_keys() -> set[str]:
    keys = set(TOP_BAR) | set(SPECIAL)
    for tab in TABS:
        for section in tab.sections:
            keys.update(section.keys)
    return keys


def unplaced_keys(all_keys: Iterable[str]) -> list[str]:
    """Config keys no tab names (shown in the general tab's "Other" section)."""
    placed = placed_keys()
    return [key for key in all_keys if key not in placed]


def tab_of(key: str) -> str:
    """The tab holding the field of a config key an error names ("concepts[0].path" -> "concepts"), "" for a key
    with no tab (the top bar's, or none)."""
    top = re.split(r"[.\[]", key, maxsplit=1)[0]
    if not top or top in TOP_BAR:
        return ""
    if top in SPECIAL:
        return SPECIAL[top]
    placed = ((tab.name, k) for tab in TABS for section in tab.sections for k in section.keys)
    return next((name for name, k in placed if k in (key, top) or k.startswith(f"{top}.")),
                "general")  # unplaced keys are in the general tab's "Other" section


def dataset_tab_of(path: str) -> str:
    """The tab holding an E2V dataset field a problem names ("processors.vae.resolution" -> "pathways")."""
    return next((name for name, sections in DATASET_SECTIONS.items() for section in sections if path in section.keys),
                "E2V elements")


def sections_of(tab_name: str, all_keys: Iterable[str]) -> tuple[Section, ...]:
    tab = next(t for t in TABS if t.name == tab_name)
    if tab_name != "general":
        return tab.sections
    other = tuple(unplaced_keys(all_keys))
    return tab.sections + ((Section("Other", other),) if other else ())
