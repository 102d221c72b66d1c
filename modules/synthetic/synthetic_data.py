"""Small synthetic video datasets (moving coloured shapes with captions) for the demo, tests and benchmarks."""
from __future__ import annotations

import random
from pathlib import Path

import cv2
import numpy as np

from modules.util.video_write import write_video

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


def _solid(height: int, width: int, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.full((height, width, 3), rgb, np.uint8)


def write_e2v_dataset(folder: str | Path, count: int = 4, frames: int = 25, height: int = 64, width: int = 64,
                      fps: float = 16.0, seed: int = 0, with_object: bool = True) -> Path:
    """An E2V dataset in the seeds' layout: `001.mp4`, `001.txt`, `001_subject.png`, `001_object.png`,
    `001_background.png`. The video shows the subject's shape moving over the background's colour."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    backgrounds = {"gray": (96, 96, 96), "teal": (30, 120, 120), "purple": (100, 50, 130)}
    for i in range(count):
        shape, colour, motion = rng.choice(_SHAPES), rng.choice(list(_COLOURS)), rng.choice(list(_MOTIONS))
        background = rng.choice(list(backgrounds))
        stem = folder / f"{i + 1:03d}"
        video = render_clip(shape, colour, motion, frames, height, width)
        video[(video == 96).all(axis=-1)] = backgrounds[background]
        if not stem.with_suffix(".mp4").exists():
            write_video(stem.with_suffix(".mp4"), video, fps)
        stem.with_suffix(".txt").write_text(f"The video shows a {colour} {shape} moving {motion} over {background}",
                                            encoding="utf-8")
        subject = render_clip(shape, colour, "left to right", 1, height, width * 3 // 4)[0]
        subject[(subject == 96).all(axis=-1)] = 255
        cv2.imwrite(str(folder / f"{stem.name}_subject.png"), cv2.cvtColor(subject, cv2.COLOR_RGB2BGR))
        if with_object or i % 2 == 0:
            obj = _solid(height // 2, width // 2, _COLOURS[rng.choice(list(_COLOURS))])
            cv2.imwrite(str(folder / f"{stem.name}_object.png"), cv2.cvtColor(obj, cv2.COLOR_RGB2BGR))
        bg = _solid(height, width + 16, backgrounds[background])
        cv2.imwrite(str(folder / f"{stem.name}_background.png"), cv2.cvtColor(bg, cv2.COLOR_RGB2BGR))
    return folder


def e2v_dataset_json(data_root: str | Path, height: int = 64, width: int = 64, frames: int = 25) -> dict:
    """A2's three elements (subject, object, background; repeats 1/4/4) in the seeds' nested form."""
    return {"datasets": [{
        "data_root": str(data_root), "dataset_type": "e2v", "target_resolution": [height, width],
        "auto_frame_buckets": True, "max_frames": frames, "remove_common_llm_caption_prefixes": True,
        "elements": [
            {"name": "subject", "suffixes": ["_subject.png"], "required": True,
             "vae": {"repeat": 1, "position": 0}, "clip": {"preprocess": "pad_white"}},
            {"name": "object", "suffixes": ["_object.png"], "required": False,
             "vae": {"repeat": 4, "position": 1}, "clip": {"preprocess": "pad_white"}},
            {"name": "background", "suffixes": ["_background.png"], "required": False,
             "vae": {"repeat": 4, "position": 2, "preprocess": "center_crop"}, "clip": {"preprocess": "center_crop"}},
        ],
        "processors": {"vae": {"combine": "before", "default_preprocess": "pad_white"},
                       "clip": {"resolution": [224, 224], "default_preprocess": "pad_white"}},
    }]}
