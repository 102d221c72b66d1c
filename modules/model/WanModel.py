"""WanModel: every component of a Wan checkpoint plus what training adds to it.

The encoders are exposed as small methods (`encode_prompts`, `encode_video`, `encode_images`) that
call diffusers' own pipeline code, so our embeddings are exactly what `WanPipeline` /
`WanImageToVideoPipeline` produce at inference. After caching the trainer frees UMT5 and CLIP; what the samples
need was encoded ahead and is answered from `encoded` (model/encoder_residency.py).
"""
from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from diffusers import AutoencoderKLWan, WanImageToVideoPipeline, WanPipeline, WanTransformer3DModel, WanVACEPipeline
from diffusers.schedulers import SchedulerMixin
from PIL import Image
from transformers import CLIPImageProcessor, CLIPVisionModel, PreTrainedTokenizerBase, UMT5EncoderModel

from modules.model.conditioning import VariantConditioning
from modules.model.encoder_residency import (
    ENCODER_ATTRIBUTES,
    EncodedInputs,
    EncoderResidency,
    image_key,
    padded_rows,
    prompt_key,
    real_token_rows,
)
from modules.model.registry import family_for
from modules.model.text_embedding import WanModelEmbedding, encode_with_embedding
from modules.model.WanVariant import WanVariant

TEXT_SEQ_LEN = 512  # the transformer splits image from text context at "length - 512"


