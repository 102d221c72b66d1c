"""Reference images on a VACE model, in one place for the sampler (a sample's `elements`) and training (an E2V
dataset's element images): each image is placed as diffusers' `WanVACEPipeline` places it (`reference_canvas`),
then the control video, mask and references become the VACE context (`vace_context`), R leading latent frames.

An E2V dataset trains on a VACE base with its elements as these references, in the dataset's layout order
(`vae.position`); an element's `vae.repeat` and `vae.preprocess` belong to the A2 layout and do not apply (one
latent frame per image, placed on white). What cannot apply is refused before a model loads (`vace_e2v.py`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from modules.model.vace import Encode, reference_canvas, vace_context

if TYPE_CHECKING:
    from modules.model.WanModel import WanModel


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
