"""Elements-to-Video generation, as SkyReels-A2's pipeline does it (docs/e2v.md §3–§6).

The references are laid out, encoded with ONE VAE call and masked exactly as in training (the same
functions build both), the transformer denoises with classifier-free guidance on the text only (the
negative branch keeps the image embeddings, as A2 does), two-expert models switch at the boundary, and
the decoded reference frames are dropped (4K for `separate`, P for `joint`). The scheduler, its shift
and the condition posterior (mode or sample) are the sample's; `unipc`, shift 8 and `sample` are A2's
infer.py recipe, random draws included.

In SkyReels-V3's layout (docs/e2v.md §9) the references are encoded one by one as single latent frames, appended
after the noisy latents in the model's slots, and the guidance is SkyReels-V3's dual one (text, and image against
all-zero reference slots, `reference_slots.dual_guidance`); nothing is dropped from the decoded video.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np
import torch

from modules.config.train_config import SampleConfig
from modules.dataLoader.e2v.preprocess import image_to_tensor, preprocess
from modules.dataLoader.e2v.sampling_options import ElementSpec
from modules.model.condition_layout import (
    concat_clip_embeds,
    dropped_decoded_frames,
    fold_mask,
    pixel_frame_mask,
    reference_clip,
    reference_latent_frames,
)
from modules.model.conditioning import ConditionPayload
from modules.model.reference_slots import SKYREELS_V3_SLOTS, dual_guidance, pad_reference_slots
from modules.model.WanModel import WanModel
from modules.modelSampler.schedulers import sample_scheduler
from modules.util.errors import UserError


@dataclasses.dataclass
class E2VConditioning:
    posterior_mean: torch.Tensor | None  # raw (not normalised) VAE posterior of the reference clip, (1, C, T, h, w)
    posterior_std: torch.Tensor | None
    mask: torch.Tensor | None  # (1, 4, T, h, w)
    clip_embeds: torch.Tensor | None  # (1, 257·N, D)
    reference_frames: int  # P
    reference_latents: int  # K
    references_preview: np.ndarray  # uint8 (N, H, W, 3): each element as the VAE sees it
    control: torch.Tensor | None = None  # VACE: the context (1, 96, R + T, h, w) (`vace_sampling.build_vace_context`)
    control_references: int = 0  # VACE: R, the reference images' leading latent frames (dropped from the output)
    # SkyReels-V3: the slots the references fill after the video's latents (posterior_* then hold one latent frame
    # per reference, each encoded alone); 0 = A2's layout
    reference_slots: int = 0

    def condition_latents(self, model: WanModel, posterior: str, generator: torch.Generator) -> torch.Tensor | None:
        """Normalised z_cond on the generator's device: the posterior mode (diffusers' I2V pipeline) or a sample
        drawn with `generator` (A2's `retrieve_latents` → `latent_dist.sample(generator)`; SkyReels-V3 draws one
        sample per reference, in order, so its frames are drawn one at a time)."""
        if self.posterior_mean is None:
            return None
        mean = self.posterior_mean.to(generator.device)
        if posterior == "sample":
            parts = mean.split(1, dim=2) if self.reference_slots else [mean]
            draw = torch.cat([torch.randn(part.shape, generator=generator, device=mean.device, dtype=mean.dtype)
                              for part in parts], dim=2)
            mean = mean + self.posterior_std.to(mean.device) * draw
        return model.normalize_latents(mean)


@torch.no_grad()
def build_conditioning(model: WanModel, images: list[np.ndarray], layout: list[ElementSpec], num_frames: int,
                       height: int, width: int, use_vae: bool, use_clip: bool,
                       clip_resolution: tuple[int, int] = (512, 512)) -> E2VConditioning:
    vae_images = [preprocess(image, spec.vae_preprocess, height, width) for image, spec in zip(images, layout)]
    p = sum(spec.repeat for spec in layout) if use_vae else 0
    mean = std = mask = None
    if use_vae:
        clip = reference_clip([image_to_tensor(i) for i in vae_images], [s.repeat for s in layout], num_frames)
        mean, std = model.encode_video(clip[None])
        _, _, _, h, w = mean.shape
        mask = fold_mask(pixel_frame_mask(num_frames, p), h, w, model.variant.vae_scale_temporal)[None]
    clip_embeds = None
    if use_clip:
        embeds = [model.encode_images([preprocess(image, spec.clip_preprocess, *clip_resolution)])[0]
                  for image, spec in zip(images, layout) if spec.clip_preprocess is not None]
        clip_embeds = concat_clip_embeds(embeds)[None] if embeds else None
    return E2VConditioning(mean, std, mask, clip_embeds, p, reference_latent_frames(p), np.stack(vae_images))


@torch.no_grad()
def build_reference_slots(model: WanModel, images: list[np.ndarray], layout: list[ElementSpec], height: int,
                          width: int, slots: int = SKYREELS_V3_SLOTS) -> E2VConditioning:
    """SkyReels-V3's references: each image preprocessed to the video's size and VAE-encoded alone as ONE latent
    frame (its `prepare_latents`), the posteriors stacked in order along time, (1, C, N, h, w)."""
    if len(images) > slots:
        raise ValueError(f"{len(images)} references do not fit the model's {slots} reference slots")
    vae_images = [preprocess(image, spec.vae_preprocess, height, width) for image, spec in zip(images, layout)]
    posteriors = [model.encode_video(image_to_tensor(image)[None, :, None]) for image in vae_images]
    mean = torch.cat([m for m, _ in posteriors], dim=2)
    std = torch.cat([s for _, s in posteriors], dim=2)
    return E2VConditioning(mean, std, None, None, 0, 0, np.stack(vae_images), reference_slots=slots)


def latent_shape(model: WanModel, sample: SampleConfig, leading: int = 0) -> tuple[int, int, int, int, int]:
    """(1, C, T, h, w) of a sample's latents, `leading` extra frames first (VACE's reference slots)."""
    variant = model.variant
    t = (sample.frames - 1) // variant.vae_scale_temporal + 1 + leading
    return (1, variant.out_channels, t, sample.height // variant.vae_scale_spatial,
            sample.width // variant.vae_scale_spatial)


def initial_latents(model: WanModel, conditioning: E2VConditioning,
                    sample: SampleConfig) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(noise, z_cond) from ONE generator seeded with the sample's seed on the sampling device, drawn in A2's
    order (models/pipeline_a2.py `prepare_latents`: the noise, then the posterior sample), so the same seed
    gives A2's starting point."""
    device = model.train_device
    generator = torch.Generator(device).manual_seed(sample.seed)
    noise = torch.randn(latent_shape(model, sample, conditioning.control_references), generator=generator,
                        device=device)
    return noise, conditioning.condition_latents(model, sample.e2v_posterior, generator)


