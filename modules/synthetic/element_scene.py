"""A synthetic scene for the element and mask tools, and segmenters that return its true masks (for their tests, the
E2V learning run on tool-made elements and benchmarks/data_tools.py): a prompt names a colour, and its mask is the
pixels of that colour (what a perfect segmenter sees: the visible part of the element, occluded pixels excluded)."""
from __future__ import annotations

import cv2
import numpy as np

from modules.dataTools.segmenter import Detection, mask_box


class ColourSegmenter:
    """`colours`: prompt -> RGB. A prompt's mask in a frame: pixels within `tolerance` of its colour; a prompt not
    named is never found."""

    def __init__(self, colours: dict[str, tuple[int, int, int]], tolerance: float = 60.0, min_pixels: int = 4):
        self.colours, self.tolerance, self.min_pixels = colours, tolerance, min_pixels
        self.calls = 0

    def mask(self, frame: np.ndarray, prompt: str) -> np.ndarray:
        distance = np.linalg.norm(frame.astype(np.float32) - np.array(self.colours[prompt], np.float32), axis=-1)
        return distance < self.tolerance

    def detect(self, frames: np.ndarray, prompt: str) -> list[list[Detection]]:
        self.calls += 1
        found = []
        for frame in frames:
            mask = self.mask(frame, prompt) if prompt in self.colours else np.zeros(frame.shape[:2], bool)
            found.append([Detection(mask, 1.0, mask_box(mask))] if mask.sum() >= self.min_pixels else [])
        return found


class ForegroundSegmenter(ColourSegmenter):
    """Every prompt's mask is what differs from a plain background colour (one shape over a plain scene)."""

    def __init__(self, background: tuple[int, int, int], tolerance: float = 60.0):
        super().__init__({}, tolerance)
        self.background = background

    def mask(self, frame: np.ndarray, prompt: str) -> np.ndarray:
        distance = np.linalg.norm(frame.astype(np.float32) - np.array(self.background, np.float32), axis=-1)
        return distance >= self.tolerance

    def detect(self, frames: np.ndarray, prompt: str) -> list[list[Detection]]:
        self.colours = {prompt: self.background}
        return super().detect(frames, prompt)


SCENE_SIZE = (64, 96)  # H, W
SCENE_FRAMES = 20
RED, BLUE = (230, 30, 30), (30, 40, 230)


def empty_background(height: int = SCENE_SIZE[0], width: int = SCENE_SIZE[1]) -> np.ndarray:
    """A smooth scene without red or blue (a green-grey gradient with soft stripes)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    grey = 90 + 40 * np.sin(x / 9.0) * np.cos(y / 13.0) + 0.4 * x
    return np.stack([grey, grey + 25, grey * 0.8], axis=-1).clip(0, 255).astype(np.uint8)


def scene() -> tuple[np.ndarray, np.ndarray]:
    """(frames, subject radius per frame): a red disc ("subject") crossing the scene, growing, half out of view in
    frame 0, whole and largest in frames 12-14, partly hidden behind a blue square ("object") from frame 15 on."""
    frames = np.repeat(empty_background()[None], SCENE_FRAMES, axis=0).copy()
    radii = np.array([8 + f * 0.5 for f in range(SCENE_FRAMES)])
    for f in range(SCENE_FRAMES):
        cx = 2 + f * 3.5
        cv2.circle(frames[f], (round(cx), 30), round(radii[f]), RED, -1)
        if f >= 15:
            cv2.rectangle(frames[f], (round(cx) - 6, 14), (round(cx) + 22, 46), BLUE, -1)
    return frames, radii
