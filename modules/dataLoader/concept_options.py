"""The clip and caption options of one concept: its own value where it sets one, else the run's.

The one place that resolves per-concept overrides, so the loaders, the dataset statistics and the GUI's
concept summary agree on what a concept trains on.
"""
from __future__ import annotations

import dataclasses

from modules.config.train_config import ConceptConfig, TrainConfig, frame_lengths, resolutions
from modules.dataLoader.windows import WindowOptions
from modules.util.enum import FrameSampleStrategy

# Keys a concept may set for itself (None there: the run's value).
OVERRIDABLE = ("fps", "frames", "resolution", "frame_sample_strategy", "frame_stride", "frame_windows", "max_frames",
               "caption_dropout_probability")


@dataclasses.dataclass(frozen=True)
class ConceptOptions:
    fps: float  # 0: the variant's own
    lengths: tuple[int, ...]  # window lengths (4k+1)
    resolutions: tuple[tuple[int, int], ...]  # [height, width] targets (their areas with aspect bucketing)
    windows: WindowOptions
    caption_prefix: str
    caption_suffix: str
    caption_dropout: float
    loss_weight: float

    @property
    def windowed(self) -> bool:
        """Whether windows other than the first `length` frames train (the clip's length must be known)."""
        return self.windows.strategy != FrameSampleStrategy.HEAD

    def caption(self, text: str) -> str:
        """The caption as trained: prefix + text + suffix."""
        return f"{self.caption_prefix}{text}{self.caption_suffix}"


def concept_options(concept: ConceptConfig, config: TrainConfig) -> ConceptOptions:
    value = {key: getattr(concept, key) if getattr(concept, key) is not None else getattr(config, key)
             for key in OVERRIDABLE}
    windows = WindowOptions(value["frame_sample_strategy"], value["frame_stride"], value["frame_windows"],
                            value["max_frames"])
    return ConceptOptions(
        fps=value["fps"], lengths=tuple(sorted(set(frame_lengths(value["frames"])))),
        resolutions=tuple((h, w) for h, w in resolutions(value["resolution"])), windows=windows,
        caption_prefix=concept.caption_prefix, caption_suffix=concept.caption_suffix,
        caption_dropout=value["caption_dropout_probability"], loss_weight=concept.loss_weight)
