"""The pixels of E2V element images, from a clip's frames and an element's per-frame masks: which frame to take,
the cut-out on white, and the background plate. Pure numpy/OpenCV; elements.py runs them over a folder."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import cv2
import numpy as np

WHITE = (255, 255, 255)


@dataclass(frozen=True)
class FrameChoice:
    frame: int
    quality: float  # the frame's score (area x solidity x edge x sharpness x detection score), 0..1
    area: int  # mask pixels


def sharpness(frame: np.ndarray, mask: np.ndarray) -> float:
    """Variance of the Laplacian over the mask's pixels (a blurred or moving subject scores low)."""
    grey = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY).astype(np.float32)
    lap = cv2.Laplacian(grey, cv2.CV_32F)
    inside = lap[mask]
    return float(inside.var()) if inside.size > 1 else 0.0


def solidity(mask: np.ndarray) -> float:
    """Mask area over its convex hull's area: an instance cut by something in front of it is less solid."""
    points = cv2.findNonZero(mask.astype(np.uint8))
    if points is None:
        return 0.0
    hull = cv2.contourArea(cv2.convexHull(points))
    return float(min(1.0, mask.sum() / hull)) if hull > 0 else 1.0


def touches_edge(mask: np.ndarray) -> bool:
    return bool(mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any())


def choose_frame(frames: np.ndarray, masks: Sequence[np.ndarray | None], scores: Sequence[float],
                 avoid_first: int = 1) -> FrameChoice | None:
    """The frame that shows the element largest, whole and sharp: quality = area / the largest area x solidity x
    (0.5 when the mask touches the frame's edge: partly out of view) x sharpness / the sharpest x the detection's
    score. The first `avoid_first` frames (those a step's target starts with: a copy of the reference there would
    teach copying) are taken only when no later frame shows the element. None when no frame does."""
    seen = [i for i, m in enumerate(masks) if m is not None and m.any()]
    if not seen:
        return None
    later = [i for i in seen if i >= avoid_first]
    pool = later or seen
    areas = {i: int(masks[i].sum()) for i in pool}
    sharp = {i: sharpness(frames[i], masks[i]) for i in pool}
    top_area, top_sharp = max(areas.values()), max(sharp.values()) or 1.0
    best = None
    for i in pool:
        quality = (areas[i] / top_area) * solidity(masks[i]) * (0.5 if touches_edge(masks[i]) else 1.0) \
            * (0.5 + 0.5 * sharp[i] / top_sharp) * float(scores[i])
        if best is None or quality > best.quality:
            best = FrameChoice(i, quality, areas[i])
    return best


def crop_box(mask: np.ndarray, margin: float = 0.05) -> tuple[int, int, int, int]:
    """The mask's bounding box grown by `margin` of its size on each side, inside the frame: x0, y0, x1, y1."""
    ys, xs = np.nonzero(mask)
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    grow_x, grow_y = round((x1 - x0) * margin), round((y1 - y0) * margin)
    height, width = mask.shape
    return max(0, x0 - grow_x), max(0, y0 - grow_y), min(width, x1 + grow_x), min(height, y1 + grow_y)


def cut_out(frame: np.ndarray, mask: np.ndarray, margin: float = 0.05,
            fill: tuple[int, int, int] = WHITE) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The element on white (`fill`), as SkyReels-A2's reference images are: pixels outside the mask white, cropped
    to the mask's box (+ margin), then padded with white to a square, centred (the training's `pad_white` fits any
    aspect without cropping, docs/e2v.md §2). Returns the image and the box it was cut from."""
    x0, y0, x1, y1 = crop_box(mask, margin)
    piece = np.where(mask[y0:y1, x0:x1, None], frame[y0:y1, x0:x1], np.array(fill, np.uint8)).astype(np.uint8)
    return pad_square(piece, fill), (int(x0), int(y0), int(x1), int(y1))


def pad_square(image: np.ndarray, fill: tuple[int, int, int] = WHITE) -> np.ndarray:
    height, width = image.shape[:2]
    side = max(height, width)
    top, left = (side - height) // 2, (side - width) // 2
    return cv2.copyMakeBorder(image, top, side - height - top, left, side - width - left, cv2.BORDER_CONSTANT,
                              value=tuple(int(c) for c in fill))


@dataclass(frozen=True)
class Plate:
    image: np.ndarray
    hole_fraction: float  # share of pixels no frame showed free (inpainted)
    method: str  # "median" | "frame"
    frame: int | None = None


def background_plate(frames: np.ndarray, masks: np.ndarray, grow: int = 2) -> Plate:
    """The scene without its elements: per pixel, the median over the frames where no element covers it (`masks`:
    bool (F, H, W), the union of every element's mask, grown by `grow` px against edge halos); pixels covered in
    every frame are inpainted (OpenCV Telea) from around them."""
    if grow > 0:
        kernel = np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)
        masks = np.stack([cv2.dilate(m.astype(np.uint8), kernel) > 0 for m in masks])
    free = ~masks  # (F, H, W)
    values = np.where(free[..., None], frames.astype(np.float32), np.nan)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels: the holes
            median = np.nanmedian(values, axis=0)
    holes = ~free.any(axis=0)
    plate = np.nan_to_num(median, nan=0.0).round().clip(0, 255).astype(np.uint8)
    if holes.any():
        plate = cv2.inpaint(plate, holes.astype(np.uint8), 3, cv2.INPAINT_TELEA)
    return Plate(plate, float(holes.mean()), "median")


def frame_plate(frames: np.ndarray, masks: np.ndarray) -> Plate:
    """The frame where the elements cover least, their pixels inpainted: for a clip whose camera moves (a median
    of moving backgrounds is a blur)."""
    index = int(np.argmin(masks.reshape(len(masks), -1).sum(axis=1)))
    hole = masks[index].astype(np.uint8)
    image = cv2.inpaint(frames[index], hole, 3, cv2.INPAINT_TELEA) if hole.any() else frames[index].copy()
    return Plate(image, float(hole.mean()), "frame", index)
