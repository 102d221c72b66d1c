"""Pipeline modules of the E2V data path (docs/e2v.md §2–§6), for the engine in dataLoader/pipeline.

Decoding and encoding modules are deterministic, so they sit in CacheStages: the VAE, UMT5 and CLIP
run once per sample and setting. Posterior sampling and noise happen later, at train time, from the
step's random streams.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from modules.config.e2v_dataset_config import E2VDatasetConfig
from modules.config.train_config import DEFAULT_MAX_FRAME_PIXELS
from modules.dataLoader.e2v.preprocess import image_to_tensor, preprocess
from modules.dataLoader.encoding_modules import EncodePosterior
from modules.dataLoader.errors import CHANGED_FILE, TOO_FEW_FRAMES, DataError
from modules.dataLoader.frames import largest_4k1, resize_and_crop, to_tensor
from modules.dataLoader.masks import latent_grid_mask, read_mask_frames
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.dataLoader.video_io import WHITE, read_image, read_video_frames
from modules.dataLoader.windows import random_start
from modules.model.condition_layout import (
    TEMPORAL,
    joint_clip,
    layout_elements,
    mask_reference_clip,
    min_num_frames,
    pixel_frame_mask,
    reference_clip,
    reference_latent_frames,
    separate_target_frames,
)
from modules.model.WanModel import WanModel


def flipped(ctx: ItemContext) -> bool:
    """random_flip's draw for an item's variant: one stream for the video and its VAE references, so both are
    mirrored or neither (their cache stages hold the same number of variants)."""
    return ctx.rng("e2v-flip").random() < 0.5


class DecodeTargetVideo(PipelineModule):
    """The training video's frames that the target needs, and the clip length F (docs/e2v.md §6).

    `separate`: the first F − 4K frames are encoded on their own; `joint`: the first F − P frames follow
    the P reference frames. With auto frame buckets F is the largest 4k+1 the video supports (capped by
    `max_frames`); otherwise F is `frames` and a shorter video is skipped.
    """

    inputs = ("video_path", "num_reference_frames", "window")
    outputs = ("video_frames", "num_frames", "window_start", "source_size")

    def __init__(self, dataset: E2VDatasetConfig, fps: float, target_layout: str, height: int, width: int,
                 flip: bool = False, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS):
        self.dataset, self.fps, self.target_layout = dataset, fps, target_layout
        self.max_pixels = max_pixels  # not in the identity: it decides which files are read, not what they give
        self.height, self.width = height, width
        self.flip = flip  # random_flip: mirrored with its references (`flipped`)

    def cache_identity(self) -> Any:
        d = self.dataset
        identity = [self.fps, self.target_layout, self.height, self.width, d.auto_frame_buckets, d.max_frames, d.frames]
        return identity + ["flip"] if self.flip else identity

    def _reserved(self, p: int, f: int | None = None) -> int:
        """Frames of F that the references take in the target: 4K (separate) or P (joint)."""
        return 4 * reference_latent_frames(p) if self.target_layout == "separate" else p

    def target_frames(self, total: int, p: int) -> int:
        """F, the frame count of the target a `total`-frame video (or window's worth of it) trains as."""
        limit = self.dataset.max_frames if self.dataset.auto_frame_buckets else self.dataset.frames
        if self.dataset.auto_frame_buckets:
            return min(largest_4k1(min(total, limit) + self._reserved(p)), largest_4k1(limit))
        return self.dataset.frames

    def window_frames(self, total: int, p: int) -> int:
        """How many of a `total`-frame video's frames one window holds: what the first frames give (F of the
        clip minus the frames its references take)."""
        return max(self.target_frames(total, p) - self._reserved(p), 1)

    def usable(self, total: int, p: int) -> bool:
        """Whether `total` video frames make a target with `p` reference frames (else the item is skipped)."""
        return self.target_frames(total, p) >= min_num_frames(self.target_layout, p) and \
            total >= self.window_frames(total, p)

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        path, p, window = item["video_path"], item["num_reference_frames"], item["window"]
        limit = self.dataset.max_frames if self.dataset.auto_frame_buckets else self.dataset.frames
        start = 0
        if window is None:  # HEAD: the first frames
            frames, _ = read_video_frames(path, target_fps=self.fps, max_frames=limit, max_pixels=self.max_pixels)
        else:  # {start (None: RANDOM), frames (the video frames the target needs), total}
            start, length = window["start"], window["frames"]
            if start is None:
                start = random_start(window["total"], length, ctx.rng(self.name, "window"))
            frames, _ = read_video_frames(path, target_fps=self.fps, max_frames=start + length,
                                          max_pixels=self.max_pixels)
            if len(frames) < start + length:
                raise DataError(path, f"changed during the run: {len(frames)} frames, planned a window at "
                                f"{start}-{start + length}", CHANGED_FILE)
            frames = frames[start:]
        count, needed = self.target_frames(len(frames), p), self.window_frames(len(frames), p)
        if not self.usable(len(frames), p):
            raise DataError(path, f"{len(frames)} frames at {self.fps:g} fps are too few for {p} reference frames "
                                  f"and a {self.target_layout} target of {count} frames", TOO_FEW_FRAMES)
        clip = resize_and_crop(frames[:needed], self.height, self.width)
        if self.flip and flipped(ctx):
            clip = clip[:, :, ::-1]
        return {"video_frames": to_tensor(clip), "num_frames": count, "window_start": start,
                "source_size": [int(frames.shape[1]), int(frames.shape[2])]}


class LoadReferences(PipelineModule):
    """The present elements' images through their VAE preprocessing, in layout order (§1–§2)."""

    inputs = ("element_paths",)
    outputs = ("reference_frames", "repeats")

    def __init__(self, dataset: E2VDatasetConfig, height: int, width: int, background: Sequence[int] = WHITE,
                 flip: bool = False, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS):
        self.dataset, self.height, self.width, self.background = dataset, height, width, list(background)
        self.max_pixels = max_pixels
        self.flip = flip  # random_flip: mirrored with the video (`flipped`)

    def cache_identity(self) -> Any:
        identity = [[e.name, e.vae.position, e.vae.repeat, self.dataset.vae_preprocess(e)]
                    for e in self.dataset.elements] + [self.height, self.width, self.background]
        return identity + ["flip"] if self.flip else identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        paths = item["element_paths"]
        by_name = {e.name: e for e in self.dataset.elements}
        frames, repeats = [], []
        for name, repeat in layout_elements(self.dataset.elements, {n: True for n in paths}):
            image = preprocess(read_image(paths[name], self.background, self.max_pixels), self.dataset.vae_preprocess(by_name[name]),
                               self.height, self.width)
            frames.append(image_to_tensor(image))
            repeats.append(repeat)
        references = torch.stack(frames, dim=1)
        if self.flip and flipped(ctx):
            references = references.flip(-1)
        return {"reference_frames": references, "repeats": repeats}


class BuildConditionClip(PipelineModule):
    """ONE pixel clip of F frames (references, then zero frames) and its pixel mask (§3.1, §4.1)."""

    inputs = ("reference_frames", "repeats", "num_frames")
    outputs = ("condition_clip", "pixel_mask")

    def __init__(self, frame_conditioning: str, frame_index: int):
        self.frame_conditioning, self.frame_index = frame_conditioning, frame_index

    def cache_identity(self) -> Any:
        return [self.frame_conditioning, self.frame_index]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        refs, repeats, f = item["reference_frames"], item["repeats"], item["num_frames"]
        clip = reference_clip(list(refs.unbind(1)), repeats, f)
        mask = pixel_frame_mask(f, sum(repeats), self.frame_conditioning, self.frame_index,
                                rng=ctx.torch_generator(self.name))
        return {"condition_clip": mask_reference_clip(clip, mask), "pixel_mask": mask}


class EncodeEachReference(EncodePosterior):
    """SkyReels-V3's layout (docs/e2v.md §9): each reference frame of (3, N, H, W) VAE-encoded on its own as a
    one-frame clip (one latent frame each, as its `prepare_latents`), posteriors stacked along time: (C, N, h, w)."""

    def __init__(self, model: WanModel, identity: Any, placement=None):
        super().__init__(model, "reference_frames", "reference", identity, placement=placement)

    def cache_identity(self) -> Any:
        return [self.identity, "each frame alone"]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        if self.placement is not None:
            self.placement.use(self.encoder)
        posteriors = [self.model.encode_video(frame[None, :, None]) for frame in item["reference_frames"].unbind(1)]
        return {"reference_mean": torch.cat([m[0] for m, _ in posteriors], dim=1),
                "reference_std": torch.cat([s[0] for _, s in posteriors], dim=1)}


class BuildJointClip(PipelineModule):
    """`joint` target: [the P reference frames, the first F − P video frames], encoded in one call (§6)."""

    inputs = ("condition_clip", "repeats", "video_frames", "num_frames")
    outputs = ("target_clip",)

    def cache_identity(self) -> Any:
        return 1

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        p = sum(item["repeats"])
        return {"target_clip": joint_clip(item["condition_clip"][:, :p], item["video_frames"], item["num_frames"])}


class EncodeClipElement(PipelineModule):
    """CLIP second-to-last hidden state of one element, encoded on its own (§2, §5); (0, D) if absent."""

    inputs = ("element_paths",)
    encoder = "clip"

    def __init__(self, model: WanModel, dataset: E2VDatasetConfig, element_name: str, identity: Any,
                 background: Sequence[int] = WHITE, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS, placement=None):
        self.model, self.dataset, self.identity, self.background = model, dataset, identity, list(background)
        self.max_pixels = max_pixels
        self.placement = placement  # an EncoderPlacement: CLIP onto the device first (while caching)
        self.element = next(e for e in dataset.elements if e.name == element_name)
        self.name = f"EncodeClip[{element_name}]"
        self.outputs = (f"clip_{element_name}",)

    def cache_identity(self) -> Any:
        height, width = self.dataset.processors.clip.resolution
        return [self.identity, self.dataset.clip_preprocess(self.element), height, width, self.background]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        path = item["element_paths"].get(self.element.name)
        width_out = self.model.image_encoder.config.hidden_size
        if path is None:
            return {self.outputs[0]: torch.zeros(0, width_out)}
        height, width = self.dataset.processors.clip.resolution
        if self.placement is not None:
            self.placement.use(self.encoder)
        image = preprocess(read_image(path, self.background, self.max_pixels), self.dataset.clip_preprocess(self.element), height, width)
        return {self.outputs[0]: self.model.encode_images([image])[0]}


def video_target_frames(target_layout: str, num_frames: int, num_reference_frames: int) -> int:
    """How many video frames the target holds (F − 4K or F − P)."""
    if target_layout == "separate":
        return separate_target_frames(num_frames, reference_latent_frames(num_reference_frames))
    return num_frames - num_reference_frames


class DecodeE2VMask(PipelineModule):
    """The latent-grid mask of an E2V target (`latent_mask`, (1, T, h, w)): the video mask's window, crop and
    flip as DecodeTargetVideo made them; the reference frames keep their own rule (mask 1: their weight is
    `e2v.loss_on_reference_frames`'), as K leading latent frames (separate) or P leading pixel frames (joint)."""

    inputs = ("mask_path", "num_reference_frames", "num_frames", "window_start", "source_size")
    outputs = ("latent_mask",)

    def __init__(self, target_layout: str, height: int, width: int, fps: float, spatial: int, flip: bool = False):
        self.target_layout, self.height, self.width, self.fps = target_layout, height, width, fps
        self.spatial, self.flip = spatial, flip

    def cache_identity(self) -> Any:
        return [1, self.target_layout, self.height, self.width, self.fps, self.spatial, self.flip]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        p, count = item["num_reference_frames"], item["num_frames"]
        k = reference_latent_frames(p)
        video_frames = max(count - (TEMPORAL * k if self.target_layout == "separate" else p), 1)
        pixels = read_mask_frames(Path(item["mask_path"]), self.fps, item["window_start"], video_frames,
                                  tuple(item["source_size"]))
        pixels = resize_and_crop(pixels, self.height, self.width)
        if self.flip and flipped(ctx):
            pixels = pixels[:, :, ::-1]
        mask = torch.from_numpy(np.ascontiguousarray(pixels[..., 0]).astype(np.float32) / 255.0)
        if self.target_layout == "joint":  # the references lead the pixel clip
            mask = torch.cat([torch.ones(p, *mask.shape[1:]), mask])
            return {"latent_mask": latent_grid_mask(mask, self.spatial)}
        latent = latent_grid_mask(mask, self.spatial)
        return {"latent_mask": torch.cat([torch.ones(1, k, *latent.shape[2:]), latent], dim=1)}
