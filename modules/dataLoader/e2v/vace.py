"""An E2V dataset on a VACE base: the present elements are VACE's reference images (layout order), beside an
optional control video and mask (`<stem>_control.mp4`, `<stem>_control_mask.mp4|.png`, as for clips). Both become
the VACE context through the sampler's own function (`model.vace_references.reference_context`), cached with the
target latents; without a control video it is diffusers' reference-to-video one (a grey video, mask all ones)."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from modules.config.e2v_dataset_config import E2VDatasetConfig
from modules.config.train_config import DEFAULT_MAX_FRAME_PIXELS
from modules.dataLoader.e2v.modules import flipped
from modules.dataLoader.frames import resize_and_crop
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.dataLoader.vace_modules import read_control
from modules.dataLoader.video_io import WHITE, read_image
from modules.model.condition_layout import layout_elements
from modules.model.vace_references import reference_context
from modules.model.WanModel import WanModel

logger = logging.getLogger(__name__)


def note_unused_settings(datasets: Sequence[E2VDatasetConfig]) -> None:
    """Logs the A2-layout element settings that a VACE base does not follow (one reference frame per image, placed
    on white as diffusers places it), so a dataset JSON written for A2 trains unchanged and the user knows."""
    unused = sorted({f"{e.name}: {what}" for d in datasets for e in d.elements
                     for what in (["vae.repeat"] if e.vae.repeat != 1 else [])
                     + (["vae.preprocess"] if d.vae_preprocess(e) != "pad_white" else [])})
    if unused:
        logger.info("VACE base: each element is one reference image placed on white (as diffusers' WanVACEPipeline "
                    "places it); these element settings do not apply: %s", ", ".join(unused))


def reference_names(dataset: E2VDatasetConfig, element_paths: Mapping[str, str]) -> list[str]:
    """The present elements in layout order: the VACE references, first to last (R = their count)."""
    return [name for name, _ in layout_elements(dataset.elements, {n: True for n in element_paths})]


def read_references(dataset: E2VDatasetConfig, element_paths: Mapping[str, str], background: Sequence[int],
                    max_pixels: int) -> list[np.ndarray]:
    """The reference images (uint8 RGB, transparency on `background`), first to last."""
    return [read_image(element_paths[name], background, max_pixels) for name in reference_names(dataset, element_paths)]


class DecodeE2VControl(PipelineModule):
    """The target clip's control video and mask in its window and geometry (`vace_modules.read_control`)."""

    inputs = ("video_path", "video_frames", "window_start", "source_size")
    outputs = ("control_frames", "control_mask")

    def __init__(self, fps: float, flip: bool = False):
        self.fps, self.flip = fps, flip

    def cache_identity(self) -> Any:
        return [1, self.fps, self.flip]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        clip = item["video_frames"]
        _, frames, height, width = clip.shape
        mirror = self.flip and flipped(ctx)

        def geometry(pixels: np.ndarray) -> np.ndarray:
            pixels = resize_and_crop(pixels, height, width)
            return np.ascontiguousarray(pixels[:, :, ::-1]) if mirror else pixels

        control, mask = read_control(Path(item["video_path"]), self.fps, item["window_start"], frames,
                                     tuple(item["source_size"]), clip, geometry)
        return {"control_frames": control, "control_mask": mask}


class EncodeE2VVaceContext(PipelineModule):
    """The VACE context (96, R + T, h, w) of an E2V item: control, mask and its element images as references."""

    inputs = ("element_paths", "control_frames", "control_mask", "video_frames")
    outputs = ("vace_context",)
    encoder = "vae"

    def __init__(self, model: WanModel, dataset: E2VDatasetConfig, identity: Any, background: Sequence[int] = WHITE,
                 flip: bool = False, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS, placement=None):
        self.model, self.dataset, self.identity = model, dataset, identity
        self.background, self.flip, self.max_pixels = list(background), flip, max_pixels
        self.placement = placement  # an EncoderPlacement: the VAE onto the device first (while caching)

    def cache_identity(self) -> Any:
        order = [element.name for element in self.dataset.layout_order()]
        return [self.identity, order, self.background] + (["flip"] if self.flip else [])

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        images = read_references(self.dataset, item["element_paths"], self.background, self.max_pixels)
        control, mask = item["control_frames"], item["control_mask"]
        _, frames, height, width = item["video_frames"].shape
        if self.placement is not None:
            self.placement.use(self.encoder)
        context = reference_context(self.model, None if control is None else control[None],
                                    None if mask is None else mask[None], images, frames, height, width,
                                    mirror=self.flip and flipped(ctx))
        return {"vace_context": context[0].cpu()}
