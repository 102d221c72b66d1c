"""Which frame windows of an E2V video train, decided without a model: the loader plans its items with it and
scripts/dataset_stats.py counts them, so the two cannot disagree."""
from __future__ import annotations

from pathlib import Path

from modules.config.e2v_dataset_config import E2VDatasetConfig
from modules.dataLoader.e2v.modules import DecodeTargetVideo
from modules.dataLoader.item_plan import ItemPlanner
from modules.dataLoader.windows import WindowOptions, plan_windows
from modules.util.enum import FrameSampleStrategy


def windowed(dataset: E2VDatasetConfig) -> bool:
    """Whether a dataset trains other windows than the first frames (FULL is HEAD: frame buckets already take
    the whole video up to max_frames)."""
    return dataset.frame_sample_strategy not in (FrameSampleStrategy.HEAD, FrameSampleStrategy.FULL)


def e2v_windows(planner: ItemPlanner, decoder: DecodeTargetVideo, dataset: E2VDatasetConfig, video: Path,
                video_fp: str, p: int) -> list[dict | None]:
    """The dataset's frame windows of a video with `p` reference frames: [None] for HEAD (the first frames)."""
    if not windowed(dataset):
        return [None]
    strategy = dataset.frame_sample_strategy
    probe = planner.probe(video, video_fp, decoder.fps, strategy == FrameSampleStrategy.KEYFRAME)
    length = decoder.window_frames(probe.frames, p)
    options = WindowOptions(strategy, dataset.frame_stride, dataset.frame_windows, dataset.max_frames)
    windows = plan_windows(probe.frames, length, options, probe.cuts)
    if probe.frames < length:  # too short for a window: HEAD reports it as it always did
        return [None]
    return [{"start": w.start, "frames": length, "total": probe.frames if w.start is None else None}
            for w in windows]
