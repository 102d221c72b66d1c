"""Animate-2's data: beside each target clip `<name>.mp4`, its driving video `<name>_driving.mp4`, the reference image
`<name>_reference.png` and optionally the driving stream's caption `<name>_driving.txt` (default: the official
pipeline's fixed driving prompt, which diffusers' and ComfyUI's Animate-2 nodes also default to). No torch here:
start-up checks it before any model loads.

The copying trap (NeMo's Animate-2 guide): a target used as its own driving video (the same file, a copy, a
re-encode or a resize) teaches the model to copy the driving frames while the loss looks normal. It is refused in
one line: equal content hashes, or frames that match at `COPY_PSNR_DB` or more (RGB thumbnails 64 wide, both
streams resampled to the same `CHECK_FPS`). Two different performances of a motion, even in one room, stay far below.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import cv2
import numpy as np

from modules.dataLoader.discovery import read_caption
from modules.dataLoader.video_io import IMAGE_EXTENSIONS, probe_video
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

DRIVING_SUFFIX, REFERENCE_SUFFIX = "_driving", "_reference"
DEFAULT_DRIVING_CAPTION = "人物动作的参考视频"  # "reference video of a person's motion": the official pipeline's
COPY_PSNR_DB = 30.0  # a re-encode or resize of the same frames is above; another take of the motion well under 20
CHECK_FPS = 8.0  # enough frames to compare motion, few to decode


@dataclasses.dataclass(frozen=True)
class Triplet:
    target: Path
    driving: Path
    reference: Path
    driving_caption: str


def is_stream_file(path: Path) -> bool:
    """`clip_driving.mp4`, `clip_reference.png`: a sample's Animate-2 inputs, never a sample of their own."""
    return path.stem.endswith((DRIVING_SUFFIX, REFERENCE_SUFFIX))


def triplet_for(target: Path) -> Triplet | str:
    """The sample's triplet, or why it has none (a missing file, named)."""
    driving = target.with_name(target.stem + DRIVING_SUFFIX + target.suffix)
    references = [target.with_name(target.stem + REFERENCE_SUFFIX + ext) for ext in sorted(IMAGE_EXTENSIONS)]
    reference = next((path for path in references if path.is_file()), None)
    if not driving.is_file():
        return f"no driving video '{driving.name}'"
    if reference is None:
        return f"no reference image '{target.stem}{REFERENCE_SUFFIX}.png'"
    caption_file = driving.with_suffix(".txt")
    caption = read_caption(caption_file) if caption_file.is_file() else ""
    return Triplet(target, driving, reference, caption or DEFAULT_DRIVING_CAPTION)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pixels(frames: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """RGB, not grey: a red shape on a grey ground is nearly the ground's grey."""
    if shape is not None:
        frames = [cv2.resize(frame, (shape[1], shape[0]), interpolation=cv2.INTER_AREA) for frame in frames]
    return np.stack(frames).astype(np.float64)


def frame_psnr(target: Path, driving: Path) -> float:
    """PSNR (dB) between the two streams' thumbnails over the frames both have (inf: identical)."""
    target_frames, _ = probe_video(target, CHECK_FPS)
    driving_frames, _ = probe_video(driving, CHECK_FPS)
    count = min(len(target_frames), len(driving_frames))
    a = _pixels(target_frames[:count])
    b = _pixels(driving_frames[:count], a.shape[1:])
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def check_not_a_copy(triplet: Triplet) -> None:
    """One-line `UserError` naming the driving video when it is the target itself."""
    if _sha256(triplet.target) == _sha256(triplet.driving):
        why = "the same file content (equal sha256)"
    elif (psnr := frame_psnr(triplet.target, triplet.driving)) >= COPY_PSNR_DB:
        why = f"the same frames ({psnr:.1f} dB PSNR, the limit is {COPY_PSNR_DB:.0f})"
    else:
        return
    raise UserError(f"'{triplet.driving}' is its target clip '{triplet.target.name}' itself ({why}): a target "
                    "used as its own driving video teaches copying while the loss looks normal; give a different "
                    "performance of the motion (another take, actor or pose render)")
