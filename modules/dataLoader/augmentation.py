"""Augmentation of a training clip, the same for every frame of it: a horizontal flip, a jittered crop window
and small brightness / contrast / saturation changes.

Each draw comes from the item's seeded stream: with latent caching, one per cached variant (`cache_variations`,
epoch e trains variant e mod N), so later epochs run no encoder; uncached, a new one each epoch. Validation
never augments.
"""
from __future__ import annotations

import dataclasses
import random

import numpy as np

from modules.dataLoader.frames import crop_box, resize_and_crop

_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601, as PIL's and OpenCV's grey


@dataclasses.dataclass(frozen=True)
class Augmentation:
    flip: bool = False  # random_flip: half the draws mirror the clip
    crop: float = 0.0  # random_crop: the crop window shrinks by up to this share and moves within the frame
    color: float = 0.0  # color_jitter: brightness, contrast and saturation change by up to this share

    @property
    def enabled(self) -> bool:
        return self.flip or self.crop > 0 or self.color > 0

    def identity(self) -> list:
        return [self.flip, self.crop, self.color]

    def draw(self, rng: random.Random) -> "Draw":
        """One clip's augmentation (always seven numbers from the stream, so options do not shift each other)."""
        flip, scale, y, x = rng.random() < 0.5, rng.random(), rng.random(), rng.random()
        factors = tuple(1 + self.color * (2 * rng.random() - 1) for _ in range(3))
        if self.crop == 0:  # the centred cover crop, exactly as without augmentation
            y = x = 0.5
        return Draw(self.flip and flip, 1 - self.crop * scale, y, x, factors if self.color > 0 else (1.0, 1.0, 1.0))

    def geometry(self, rng: random.Random) -> "Draw":
        """The draw of a clip (`rng` repeats its stream) without its colours: what the inputs beside the clip (VACE's
        control video, Animate-2's driving video) get, so they stay aligned with it."""
        if not self.enabled:
            return Draw(False, 1.0, 0.5, 0.5, (1.0, 1.0, 1.0))
        return dataclasses.replace(self.draw(rng), color=(1.0, 1.0, 1.0))


@dataclasses.dataclass(frozen=True)
class Draw:
    flip: bool
    crop_scale: float  # share of the cover crop's size kept (1: the whole cover crop)
    crop_y: float  # where the smaller window sits in the cover crop's slack, 0..1 (0.5: centred)
    crop_x: float
    color: tuple[float, float, float]  # brightness, contrast, saturation factors

    def box(self, src_h: int, src_w: int, height: int, width: int) -> tuple[int, int, int, int]:
        """The crop window (y0, x0, h, w): the centred cover crop, scaled and moved inside the source."""
        _, _, crop_h, crop_w = crop_box(src_h, src_w, height, width)
        crop_h, crop_w = max(1, round(crop_h * self.crop_scale)), max(1, round(crop_w * self.crop_scale))
        # floor, so 0.5 places the window as crop_box centres it
        return int((src_h - crop_h) * self.crop_y), int((src_w - crop_w) * self.crop_x), crop_h, crop_w

    def apply(self, frames: np.ndarray, height: int, width: int) -> np.ndarray:
        """uint8 (F, H, W, 3) source frames -> (F, height, width, 3), augmented alike."""
        out = resize_and_crop(frames, height, width, self.box(frames.shape[1], frames.shape[2], height, width))
        if self.flip:
            out = out[:, :, ::-1]
        if self.color != (1.0, 1.0, 1.0):
            out = _color(out, *self.color)
        return np.ascontiguousarray(out)


def _color(frames: np.ndarray, brightness: float, contrast: float, saturation: float) -> np.ndarray:
    """torchvision's ColorJitter order, with one set of factors for the whole clip."""
    x = frames.astype(np.float32) * brightness
    grey = x @ _LUMA
    x = (x - grey.mean()) * contrast + grey.mean()
    grey = (x @ _LUMA)[..., None]
    x = grey + (x - grey) * saturation
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)
