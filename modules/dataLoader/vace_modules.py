"""VACE data: beside a clip `<stem>.mp4`, an optional control video `<stem>_control.mp4` (depth, pose, edges, ... as
given) and an optional mask `<stem>_control_mask.mp4` or `.png` (white where the model generates, black where the
control is kept). Both follow the clip's window, crop and resize (and augmentation's geometry), then become the
VACE context (`modules/model/vace.py`) that is cached with the latents.

Without a control video the context is diffusers' "no video" one (zero video, all-ones mask): the clip trains as
text-to-video on the VACE branch. A mask without a control video masks the clip itself: the masked region is
blanked (grey), the rest kept, so the model learns to inpaint it (VACE's inpainting task).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from modules.dataLoader.augmentation import Augmentation
from modules.dataLoader.cache import file_fingerprint, fingerprint
from modules.dataLoader.errors import DataError
from modules.dataLoader.frames import to_tensor
from modules.dataLoader.masks import check_aspect, read_mask_frames
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.dataLoader.video_io import read_video_frames
from modules.model.vace_references import reference_context
from modules.model.WanModel import WanModel

CONTROL_SUFFIX = "_control"
CONTROL_MASK_SUFFIX = "_control_mask"
BAD_CONTROL = "bad control video"


def is_control_file(path: Path) -> bool:
    """`clip_control.mp4`, `clip_control_mask.png`: a sample's VACE inputs, never a sample of their own."""
    return path.stem.endswith((CONTROL_SUFFIX, CONTROL_MASK_SUFFIX))


def control_paths_for(media: Path) -> tuple[Path | None, Path | None]:
    """(control video, control mask) beside a sample, each None when absent."""
    control = media.with_name(media.stem + CONTROL_SUFFIX + ".mp4")
    masks = [media.with_name(media.stem + CONTROL_MASK_SUFFIX + ext) for ext in (".mp4", ".png")]
    return (control if control.is_file() else None), next((m for m in masks if m.is_file()), None)


class DecodeControl(PipelineModule):
    """The clip's control video and mask in its window and geometry: `control_frames` (3, F, H, W) in [-1, 1] or
    None, `control_mask` (1, F, H, W) in {0, 1} or None."""

    inputs = ("media_path", "clip", "bucket", "source_size", "window_start", "video_frames")
    outputs = ("control_frames", "control_mask")

    def __init__(self, augmentation: Augmentation, clip_module: str, per_epoch_random: bool = False):
        self.augmentation = augmentation
        self.clip_module = clip_module  # the decoder whose augmentation stream this one repeats
        self.per_epoch_random = per_epoch_random

    def cache_identity(self) -> Any:
        return 1

    def _geometry(self, pixels: np.ndarray, height: int, width: int, ctx: ItemContext) -> np.ndarray:
        return self.augmentation.geometry(ctx.rng(self.clip_module, "augment")).apply(pixels, height, width)

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        frames, height, width = item["bucket"]
        control, mask = read_control(Path(item["media_path"]), item["clip"]["fps"], item["window_start"], frames,
                                     tuple(item["source_size"]), item["video_frames"],
                                     lambda pixels: self._geometry(pixels, height, width, ctx))
        return {"control_frames": control, "control_mask": mask}


def read_control(media: Path, fps: float, start: int, frames: int, source: tuple[int, int], video_frames: torch.Tensor,
                 geometry: Callable[[np.ndarray], np.ndarray]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A clip's control video (3, F, H, W) in [-1, 1] and mask (1, F, H, W) in {0, 1}, each None when absent: the
    clip's window of `frames` from `start` (at `fps`), through `geometry` (the clip's crop, resize and flip). A mask
    without a control video masks the clip itself (`video_frames`, the clip's pixels)."""
    control_path, mask_path = control_paths_for(media)
    control = None
    if control_path is not None:
        try:
            pixels, _ = read_video_frames(control_path, target_fps=fps, max_frames=start + frames)
        except DataError as e:
            raise DataError(control_path, e.reason, BAD_CONTROL) from None
        pixels = pixels[start:]
        if len(pixels) < frames:
            raise DataError(control_path, f"the control video holds {len(pixels)} frames from frame {start}, its "
                            f"clip's window {frames}: give it the clip's length", BAD_CONTROL)
        check_aspect(control_path, pixels.shape[1:3], source)
        control = to_tensor(geometry(pixels[:frames]))
    mask = None
    if mask_path is not None:
        pixels = read_mask_frames(mask_path, fps, start, frames, source)
        mask = torch.from_numpy(geometry(pixels)[..., 0] > 127).float()[None]
        if control is None:  # inpainting the clip: the masked region blanked
            control = video_frames * (1 - mask)
    return control, mask


def control_fingerprint(media: Path) -> str:
    """The identity of a sample's control video and mask ("" each when absent): they key its cache entry."""
    return fingerprint([file_fingerprint(path) if path is not None else "" for path in control_paths_for(media)])


class EncodeVaceContext(PipelineModule):
    """The VACE context of a clip (96, T, h, w): its control video and mask, VAE-encoded (posterior mode)."""

    inputs = ("control_frames", "control_mask", "video_frames")
    outputs = ("vace_context",)

    def __init__(self, model: WanModel, identity: Any, counter):
        self.model, self.identity, self.counter = model, identity, counter

    def cache_identity(self) -> Any:
        return self.identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.counter.calls += 1
        control, mask = item["control_frames"], item["control_mask"]
        _, frames, height, width = item["video_frames"].shape
        context = reference_context(self.model, None if control is None else control[None],
                                    None if mask is None else mask[None], [], frames, height, width)
        return {"vace_context": context[0].cpu()}
