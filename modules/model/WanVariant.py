"""What a Wan checkpoint is, read from its own configs (never from its folder name).

One descriptor instead of a ladder of `is_i2v()`/`is_ti2v()` checks: code asks for a capability
(`has_clip_branch`, `two_experts`, `expand_timesteps`, ...) and the checkpoint answers. Reading a folder into
one is `modules/model/detection.py` (it needs the family registry, which needs this descriptor).
"""
from __future__ import annotations

import dataclasses

from modules.util.enum import ModelType


@dataclasses.dataclass(frozen=True)
class WanVariant:
    name: str  # t2v | i2v | flf2v | ti2v | a14b_t2v | a14b_i2v | vace | a14b_vace
    model_type: ModelType
    in_channels: int  # transformer input channels (16, 36 or 48)
    out_channels: int  # latent channels the transformer predicts
    has_clip_branch: bool  # transformer has image cross-attention (image_dim set)
    has_image_encoder: bool  # checkpoint ships image_encoder/ + image_processor/
    two_experts: bool  # transformer_2 present (Wan 2.2 A14B)
    boundary_ratio: float | None  # expert switch, as a fraction of the 1000 train timesteps
    expand_timesteps: bool  # Wan 2.2 TI2V: per-token timesteps, first-frame condition as clean tokens
    vae_z_dim: int
    vae_scale_spatial: int
    vae_scale_temporal: int
    patch_size: tuple[int, int, int]
    fps: int  # frame rate the variant was trained at
    transformer_config_hash: str = ""  # of the checkpoint's transformer config: LoRA files record their base's
    transformer_class: str = "WanTransformer3DModel"  # `_class_name`: with the layout, the registry's key
    # FLF2V: the CLIP branch takes a first and a last frame (2 x 257 tokens with a position embedding)
    paired_image_tokens: bool = False
    fps_embedding: bool = False  # SkyReels-V2 with inject_sample_info: the transformer takes the clip's fps
    vace_layers: tuple[int, ...] = ()  # VACE: the base blocks its control blocks feed (empty: no VACE branch)

    @property
    def channel_concat_condition(self) -> bool:
        """The I2V layout: hidden = [x_t, 4 mask channels, condition latents] (36 = 16 + 4 + 16)."""
        return self.in_channels == 2 * self.out_channels + self.vae_scale_temporal

    @property
    def boundary_sigma(self) -> float | None:
        # diffusers routes t >= boundary_ratio * 1000 to the high-noise expert; with t = 1000σ this is σ.
        return self.boundary_ratio

    def describe(self) -> str:
        parts = [self.name, f"{self.in_channels}ch in", f"VAE z{self.vae_z_dim}", f"{self.fps} fps"]
        if self.has_clip_branch:
            parts.append("CLIP branch")
        if self.two_experts:
            parts.append(f"two experts (boundary {self.boundary_ratio})")
        if self.expand_timesteps:
            parts.append("per-token timesteps")
        if self.vace_layers:
            parts.append(f"VACE control on {len(self.vace_layers)} blocks")
        return ", ".join(parts)
