"""Shot boundaries with PySceneDetect, and the clips a shot list gives under length rules.

Detection runs on the frames the tool will cut (decoded by timestamps at the output rate, rotation applied), not on
PySceneDetect's own reader: a variable-frame-rate video then has one frame numbering for detection and cutting.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

DETECTORS = ("content", "adaptive")
#: PySceneDetect's own defaults: ContentDetector's `threshold` (mean HSV change, 0..255) and AdaptiveDetector's
#: `adaptive_threshold` (a frame's change over its neighbours' mean)
DEFAULT_THRESHOLDS = {"content": 27.0, "adaptive": 3.0}


@dataclass(frozen=True)
class SplitOptions:
    """How footage becomes clips (scripts/split_clips.py's options; recorded in the manifest)."""

    detector: str = "content"
    threshold: float | None = None  # None: the detector's default
    min_shot_frames: int = 15  # a cut within this many frames of the last one is merged (flash filter)
    min_seconds: float = 1.0  # shorter clips are dropped
    max_seconds: float = 10.0  # longer shots are cut into pieces of this length
    fps: float | None = None  # output rate; None: the source's
    wan_frames: bool = False  # every clip 4k+1 frames long (its tail dropped)

    def check(self) -> None:
        if self.detector not in DETECTORS:
            raise ValueError(f"detector must be one of {', '.join(DETECTORS)}, got '{self.detector}'")
        if self.threshold is not None and not (math.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"threshold must be a positive number, got {self.threshold}")
        if not (0 < self.min_seconds <= self.max_seconds) or not math.isfinite(self.max_seconds):
            raise ValueError(f"need 0 < min_seconds <= max_seconds, got {self.min_seconds} and {self.max_seconds}")
        if self.fps is not None and not (math.isfinite(self.fps) and 0 < self.fps <= 240):
            raise ValueError(f"fps must be in (0, 240], got {self.fps}")
        if self.min_shot_frames < 0:
            raise ValueError(f"min_shot_frames must be >= 0, got {self.min_shot_frames}")

    def as_dict(self) -> dict:
        return asdict(self)


def make_detector(options: SplitOptions):
    from scenedetect import AdaptiveDetector, ContentDetector

    threshold = options.threshold if options.threshold is not None else DEFAULT_THRESHOLDS[options.detector]
    if options.detector == "adaptive":
        return AdaptiveDetector(adaptive_threshold=threshold, min_scene_len=options.min_shot_frames)
    return ContentDetector(threshold=threshold, min_scene_len=options.min_shot_frames)


def detect_cuts(frames: Iterable[np.ndarray], fps: float, options: SplitOptions) -> tuple[list[int], int]:
    """(the frame numbers where a new shot starts, the number of frames) of RGB frames at `fps`."""
    from scenedetect import FrameTimecode

    detector = make_detector(options)
    cuts: list[int] = []
    count = 0
    for frame in frames:
        timecode = FrameTimecode(count, fps)
        cuts.extend(c.frame_num for c in detector.process_frame(timecode, np.ascontiguousarray(frame[..., ::-1])))
        count += 1
    if count:
        cuts.extend(c.frame_num for c in detector.post_process(FrameTimecode(count - 1, fps)))
    return sorted({c for c in cuts if 0 < c < count}), count


def shots_of(cuts: list[int], count: int) -> list[tuple[int, int]]:
    """[start, end) frame ranges between the cuts."""
    edges = [0, *cuts, count]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def wan_length(frames: int) -> int:
    """The largest 4k+1 <= frames (0 when under 1)."""
    return 0 if frames < 1 else frames - (frames - 1) % 4


def clip_ranges(shots: list[tuple[int, int]], fps: float, options: SplitOptions) -> list[tuple[int, int]]:
    """The [start, end) frame ranges to write: each shot cut into pieces of at most `max_seconds` from its start
    (the last piece kept if it lasts `min_seconds`), each trimmed to 4k+1 frames with `wan_frames`."""
    shortest = max(1, math.ceil(options.min_seconds * fps - 1e-9))
    longest = max(1, math.floor(options.max_seconds * fps + 1e-9))
    if options.wan_frames:
        longest = max(1, wan_length(longest))
    ranges = []
    for start, end in shots:
        for piece in range(start, end, longest):
            length = min(longest, end - piece)
            if options.wan_frames:
                length = wan_length(length)
            if length >= shortest:
                ranges.append((piece, piece + length))
    return ranges
