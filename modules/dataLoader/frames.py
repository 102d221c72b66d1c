"""Frame-count rules (4k+1), temporal windows, spatial resize/crop and tensor conversion."""

import random
from pathlib import Path

import cv2
import numpy as np
import torch

from modules.util.resolution_text import size_text


def is_4k1(n: int) -> bool:
    """Whether n has the form 4k+1 (1, 5, 9, ...), the frame counts the Wan VAE accepts."""
    return n >= 1 and (n - 1) % 4 == 0


def largest_4k1(n: int) -> int:
    """The largest 4k+1 that is <= n. Raises ValueError when n < 1."""
    if n < 1:
        raise ValueError(f"need at least 1 frame, got {n}")
    return (n - 1) // 4 * 4 + 1


def choose_frame_count(available: int, requested: int | None, auto: bool, max_frames: int | None) -> int | None:
    """How many frames to train on, or None when the clip is too short.

    auto: the largest 4k+1 <= min(available, max_frames) (`requested` is ignored).
    Otherwise: `requested` (must be 4k+1) when available >= requested.
    """
    if available < 1:
        return None
    if auto:
        limit = available if max_frames is None else min(available, max_frames)
        if limit < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        return largest_4k1(limit)
    if requested is None or not is_4k1(requested):
        raise ValueError(f"frame count must be of the form 4k+1 (1, 5, 9, ..., 81), got {requested}")
    return requested if available >= requested else None


def pick_window(
    num_frames: int, length: int, rng_or_offset: random.Random | np.random.Generator | int | None
) -> slice:
    """A slice of `length` consecutive frames out of `num_frames`.

    `rng_or_offset`: a `random.Random` (or numpy Generator) picks a uniform start; an int is the
    start itself; None centers the window.
    """
    if length < 1 or length > num_frames:
        raise ValueError(f"window of {length} frames does not fit in {num_frames} frames")
    last_start = num_frames - length
    if rng_or_offset is None:
        start = last_start // 2
    elif isinstance(rng_or_offset, random.Random):
        start = rng_or_offset.randint(0, last_start)
    elif isinstance(rng_or_offset, np.random.Generator):
        start = int(rng_or_offset.integers(0, last_start + 1))
    else:
        start = int(rng_or_offset)
        if not 0 <= start <= last_start:
            raise ValueError(f"offset {start} out of range 0..{last_start} for {length} of {num_frames} frames")
    return slice(start, start + length)


def crop_box(src_h: int, src_w: int, height: int, width: int) -> tuple[int, int, int, int]:
    """Centered (y0, x0, h, w) source region with the target aspect ratio (cover crop)."""
    if src_w * height > width * src_h:  # source is wider than the target
        crop_h, crop_w = src_h, max(1, min(src_w, round(src_h * width / height)))
    else:
        crop_h, crop_w = max(1, min(src_h, round(src_w * height / width))), src_w
    return (src_h - crop_h) // 2, (src_w - crop_w) // 2, crop_h, crop_w


MIN_KEPT_SHARE = 0.5  # a cover crop that keeps less of the source than this is worth a warning
MAX_UPSCALE = 2.0  # so is enlarging the kept region by more than this factor


def framing_warning(name: str | Path, src_h: int, src_w: int, height: int, width: int) -> str | None:
    """One line about what `resize_and_crop` to height x width does to a src_h x src_w source when it
    crops away more than half of it or enlarges it more than 2x; None when neither happens."""
    _, _, crop_h, crop_w = crop_box(src_h, src_w, height, width)
    kept = crop_h * crop_w / (src_h * src_w)
    upscale = max(height / crop_h, width / crop_w)
    problems = []
    if kept < MIN_KEPT_SHARE:
        problems.append(f"the crop keeps {size_text(crop_h, crop_w)} ({kept:.0%} of the pixels)")
    if upscale > MAX_UPSCALE:
        problems.append(f"it is upscaled {upscale:.1f}x")
    if not problems:
        return None
    return f"{name}: {size_text(src_h, src_w)} trains at {size_text(height, width)}: {' and '.join(problems)}"


def resize_and_crop(frames: np.ndarray, height: int, width: int,
                    box: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """Cover-resize and center-crop uint8 (F, H, W, 3) frames to exactly (F, height, width, 3); `box`
    (y0, x0, h, w) replaces the centered crop (augmentation's jittered one).

    Uses INTER_AREA when shrinking and INTER_CUBIC when enlarging.
    """
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be (F, H, W, 3), got {frames.shape}")
    if height < 1 or width < 1:
        raise ValueError(f"target size must be positive, got {height}x{width}")
    y0, x0, crop_h, crop_w = box or crop_box(frames.shape[1], frames.shape[2], height, width)
    cropped = frames[:, y0 : y0 + crop_h, x0 : x0 + crop_w]
    if (crop_h, crop_w) == (height, width):
        return np.ascontiguousarray(cropped)
    interpolation = cv2.INTER_AREA if crop_h * crop_w > height * width else cv2.INTER_CUBIC
    out = np.empty((frames.shape[0], height, width, 3), dtype=frames.dtype)
    for i, frame in enumerate(cropped):
        out[i] = cv2.resize(np.ascontiguousarray(frame), (width, height), interpolation=interpolation)
    return out


def to_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 (F, H, W, 3) frames -> float32 (3, F, H, W) in [-1, 1] (Wan VAE layout)."""
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 (F, H, W, 3), got {frames.dtype} {frames.shape}")
    tensor = torch.from_numpy(np.ascontiguousarray(frames)).permute(3, 0, 1, 2)
    return tensor.to(torch.float32).div_(127.5).sub_(1.0).contiguous()


__all__ = [
    "choose_frame_count",
    "crop_box",
    "framing_warning",
    "is_4k1",
    "largest_4k1",
    "pick_window",
    "resize_and_crop",
    "to_tensor",
]
