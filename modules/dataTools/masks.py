"""Masks for masked training from the same segmenter: `<clip>-masklabel.mp4` beside each clip, white where any of the
prompts is found in that frame, black elsewhere, at the clip's rate and length, as the data loader reads them
(docs/data.md, masked training: the red channel / 255 is the mask). Existing masks are kept unless asked."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
from tqdm import tqdm

from modules.dataLoader.errors import DataError
from modules.dataLoader.masks import MASK_SUFFIX
from modules.dataLoader.video_io import read_video_frames
from modules.dataTools.clip_writer import clip_writer
from modules.dataTools.elements import clips_of
from modules.dataTools.segmenter import Segmenter, track
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaskOptions:
    prompts: tuple[str, ...]
    overwrite: bool = False
    grow: int = 0  # pixels the mask is widened by (a margin around the subject)
    min_score: float = 0.0

    def check(self) -> None:
        if not self.prompts or not all(p.strip() for p in self.prompts):
            raise UserError("give at least one --prompt: what the mask covers (e.g. 'person')")
        if self.grow < 0:
            raise UserError(f"--grow must be >= 0, got {self.grow}")


@dataclass
class MaskReport:
    clips: int = 0
    written: int = 0
    kept: int = 0
    empty: list = field(default_factory=list)  # clips where no prompt was found in any frame (no mask written)
    skipped: dict = field(default_factory=dict)
    cancelled: bool = False

    def summary(self) -> str:
        parts = [f"{self.clips} clip(s)", f"{self.written} mask(s) written", f"{self.kept} kept (they existed)"]
        if self.empty:
            parts.append(f"{len(self.empty)} with nothing found: {', '.join(self.empty)}")
        parts += [f"{n} skipped: {reason}" for reason, n in sorted(self.skipped.items())]
        return ("cancelled; " if self.cancelled else "") + "; ".join(parts)


def mask_frames(frames: np.ndarray, segmenter: Segmenter, prompts: Sequence[str], grow: int = 0,
                min_score: float = 0.0) -> np.ndarray:
    """bool (F, H, W): the union of each prompt's tracked instance per frame."""
    masks = np.zeros(frames.shape[:3], bool)
    for prompt in prompts:
        for i, detection in enumerate(track(segmenter.detect(frames, prompt), min_score)):
            if detection is not None:
                masks[i] |= detection.mask
    if grow:
        kernel = np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)
        masks = np.stack([cv2.dilate(m.astype(np.uint8), kernel) > 0 for m in masks])
    return masks


def make_masks(folder: str | os.PathLike, segmenter: Segmenter | Callable[[], Segmenter], options: MaskOptions,
               stop: Callable[[], bool] = lambda: False, progress: bool = True,
               on_clip: Callable[[Path], None] | None = None) -> MaskReport:
    options.check()
    report = MaskReport()
    model = None
    for clip in tqdm(clips_of(Path(folder)), desc="masks", unit="clip", disable=not progress):
        if stop():
            report.cancelled = True
            break
        report.clips += 1
        target = clip.with_name(clip.stem + MASK_SUFFIX + ".mp4")
        if target.exists() and not options.overwrite:
            report.kept += 1
            continue
        if model is None:
            model = segmenter if hasattr(segmenter, "detect") else segmenter()
        try:
            frames, fps = read_video_frames(clip)
        except DataError as e:
            logger.warning("%s; no mask made", e)
            report.skipped[e.category] = report.skipped.get(e.category, 0) + 1
            continue
        masks = mask_frames(frames, model, options.prompts, options.grow, options.min_score)
        if not masks.any():
            report.empty.append(clip.name)
            logger.warning("%s: none of %s found in any frame: no mask written", clip, ", ".join(options.prompts))
            continue
        with clip_writer(target, fps or 16.0) as writer:
            for mask in masks:
                writer.write(np.repeat(mask[..., None].astype(np.uint8) * 255, 3, axis=2))
        report.written += 1
        if on_clip is not None:
            on_clip(clip)
    return report
