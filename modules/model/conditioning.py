"""How each variant family feeds its transformer, in one object that the training step and the sampler share.

A `VariantConditioning` answers the questions that used to be written three times (the training step, the
E2V sampler loop, `WanModel.expert_for_sigma`): which expert a noise level goes to, the timestep tensor the
transformer takes (one per sample, or one per token for Wan 2.2 TI2V), the hidden states (the noisy latents,
plus mask and condition channels for the I2V layout), which latent frames stay clean, and the image context.
What a batch or a sample brings is a `ConditionPayload`; which of its fields a family reads is listed there.

T2V, I2V, TI2V, the two-expert A14B models and VACE are instances (`conditioning_for(variant)`); E2V is a payload
on them (P reference frames in the condition channels, K clean reference latents for TI2V, or SkyReels-V3's reference
slots appended after the latents, `appended`), not another family.
VACE adds the control context (`modules/model/vace.py`) and its scale; its reference images are R leading latent
frames of the latents that stay out of the loss (`dropped_frames`).
"""
from __future__ import annotations

import dataclasses

import torch

from modules.model.WanVariant import WanVariant
from modules.model.animate2 import DrivingStream, two_pass_forward

TRAIN_TIMESTEPS = 1000  # diffusers' Wan schedulers: t = 1000σ


@dataclasses.dataclass
class ConditionPayload:
    """What conditions one batch (or one sample), beside the prompt. Per family:
    - I2V layout (36 channels): `condition` = [mask (4), condition latents (C)], (B, 4 + C, T, h, w); None
      means no image (zeros, as diffusers and SkyReels-A2 feed then).
    - CLIP branch (Wan 2.1 I2V, E2V on a CLIP base): `clip_embeds` (B, 257·N, D).
    - TI2V (per-token timesteps): `clean_frames` K, the leading latent frames that stay the clean condition.
    - every family: `loss_frame_weights` (T,) per latent frame (E2V leaves reference frames out), None = all 1;
      `sample_weights` (B,) per sample (`concepts[].loss_weight`), None = all 1; `loss_mask` (B, 1, T, h, w) in
      [0, 1], the masked share of each latent cell (masked training), None = no mask.
    - VACE: `control` (B, 96, R + T, h, w), the VACE context (never None for a VACE model); `control_scale`, the
      weight of its hints (diffusers' `conditioning_scale`, ComfyUI's VACE strength); `dropped_frames` R, the
      leading latent frames that stand for the reference images (noised like the rest, left out of the loss).
    - E2V in SkyReels-V3's layout (T2V-layout families): `appended` (B, C, S, h, w), the reference latents zero-padded
      to S slots (`modules/model/reference_slots.py`), fed after the noisy latents along time at the same timestep;
      their prediction is cut off (`video_prediction`), so it never reaches the loss or the scheduler.
    """

    condition: torch.Tensor | None = None
    clip_embeds: torch.Tensor | None = None
    clean_frames: int = 0
    loss_frame_weights: torch.Tensor | None = None
    sample_weights: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None
    control: torch.Tensor | None = None
    control_scale: float = 1.0
    dropped_frames: int = 0
    appended: torch.Tensor | None = None
    driving: DrivingStream | None = None  # Animate-2: the driving pass's inputs (model/animate2.py)


