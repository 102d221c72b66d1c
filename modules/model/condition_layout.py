"""The conditioning layout of E2V (docs/e2v.md §3–§6) and of plain I2V (its one-reference case), as pure torch
functions shared by the data loaders and the sampler.

Pixel tensors are (3, F, H, W) in [−1, 1]; masks are float32. Nothing here touches a model: the
caller encodes `reference_clip` with ONE VAE call (§3.2) and stacks [x_t, fold_mask, z_cond].
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from modules.config.e2v_dataset_config import ElementConfig
from modules.model.layout_frames import (  # noqa: F401 (callers take them from here too)
    TEMPORAL,
    dropped_decoded_frames,
    min_num_frames,
    reference_latent_frames,
    separate_target_frames,
)


def layout_elements(elements: Sequence[ElementConfig], present: Mapping[str, bool]) -> list[tuple[str, int]]:
    """§1: (name, vae.repeat) of the present elements by ascending vae.position (stable for ties);
    missing optional elements are skipped so later ones move forward. A missing required element
    is a ValueError (discovery skips such samples first, §7)."""
    layout = []
    for element in sorted(elements, key=lambda e: -1 if e.vae.position is None else e.vae.position):
        if present.get(element.name, False):
            layout.append((element.name, element.vae.repeat))
        elif element.required:
            raise ValueError(f"required element '{element.name}' is missing")
    return layout


def reference_clip(frames: Sequence[torch.Tensor], repeats: Sequence[int], num_frames: int) -> torch.Tensor:
    """§3.1: `repeats[i]` copies of each (3, H, W) frame in layout order, then zero frames (mid-gray)
    up to F -> (3, F, H, W). P = Σ repeats must not exceed F."""
    if len(frames) != len(repeats):
        raise ValueError(f"{len(frames)} frames but {len(repeats)} repeat counts")
    if not frames:
        raise ValueError("reference_clip needs at least one frame (its size and dtype come from it)")
    p = sum(repeats)
    if p > num_frames:
        raise ValueError(f"P = {p} reference frames do not fit in F = {num_frames} frames")
    shape = frames[0].shape
    parts = []
    for frame, repeat in zip(frames, repeats):
        if frame.shape != shape or frame.ndim != 3:
            raise ValueError(f"reference frames must all be (3, H, W) of one size, got {tuple(frame.shape)} and {tuple(shape)}")
        parts.append(frame.unsqueeze(1).expand(-1, repeat, -1, -1))
    parts.append(frames[0].new_zeros(shape[0], num_frames - p, shape[1], shape[2]))
    return torch.cat(parts, dim=1)


def pixel_frame_mask(
    num_frames: int,
    num_reference_frames: int,
    frame_conditioning: str = "full",
    frame_index: int = 0,
    rng: torch.Generator | None = None,
) -> torch.Tensor:
    """§4.1 pixel mask m (F,), float32. P = `num_reference_frames`; i = min(frame_index, P − 1).

    - ``full`` (A2, default): m[f] = 1 for f < P — exactly the spec rule.
    - ``index``: only frame i.
    - ``prefix``: frames 0..i (the first i + 1).
    - ``first_and_last``: frames 0 and P − 1 (first and last reference frame).
    - ``random``: frames 0..L−1 with L drawn uniformly from 1..P with `rng` (one randint).
    All zeros when P = 0. Frames outside the mask should be blanked with `mask_reference_clip`.
    """
    p = num_reference_frames
    if not 0 <= p <= num_frames:
        raise ValueError(f"P = {p} reference frames must be within 0..F = {num_frames}")
    mask = torch.zeros(num_frames, dtype=torch.float32)
    if p == 0:
        return mask
    i = min(max(frame_index, 0), p - 1)
    if frame_conditioning == "full":
        mask[:p] = 1
    elif frame_conditioning == "index":
        mask[i] = 1
    elif frame_conditioning == "prefix":
        mask[: i + 1] = 1
    elif frame_conditioning == "first_and_last":
        mask[0] = 1
        mask[p - 1] = 1
    elif frame_conditioning == "random":
        length = int(torch.randint(1, p + 1, (1,), generator=rng).item())
        mask[:length] = 1
    else:
        raise ValueError(f"unknown frame_conditioning '{frame_conditioning}'")
    return mask


def mask_reference_clip(clip: torch.Tensor, pixel_mask: torch.Tensor) -> torch.Tensor:
    """Zero (mid-gray) the frames of a (3, F, H, W) clip where the pixel mask is 0, so the encoded
    condition carries only what the mask marks; a no-op for ``full`` (frames ≥ P are zero already)."""
    return clip * pixel_mask.to(clip.dtype)[None, :, None, None]


def fold_mask(pixel_mask: torch.Tensor, latent_h: int, latent_w: int, temporal: int = TEMPORAL) -> torch.Tensor:
    """§4.2–4.3: m′ = [m0 × temporal, m1, …, m_{F−1}] (length 4T); channel c of latent frame k is
    m′[4k + c], broadcast over (h, w) -> (4, T, h, w)."""
    f = pixel_mask.numel()
    if pixel_mask.ndim != 1 or (f - 1) % temporal:
        raise ValueError(f"pixel mask must be 1-D with F ≡ 1 mod {temporal} entries, got shape {tuple(pixel_mask.shape)}")
    folded = torch.cat([pixel_mask[:1].repeat(temporal), pixel_mask[1:]])
    t = folded.numel() // temporal
    return folded.view(t, temporal).transpose(0, 1)[:, :, None, None].expand(temporal, t, latent_h, latent_w).contiguous()


def concat_clip_embeds(embeds: Sequence[torch.Tensor]) -> torch.Tensor:
    """§5: per-element CLIP states (…, 257, D) concatenated along the token axis in layout order
    -> (…, 257·N, D)."""
    if not embeds:
        raise ValueError("no CLIP embeddings to concatenate")
    return torch.cat(list(embeds), dim=-2)


def separate_target_latents(condition_latents: torch.Tensor, video_latents: torch.Tensor,
                            num_reference_latents: int) -> torch.Tensor:
    """§6 ``separate``: x0 = [z_cond latent frames 0..K−1, latents of the first F − 4K video frames],
    concatenated along the latent-frame axis (dim −3 of (…, C, T, h, w))."""
    return torch.cat([condition_latents[..., :num_reference_latents, :, :], video_latents], dim=-3)


def joint_clip(reference_frames: torch.Tensor, video: torch.Tensor, num_frames: int | None = None) -> torch.Tensor:
    """§6 ``joint``: one (3, F, H, W) clip [the P reference frames of §3.1, the first F − P video
    frames], to be encoded in one call. F defaults to the video's frame count."""
    p = reference_frames.shape[1]
    f = video.shape[1] if num_frames is None else num_frames
    if p > f or video.shape[1] < f - p:
        raise ValueError(f"joint clip of F = {f} needs P = {p} ≤ F and ≥ {f - p} video frames, got {video.shape[1]}")
    return torch.cat([reference_frames, video[:, : f - p]], dim=1)


