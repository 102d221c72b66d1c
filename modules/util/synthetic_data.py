"""Small synthetic video datasets (moving coloured shapes with captions) for the demo, tests and benchmarks."""
from __future__ import annotations

import random
from pathlib import Path

import cv2
import numpy as np

from modules.dataLoader.video_io import write_video

_COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}
_SHAPES = ("circle", "square")
_MOTIONS = {"left to right": (1, 0), "right to left": (-1, 0), "top to bottom": (0, 1), "bottom to top": (0, -1)}


def render_clip(shape: str, colour: str, motion: str, frames: int, height: int, width: int) -> np.ndarray:
    """uint8 (F, H, W, 3): one shape moving across a gray background."""
    dx, dy = _MOTIONS[motion]
    size = max(4, min(height, width) // 5)
    video = np.full((frames, height, width, 3), 96, np.uint8)
    for f in range(frames):
        t = f / max(1, frames - 1)
        cx = int(width / 2 + dx * (t - 0.5) * (width - 2 * size))
        cy = int(height / 2 + dy * (t - 0.5) * (height - 2 * size))
        rgb = _COLOURS[colour]
        if shape == "circle":
            cv2.circle(video[f], (cx, cy), size, rgb, -1)
        else:
            cv2.rectangle(video[f], (cx - size, cy - size), (cx + size, cy + size), rgb, -1)
    return video


def write_video_dataset(folder: str | Path, count: int = 4, frames: int = 17, height: int = 64, width: int = 64,
                        fps: float = 16.0, seed: int = 0) -> Path:
    """`count` mp4 clips with same-name .txt captions in `folder` (skips files that already exist)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for i in range(count):
        shape, colour, motion = rng.choice(_SHAPES), rng.choice(list(_COLOURS)), rng.choice(list(_MOTIONS))
        video_path = folder / f"{i:03d}.mp4"
        if not video_path.exists():
            write_video(video_path, render_clip(shape, colour, motion, frames, height, width), fps)
            (folder / f"{i:03d}.txt").write_text(f"a {colour} {shape} moving {motion}", encoding="utf-8")
    return folder
