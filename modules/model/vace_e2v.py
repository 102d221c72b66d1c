"""E2V on a VACE base, decided from the configs alone (no torch, no diffusers: the start-up check runs before either
is imported): whether a model folder holds a VACE transformer, and the E2V settings such a base cannot follow. How
the elements then become VACE's reference frames is `vace_references.py`."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from modules.config.e2v_dataset_config import E2VDatasetConfig
from modules.config.train_config import TrainConfig
from modules.util.base_config import ConfigError

# Each reference adds one latent frame of tokens to every step; SkyReels-V3's reference-to-video also stops at 4.
MAX_VACE_REFERENCES = 4


def is_vace_class(class_name: str) -> bool:
    """diffusers' VACE transformers (`WanVACETransformer3DModel`), by class name: the rule detection.py reads too."""
    return "VACE" in class_name


def is_vace_folder(model_dir: str | Path) -> bool:
    """Whether a diffusers Wan folder's transformer is a VACE one (transformer/config.json's `_class_name`, else
    model_index.json's entry). False when neither can be read: the path checks and the loader name a broken folder."""
    folder = Path(model_dir)
    try:
        name = json.loads((folder / "transformer" / "config.json").read_text(encoding="utf-8")).get("_class_name")
        if not name:
            entry = json.loads((folder / "model_index.json").read_text(encoding="utf-8")).get("transformer")
            name = entry[1] if isinstance(entry, list) and len(entry) == 2 else None
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(name, str) and is_vace_class(name)


def check_e2v_on_vace(config: TrainConfig, datasets: Sequence[E2VDatasetConfig]) -> None:
    """One-line `ConfigError` for E2V settings a VACE base cannot follow: VACE takes the elements through its VAE
    only, posterior mode, one leading latent frame each, at most MAX_VACE_REFERENCES."""
    e2v = config.e2v
    if e2v.e2v_type in ("dual", "clip"):
        raise ConfigError(f"config key 'e2v.e2v_type' is '{e2v.e2v_type}', but a VACE base takes element images as "
                          "VACE reference images, through the VAE only: set it to 'auto' or 'vae'")
    if e2v.image_encoder_model_name:
        raise ConfigError("config key 'e2v.image_encoder_model_name' is set, but a VACE base has no CLIP branch (its "
                          "element images are VACE reference images): clear it")
    if e2v.target_layout != "separate":
        raise ConfigError(f"config key 'e2v.target_layout' is '{e2v.target_layout}', but on a VACE base the references "
                          "are VACE's own leading latent frames, not A2's reference slots: set it to 'separate'")
    if e2v.vae_posterior != "mode":
        raise ConfigError(f"config key 'e2v.vae_posterior' is '{e2v.vae_posterior}', but a VACE base encodes its "
                          "references with the posterior mode (as diffusers' WanVACEPipeline does): set it to 'mode'")
    for index, dataset in enumerate(datasets):
        if len(dataset.elements) > MAX_VACE_REFERENCES:
            raise ConfigError(f"datasets[{index}] of '{config.dataset_config}' has {len(dataset.elements)} elements, "
                              f"but a VACE base takes at most {MAX_VACE_REFERENCES} reference images (one latent "
                              "frame each): drop elements")


def check_vace_references(count: int, key: str) -> None:
    """Sampling takes no more references than training does: `key` names the option or config key."""
    if count > MAX_VACE_REFERENCES:
        raise ConfigError(f"{key} gives {count} reference images, but a VACE base takes at most {MAX_VACE_REFERENCES} "
                          "(one latent frame each, as training): drop some")
