"""Which Wan checkpoints we know, in one plain dict: the transformer's `_class_name` and the layout its configs
describe -> the variant family, the transformer class, the diffusers pipeline classes and the conditioning.

Nothing registers itself: a new family (VACE, FLF2V, Fun-Control) is an entry here, its `VariantConditioning`
fields, and its data/sampling code. An unknown class or a layout no entry matches is a one-line error naming
the folder, never a silent "t2v".
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from diffusers import (SkyReelsV2ImageToVideoPipeline, SkyReelsV2Pipeline, SkyReelsV2Transformer3DModel,
                       WanAnimate2ModularPipeline, WanAnimate2Transformer3DModel, WanImageToVideoPipeline, WanPipeline,
                       WanTransformer3DModel, WanVACEPipeline, WanVACETransformer3DModel)

from modules.model.WanVariant import WanVariant
from modules.model.conditioning import VariantConditioning, conditioning_for
from modules.util.errors import UserError


@dataclasses.dataclass(frozen=True)
class VariantFamily:
    name: str  # t2v | i2v | flf2v | ti2v | a14b_t2v | a14b_i2v | vace | a14b_vace | animate_2 (WanVariant.name)
    transformer_class: type
    pipeline_class: type  # generation without an image
    image_pipeline_class: type | None  # generation from an image (I2V layouts need one; TI2V may take one)
    # How the family feeds its transformer; its fields are read from the variant (E2V expansion changes them).
    conditioning: Callable[[WanVariant], VariantConditioning] = conditioning_for

    def pipeline(self, image_conditioned: bool) -> type:
        if image_conditioned and self.image_pipeline_class is not None:
            return self.image_pipeline_class
        return self.pipeline_class


# (transformer class name, channel layout, two experts) -> family. The layout comes from the configs:
# "t2v" in == out channels, "i2v" in == 2·out + 4 (mask and condition latents), "ti2v" per-token timesteps.
FAMILIES: dict[tuple[str, str, bool], VariantFamily] = {
    ("WanTransformer3DModel", "t2v", False): VariantFamily("t2v", WanTransformer3DModel, WanPipeline, None),
    ("WanTransformer3DModel", "i2v", False): VariantFamily("i2v", WanTransformer3DModel, WanImageToVideoPipeline,
                                                           WanImageToVideoPipeline),
    ("WanTransformer3DModel", "ti2v", False): VariantFamily("ti2v", WanTransformer3DModel, WanPipeline,
                                                            WanImageToVideoPipeline),
    ("WanTransformer3DModel", "t2v", True): VariantFamily("a14b_t2v", WanTransformer3DModel, WanPipeline, None),
    # Wan2.1-FLF2V-14B: the I2V layout whose CLIP branch takes the first and the last frame (a position embedding
    # over 2 x 257 image tokens)
    ("WanTransformer3DModel", "flf2v", False): VariantFamily("flf2v", WanTransformer3DModel, WanImageToVideoPipeline,
                                                             WanImageToVideoPipeline),
    ("WanTransformer3DModel", "i2v", True): VariantFamily("a14b_i2v", WanTransformer3DModel, WanImageToVideoPipeline,
                                                          WanImageToVideoPipeline),
    # VACE (Wan2.1-VACE-1.3B/14B; Wan2.2-VACE-Fun-A14B with two experts): a T2V transformer plus control blocks
    # fed the 96-channel VACE context (modules/model/vace.py)
    ("WanVACETransformer3DModel", "t2v", False): VariantFamily("vace", WanVACETransformer3DModel, WanVACEPipeline,
                                                               None),
    ("WanVACETransformer3DModel", "t2v", True): VariantFamily("a14b_vace", WanVACETransformer3DModel,
                                                              WanVACEPipeline, None),
    # SkyReels-V2 T2V / I2V (not diffusion forcing): Wan blocks, 24 fps, with an fps embedding when its config has
    # inject_sample_info
    ("SkyReelsV2Transformer3DModel", "t2v", False): VariantFamily("skyreels_v2_t2v", SkyReelsV2Transformer3DModel,
                                                                  SkyReelsV2Pipeline, None),
    ("SkyReelsV2Transformer3DModel", "i2v", False): VariantFamily(
        "skyreels_v2_i2v", SkyReelsV2Transformer3DModel, SkyReelsV2ImageToVideoPipeline, SkyReelsV2ImageToVideoPipeline),
    # Wan2.2-Animate-2 (its Distilled weights have the same transformer config: only sampling differs): two passes
    # through one DiT, the driving video's then the target's, whose self-attention also sees the same frame's
    # driving keys (modules/model/animate2.py). The I2V channel layout (36 in), the CLIP branch as `use_img_emb`.
    ("WanAnimate2Transformer3DModel", "i2v", False): VariantFamily("animate_2", WanAnimate2Transformer3DModel,
                                                                   WanAnimate2ModularPipeline, None),
}

# Wan-derived transformers diffusers knows that we do not train: named, with why, so the error can say so.
NOT_SUPPORTED = {
    "WanAnimateTransformer3DModel": ("Wan Animate", "it animates a character from pose and face videos through its "
                                     "own motion encoder and face adapter, inputs no data kind here provides, and "
                                     "WanTrainer ships no pose or face extractor; Wan2.2-Animate-2 folders load"),
    "ChronoEditTransformer3DModel": ("ChronoEdit", "an image editor over temporal reasoning frames, trained on image "
                                     "pairs, which is no video data kind here"),
}


def channel_layout(in_channels: int, out_channels: int, temporal_scale: int, per_token_timesteps: bool,
                   paired_image_tokens: bool = False) -> str | None:
    """t2v | i2v | flf2v | ti2v, or None for channels no Wan layout has (`paired_image_tokens`: the CLIP branch has
    a position embedding over a first and a last frame's tokens, FLF2V's)."""
    if per_token_timesteps:
        return "ti2v" if in_channels == out_channels else None
    if in_channels == out_channels:
        return "t2v"
    if in_channels == 2 * out_channels + temporal_scale:
        return "flf2v" if paired_image_tokens else "i2v"
    return None


def family_of(model_dir: Any, class_name: str, in_channels: int, out_channels: int, temporal_scale: int,
              per_token_timesteps: bool, two_experts: bool, paired_image_tokens: bool = False) -> VariantFamily:
    """The family of a checkpoint folder from what its configs say; a one-line UserError naming the folder
    for a class or layout we do not know."""
    if class_name in NOT_SUPPORTED:
        title, reason = NOT_SUPPORTED[class_name]
        raise UserError(f"'{model_dir}' is a {title} checkpoint ({class_name}), which WanTrainer does not train yet "
                        f"({reason}): use a Wan 2.1 / 2.2 T2V, I2V, FLF2V, TI2V, A14B, VACE or SkyReels-V2 folder")
    if not any(key[0] == class_name for key in FAMILIES):
        raise UserError(f"'{model_dir}': transformer class '{class_name}' is not a Wan transformer WanTrainer knows "
                        "(expected WanTransformer3DModel in transformer/config.json)")
    layout = channel_layout(in_channels, out_channels, temporal_scale, per_token_timesteps, paired_image_tokens)
    family = FAMILIES.get((class_name, layout, two_experts)) if layout else None
    if family is None:
        raise UserError(f"'{model_dir}': a transformer with {in_channels} input and {out_channels} output channels"
                        f"{' and per-token timesteps' if per_token_timesteps else ''} matches no Wan layout "
                        f"(T2V: in = out; I2V: in = 2·out + {temporal_scale}): the folder's configs are not a Wan model's")
    return family


def family_for(variant: WanVariant) -> VariantFamily:
    """The family a variant's current layout belongs to (an E2V-expanded T2V base has the I2V layout)."""
    layout = channel_layout(variant.in_channels, variant.out_channels, variant.vae_scale_temporal,
                            variant.expand_timesteps, variant.paired_image_tokens)
    return FAMILIES[(variant.transformer_class, layout, variant.two_experts)]