@dataclasses.dataclass(frozen=True)
class VariantConditioning:
    family: str  # t2v | i2v | flf2v | ti2v | a14b_t2v | a14b_i2v | vace | a14b_vace
    channel_concat: bool  # hidden = [x_t, mask, condition latents]
    per_token_timesteps: bool  # Wan 2.2 TI2V: timestep 0 on clean frames' tokens
    image_context: bool  # the transformer has a CLIP cross-attention branch
    boundary_sigma: float | None  # two experts: σ >= boundary goes to the high-noise expert
    latent_channels: int
    patch_size: tuple[int, int, int]
    vace_layers: int = 0  # VACE: how many control blocks (each takes the context's hint at `control_scale`)
    # FLF2V: the CLIP branch reads (B, 2·257, D) as (2B, 257, D) pairs (diffusers' WanImageEmbedding views them back)
    paired_image_tokens: bool = False
    # SkyReels-V2 with an fps embedding: 0 for 16 fps, 1 otherwise (its diffusion-forcing pipeline's rule)
    fps_index: int | None = None

    # --- expert routing --------------------------------------------------------------------------------------
    def expert_for_sigma(self, sigma: float, experts: int = 2) -> int:
        """0 = `transformer` (high noise), 1 = `transformer_2`: σ >= boundary goes to the high-noise expert."""
        return self._expert(sigma, 1.0, experts)

    def expert_for_timestep(self, timestep: float, experts: int = 2) -> int:
        """The same rule in the sampler's units, as diffusers routes: t >= boundary · 1000."""
        return self._expert(float(timestep), TRAIN_TIMESTEPS, experts)

    def _expert(self, value: float, scale: float, experts: int) -> int:
        if experts < 2 or self.boundary_sigma is None or value >= self.boundary_sigma * scale:
            return 0
        return 1

    def sigma_range(self, expert: int, experts: int = 2) -> tuple[float, float]:
        """The σ interval an expert is trained on (a batch never straddles the boundary)."""
        if experts < 2 or self.boundary_sigma is None:
            return 0.0, 1.0
        return (self.boundary_sigma, 1.0) if expert == 0 else (0.0, self.boundary_sigma)

    # --- what the transformer takes --------------------------------------------------------------------------
    def timesteps(self, timesteps: torch.Tensor, latent_shape: torch.Size | tuple[int, ...],
                  clean_frames: int = 0) -> torch.Tensor:
        """(B,) timesteps -> what the transformer takes: (B,), or (B, T·h/p·w/p) per token with 0 on clean frames."""
        if not self.per_token_timesteps:
            return timesteps
        _, _, t, h, w = latent_shape
        _, ph, pw = self.patch_size
        per_frame = timesteps[:, None].expand(-1, t).clone()
        per_frame[:, :clean_frames] = 0
        return per_frame[:, :, None].expand(-1, -1, (h // ph) * (w // pw)).reshape(len(timesteps), -1)

    def keep_clean(self, noisy: torch.Tensor, clean: torch.Tensor, clean_frames: int) -> torch.Tensor:
        """`noisy` with its first `clean_frames` latent frames taken from `clean` (TI2V's condition frames)."""
        if not clean_frames:
            return noisy
        return torch.cat([clean[:, :, :clean_frames], noisy[:, :, clean_frames:]], dim=2)

    def hidden_states(self, noisy: torch.Tensor, payload: ConditionPayload) -> torch.Tensor:
        if payload.appended is not None:  # SkyReels-V3: the reference slots follow the video's latent frames
            if self.channel_concat or self.vace_layers:
                raise ValueError(f"the {self.family} layout takes no appended reference latents (SkyReels-V3's "
                                 "layout needs a T2V-layout transformer)")
            return torch.cat([noisy, payload.appended.to(noisy.device, noisy.dtype)], dim=2)
        if not self.channel_concat:
            return noisy
        condition = payload.condition
        if condition is None:  # no image: zero mask and latents
            b, c, t, h, w = noisy.shape
            condition = noisy.new_zeros(b, 4 + c, t, h, w)
        return torch.cat([noisy, condition.to(noisy.dtype)], dim=1)

    def transformer_inputs(self, noisy: torch.Tensor, timesteps: torch.Tensor, prompt_embeds: torch.Tensor,
                           payload: ConditionPayload, dtype: torch.dtype) -> dict[str, torch.Tensor | None]:
        """The keyword arguments of `WanTransformer3DModel.forward` for noisy latents at `timesteps` (B,)."""
        clip = payload.clip_embeds if self.image_context else None
        if clip is not None and self.paired_image_tokens:  # [first, last] per sample, as diffusers' pipeline feeds
            clip = clip.reshape(clip.shape[0] * 2, clip.shape[1] // 2, clip.shape[2])
        hidden = self.hidden_states(noisy, payload)
        inputs = dict(hidden_states=hidden.to(dtype),  # appended reference slots take the noisy frames' timestep
                      timestep=self.timesteps(timesteps, hidden.shape, payload.clean_frames),
                      encoder_hidden_states=prompt_embeds.to(dtype),
                      encoder_hidden_states_image=clip.to(dtype) if clip is not None else None)
        if self.fps_index is not None:
            inputs["fps"] = [self.fps_index] * noisy.shape[0]
        if self.vace_layers:
            if payload.control is None:
                raise ValueError("a VACE model needs the VACE context (ConditionPayload.control)")
            if payload.control.shape[2] != noisy.shape[2]:
                raise ValueError(f"VACE context of {payload.control.shape[2]} latent frames for latents of "
                                 f"{noisy.shape[2]}: the references must lead both")
            inputs["control_hidden_states"] = payload.control.to(noisy.device, dtype)
            inputs["control_hidden_states_scale"] = torch.full((self.vace_layers,), float(payload.control_scale),
                                                               device=noisy.device, dtype=dtype)
        return inputs

    def predict(self, transformer, noisy: torch.Tensor, timesteps: torch.Tensor, prompt_embeds: torch.Tensor,
                payload: ConditionPayload, dtype: torch.dtype) -> torch.Tensor:
        """The transformer's prediction for the video's latent frames: one call with `transformer_inputs`, or
        Animate-2's two passes (the reference image's leading slot stays in; `dropped_frames` keeps it out of the
        loss)."""
        if payload.driving is None:
            return self.video_prediction(transformer(**self.transformer_inputs(noisy, timesteps, prompt_embeds,
                                                                               payload, dtype), return_dict=False)[0],
                                         payload)
        if payload.condition is None:
            raise ValueError("Animate-2 needs the reference image's condition channels (ConditionPayload.condition)")
        drv, device = payload.driving, noisy.device

        def cast(tensor: torch.Tensor | None) -> torch.Tensor | None:
            return None if tensor is None else tensor.to(device, dtype)

        return two_pass_forward(transformer, cast(noisy), cast(payload.condition), cast(drv.latents),
                                cast(drv.condition), timesteps, cast(prompt_embeds), cast(drv.prompt_embeds),
                                cast(payload.clip_embeds), cast(drv.clip_embeds))

    def video_prediction(self, output: torch.Tensor, payload: ConditionPayload) -> torch.Tensor:
        """The transformer's output without the appended reference slots' frames (SkyReels-V3 drops them)."""
        if payload.appended is None:
            return output
        return output[:, :, : output.shape[2] - payload.appended.shape[2]]

    def loss_weights(self, num_latent_frames: int, payload: ConditionPayload, device: torch.device) -> torch.Tensor:
        """(T,) weight of each latent frame in the loss: the payload's, with clean frames at 0."""
        weights = torch.ones(num_latent_frames, device=device)
        if payload.loss_frame_weights is not None:
            weights = payload.loss_frame_weights.to(device).float().clone()
        weights[: max(payload.clean_frames, payload.dropped_frames)] = 0
        return weights


def conditioning_for(variant: WanVariant) -> VariantConditioning:
    """The family object of a checkpoint, from what its configs say (`WanVariant`)."""
    return VariantConditioning(
        family=variant.name, channel_concat=variant.channel_concat_condition,
        per_token_timesteps=variant.expand_timesteps, image_context=variant.has_clip_branch,
        boundary_sigma=variant.boundary_sigma if variant.two_experts else None,
        latent_channels=variant.out_channels, patch_size=tuple(variant.patch_size),
        vace_layers=len(variant.vace_layers), paired_image_tokens=variant.paired_image_tokens,
        fps_index=(0 if variant.fps == 16 else 1) if variant.fps_embedding else None)
