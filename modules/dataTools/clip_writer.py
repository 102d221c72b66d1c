"""Writing a clip frame by frame with PyAV (H.264 through libx264, MPEG-4 Part 2 where a build lacks it),
atomically: the file appears complete under its name or not at all."""
from __future__ import annotations

import contextlib
import os
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import av
import numpy as np

from modules.util.atomic import atomic_path

#: Near-lossless for training data (x264's 0..51 scale; 18 is "visually lossless"), yuv420p so every player reads it.
H264_OPTIONS = {"crf": "16", "preset": "fast"}


def _codec() -> str:
    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


class ClipWriter:
    """Frames (H, W, 3) uint8 RGB of one size in, an mp4 at `fps` out. Odd sizes lose their last row or column
    (yuv420p halves the colour planes)."""

    def __init__(self, container: av.container.OutputContainer, fps: float):
        self.container = container
        self.fps = Fraction(fps).limit_denominator(1001)
        self.stream = None
        self.frames = 0

    def write(self, frame: np.ndarray) -> None:
        height, width = frame.shape[0] & ~1, frame.shape[1] & ~1
        if self.stream is None:
            codec = _codec()
            self.stream = self.container.add_stream(codec, rate=self.fps)
            self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
            if codec == "libx264":
                self.stream.options = dict(H264_OPTIONS)
            else:
                self.stream.bit_rate = 20_000_000
        video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame[:height, :width]), format="rgb24")
        video_frame.pts = self.frames
        self.frames += 1
        for packet in self.stream.encode(video_frame):
            self.container.mux(packet)

    def flush(self) -> None:
        if self.stream is not None:
            for packet in self.stream.encode():
                self.container.mux(packet)


@contextlib.contextmanager
def clip_writer(path: str | os.PathLike, fps: float) -> Iterator[ClipWriter]:
    """A `ClipWriter` into a temp file beside `path`, renamed to `path` when the block ends without an error and
    at least one frame was written (an error or a kill leaves `path` as it was)."""
    with atomic_path(Path(path)) as temp:
        container = av.open(str(temp), mode="w", format="mp4")
        try:
            writer = ClipWriter(container, fps)
            yield writer
            if writer.frames == 0:
                raise ValueError(f"{path}: no frames to write")
            writer.flush()
        finally:
            container.close()
