"""Which frame windows of a clip become training items (`frame_sample_strategy`).

A clip of `total` frames (counted at the training fps) gives windows of a 4k+1 `length`:
- HEAD: the first `length` frames (what every run did before the strategies existed);
- SLIDE: consecutive windows every `stride` frames (`stride == length` cuts the clip into chunks);
- UNIFORM: `count` windows spread evenly from the first frame to the last;
- RANDOM: one window per epoch at a start drawn from the item's seeded stream (`random_start`);
- KEYFRAME: windows starting at the first frame and at each scene cut (`detect_cuts`); no cut: UNIFORM;
- FULL: the whole clip, the largest 4k+1 <= min(total, max_frames).
A clip shorter than `length` gives one window of the largest 4k+1 it holds, whatever the strategy.
Everything here is a pure function of its arguments, so items, cache keys and resume positions are exact.
"""
from __future__ import annotations

import dataclasses
import random

import cv2
import numpy as np

from modules.dataLoader.frames import largest_4k1
from modules.util.enum import FrameSampleStrategy

# Scene cuts: the mean absolute difference of consecutive frames (grey, 64 px wide, 0..1) above this, and
# well above the clip's typical motion (a pan or a fast subject stays below a hard cut's jump).
CUT_THRESHOLD = 0.15
CUT_OVER_MEDIAN = 4.0
_CUT_WIDTH = 64


@dataclasses.dataclass(frozen=True)
class WindowOptions:
    strategy: FrameSampleStrategy = FrameSampleStrategy.HEAD
    stride: int = 0  # SLIDE; 0 = the window's length (chunks)
    count: int = 4  # UNIFORM (and KEYFRAME without cuts)
    max_frames: int = 81  # FULL


@dataclasses.dataclass(frozen=True)
class FrameWindow:
    """`frames` frames from `start` (at the training fps); start None: drawn per epoch (RANDOM)."""

    start: int | None
    frames: int

    def to_json(self) -> list:
        return [self.start, self.frames]


def plan_windows(total: int, length: int, options: WindowOptions, cuts: list[int] | tuple[int, ...] = ()) -> list[FrameWindow]:
    """The windows a clip of `total` frames gives at `length` (4k+1). [] when it holds no frame."""
    if total < 1:
        return []
    strategy = options.strategy
    if strategy == FrameSampleStrategy.FULL:
        return [FrameWindow(0, largest_4k1(min(total, options.max_frames)))]
    if total < length:  # today's rule for short clips: the largest 4k+1 they hold, from the start
        return [FrameWindow(0, largest_4k1(total))]
    last = total - length
    if strategy == FrameSampleStrategy.HEAD:
        starts = [0]
    elif strategy == FrameSampleStrategy.SLIDE:
        starts = list(range(0, last + 1, options.stride or length))
    elif strategy == FrameSampleStrategy.UNIFORM:
        starts = uniform_starts(last, options.count)
    elif strategy == FrameSampleStrategy.KEYFRAME:
        starts = [0, *[c for c in cuts if 0 < c <= last]] if cuts else uniform_starts(last, options.count)
    elif strategy == FrameSampleStrategy.RANDOM:
        return [FrameWindow(None, length)]
    else:  # pragma: no cover - a new enum member needs a rule here
        raise ValueError(f"unknown frame_sample_strategy {strategy}")
    return [FrameWindow(start, length) for start in starts]


def uniform_starts(last: int, count: int) -> list[int]:
    """`count` starts from 0 to `last` evenly spaced (rounded; duplicates of a short clip dropped)."""
    if count <= 1 or last == 0:
        return [0]
    return sorted({round(i * last / (count - 1)) for i in range(count)})


def random_start(total: int, length: int, rng: random.Random) -> int:
    """A RANDOM window's start, uniform over every start that fits."""
    return rng.randint(0, max(0, total - length))


def frame_differences(frames: np.ndarray) -> np.ndarray:
    """(F-1,) mean absolute difference (0..1) of each frame to the one before, on small grey copies."""
    if len(frames) < 2:
        return np.zeros(0, np.float32)
    height, width = frames.shape[1:3]
    size = (_CUT_WIDTH, max(1, round(height * _CUT_WIDTH / width)))
    grey = np.stack([cv2.resize(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), size, interpolation=cv2.INTER_AREA)
                     for f in frames]).astype(np.float32) / 255.0
    return np.abs(np.diff(grey, axis=0)).mean(axis=(1, 2))


def detect_cuts(frames: np.ndarray) -> list[int]:
    """Indices of frames that start a new shot: a jump in content far above the clip's usual change."""
    differences = frame_differences(frames)
    if not len(differences):
        return []
    typical = float(np.median(differences))
    return [i + 1 for i, d in enumerate(differences) if d > CUT_THRESHOLD and d > CUT_OVER_MEDIAN * typical]
