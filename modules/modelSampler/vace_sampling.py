"""VACE generation inputs: a sample's control video, mask and reference images, read and laid out as diffusers'
`WanVACEPipeline` does, into the VACE context that `sample_latents` feeds through the family's conditioning (the
same `transformer_inputs` the training step uses)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from modules.config.train_config import SampleConfig
from modules.dataLoader.errors import DataError
from modules.dataLoader.frames import resize_and_crop, to_tensor
from modules.dataLoader.masks import read_mask_frames
from modules.model.vace_references import reference_context
from modules.model.WanModel import WanModel
from modules.modelSampler.sample_video import read_sample_video
from modules.util.errors import UserError


@torch.no_grad()
def build_vace_context(model: WanModel, sample: SampleConfig, references: list[np.ndarray]) -> torch.Tensor:
    """(1, 96, R + T, h, w) for a sample: `control_video` (+ `control_mask`) or none, and `references` (uint8
    images, the sample's elements) in order; the same function builds an E2V dataset's context in training."""
    variant = model.variant
    frames, height, width = sample.frames, sample.height, sample.width
    video = mask = None
    if sample.control_video:
        pixels, source = read_sample_video(sample.control_video, "control_video", variant.fps, frames, height, width)
        video = to_tensor(pixels)[None]
        if sample.control_mask:
            if not Path(sample.control_mask).is_file():
                raise UserError(f"control mask '{sample.control_mask}' does not exist: fix the sample's control_mask")
            try:
                masks = read_mask_frames(Path(sample.control_mask), variant.fps, 0, frames, source)
            except DataError as e:
                raise UserError(f"control mask '{sample.control_mask}' cannot be used ({e.reason})") from None
            mask = torch.from_numpy(resize_and_crop(masks, height, width)[..., 0] > 127).float()[None, None]
    return reference_context(model, video, mask, references, frames, height, width)
