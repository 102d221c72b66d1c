"""Animate-2's data: beside each target clip `<name>.mp4`, its driving video `<name>_driving.mp4`, the reference image
`<name>_reference.png` and optionally the driving stream's caption `<name>_driving.txt` (default: the official
pipeline's fixed driving prompt, which diffusers' and ComfyUI's Animate-2 nodes also default to). No torch here:
start-up checks it before any model loads.

The copying trap (NeMo's Animate-2 guide): a target used as its own driving video (the same file, a copy, a
re-encode or a resize) teaches the model to copy the driving frames while the loss looks normal. It is refused in
one line: equal content hashes, or frames that match at `COPY_PSNR_DB` or more (RGB thumbnails 64 wide, both
streams resampled to the same `CHECK_FPS`), at the best of every time shift up to `MAX_SHIFT` frames either way,
mirrored or not, each colour channel's brightness and contrast fitted (`_matched_psnr`). A reference image that is a
driving frame (mirrored or not) is refused the same way. `benchmarks/copying_trap.py` measures made performances
(`synthetic/performances.py`): another take in the same room with the same figure scores 22-29.4 dB (another room
19-22), the reference taken from the target against another take 24-29.4; every evasion (a copy 1-3 frames late or
early, brightness +25, contrast x1.3 or x0.7, mirrored, mirrored + late + brighter, resized, blurred) and a
reference taken from any driving frame 41-48 dB. The limit sits between the two, 5 dB from each.
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
COPY_PSNR_DB = 35.0  # copies and their evasions score 41+, other takes in the same room 29.4 at most (docstring)
CHECK_FPS = 16.0  # Wan's own frame rate: a copy delayed by a frame of the clip lines up with a whole shift
MAX_SHIFT = 4  # frames at CHECK_FPS (a quarter second) a copy may be delayed or advanced
MIN_OVERLAP = 2  # frames a shifted comparison needs
GAIN_RANGE = (0.5, 2.0)  # contrast changes undone (a wider one would fit unrelated frames to their mean)
FLAT_VARIANCE = 4.0  # a channel varying by less than 2 levels is not brightness-matched


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


def _thumbnails(path: Path, shape: tuple[int, int] | None = None) -> np.ndarray:
    """(F, h, w, 3) float64 RGB thumbnails, 64 wide (or resized to `shape`) at `CHECK_FPS`: RGB, not grey, since a
    red shape on a grey ground is nearly the ground's grey."""
    frames, _ = probe_video(path, CHECK_FPS)
    if shape is not None:
        frames = [cv2.resize(frame, (shape[1], shape[0]), interpolation=cv2.INTER_AREA) for frame in frames]
    return np.stack(frames).astype(np.float64)


def _matched_psnr(target: np.ndarray, other: np.ndarray) -> float:
    """PSNR of `other` against `target` (same shape) once each colour channel of `other` is mapped by the gain and
    offset that fit `target` best, the gain kept within `GAIN_RANGE`: a brightness or contrast change undone."""
    t = target.reshape(-1, 3)
    o = other.reshape(-1, 3)
    o_mean, t_mean = o.mean(axis=0), t.mean(axis=0)
    variance = ((o - o_mean) ** 2).mean(axis=0)
    covariance = ((o - o_mean) * (t - t_mean)).mean(axis=0)
    # a flat channel (a plain image) says nothing about contrast: it is compared as it is
    textured = variance > FLAT_VARIANCE
    gain = np.clip(np.divide(covariance, variance, out=np.ones(3), where=textured), *GAIN_RANGE)
    fitted = np.where(textured, (o - o_mean) * gain + t_mean, o)
    mse = float(np.mean((fitted - t) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


@dataclasses.dataclass(frozen=True)
class Match:
    """The best alignment of two streams: its PSNR (dB) and how it was aligned (for the message)."""

    psnr: float
    shift: int = 0  # driving frames later than the target's, at CHECK_FPS
    mirrored: bool = False

    def describe(self) -> str:
        how = [f"{abs(self.shift)} frame(s) {'later' if self.shift > 0 else 'earlier'}"] if self.shift else []
        how += ["mirrored"] if self.mirrored else []
        return f"{self.psnr:.1f} dB PSNR" + (f" {', '.join(how)}" if how else "") + \
            f", brightness and contrast matched; the limit is {COPY_PSNR_DB:.0f}"


def stream_match(target: Path, driving: Path) -> Match:
    """How close the driving video comes to the target: the best PSNR over time shifts of up to `MAX_SHIFT` frames
    either way, mirrored or not, with brightness and contrast matched (inf: identical)."""
    a = _thumbnails(target)
    b = _thumbnails(driving, a.shape[1:3])
    best = Match(-float("inf"))
    for mirrored in (False, True):
        other = b[:, :, ::-1] if mirrored else b
        for shift in range(-MAX_SHIFT, MAX_SHIFT + 1):  # driving frame i + shift shows target frame i
            t, o = (a, other[shift:]) if shift >= 0 else (a[-shift:], other)
            count = min(len(t), len(o))
            if count < MIN_OVERLAP and shift:
                continue
            psnr = _matched_psnr(t[:count], o[:count])
            if psnr > best.psnr:
                best = Match(psnr, shift, mirrored)
    return best


def reference_match(reference: Path, driving: Path) -> tuple[Match, int]:
    """The driving frame the reference image comes closest to (best PSNR, mirrored or not, brightness and contrast
    matched) and that frame's index at `CHECK_FPS`."""
    frames = _thumbnails(driving)
    image = _thumbnails(reference, frames.shape[1:3])[0]
    best, index = Match(-float("inf")), 0
    for mirrored in (False, True):
        candidate = image[:, ::-1] if mirrored else image
        for number, frame in enumerate(frames):
            psnr = _matched_psnr(frame, candidate)
            if psnr > best.psnr:
                best, index = Match(psnr, 0, mirrored), number
    return best, index


def frame_psnr(target: Path, driving: Path) -> float:
    """`stream_match`'s PSNR (dB)."""
    return stream_match(target, driving).psnr


def check_not_a_copy(triplet: Triplet) -> None:
    """One-line `UserError` naming the driving video when it is the target itself (the same file, or the same frames
    after a re-encode, resize, blur, a time shift of a few frames, a brightness or contrast change or a mirroring), or
    naming the reference image when it is one of the driving video's frames."""
    if _sha256(triplet.target) == _sha256(triplet.driving):
        why = "the same file content (equal sha256)"
    elif (match := stream_match(triplet.target, triplet.driving)).psnr >= COPY_PSNR_DB:
        why = f"the same frames ({match.describe()})"
    else:
        match, index = reference_match(triplet.reference, triplet.driving)
        if match.psnr < COPY_PSNR_DB:
            return
        raise UserError(f"'{triplet.reference}' is frame {index} of its driving video '{triplet.driving.name}' "
                        f"({match.describe()}): the reference must show the target's subject, not the driving "
                        "performance, or the model learns to copy the driving video; take it from the target clip "
                        "or another photo of the subject")
    raise UserError(f"'{triplet.driving}' is its target clip '{triplet.target.name}' itself ({why}): a target "
                    "used as its own driving video teaches copying while the loss looks normal; give a different "
                    "performance of the motion (another take, actor or pose render)")