@torch.no_grad()
def sample_latents(model: WanModel, conditioning: E2VConditioning, sample: SampleConfig,
                   progress: Callable[[Iterable], Iterable] | None = None) -> torch.Tensor:
    """The denoised normalised latents (1, C, T, h, w) of one E2V (or VACE) sample."""
    device, dtype = model.train_device, model.train_dtype
    appends = conditioning.reference_slots > 0  # SkyReels-V3: dual guidance (text, and image against zero slots)
    if sample.image_guidance_scale != 1 and not appends:
        raise UserError(f"the sample's image_guidance_scale is {sample.image_guidance_scale} but image guidance "
                        "applies only to E2V in SkyReels-V3's layout (e2v.reference_layout skyreels_v3): set it to 1")
    image_guided = appends and sample.image_guidance_scale != 1
    prompt_embeds = model.encode_prompts([sample.prompt]).to(device, dtype)
    negative_embeds = model.encode_prompts([sample.negative_prompt]).to(device, dtype) \
        if sample.cfg_scale > 1 or image_guided else None
    scheduler = sample_scheduler(model, sample)
    scheduler.set_timesteps(sample.steps, device=device)
    latents, condition_z = initial_latents(model, conditioning, sample)
    family = model.conditioning  # the routing, timesteps and hidden-state layout training uses
    payload = ConditionPayload(
        condition=torch.cat([conditioning.mask.to(device), condition_z], dim=1).to(dtype)
        if family.channel_concat and condition_z is not None else None,  # None: zero condition channels
        clip_embeds=conditioning.clip_embeds.to(device) if conditioning.clip_embeds is not None else None,
        clean_frames=conditioning.reference_latents if family.per_token_timesteps and not appends else 0,  # TI2V
        control=conditioning.control.to(device) if conditioning.control is not None else None,  # VACE
        control_scale=sample.vace_scale, dropped_frames=conditioning.control_references,
        appended=pad_reference_slots(condition_z, conditioning.reference_slots) if appends else None)
    zero_references = dataclasses.replace(payload, appended=torch.zeros_like(payload.appended)) if image_guided else None
    k = payload.clean_frames
    for timestep in (progress(scheduler.timesteps) if progress else scheduler.timesteps):
        latents = family.keep_clean(latents, condition_z, k)
        transformer = model.transformer_for_timestep(timestep)
        t = timestep.expand(1).to(device)

        def predict(embeds: torch.Tensor, conditioned: ConditionPayload) -> torch.Tensor:
            inputs = family.transformer_inputs(latents, t, embeds, conditioned, dtype)
            return family.video_prediction(transformer(**inputs, return_dict=False)[0], conditioned).float()

        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            prediction = predict(prompt_embeds, payload)
            if negative_embeds is not None:  # CFG on the text: the image context and references stay (A2, V3)
                unconditional = predict(negative_embeds, payload)
                if zero_references is not None:  # SkyReels-V3's third pass: no text, all-zero references
                    prediction = dual_guidance(prediction, unconditional, predict(negative_embeds, zero_references),
                                               sample.cfg_scale, sample.image_guidance_scale)
                else:  # image scale 1: dual guidance is this, exactly (its third pass cancels out)
                    prediction = unconditional + sample.cfg_scale * (prediction - unconditional)
        latents = scheduler.step(prediction, timestep, latents, return_dict=False)[0]
    latents = family.keep_clean(latents, condition_z, k)
    return latents[:, :, payload.dropped_frames:]  # VACE: without the reference images' frames


