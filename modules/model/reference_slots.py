"""SkyReels-V3's reference-to-video layout (docs/e2v.md §9), as pure torch functions shared by the E2V data loader,
the training step (through `ConditionPayload.appended`) and the sampler.

Each reference image is VAE-encoded on its own as ONE latent frame, normalised like the video's latents, and the
references follow the noisy latents along time, zero latent frames filling the model's slots (SkyReels-V3:
`prepare_latents` of skyreels_v3/pipelines/reference_to_video_pipeline.py). The transformer's prediction of those
frames is cut off before the loss and the scheduler step. Nothing here touches a model.
"""
from __future__ import annotations

import torch

from modules.model.WanVariant import WanVariant
from modules.model.layout_frames import SKYREELS_V3_SLOTS
from modules.util.errors import UserError

# The LoRA header entry naming the reference layout a file was trained in (absent: A2's), so samplers pick it up
REFERENCE_LAYOUT_KEY = "wantrainer.e2v_reference_layout"


def check_reference_base(variant: WanVariant, what: str) -> None:
    """SkyReels-V3's layout needs a T2V-layout transformer (in = out channels: Wan 2.1 T2V, Wan 2.2 T2V A14B, TI2V 5B,
    SkyReels-V2 T2V), which takes the appended frames as they are; a one-line UserError naming `what` otherwise."""
    if variant.channel_concat_condition or variant.vace_layers:
        kind = "a VACE" if variant.vace_layers else "an image-to-video (channel-concat)"
        raise UserError(f"{what} is {kind} model ({variant.name}), but e2v.reference_layout 'skyreels_v3' appends the "
                        "references to a text-to-video transformer's latents: use a T2V base (Wan 2.1 T2V, Wan 2.2 "
                        "T2V A14B or TI2V 5B) or reference_layout 'a2'")


def pad_reference_slots(references: torch.Tensor, slots: int = SKYREELS_V3_SLOTS) -> torch.Tensor:
    """(B, C, N, h, w) normalised reference latents, one latent frame per reference in order -> (B, C, slots, h, w):
    the references, then all-zero latent frames (zeros after normalisation, as SkyReels-V3 pads)."""
    if references.ndim != 5:
        raise ValueError(f"reference latents must be (B, C, N, h, w), got shape {tuple(references.shape)}")
    count = references.shape[2]
    if count > slots:
        raise ValueError(f"{count} references do not fit the model's {slots} reference slots")
    b, c, _, h, w = references.shape
    return torch.cat([references, references.new_zeros(b, c, slots - count, h, w)], dim=2)


def dual_guidance(conditional: torch.Tensor, text_unconditional: torch.Tensor, unconditional: torch.Tensor,
                  text_scale: float, image_scale: float) -> torch.Tensor:
    """SkyReels-V3's dual classifier-free guidance: `conditional` (prompt, references), `text_unconditional`
    (negative prompt, references) and `unconditional` (negative prompt, all-zero references):
    u + s_img·(u_text − u) + s_text·(c − u_text). Scales 1 and 1 give `conditional`."""
    return (unconditional + image_scale * (text_unconditional - unconditional)
            + text_scale * (conditional - text_unconditional))
