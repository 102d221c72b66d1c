"""The frame counts of the conditioning layout (docs/e2v.md §6): how many frames the references take, and the
smallest clip that holds them. Plain integers, no torch: the start-up checks (E2V dataset frames, samples' frames)
use them before torch is imported; `condition_layout` builds the tensors from them."""
from __future__ import annotations

TEMPORAL = 4  # Wan VAE temporal compression


def reference_latent_frames(num_reference_frames: int, temporal: int = TEMPORAL) -> int:
    """§6: K = latent frames the P references touch = those whose folded mask (`full`) has a one.
    Latent 0 holds pixel frame 0, latent k ≥ 1 frames 4k−3..4k, so K = 1 + ceil((P − 1)/4)
    (P = 9 -> 3, P = 8 -> 3, P = 1 -> 1, P = 0 -> 0)."""
    p = num_reference_frames
    if p < 0:
        raise ValueError(f"P must not be negative, got {p}")
    return 0 if p == 0 else 1 + (p - 1 + temporal - 1) // temporal


def separate_target_frames(num_frames: int, num_reference_latents: int, temporal: int = TEMPORAL) -> int:
    """§6 ``separate``: how many leading video frames are encoded on their own: F − 4K
    (81 − 12 = 69 for K = 3 -> 18 latents, plus the 3 reference latents = T = 21)."""
    n = num_frames - temporal * num_reference_latents
    if n < 1:
        raise ValueError(f"F = {num_frames} frames leave no video frame after K = {num_reference_latents} reference latents")
    return n


def dropped_decoded_frames(target_layout: str, num_reference_frames: int, temporal: int = TEMPORAL) -> int:
    """§6: decoded frames a sampler drops before the generated video: 4K (separate) or P (joint)."""
    if target_layout == "separate":
        return temporal * reference_latent_frames(num_reference_frames, temporal)
    if target_layout == "joint":
        return num_reference_frames
    raise ValueError(f"unknown target_layout '{target_layout}'")


def min_num_frames(target_layout: str, num_reference_frames: int, temporal: int = TEMPORAL) -> int:
    """Smallest F (4k+1) that holds the references and at least one video frame:
    4K + 1 for ``separate``, the first 4k+1 > P for ``joint``."""
    if target_layout == "separate":
        return temporal * reference_latent_frames(num_reference_frames, temporal) + 1
    if target_layout == "joint":
        return num_reference_frames + 1 + (-num_reference_frames) % temporal
    raise ValueError(f"unknown target_layout '{target_layout}'")


# SkyReels-V3's MAX_ALLOWED_REF_IMG_LENGTH: its R2V model was trained with exactly this many reference slots
# (E2V's `reference_layout: skyreels_v3`, modules/model/reference_slots.py)
SKYREELS_V3_SLOTS = 4
