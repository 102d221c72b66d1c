"""Video generation from a (partly trained) WanModel: diffusers' own Wan pipelines over our modules.

Writes an mp4 and a PNG strip of evenly spaced frames beside it.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from modules.dataLoader.video_io import write_png_strip, write_video
from modules.model.WanModel import WanModel
from modules.util.config.train_config import SampleConfig
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


class WanModelSampler:
    def __init__(self, model: WanModel):
        self.model = model

    def _load_image(self, path: str, height: int, width: int) -> Image.Image:
        if not Path(path).is_file():
            raise UserError(f"sample image '{path}' does not exist: fix the sample's image path")
        try:
            image = Image.open(path).convert("RGB")
        except OSError as e:
            raise UserError(f"sample image '{path}' cannot be read ({e})") from None
        return image.resize((width, height), Image.BICUBIC)

    @torch.no_grad()
    def generate(self, sample: SampleConfig, show_progress: bool = True) -> np.ndarray:
        """uint8 frames (F, H, W, 3) for one sample definition."""
        variant = self.model.variant
        needs_image = variant.channel_concat_condition
        if needs_image and not sample.image:
            raise UserError(f"the {variant.name} model generates from an image: give the sample an image (--image)")
        use_image = bool(sample.image) and (needs_image or variant.expand_timesteps)
        pipe = self.model.pipeline(image_conditioned=use_image)
        pipe.set_progress_bar_config(disable=not show_progress, leave=False)
        device = self.model.train_device
        self._move(device)
        kwargs = dict(prompt=sample.prompt, negative_prompt=sample.negative_prompt or None,
                      num_frames=sample.frames, height=sample.height, width=sample.width,
                      num_inference_steps=sample.steps, guidance_scale=sample.cfg_scale,
                      generator=torch.Generator("cpu").manual_seed(sample.seed), output_type="np")
        if variant.two_experts:
            kwargs["guidance_scale_2"] = sample.cfg_scale
        if use_image:
            kwargs["image"] = self._load_image(sample.image, sample.height, sample.width)
        training = [t.training for t in self.model.transformers()]
        for t in self.model.transformers():
            t.eval()
        try:
            with torch.autocast(device.type, dtype=self.model.train_dtype, enabled=self.model.train_dtype != torch.float32):
                video = pipe(**kwargs).frames[0]  # (F, H, W, 3) floats in [0, 1]
        finally:
            for t, was_training in zip(self.model.transformers(), training):
                t.train(was_training)
        return (np.clip(video, 0, 1) * 255).round().astype(np.uint8)

    def _move(self, device: torch.device) -> None:
        for module in (self.model.text_encoder, self.model.vae, self.model.image_encoder, *self.model.transformers()):
            if module is not None:
                module.to(device)

    def sample_to_file(self, sample: SampleConfig, output: str | Path, show_progress: bool = True) -> Path:
        output = Path(output)
        frames = self.generate(sample, show_progress)
        write_video(output, frames, fps=self.model.variant.fps)
        write_png_strip(output.with_suffix(".png"), frames)
        logger.info("sample written to %s", output)
        return output
