"""Writing uint8 RGB frame arrays (F, H, W, 3) as an mp4 or a PNG strip, atomically.

In util (not dataLoader) because the sampler, the synthetic test media and the data tools all write videos.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import cv2
import numpy as np

from modules.util.atomic import atomic_path, atomic_write_bytes


def _check_frames(frames: np.ndarray) -> np.ndarray:
    """Validate a (F, H, W, 3) uint8 frame array."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] == 0:
        raise ValueError(f"frames must be uint8 (F>0, H, W, 3), got {frames.dtype} {frames.shape}")
    return frames


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: float) -> None:
    """Write RGB frames as an mp4 (mp4v fourcc), atomically. Odd sizes are cropped to even.

    The container follows the suffix of `path` (use .mp4).
    """
    path = Path(path)
    frames = _check_frames(frames)
    height, width = frames.shape[1] - frames.shape[1] % 2, frames.shape[2] - frames.shape[2] % 2
    if height == 0 or width == 0:
        raise ValueError(f"frames too small to encode: {frames.shape}")
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be positive, got {fps}")
    with atomic_path(path) as temp:
        # the temp name keeps the path's suffix (.mp4): FFmpeg picks the container from it. FFmpeg only: when
        # it cannot open a name, OpenCV falls back to its image-sequence writer, which reads a digit run in
        # the name as a frame number and writes one file per frame beside the target
        writer = cv2.VideoWriter(str(temp), cv2.CAP_FFMPEG, cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (width, height))
        try:
            if not writer.isOpened():
                raise OSError(f"cannot open a video writer for {path}")
            for frame in frames[:, :height, :width]:
                writer.write(cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2BGR))
        finally:
            writer.release()
        if temp.stat().st_size == 0:
            raise OSError(f"video writer produced no output for {path}")


def strip_indices(num_frames: int, max_frames: int) -> list[int]:
    """Up to `max_frames` evenly spread indices from 0 to num_frames - 1 (first and last included)."""
    count = max(1, min(num_frames, max_frames))
    if count == 1:
        return [0]
    return [round(i * (num_frames - 1) / (count - 1)) for i in range(count)]


def write_png_strip(path: str | os.PathLike, frames: np.ndarray, max_frames: int = 8) -> None:
    """Write a horizontal PNG strip of up to `max_frames` evenly chosen frames, atomically."""
    path = Path(path)
    frames = _check_frames(frames)
    strip = np.concatenate([frames[i] for i in strip_indices(len(frames), max_frames)], axis=1)
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(strip, cv2.COLOR_RGB2BGR))
    if not ok:
        raise OSError(f"cannot encode png for {path}")
    atomic_write_bytes(path, encoded.tobytes())
