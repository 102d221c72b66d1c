"""From concepts to planned items, without any model: the samples a concept holds and, per sample, each
window (at each length) at each target resolution that trains. The data loader encodes what this plans;
`scripts/dataset_stats.py` counts it.

A clip is probed (its frame count at the training fps, its size and, for KEYFRAME, its scene cuts) only when
windows other than the first frames are planned, or when asked (statistics); the probe is cached like latents.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from modules.config.train_config import DEFAULT_MAX_FRAME_PIXELS, ConceptConfig
from modules.dataLoader.cache import DiskCache, file_fingerprint
from modules.dataLoader.concept_options import ConceptOptions
from modules.dataLoader.concept_selection import concept_path_problem
from modules.dataLoader.discovery import RawSample, discover_concept, read_caption
from modules.dataLoader.errors import UNSUPPORTED_FILE, DataError
from modules.dataLoader.pipeline import CacheStage, ItemContext, Pipeline, PipelineModule
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.video_io import probe_video
from modules.dataLoader.windows import FrameWindow, detect_cuts, plan_windows
from modules.util.enum import FrameSampleStrategy, PromptSource
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


class ProbeClip(PipelineModule):
    """How many frames a clip has at the training fps (`clip_frames`), its [H, W] (`source_size`) and, when
    asked, where its scene cuts are (`cuts`)."""

    inputs = ("media_path", "probe")
    outputs = ("clip_frames", "source_size", "cuts")

    def __init__(self, background: Sequence[int], max_pixels: int = DEFAULT_MAX_FRAME_PIXELS):
        self.background = list(background)
        self.max_pixels = max_pixels  # not in the identity: it decides which files are read, not what they give

    def cache_identity(self) -> Any:
        return 2  # 2: cuts found on 64 px thumbnails

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        thumbnails, size = probe_video(item["media_path"], item["probe"]["fps"], self.background,
                                       max_pixels=self.max_pixels)
        return {"clip_frames": len(thumbnails), "source_size": [int(size[0]), int(size[1])],
                "cuts": detect_cuts(thumbnails) if item["probe"]["cuts"] else []}


@dataclasses.dataclass(frozen=True)
class Probe:
    frames: int  # at the training fps
    size: tuple[int, int]  # [H, W] of the source
    cuts: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PlannedItem:
    sample: RawSample
    concept: ConceptConfig
    options: ConceptOptions
    media_fp: str
    clip: dict[str, Any]  # fps, start (None: RANDOM), frames, total (RANDOM only), resolution [h, w]
    probe: Probe | None  # None: not probed (HEAD at one length)

    @property
    def caption(self) -> str:
        return self.options.caption(self.sample.caption)


class ItemPlanner:
    def __init__(self, run_fps: float, background: Sequence[int], cache: DiskCache | None, seed: int = 0,
                 max_pixels: int = DEFAULT_MAX_FRAME_PIXELS, side_files: Callable[[Path], bool] | None = None,
                 not_data: Collection[Path] = ()):
        self.run_fps = run_fps  # the run's fps (config.fps or the variant's)
        # a sample's input files on the base that reads them (VACE's `x_control.mp4`): never clips of their own
        self.side_files = side_files
        self.not_data = not_data  # the run's workspace, cache and output: never read as data
        probe = ProbeClip(background, max_pixels)
        modules = [CacheStage([probe], ["media_fp", "probe"], cache, "probe", name="probe")] if cache else [probe]
        self.pipeline = Pipeline(["media_path", "media_fp", "probe"], modules, seed)

    def samples(self, concept: ConceptConfig, skips: SkipCounter | None = None) -> list[RawSample]:
        """The concept's samples; a media file that is no regular file (a link to /dev/zero) is a skipped sample in
        `skips` (without `skips`: one warning)."""
        problem = concept_path_problem(concept.path)
        if problem:
            raise UserError(f"concept path {problem} (concepts[].path)")
        unusable: list[tuple[Path, str]] | None = [] if skips is not None else None
        try:
            found = discover_concept(concept.path, concept.include_subdirectories, concept.prompt_field,
                                     concept.prompt_source == PromptSource.SAMPLE, self.side_files, self.not_data,
                                     unusable)
        except DataError as e:
            raise UserError(str(e)) from None
        for path, why in unusable or ():
            skips.record(path, UNSUPPORTED_FILE, why)
        if not found:
            logger.warning("concept %s holds no video or image", concept.path)
        if concept.prompt_source == PromptSource.CONCEPT:  # one caption for the whole concept
            caption = read_caption(Path(concept.prompt_path))
            found = [dataclasses.replace(sample, caption=caption) for sample in found]
        return found

    def plan(self, concept: ConceptConfig, options: ConceptOptions, skips: SkipCounter,
             always_probe: bool = False, samples: list[RawSample] | None = None) -> list[PlannedItem]:
        """Every item of a concept (of `samples`, default all the concept's), in sample order, then resolution,
        then length and start. A sample that cannot be read is recorded in `skips` and gives none."""
        planned = []
        for sample in self.samples(concept, skips) if samples is None else samples:
            try:
                media_fp = file_fingerprint(sample.media_path)
                planned += self.plan_sample(sample, concept, options, media_fp, always_probe)
            except OSError as e:
                skips.record(sample.media_path, "unreadable file", str(e))
            except DataError as e:
                skips.record_error(e)
        return planned

    def plan_sample(self, sample: RawSample, concept: ConceptConfig, options: ConceptOptions, media_fp: str,
                    always_probe: bool = False) -> list[PlannedItem]:
        fps = options.fps or self.run_fps
        probe = None
        # several lengths: a short clip gives one window, not one per length
        if always_probe or options.windowed or len(options.lengths) > 1:
            probe = self.probe(sample.media_path, media_fp, fps,
                               options.windows.strategy == FrameSampleStrategy.KEYFRAME)
        if probe is not None and (options.windowed or len(options.lengths) > 1):
            windows = {w for length in options.lengths
                       for w in plan_windows(probe.frames, length, options.windows, probe.cuts)}
            windows = sorted(windows, key=_window_order)
        else:  # HEAD: decoding cuts a short clip to what it holds
            windows = [FrameWindow(0, length) for length in options.lengths]
        total = probe.frames if probe is not None else None
        return [PlannedItem(sample, concept, options, media_fp,
                            # `total` only where a window is drawn from it (RANDOM): equal windows share a cache entry
                            {"fps": fps, "start": w.start, "frames": w.frames,
                             "total": total if w.start is None else None, "resolution": list(resolution)}, probe)
                for resolution in options.resolutions for w in windows]

    def probe(self, path: Path, media_fp: str, fps: float, cuts: bool) -> Probe:
        fields = self.pipeline.run({"media_path": str(path), "media_fp": media_fp, "probe": {"fps": fps, "cuts": cuts}},
                                   self.pipeline.context(0, 0))
        return Probe(int(fields["clip_frames"]), tuple(fields["source_size"]), tuple(fields["cuts"]))


def _window_order(window: FrameWindow) -> tuple:
    return (window.frames, -1 if window.start is None else window.start)