@dataclasses.dataclass
class WanModel:
    variant: WanVariant
    model_dir: Path
    tokenizer: PreTrainedTokenizerBase
    text_encoder: UMT5EncoderModel
    vae: AutoencoderKLWan
    transformer: WanTransformer3DModel
    scheduler: SchedulerMixin
    transformer_2: WanTransformer3DModel | None = None
    image_encoder: CLIPVisionModel | None = None
    image_processor: CLIPImageProcessor | None = None
    train_device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    train_dtype: torch.dtype = torch.float32
    # Where a component's weights came from when not `model_dir/<name>` (an override file, another
    # checkpoint's image encoder): what cache entries encoded by it are keyed on.
    component_sources: dict[str, Path] = dataclasses.field(default_factory=dict)
    # A textual-inversion embedding (trained, or loaded with --embedding): prompts holding its placeholder get it.
    text_embedding: WanModelEmbedding | None = None
    # LoRAs merged into the frozen base when it loaded (modules/modelFile/base_loras.py), as the saved LoRA's
    # header records them: {"name", "path", "sha256", "strength", "expert"} with "experts" (the indexes it went into).
    base_loras: list[dict] = dataclasses.field(default_factory=list)
    # The `training_only` ones as read, (expert, file, strength) in merge order: taken out again for samples and
    # saved weights (modules/modelFile/training_only_loras.py). The file type is the loader's (no import here).
    training_only_loras: list[tuple] = dataclasses.field(default_factory=list)
    # The `sample_only` ones, read and checked but not merged: merged for the trainer's samples only (same module).
    sample_only_loras: list[tuple] = dataclasses.field(default_factory=list)
    # Prompts and images encoded ahead, and which encoders are freed / how to load them again (encoder_residency.py).
    encoded: EncodedInputs = dataclasses.field(default_factory=EncodedInputs)
    residency: EncoderResidency = dataclasses.field(default_factory=EncoderResidency)

    def component_source(self, name: str) -> Path:
        return self.component_sources.get(name, self.model_dir / name)

    # --- components ----------------------------------------------------------------------------
    def transformers(self) -> list[WanTransformer3DModel]:
        return [t for t in (self.transformer, self.transformer_2) if t is not None]

    @property
    def conditioning(self) -> VariantConditioning:
        """How this model's family is fed (read each time: E2V expansion changes the variant)."""
        return family_for(self.variant).conditioning(self.variant)

    def transformer_for_timestep(self, timestep: float) -> WanTransformer3DModel:
        """The expert that denoises at `timestep` (the shared routing of `VariantConditioning`)."""
        transformers = self.transformers()
        return transformers[self.conditioning.expert_for_timestep(timestep, len(transformers))]

    def pipeline(self, image_conditioned: bool | None = None) -> WanPipeline | WanImageToVideoPipeline:
        """The diffusers pipeline over our components (no copies), for sampling.

        36-channel models always need the image pipeline; TI2V uses it only when an image is given.
        """
        if image_conditioned is None:
            image_conditioned = self.variant.channel_concat_condition
        common = dict(tokenizer=self.tokenizer, text_encoder=self.loaded_encoder("text"), vae=self.vae,
                      scheduler=self.scheduler, transformer=self.transformer, transformer_2=self.transformer_2,
                      boundary_ratio=self.variant.boundary_ratio)
        pipeline_class = family_for(self.variant).pipeline(image_conditioned)
        if pipeline_class is not WanVACEPipeline:  # (VACE's pipeline has no expand_timesteps)
            common["expand_timesteps"] = self.variant.expand_timesteps
        accepted = inspect.signature(pipeline_class.__init__).parameters  # SkyReels-V2's: one transformer, no flags
        common = {key: value for key, value in common.items() if key in accepted}
        if "image_encoder" in accepted:
            return pipeline_class(image_encoder=self.loaded_encoder("clip"), image_processor=self.image_processor,
                                  **common)
        return pipeline_class(**common)

    # --- latent normalisation (per channel, from the VAE's own config) ---------------------------
    def _latent_stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.vae.config.z_dim
        mean = torch.tensor(self.vae.config.latents_mean, dtype=like.dtype, device=like.device).view(1, z, 1, 1, 1)
        std = torch.tensor(self.vae.config.latents_std, dtype=like.dtype, device=like.device).view(1, z, 1, 1, 1)
        return mean, std

    def normalize_latents(self, latents: torch.Tensor) -> torch.Tensor:
        mean, std = self._latent_stats(latents)
        return (latents - mean) / std

    def denormalize_latents(self, latents: torch.Tensor) -> torch.Tensor:
        mean, std = self._latent_stats(latents)
        return latents * std + mean

    # --- encoders ------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_embedding: bool = True) -> torch.Tensor:
        """UMT5 embeddings (B, 512, D), zero-padded after the real tokens, as diffusers builds them. Prompts that
        hold `text_embedding`'s placeholder get its vectors (unless `with_embedding` is false: the text cache
        holds plain text's embeddings only). Plain prompts encoded ahead come from `encoded` (on the train device)."""
        embedding = self.text_embedding if with_embedding else None
        if embedding is not None and any(embedding.applies_to(p) for p in prompts):
            return torch.cat([self.encode_with_embedding([p], embedding) for p in prompts])
        key = prompt_key(prompts)
        kept = self.encoded.lookup(key)
        if kept is not None:
            return padded_rows(kept, TEXT_SEQ_LEN).to(self.train_device)
        if self.encoded.deferring:  # noted for the text phase; the caller's run stops before using them
            self.encoded.note(prompts)
            width = self.text_encoder.config.d_model
            return torch.zeros(len(prompts), TEXT_SEQ_LEN, width, device=self.train_device)
        reloaded = "text" in self.residency.released
        text_encoder = self.encoder("text", f"for the prompt {prompts[0][:60]!r}, which was not encoded ahead")
        device = next(text_encoder.parameters()).device
        pipe = WanPipeline(tokenizer=self.tokenizer, text_encoder=text_encoder, vae=None, scheduler=None)
        embeds = pipe._get_t5_prompt_embeds(prompt=prompts, max_sequence_length=TEXT_SEQ_LEN, device=device,
                                            dtype=torch.float32)
        if self.encoded.recording or reloaded:
            self.encoded.keep(key, real_token_rows(embeds))
        return embeds

    def encode_with_embedding(self, prompts: list[str], embedding: WanModelEmbedding) -> torch.Tensor:
        """(B, 512, D) of prompts holding `embedding`'s placeholder; differentiable in its vectors (the training
        step calls it with gradients on)."""
        text_encoder = self.encoder("text", "for a prompt holding the embedding's placeholder")
        return encode_with_embedding(self.tokenizer, text_encoder, prompts, embedding, TEXT_SEQ_LEN)

    @torch.no_grad()
    def encode_video(self, video: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """VAE posterior of a clip in [-1, 1], (B, 3, F, H, W) -> raw (not normalised) mean and std."""
        vae_param = next(self.vae.parameters())
        dist = self.vae.encode(video.to(vae_param.device, vae_param.dtype)).latent_dist
        return dist.mean.float(), dist.std.float()

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalised latents -> video in [-1, 1], (B, 3, F, H, W)."""
        vae_param = next(self.vae.parameters())
        raw = self.denormalize_latents(latents.float()).to(vae_param.device, vae_param.dtype)
        return self.vae.decode(raw, return_dict=False)[0].float().clamp(-1, 1)

    @torch.no_grad()
    def encode_images(self, images: list) -> torch.Tensor:
        """CLIP second-to-last hidden state for each image (PIL or uint8 HWC), (N, tokens, width)."""
        if self.image_encoder is None or self.image_processor is None:
            raise RuntimeError("this model has no image encoder")
        return self.encoded_images("clip_states", images, lambda encoder: self._clip_states(encoder, images))

    def _clip_states(self, image_encoder: CLIPVisionModel, images: list) -> torch.Tensor:
        device = next(image_encoder.parameters()).device
        pixels = self.image_processor(images=images, return_tensors="pt").pixel_values
        out = image_encoder(pixel_values=pixels.to(device, next(image_encoder.parameters()).dtype),
                            output_hidden_states=True)
        return out.hidden_states[-2].float()

    @torch.no_grad()
    def encoded_images(self, tag: str, inputs: list, encode: Callable[[CLIPVisionModel], torch.Tensor]) -> torch.Tensor:
        """`encode(image_encoder)` of `inputs` (the images as `tag`'s caller preprocessed them): kept from encoding
        ahead (on the train device), else computed now with the encoder loaded again if it was freed."""
        key = image_key(tag, [np.asarray(i) if isinstance(i, Image.Image) else i for i in inputs], self.train_device)
        kept = self.encoded.lookup(key)
        if kept is not None:
            return kept["states"].to(self.train_device)
        reloaded = "clip" in self.residency.released
        states = encode(self.encoder("clip", "for a sample image that was not encoded ahead"))
        if self.encoded.recording or reloaded:
            self.encoded.keep(key, {"states": states})
        return states

    # --- the encoders after caching (model/encoder_residency.py) ---------------------------------------
    def encoder(self, name: str, why: str = "") -> torch.nn.Module:
        """The encoder `name` ("text": UMT5, "clip": CLIP), loaded again from its files when it was freed (logged
        with `why`)."""
        return self.residency.ready(self, name, why)

    def loaded_encoder(self, name: str) -> torch.nn.Module | None:
        """The encoder `name` while it holds weights; None when the model has none or it was freed."""
        return None if name in self.residency.released else getattr(self, ENCODER_ATTRIBUTES[name])

    def release_encoders(self, names: list[str]) -> float:
        """Free UMT5 and/or CLIP (the trainer, after caching); returns the GiB given back."""
        return self.residency.release(self, names)