@torch.no_grad()
def denoise_e2v(model: WanModel, conditioning: E2VConditioning, sample: SampleConfig, target_layout: str = "separate",
                progress: Callable[[Iterable], Iterable] | None = None) -> np.ndarray:
    """uint8 frames (F − dropped, H, W, 3) of the generated video, reference frames removed."""
    video = model.decode_latents(sample_latents(model, conditioning, sample, progress))[0]  # (3, F, H, W) in [-1, 1]
    drop = dropped_decoded_frames(target_layout, conditioning.reference_frames) if conditioning.reference_frames else 0
    frames = ((video.permute(1, 2, 3, 0).cpu().numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8)
    return frames[drop:]


def contact_sheet(references: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """One row: the references | the first, middle and last generated frames (gray gap between)."""
    height = frames.shape[1]
    def fit(image: np.ndarray) -> np.ndarray:
        import cv2

        scale = height / image.shape[0]
        return cv2.resize(image, (max(1, round(image.shape[1] * scale)), height), interpolation=cv2.INTER_AREA)

    gap = np.full((height, max(4, height // 8), 3), 128, np.uint8)
    picks = [frames[0], frames[len(frames) // 2], frames[-1]] if len(frames) else []
    return np.concatenate([*[fit(r) for r in references], gap, *picks], axis=1)