def latent_loss_mask(num_latent_frames: int, num_reference_latents: int, loss_on_reference_frames: bool) -> torch.Tensor:
    """(T,) float32 weights of the latent frames in the loss: all ones, or zeros on the first K
    reference latents when `loss_on_reference_frames` is false (§6)."""
    mask = torch.ones(num_latent_frames, dtype=torch.float32)
    if not loss_on_reference_frames:
        mask[:num_reference_latents] = 0
    return mask


# --- plain I2V: the one-reference case of §3–§4 ------------------------------------------------------------
def condition_clip(reference_frames: torch.Tensor, num_frames: int) -> torch.Tensor:
    """(C, P, H, W) reference frames in [−1, 1] -> (C, F, H, W): the references, then zero frames up to F."""
    return reference_clip(list(reference_frames.unbind(1)), [1] * reference_frames.shape[1], num_frames)


def frame_mask(num_frames: int, num_reference_frames: int, latent_h: int, latent_w: int,
               temporal_scale: int = TEMPORAL) -> torch.Tensor:
    """The 4-channel latent mask (4, T, h, w) of the first P pixel frames (diffusers' I2V mask for P = 1)."""
    return fold_mask(pixel_frame_mask(num_frames, num_reference_frames), latent_h, latent_w, temporal_scale)
