"""Writing a generated video in the format its file name asks for: .mp4, or an animated .gif / .webp.

The mp4 goes through opencv (`video_io.write_video`); GIF and WebP through Pillow, every frame at the
video's frame rate, looping. Any other extension is refused before anything is generated.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from modules.util.video_write import write_video
from modules.util.atomic import atomic_path
from modules.util.errors import UserError
from modules.util.path_checks import check_writable_file

_PILLOW_FORMATS = {".gif": "GIF", ".webp": "WEBP"}
VIDEO_OUTPUT_EXTENSIONS = (".mp4", *_PILLOW_FORMATS)


def check_video_output(path: str | os.PathLike, option: str = "--output") -> Path:
    """`path` has a supported extension and can be written: its folder exists or can be made, and is
    writable. `option` names where the path came from, for the message."""
    path = Path(path)
    if path.suffix.lower() not in VIDEO_OUTPUT_EXTENSIONS:
        raise UserError(f"{option} '{path}': cannot write '{path.suffix or 'no extension'}' videos; "
                        f"end the name in {', '.join(VIDEO_OUTPUT_EXTENSIONS)}")
    return check_writable_file(option, path)


def write_video_output(path: str | os.PathLike, frames: np.ndarray, fps: float) -> None:
    """Write uint8 RGB frames (F, H, W, 3) atomically, in the format of `path`'s extension."""
    path = Path(path)
    pillow_format = _PILLOW_FORMATS.get(path.suffix.lower())
    if pillow_format is None:
        write_video(path, frames, fps)
        return
    images = [Image.fromarray(np.ascontiguousarray(frame)) for frame in frames]
    with atomic_path(path) as temp:
        images[0].save(temp, format=pillow_format, save_all=True, append_images=images[1:],
                       duration=round(1000 / fps), loop=0)
