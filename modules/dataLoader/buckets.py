"""Shape buckets (frames, height, width) and batching that never mixes shapes."""

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from modules.dataLoader.frames import is_4k1

SIZE_MULTIPLE = 16

# Width / height ratios used to build resolution buckets from a target area.
DEFAULT_ASPECTS: tuple[float, ...] = (1 / 2, 9 / 16, 2 / 3, 3 / 4, 1.0, 4 / 3, 3 / 2, 16 / 9, 2.0)


@dataclass(frozen=True, order=True)
class Bucket:
    """A training shape: frames (4k+1), height and width (multiples of 16)."""

    frames: int
    height: int
    width: int

    def __post_init__(self) -> None:
        if not is_4k1(self.frames):
            raise ValueError(f"bucket frames must be of the form 4k+1, got {self.frames}")
        for name, value in (("height", self.height), ("width", self.width)):
            if value < SIZE_MULTIPLE or value % SIZE_MULTIPLE:
                raise ValueError(f"bucket {name} must be a positive multiple of {SIZE_MULTIPLE}, got {value}")


def round_to_multiple(value: float, multiple: int = SIZE_MULTIPLE) -> int:
    """Nearest multiple of `multiple`, at least `multiple`."""
    return max(multiple, int(math.floor(value / multiple + 0.5)) * multiple)


def area_resolutions(area: int, aspects: Sequence[float] = DEFAULT_ASPECTS) -> list[tuple[int, int]]:
    """(H, W) pairs of about `area` pixels for each width/height ratio, multiples of 16, deduplicated."""
    if area < SIZE_MULTIPLE * SIZE_MULTIPLE:
        raise ValueError(f"target area must be >= {SIZE_MULTIPLE * SIZE_MULTIPLE}, got {area}")
    resolutions: list[tuple[int, int]] = []
    for aspect in aspects:
        height = round_to_multiple(math.sqrt(area / aspect))
        width = round_to_multiple(math.sqrt(area * aspect))
        if (height, width) not in resolutions:
            resolutions.append((height, width))
    return resolutions


def _aspect_distance(src_h: int, src_w: int, height: int, width: int) -> float:
    """Distance between aspect ratios on a log scale (2:1 is as far from 1:1 as 1:2)."""
    return abs(math.log(src_w / src_h) - math.log(width / height))


def choose_resolution(src_h: int, src_w: int, resolutions: Sequence[tuple[int, int]] | int) -> tuple[int, int]:
    """The (H, W) with the aspect ratio closest to the source's; ties go to the first listed.

    `resolutions` is a list of (H, W) (multiples of 16) or a target pixel area (see `area_resolutions`).
    """
    if src_h < 1 or src_w < 1:
        raise ValueError(f"source size must be positive, got {src_h}x{src_w}")
    candidates = area_resolutions(resolutions) if isinstance(resolutions, int) else list(resolutions)
    if not candidates:
        raise ValueError("no resolution buckets given")
    return min(candidates, key=lambda hw: _aspect_distance(src_h, src_w, hw[0], hw[1]))


def choose_bucket(
    src_h: int,
    src_w: int,
    src_frames: int,
    resolutions: Sequence[tuple[int, int]] | int,
    frame_buckets: Sequence[int],
) -> Bucket | None:
    """The bucket for a clip: closest-aspect resolution and largest frame bucket <= src_frames.

    Returns None when no frame bucket fits (clip too short).
    """
    bad = [f for f in frame_buckets if not is_4k1(f)]
    if bad or not frame_buckets:
        raise ValueError(f"frame buckets must be a non-empty list of 4k+1 counts, got {list(frame_buckets)}")
    fitting = [f for f in frame_buckets if f <= src_frames]
    if not fitting:
        return None
    height, width = choose_resolution(src_h, src_w, resolutions)
    return Bucket(max(fitting), height, width)


def batch_by_bucket(
    items: Sequence[tuple[int, Bucket]], batch_size: int, rng: random.Random, drop_last: bool
) -> list[list[int]]:
    """Group item indices into batches of one bucket each, shuffled deterministically by `rng`.

    Indices are shuffled within each bucket, cut into batches (the last one of a bucket may be
    smaller unless `drop_last`), then the batch order is shuffled.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    groups: dict[Bucket, list[int]] = {}
    for index, bucket in items:
        groups.setdefault(bucket, []).append(index)
    batches: list[list[int]] = []
    for bucket in sorted(groups):
        indices = groups[bucket]
        rng.shuffle(indices)
        for start in range(0, len(indices), batch_size):
            batch = indices[start : start + batch_size]
            if len(batch) == batch_size or not drop_last:
                batches.append(batch)
    rng.shuffle(batches)
    return batches
