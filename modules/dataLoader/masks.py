"""Masked training for video: `<name>-masklabel.png` (one mask for every frame) or `<name>-masklabel.mp4` (a mask
per frame) beside a sample, cropped and resized exactly as its frames are, then taken to the latent grid the
way the Wan VAE maps frames: latent frame 0 is pixel frame 0 alone, latent frame j >= 1 the group of pixel
frames 4j-3 .. 4j; spatially one latent cell per `vae_scale_spatial` square. Each latent cell holds the mean
of the mask over the pixels it stands for (1: all masked, 0: none), which `losses.masked_weights` turns into
loss weights. The mask never enters the model's inputs.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from modules.dataLoader.augmentation import Augmentation, Draw
from modules.dataLoader.errors import DataError
from modules.dataLoader.frames import resize_and_crop
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.dataLoader.video_io import read_image, read_video_frames
from modules.util.resolution_text import size_text

MASK_SUFFIX = "-masklabel"
MASK_EXTENSIONS = (".png", ".mp4")
MISSING_MASK = "missing mask"
BAD_MASK = "bad mask"
ASPECT_TOLERANCE = 0.01  # a mask of another aspect ratio would be cropped elsewhere than its clip


def is_mask_file(path: Path) -> bool:
    """`clip-masklabel.png` and the like: a mask, never a training sample of its own."""
    return path.stem.endswith(MASK_SUFFIX)


def mask_path_for(media: Path) -> Path | None:
    """The mask file beside a sample (the PNG first), or None."""
    for extension in MASK_EXTENSIONS:
        candidate = media.with_name(media.stem + MASK_SUFFIX + extension)
        if candidate.is_file():
            return candidate
    return None


def latent_grid_mask(mask: torch.Tensor, spatial: int, temporal: int = 4) -> torch.Tensor:
    """(F, H, W) pixel mask in [0, 1], F = 1 + temporal·k -> (1, 1 + k, H / spatial, W / spatial): the mean of
    each latent cell's pixels, frames grouped as the VAE groups them (the first alone, then `temporal` each)."""
    frames, height, width = mask.shape
    if (frames - 1) % temporal or height % spatial or width % spatial:
        raise ValueError(f"mask of {frames} frames {size_text(height, width)} does not fit the latent grid "
                         f"(1 + {temporal}k frames, multiples of {spatial})")
    first = mask[:1]
    rest = mask[1:].reshape(-1, temporal, height, width).mean(dim=1)
    grouped = torch.cat([first, rest]).float()
    return F.avg_pool2d(grouped[None], spatial)  # (1, T, h, w)


def check_aspect(path: Path, mask_size: tuple[int, int], source_size: tuple[int, int]) -> None:
    (mh, mw), (sh, sw) = mask_size, source_size
    if abs(mw / mh - sw / sh) > ASPECT_TOLERANCE * (sw / sh):
        raise DataError(path, f"the mask is {size_text(mh, mw)} but its clip {size_text(sh, sw)}: give the mask the clip's aspect ratio",
                        BAD_MASK)


def read_mask_frames(path: Path, fps: float, start: int, count: int, source_size: tuple[int, int]) -> np.ndarray:
    """(count, H, W, 3) uint8 mask frames for the clip's window: a PNG repeated, or an MP4's frames at the
    clip's fps from `start`. A mask that is unreadable, shorter than the window or of another aspect ratio is a
    `DataError` (the sample is skipped and counted)."""
    try:
        if path.suffix.lower() == ".png":
            frame = read_image(path, (0, 0, 0))
            frames = np.repeat(frame[None], count, axis=0)
        else:
            frames, _ = read_video_frames(path, target_fps=fps, max_frames=start + count, background=(0, 0, 0))
            frames = frames[start:]
            if len(frames) < count:
                raise DataError(path, f"the mask holds {len(frames)} frames from frame {start}, its clip's window "
                                f"{count}: give it the clip's length", BAD_MASK)
    except DataError as e:
        raise DataError(path, e.reason, BAD_MASK) from None
    check_aspect(path, frames.shape[1:3], source_size)
    return frames


class DecodeMask(PipelineModule):
    """The latent-grid mask of a concept clip (`latent_mask`, (1, T, h, w)): its window, crop and resize (and
    augmentation's flip and crop) as DecodeClip made them."""

    inputs = ("mask_path", "clip", "bucket", "source_size", "window_start")
    outputs = ("latent_mask",)

    def __init__(self, spatial: int, temporal: int, augmentation: Augmentation, clip_module: str,
                 per_epoch_random: bool = False):
        self.spatial, self.temporal = spatial, temporal
        self.augmentation = augmentation
        self.clip_module = clip_module  # the decoder whose augmentation stream this one repeats
        self.per_epoch_random = per_epoch_random

    def cache_identity(self) -> Any:
        return [1, self.spatial, self.temporal]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        frames, height, width = item["bucket"]
        path = Path(item["mask_path"])
        pixels = read_mask_frames(path, item["clip"]["fps"], item["window_start"], frames, tuple(item["source_size"]))
        if self.augmentation.enabled:  # the clip's geometry, not its colours
            draw = self.augmentation.draw(ctx.rng(self.clip_module, "augment"))
            pixels = Draw(draw.flip, draw.crop_scale, draw.crop_y, draw.crop_x, (1.0, 1.0, 1.0)).apply(
                pixels, height, width)
        else:
            pixels = resize_and_crop(pixels, height, width)
        mask = torch.from_numpy(pixels[..., 0].astype(np.float32) / 255.0)
        return {"latent_mask": latent_grid_mask(mask, self.spatial, self.temporal)}
