"""The VACE context: what a `WanVACETransformer3DModel`'s control blocks read (96 channels for the Wan VAE), built
as diffusers' `WanVACEPipeline` builds it, so training and the sampler feed the same tensor.

- the control video (B, 3, F, H, W) in [-1, 1] and the mask (B, 1, F, H, W), 1 where the model generates and 0
  where the control is kept: `inactive = video·(1 − mask)` and `reactive = video·mask` are VAE-encoded (the
  posterior mode) and normalised, 2·z channels;
- the mask, binarised, folded to the latent grid: each `spatial`×`spatial` pixel square becomes spatial² channels
  (64 for the 8× VAE), frames resampled to the latent frame count (nearest);
- each reference image (3, H, W) is one latent frame [its latents, zeros] with a zero mask, PREPENDED in time;
  diffusers prepends them one after the other, so the last reference ends up first. The denoised latents carry
  as many leading frames (the noisy latents are R frames longer) and those are dropped from the output and left
  out of the loss.

No video (text- or reference-to-video) is a zero video with an all-ones mask, as diffusers feeds then.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

# pixel clip (B, 3, F, H, W) in [-1, 1] -> normalised latents (the posterior mode), (B, z, T, h, w)
Encode = Callable[[torch.Tensor], torch.Tensor]


def mask_channels(mask: torch.Tensor, spatial: int, temporal: int) -> torch.Tensor:
    """(B, 1, F, H, W) pixel mask -> (B, spatial², T, H/spatial, W/spatial), T = (F + temporal − 1) // temporal."""
    b, _, frames, height, width = mask.shape
    h, w = height // spatial, width // spatial
    folded = mask[:, 0].reshape(b, frames, h, spatial, w, spatial).permute(0, 3, 5, 1, 2, 4)
    folded = folded.reshape(b, spatial * spatial, frames, h, w)
    t = (frames + temporal - 1) // temporal
    return F.interpolate(folded.float(), size=(t, h, w), mode="nearest-exact")


def vace_context(encode: Encode, video: torch.Tensor | None, mask: torch.Tensor | None,
                 references: Sequence[torch.Tensor], spatial: int, temporal: int,
                 shape: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """(B, 2z + spatial², R + T, h, w): the control latents and mask of a batch (the same R references for every
    row). `shape` (B, F, H, W) is needed only when there is no video."""
    if video is None:
        if shape is None:
            raise ValueError("vace_context: give the video or its shape")
        b, frames, height, width = shape
        video = torch.zeros(b, 3, frames, height, width)
    if mask is None:
        mask = torch.ones_like(video[:, :1])
    mask = (mask > 0.5).to(video.dtype)
    latents = torch.cat([encode(video * (1 - mask)), encode(video * mask)], dim=1)
    masks = mask_channels(mask, spatial, temporal).to(latents.dtype)
    for reference in references:
        z = encode(reference[None, :, None].expand(len(video), -1, -1, -1, -1).contiguous())
        latents = torch.cat([torch.cat([z, torch.zeros_like(z)], dim=1), latents], dim=2)
        masks = torch.cat([masks.new_zeros(masks.shape[0], masks.shape[1], 1, *masks.shape[3:]), masks], dim=2)
    return torch.cat([latents, masks.to(latents.device)], dim=1)


def reference_canvas(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(3, h, w) in [-1, 1] -> (3, height, width): scaled to fit (bilinear) and centred on white, as diffusers'
    `WanVACEPipeline.preprocess_conditions` places a reference image."""
    _, h, w = image.shape
    scale = min(height / h, width / w)
    nh, nw = int(h * scale), int(w * scale)
    resized = F.interpolate(image[None].float(), size=(nh, nw), mode="bilinear", align_corners=False)[0]
    canvas = torch.ones(3, height, width)
    top, left = (height - nh) // 2, (width - nw) // 2
    canvas[:, top:top + nh, left:left + nw] = resized
    return canvas
