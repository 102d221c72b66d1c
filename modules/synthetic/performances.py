"""Made "performances" for Animate-2's copying trap (`dataLoader/animate2_triplets.py`): a textured room (colour noise
summed over scales, coarse ones strongest, as natural images' spectra fall), a textured figure with a torso, a head
and two swinging arms walking a random path, a camera that pans a little and sensor noise. Two takes of one room
share the background and the figure and differ in path and camera: the hardest legitimate driving video. The
evasions are what a user might hand in as the driving video when it is the target itself. No video is downloaded:
tests and `benchmarks/copying_trap.py` make them."""
from __future__ import annotations

import cv2
import numpy as np


def texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """(H, W, 3) float colour noise in 40-210."""
    image = np.zeros((height, width, 3))
    for scale in (2, 4, 8, 16, 32, 64):
        noise = rng.normal(size=(max(1, height // scale), max(1, width // scale), 3))
        image += cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC) * scale
    image = (image - image.min()) / (np.ptp(image) + 1e-9)
    return 40 + 170 * image


def room(rng: np.random.Generator, size: int) -> np.ndarray:
    """A background a quarter larger than the frame, for the camera to pan over."""
    return texture(rng, size * 5 // 4, size * 5 // 4)


def take(background: np.ndarray, figure: np.ndarray, frames: int, size: int, rng: np.random.Generator,
         figure_share: float = 1 / 6) -> np.ndarray:
    """uint8 (F, size, size, 3): the figure (its torso's half-height `figure_share` of the frame) on a random path."""
    margin = (background.shape[0] - size) // 2
    start, end = rng.uniform(0.2, 0.8, 2) * size, rng.uniform(0.2, 0.8, 2) * size
    swing, phase = rng.uniform(0.5, 1.2), rng.uniform(0, 2 * np.pi)
    pan = rng.normal(0, margin / 3, 2)
    body = max(2, int(size * figure_share))
    video = np.empty((frames, size, size, 3), np.uint8)
    for f in range(frames):
        t = f / max(1, frames - 1)
        oy, ox = np.clip((margin + pan * t).astype(int), 0, 2 * margin)
        frame = background[oy:oy + size, ox:ox + size].copy()
        cx, cy = (start + (end - start) * t).astype(int)
        mask = np.zeros((size, size), np.uint8)
        cv2.ellipse(mask, (int(cx), int(cy)), (body // 2, body), 0, 0, 360, 255, -1)
        cv2.circle(mask, (int(cx), int(cy - 1.3 * body)), max(1, body // 3), 255, -1)
        for side in (-1, 1):
            angle = side * swing * np.sin(2 * np.pi * 1.5 * t + phase)
            hand = (int(cx + side * body * 0.9 * np.cos(angle)), int(cy + body * 0.9 * np.sin(angle) + body // 3))
            cv2.line(mask, (int(cx), int(cy - body // 2)), hand, 255, max(2, body // 5))
        frame = np.where(mask[..., None] > 0, figure[:size, :size], frame)
        frame += rng.normal(0, 2.0, frame.shape)
        video[f] = np.clip(frame, 0, 255).astype(np.uint8)
    return video


def delayed(video: np.ndarray, frames: int) -> np.ndarray:
    """The video `frames` later (its first frame held), or earlier when negative (its last frame held)."""
    if frames >= 0:
        return np.concatenate([np.repeat(video[:1], frames, axis=0), video[:len(video) - frames]])
    return np.concatenate([video[-frames:], np.repeat(video[-1:], -frames, axis=0)])


def brighter(video: np.ndarray, levels: int) -> np.ndarray:
    return np.clip(video.astype(np.int16) + levels, 0, 255).astype(np.uint8)


def contrast(video: np.ndarray, factor: float, offset: float = 0.0) -> np.ndarray:
    mean = video.mean()
    return np.clip((video.astype(np.float64) - mean) * factor + mean + offset, 0, 255).astype(np.uint8)


def mirrored(video: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(video[:, :, ::-1])


def evasions(target: np.ndarray) -> dict[str, np.ndarray]:
    """The target handed in as its own driving video, disguised."""
    size = target.shape[1]
    return {
        "copy (re-encoded)": target,
        "1 frame later": delayed(target, 1),
        "2 frames later": delayed(target, 2),
        "3 frames earlier": delayed(target, -3),
        "brightness +25": brighter(target, 25),
        "contrast x1.3": contrast(target, 1.3),
        "darker, contrast x0.7": contrast(target, 0.7, -20),
        "mirrored": mirrored(target),
        "mirrored, 1 frame later, +25": brighter(mirrored(delayed(target, 1)), 25),
        "resized to 1.5x": np.stack([cv2.resize(f, (size * 3 // 2, size * 3 // 2)) for f in target]),
        "blurred": np.stack([cv2.GaussianBlur(f, (5, 5), 1.5) for f in target]),
    }
