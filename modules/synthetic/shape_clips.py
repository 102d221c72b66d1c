"""Synthetic clips of one coloured shape moving in a straight line over a plain background, and the
measurements the learning tests and the demo make on generated frames (colour masks, centroids, fill ratio).

Used to train the tiny VAE (`modules/synthetic/tiny_vae.py`, random shapes, colours, backgrounds and motions)
and as the learning tests' datasets (a fixed shape/colour per prompt, random start positions).
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

#: The colours the learning tests ask for (RGB); a mask tells them apart by hue, so keep them far apart.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (40, 190, 60), "blue": (40, 70, 220), "yellow": (225, 205, 40),
}
BACKGROUND = (110, 110, 110)
SHAPES = ("circle", "square")
#: Unit direction (dx, dy) in image coordinates (y grows downwards).
DIRECTIONS: dict[str, tuple[int, int]] = {"right": (1, 0), "left": (-1, 0), "down": (0, 1), "up": (0, -1)}


@dataclass(frozen=True)
class ShapeMotion:
    shape: str  # "circle" | "square" | "triangle" (pointing up; only the guidance-preserving learning test's motif)
    rgb: tuple[int, int, int]
    start: tuple[float, float]  # centre (x, y) in pixels at frame 0
    velocity: tuple[float, float]  # pixels per frame
    radius: float  # circle radius / half the square's side
    background: tuple[int, int, int] = BACKGROUND


def render(motion: ShapeMotion, frames: int, height: int, width: int) -> np.ndarray:
    """uint8 (F, H, W, 3): the shape at start + f·velocity in frame f (anti-aliased, sub-pixel positions)."""
    video = np.empty((frames, height, width, 3), np.uint8)
    shift = 4  # cv2's fractional bits: positions in 1/16 px
    scale = 1 << shift
    for f in range(frames):
        frame = np.full((height, width, 3), motion.background, np.uint8)
        cx = motion.start[0] + f * motion.velocity[0]
        cy = motion.start[1] + f * motion.velocity[1]
        r = motion.radius
        if motion.shape == "circle":
            cv2.circle(frame, (round(cx * scale), round(cy * scale)), round(r * scale), motion.rgb, -1,
                       cv2.LINE_AA, shift)
        elif motion.shape == "triangle":
            corners = np.array([[cx, cy - r], [cx + r, cy + r], [cx - r, cy + r]])
            cv2.fillPoly(frame, [np.round(corners * scale).astype(np.int32)], motion.rgb, cv2.LINE_AA, shift)
        else:
            corners = np.array([[cx - r, cy - r], [cx + r, cy - r], [cx + r, cy + r], [cx - r, cy + r]])
            cv2.fillPoly(frame, [np.round(corners * scale).astype(np.int32)], motion.rgb, cv2.LINE_AA, shift)
        video[f] = frame
    return video


def random_motion(rng: np.random.Generator, height: int, width: int, frames: int) -> ShapeMotion:
    """Any shape, colour (a named one or a random one), background and straight motion that stays in view."""
    radius = float(rng.uniform(0.12, 0.22) * min(height, width))
    if rng.random() < 0.75:
        rgb = COLOURS[str(rng.choice(list(COLOURS)))]
    else:
        rgb = tuple(int(c) for c in rng.integers(0, 256, 3))
    background = tuple(int(c) for c in (rng.integers(40, 200, 3) if rng.random() < 0.25 else BACKGROUND))
    x0, x1 = (rng.uniform(radius, width - radius) for _ in range(2))
    y0, y1 = (rng.uniform(radius, height - radius) for _ in range(2))
    steps = max(1, frames - 1)
    return ShapeMotion(str(rng.choice(SHAPES)), rgb, (x0, y0), ((x1 - x0) / steps, (y1 - y0) / steps), radius,
                       background)


#: A motif's circle radius / half its square's side, as a share of the frame: 12 px at 48 px, 1.5 latent cells,
#: so the tiny VAE keeps a square's corners apart from a circle's outline (at 0.17 both came back round).
MOTIF_RADIUS = 0.25


def directed_motion(shape: str, colour: str, direction: str, rng: np.random.Generator, height: int, width: int,
                    frames: int, start: tuple[float, float] | None = None) -> ShapeMotion:
    """`shape` in `colour` crossing about half the frame in `direction`, from a random (or the given) start."""
    radius = MOTIF_RADIUS * min(height, width)
    dx, dy = DIRECTIONS[direction]
    travel = 0.45 * (width if dx else height)
    steps = max(1, frames - 1)
    if start is None:
        # The start leaves room for the whole travel; across the motion the position is random.
        lo_x, hi_x = radius + max(0, -dx) * travel, width - radius - max(0, dx) * travel
        lo_y, hi_y = radius + max(0, -dy) * travel, height - radius - max(0, dy) * travel
        start = (float(rng.uniform(lo_x, hi_x)), float(rng.uniform(lo_y, hi_y)))
    return ShapeMotion(shape, COLOURS[colour], start, (dx * travel / steps, dy * travel / steps), radius)


# ------------------------------------------------------------------------------------------------------
# Measurements on generated frames
# ------------------------------------------------------------------------------------------------------


def colour_mask(frame: np.ndarray, colour: str, tolerance: float = 70.0) -> np.ndarray:
    """bool (H, W): pixels within `tolerance` (Euclidean, RGB 0..255) of the named colour."""
    distance = np.linalg.norm(frame.astype(np.float32) - np.array(COLOURS[colour], np.float32), axis=-1)
    return distance < tolerance


def coverage(frames: np.ndarray, colour: str) -> float:
    """Mean fraction of pixels showing `colour` over the frames."""
    return float(np.mean([colour_mask(f, colour).mean() for f in frames]))


def centroids(frames: np.ndarray, colour: str, min_pixels: int = 4) -> np.ndarray:
    """(F, 2) centroid (x, y) of `colour` per frame; NaN where fewer than `min_pixels` show it."""
    out = np.full((len(frames), 2), np.nan)
    for i, frame in enumerate(frames):
        ys, xs = np.nonzero(colour_mask(frame, colour))
        if len(xs) >= min_pixels:
            out[i] = xs.mean(), ys.mean()
    return out


def slope(values: np.ndarray) -> float:
    """Least-squares slope of `values` over frame index (NaN frames left out; NaN if under 3 remain)."""
    index = np.arange(len(values), dtype=np.float64)
    keep = ~np.isnan(values)
    if keep.sum() < 3:
        return float("nan")
    return float(np.polyfit(index[keep], values[keep], 1)[0])


def corner_ratio(frame: np.ndarray, colour: str) -> float:
    """The largest `colour` blob's extent along the two diagonals over its extent along the axes (mean of each
    pair): 1 for a circle, up to sqrt(2) for an axis-aligned square, whose corners reach further along the
    diagonals (NaN when the colour is absent). Unlike the fill ratio (area over bounding box) it survives the
    tiny VAE's blur, which rounds a square's corners: decoded squares fill their box about as a circle does."""
    mask = colour_mask(frame, colour).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask)
    if count < 2:
        return float("nan")
    ys, xs = np.nonzero(labels == 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA])))
    extent = lambda values: float(values.max() - values.min() + 1)  # noqa: E731
    axes = (extent(xs) + extent(ys)) / 2
    diagonals = (extent((xs + ys) / 2 ** 0.5) + extent((xs - ys) / 2 ** 0.5)) / 2
    return diagonals / axes


#: The median corner_ratio over a clip's frames at or above this reads as a square: over 24 clips of each T2V motif
#: reconstructed by the committed tiny VAE, circles' medians are 0.945-1.044 and squares' 1.114-1.222 (1.08 lies
#: between; their fill ratios overlap: 0.71-0.80 against 0.80-0.91). tests/test_tiny_vae.py checks it.
SQUARE_CORNER_RATIO = 1.08


def median_corner_ratio(frames: np.ndarray, colour: str) -> float:
    """corner_ratio's median over the frames that show `colour` (one frame's outline is noisy; NaN if none)."""
    ratios = [r for r in (corner_ratio(frame, colour) for frame in frames) if not np.isnan(r)]
    return float(np.median(ratios)) if ratios else float("nan")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays (peak 255)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


# ------------------------------------------------------------------------------------------------------
# Datasets and verdicts of the learning tests and the demo
# ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Motif:
    """One thing to learn: `shape` in `colour` moving `direction`, captioned `prompt`."""

    shape: str
    colour: str
    direction: str

    @property
    def prompt(self) -> str:
        return f"a {self.colour} {self.shape} moving {self.direction}"


RED_CIRCLE_RIGHT = Motif("circle", "red", "right")
BLUE_SQUARE_DOWN = Motif("square", "blue", "down")
#: A motif no T2V run trained (colour, shape and direction all new): what the guidance-preserving test fine-tunes on.
GREEN_TRIANGLE_LEFT = Motif("triangle", "green", "left")


def write_motif_dataset(folder, motifs: list[Motif], clips_per_motif: int, frames: int, height: int, width: int,
                        seed: int = 0, fps: float = 16.0, caption: str | None = None):
    """`folder/NNN.mp4` + `NNN.txt` (the motif's prompt, or `caption` for all): `clips_per_motif` clips of each
    motif from random start positions."""
    from pathlib import Path

    from modules.util.video_write import write_video

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    index = 0
    for _ in range(clips_per_motif):
        for motif in motifs:
            video = render(directed_motion(motif.shape, motif.colour, motif.direction, rng, height, width, frames),
                           frames, height, width)
            write_video(folder / f"{index:03d}.mp4", video, fps)
            (folder / f"{index:03d}.txt").write_text(caption or motif.prompt, encoding="utf-8")
            index += 1
    return folder


@dataclass(frozen=True)
class MotifVerdict:
    """What one generated clip shows, measured against a motif."""

    coverage: float  # mean fraction of pixels in the motif's colour
    other_coverage: float  # the largest mean fraction of any other named colour
    corners: float  # median_corner_ratio of the colour's blob (circle ~1, square up to 1.41)
    slope_along: float  # centroid px per frame along the motif's direction (positive = the right way)
    slope_across: float  # centroid px per frame across it

    @property
    def colour_ok(self) -> bool:
        return self.coverage >= 0.02 and self.coverage > 2 * self.other_coverage

    @property
    def shape_ok(self) -> bool:
        return not np.isnan(self.corners)

    def shape_is(self, shape: str) -> bool:
        square = self.corners >= SQUARE_CORNER_RATIO
        return self.shape_ok and (square if shape == "square" else not square)

    @property
    def moves_ok(self) -> bool:
        return self.slope_along > 0.3 and self.slope_along > abs(self.slope_across)


def measure(frames: np.ndarray, motif: Motif) -> MotifVerdict:
    dx, dy = DIRECTIONS[motif.direction]
    path = centroids(frames, motif.colour)
    along = slope(path[:, 0] * dx + path[:, 1] * dy)
    across = slope(path[:, 0] * abs(dy) + path[:, 1] * abs(dx))
    others = [coverage(frames, c) for c in COLOURS if c != motif.colour]
    return MotifVerdict(coverage(frames, motif.colour), max(others), median_corner_ratio(frames, motif.colour),
                        along, across)


def matches(frames: np.ndarray, motif: Motif) -> bool:
    """Colour, shape and direction of motion all those of `motif`."""
    verdict = measure(frames, motif)
    return verdict.colour_ok and verdict.shape_is(motif.shape) and verdict.moves_ok
