"""Image conditioning of 36-channel Wan models: the pixel clip and the folded frame mask.

Plain I2V is the one-reference case of E2V_SPEC §3–4: frame 0 is the image, the other F−1 frames
are zeros (mid-gray in [−1, 1]); the mask marks the first P pixel frames.
"""
from __future__ import annotations

import torch


def condition_clip(reference_frames: torch.Tensor, num_frames: int) -> torch.Tensor:
    """(C, P, H, W) reference frames in [−1, 1] -> (C, F, H, W): the references, then zero frames up to F."""
    c, p, h, w = reference_frames.shape
    if p > num_frames:
        raise ValueError(f"{p} reference frames do not fit in {num_frames} frames")
    pad = reference_frames.new_zeros(c, num_frames - p, h, w)
    return torch.cat([reference_frames, pad], dim=1)


def frame_mask(num_frames: int, num_reference_frames: int, latent_h: int, latent_w: int,
               temporal_scale: int = 4) -> torch.Tensor:
    """The 4-channel latent mask (4, T, h, w): pixel mask m[f] = f < P, first entry repeated 4 times,
    then channel c of latent frame k is m′[4k + c] (E2V_SPEC §4; equals diffusers' I2V mask for P = 1)."""
    m = (torch.arange(num_frames) < num_reference_frames).float()
    folded = torch.cat([m[:1].repeat(temporal_scale), m[1:]])  # length F + 3 = 4T
    t = folded.numel() // temporal_scale
    return folded.view(t, temporal_scale).transpose(0, 1)[:, :, None, None].expand(temporal_scale, t, latent_h, latent_w).contiguous()
