"""An Animate-2 sample: its reference image (`image`) animated by its driving video (`driving_video`), one segment of
`frames` frames, through the sampler loop (`animate2_sampling.denoise_segment`). The inputs are prepared as
training prepares them (`dataLoader/WanAnimate2DataLoader.py`): the driving video read at the model's fps from its
first frame, both streams cover-cropped to the sample's size, the same VAE latents, masks and CLIP embeddings, and
the official driving prompt.
"""
from __future__ import annotations


import numpy as np
import torch

from modules.dataLoader.animate2_modules import animate2_clip
from modules.dataLoader.animate2_triplets import DEFAULT_DRIVING_CAPTION
from modules.dataLoader.frames import resize_and_crop, to_tensor
from modules.model.animate2 import REFERENCE_SLOTS, condition_channels
from modules.modelSampler.animate2_sampling import denoise_segment
from modules.modelSampler.sample_video import read_sample_video
from modules.modelSampler.schedulers import sample_scheduler


def generate_animate2(model, sample, reference: np.ndarray) -> np.ndarray:
    """uint8 frames (F, H, W, 3) of one sample; `reference`: the reference image, uint8 (H, W, 3)."""
    return (sample_animate2(model, sample, reference) * 255).round().clip(0, 255).astype(np.uint8)


@torch.no_grad()
def sample_animate2(model, sample, reference: np.ndarray) -> np.ndarray:
    """float32 frames (F, H, W, 3) in [0, 1], as diffusers' pipeline outputs them (`output_type="np"`)."""
    device = model.train_device
    pixels, _ = read_sample_video(sample.driving_video, "driving_video", model.variant.fps, sample.frames,
                                  sample.height, sample.width)
    driving = to_tensor(pixels)
    image = to_tensor(resize_and_crop(reference[None], sample.height, sample.width))

    def latents(video: torch.Tensor) -> torch.Tensor:  # (1, C, T, h, w), the posterior's mode
        return model.normalize_latents(model.encode_video(video[None].to(device))[0])

    driving_latents, reference_latents, empty = latents(driving), latents(image), latents(torch.zeros_like(driving))
    condition, driving_condition = condition_channels(reference_latents, empty, driving_latents)
    prompts = model.encode_prompts([sample.prompt, sample.negative_prompt or "", DEFAULT_DRIVING_CAPTION]).to(device)
    transformer = model.transformer
    generator = torch.Generator("cpu").manual_seed(sample.seed)
    noise = torch.randn(condition.shape[1] - 4, *condition.shape[2:], generator=generator).to(device)
    clip, driving_clip = (model.encoded_images("animate2_clip", [frame], lambda encoder: animate2_clip(encoder, frame))
                          [None].to(device) for frame in (image[:, 0], driving[:, 0]))
    was_training = transformer.training
    transformer.eval()
    try:
        with torch.autocast(device.type, dtype=model.train_dtype, enabled=model.train_dtype != torch.float32):
            out = denoise_segment(transformer, sample_scheduler(model, sample), noise, condition[0],
                                  driving_latents[0], driving_condition[0], prompts[0], prompts[1], prompts[2], clip,
                                  driving_clip, sample.steps, sample.cfg_scale, generator)
    finally:
        transformer.train(was_training)
    video = model.decode_latents(out[None, :, REFERENCE_SLOTS:].float())[0]  # the reference slot is no video frame
    return (video.permute(1, 2, 3, 0).cpu().numpy() + 1) / 2
