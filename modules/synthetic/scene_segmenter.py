"""Segmenters that return a synthetic scene's true masks, for the element and mask tools' tests, the E2V learning run
on tool-made elements and the benchmarks: a prompt names a colour, and its mask is the pixels of that colour (what a
perfect segmenter sees: the visible part of the element, occluded pixels excluded)."""
from __future__ import annotations

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
