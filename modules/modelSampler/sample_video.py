"""A sample's input video (VACE's control video, Animate-2's driving video): read at the model's fps from its first
frame, checked to hold the frames the sample asks for, cover-cropped to the sample's size. One place for what a user
is told when the file is missing, unreadable or short."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from modules.dataLoader.errors import DataError
from modules.dataLoader.frames import resize_and_crop
from modules.dataLoader.video_io import read_video_frames
from modules.util.errors import UserError


def read_sample_video(path: str, key: str, fps: float, frames: int, height: int,
                      width: int) -> tuple[np.ndarray, tuple[int, int]]:
    """(frames, H, W, 3) uint8 cover-cropped, and the video's own (height, width); `key` names the sample's key in
    the one-line errors."""
    if not Path(path).is_file():
        raise UserError(f"sample {key} '{path}' does not exist: fix the sample's {key} path")
    try:
        pixels, _ = read_video_frames(path, target_fps=fps, max_frames=frames)
    except DataError as e:
        raise UserError(f"sample {key} '{path}' cannot be read ({e.reason}): re-encode it as mp4") from None
    if len(pixels) < frames:
        raise UserError(f"sample {key} '{path}' holds {len(pixels)} frames at {fps:g} fps, the sample asks for "
                        f"{frames}: lower the sample's frames or give a longer video")
    return resize_and_crop(pixels[:frames], height, width), tuple(pixels.shape[1:3])
