"""Animate-2's inputs beside each clip, decoded and encoded as diffusers' Animate-2 pipeline feeds its transformer
(`modular_pipelines/wan_animate_2`: encoders.py and denoise.py), cached with the clip's latents:

- the driving video: the clip's window (same fps, start and length: both streams resampled alike), crop and
  flip; VAE latents (posterior mode), whose condition channels are an all-ones mask over the same latents;
- the reference image: the clip's crop and flip; VAE latents of one frame, the generated stream's leading slot;
- the empty continuation: the VAE latents of F black frames, the condition of the video frames after the slot
  (diffusers' first segment, which has no previous frames to continue from);
- CLIP of the reference image (the generation pass) and of driving frame 0 (the driving pass);
- the driving caption's UMT5 embedding (its own text cache stage).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from diffusers.modular_pipelines.wan_animate_2.encoders import clip_visual_encode

from modules.dataLoader.augmentation import Augmentation
from modules.dataLoader.encoding_modules import EncodeCaption, EncoderModule
from modules.dataLoader.errors import BAD_DRIVING, DataError
from modules.dataLoader.frames import to_tensor
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.dataLoader.video_io import read_video_frames
from modules.model.WanModel import WanModel


class DecodeDrivingInputs(PipelineModule):
    """`driving_frames` (3, F, H, W) and `reference_frames` (3, 1, H, W) in [-1, 1], in the clip's geometry."""

    inputs = ("driving_path", "reference_path", "clip", "bucket", "window_start")
    outputs = ("driving_frames", "reference_frames")

    def __init__(self, augmentation: Augmentation, clip_module: str, background, per_epoch_random: bool = False):
        self.augmentation, self.clip_module = augmentation, clip_module
        self.background = list(background)
        self.per_epoch_random = per_epoch_random

    def cache_identity(self) -> Any:
        return 1

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        frames, height, width = item["bucket"]
        start = item["window_start"]
        draw = self.augmentation.geometry(ctx.rng(self.clip_module, "augment"))
        driving_path, reference_path = Path(item["driving_path"]), Path(item["reference_path"])
        try:
            driving, _ = read_video_frames(driving_path, target_fps=item["clip"]["fps"], max_frames=start + frames)
            reference, _ = read_video_frames(reference_path, background=self.background)
        except DataError as e:
            raise DataError(e.path, e.reason, BAD_DRIVING) from None
        if len(driving) < start + frames:
            raise DataError(driving_path, f"the driving video holds {max(0, len(driving) - start)} frames from "
                            f"frame {start} at {item['clip']['fps']:g} fps, its clip's window {frames}: give it at "
                            "least the clip's length", BAD_DRIVING)
        return {"driving_frames": to_tensor(draw.apply(driving[start:start + frames], height, width)),
                "reference_frames": to_tensor(draw.apply(reference[:1], height, width))}


class EmptyFrames(PipelineModule):
    """`empty_frames`: F black frames (zeros in [-1, 1]) of the clip's size, whose VAE latents condition the video
    frames after the reference slot."""

    inputs = ("driving_frames",)
    outputs = ("empty_frames",)

    def cache_identity(self) -> Any:
        return 1

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        return {"empty_frames": torch.zeros_like(item["driving_frames"])}


class EncodeAnimate2Clip(EncoderModule):
    """CLIP (second-to-last hidden state) of the reference image (`clip_embeds`) and of driving frame 0
    (`driving_clip_embeds`), each (257, D), through diffusers' own Animate-2 CLIP preprocessing (a bicubic resize of
    the [-1, 1] pixels to 224, then CLIP's normalisation; not the I2V image processor's crop)."""

    inputs = ("reference_frames", "driving_frames")
    outputs = ("clip_embeds", "driving_clip_embeds")
    encoder = "clip"

    def __init__(self, model: WanModel, identity: Any, counter, placement=None):
        self.model, self.identity, self.counter, self.placement = model, identity, counter, placement

    def cache_identity(self) -> Any:
        return self.identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.use_encoder()
        image_encoder = self.model.encoder("clip", "to encode a cache entry again")
        return {"clip_embeds": animate2_clip(image_encoder, item["reference_frames"][:, 0]),
                "driving_clip_embeds": animate2_clip(image_encoder, item["driving_frames"][:, 0])}


def animate2_clip(image_encoder, frame: torch.Tensor) -> torch.Tensor:
    """(257, D) float32 CLIP embedding of one frame (3, H, W) in [-1, 1], as diffusers' Animate-2 pipeline encodes
    its reference image and driving frame 0."""
    param = next(image_encoder.parameters())
    with torch.no_grad():
        return clip_visual_encode(image_encoder, frame.to(param.device), param.device, param.dtype)[0].float().cpu()


class EncodeDrivingCaption(EncodeCaption):
    """UMT5 embeddings of the driving stream's caption (seq, D), as `EncodeCaption` does the clip's."""

    inputs = ("driving_caption",)
    outputs = ("driving_prompt_embeds",)

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        caption = {**item, "caption": item["driving_caption"]}
        return {"driving_prompt_embeds": super().process(caption, ctx)["prompt_embeds"]}
