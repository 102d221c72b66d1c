"""Reference images on a VACE model, in one place for the sampler (a sample's `elements`) and training (an E2V
dataset's element images): each image is placed as diffusers' `WanVACEPipeline` places it (`reference_canvas`),
then the control video, mask and references become the VACE context (`vace_context`), R leading latent frames.

An E2V dataset trains on a VACE base with its elements as these references, in the dataset's layout order
(`vae.position`); an element's `vae.repeat` and `vae.preprocess` belong to the A2 layout and do not apply (one
latent frame per image, placed on white). What cannot apply is refused here, before a model loads.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from modules.model.vace import Encode, reference_canvas, vace_context
from modules.util.config.base_config import ConfigError
from modules.util.config.e2v_dataset_config import E2VDatasetConfig
from modules.util.config.train_config import TrainConfig

if TYPE_CHECKING:  # the check below runs before diffusers is imported (preflight)
    from modules.model.WanModel import WanModel

# Each reference adds one latent frame of tokens to every step; SkyReels-V3's reference-to-video also stops at 4.
MAX_VACE_REFERENCES = 4


def image_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 (H, W, 3) -> float32 (3, H, W) in [-1, 1], as frames are (x / 127.5 − 1)."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).to(torch.float32).div_(127.5).sub_(1.0)


def model_encoder(model: WanModel) -> Encode:
    """A `WanModel`'s VAE as `vace_context` encodes: the posterior mode, normalised."""
    return lambda clip: model.normalize_latents(model.encode_video(clip)[0])


def placed_references(images: Sequence[np.ndarray], height: int, width: int, mirror: bool = False) -> list[torch.Tensor]:
    """Each uint8 image as the (3, height, width) frame VACE encodes (`reference_canvas`), mirrored when asked."""
    return [reference_canvas(image_tensor(image[:, ::-1] if mirror else image), height, width) for image in images]


@torch.no_grad()
def reference_context(model: WanModel, video: torch.Tensor | None, mask: torch.Tensor | None, images: Sequence[np.ndarray],
                      frames: int, height: int, width: int, mirror: bool = False) -> torch.Tensor:
    """(1, 96, R + T, h, w): the VACE context of one clip or sample. `video` (1, 3, F, H, W) in [-1, 1] or None (no
    control), `mask` (1, 1, F, H, W) or None, `images` the R reference images (uint8) in order; `mirror` flips
    each image left-right before it is placed (random_flip mirrors the references with their clip)."""
    variant = model.variant
    return vace_context(model_encoder(model), video, mask, placed_references(images, height, width, mirror),
                        variant.vae_scale_spatial,
                        variant.vae_scale_temporal, (1, frames, height, width))


def check_e2v_on_vace(config: TrainConfig, datasets: Sequence[E2VDatasetConfig], base: str) -> None:
    """One-line `ConfigError` for E2V settings a VACE base (`base`, the variant's name) cannot follow: VACE takes the
    elements through its VAE only, posterior mode, one latent frame each, at most MAX_VACE_REFERENCES."""
    e2v = config.e2v
    if e2v.e2v_type in ("dual", "clip"):
        raise ConfigError(f"config key 'e2v.e2v_type' is '{e2v.e2v_type}', but the {base} base takes element images as "
                          "VACE reference images, through the VAE only: set it to 'auto' or 'vae'")
    if e2v.image_encoder_model_name:
        raise ConfigError(f"config key 'e2v.image_encoder_model_name' is set, but the {base} base has no CLIP "
                          "branch (its element images are VACE reference images): clear it")
    if e2v.target_layout != "separate":
        raise ConfigError(f"config key 'e2v.target_layout' is '{e2v.target_layout}', but on the {base} base the "
                          "references are VACE's own leading latent frames, not A2's reference slots: set it to "
                          "'separate'")
    if e2v.vae_posterior != "mode":
        raise ConfigError(f"config key 'e2v.vae_posterior' is '{e2v.vae_posterior}', but the {base} base encodes "
                          "its references with the posterior mode (as diffusers' WanVACEPipeline does): set it to 'mode'")
    for index, dataset in enumerate(datasets):
        if len(dataset.elements) > MAX_VACE_REFERENCES:
            raise ConfigError(f"datasets[{index}] of '{config.dataset_config}' has {len(dataset.elements)} elements, "
                              f"but the {base} base takes at most {MAX_VACE_REFERENCES} reference images (one latent "
                              "frame each): drop elements")
