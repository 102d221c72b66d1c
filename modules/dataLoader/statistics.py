"""What each concept of a config trains on, counted without loading any model (`scripts/dataset_stats.py`, the
GUI's concepts tab): files, usable samples, items (windows x lengths x resolutions, balanced) per length, seconds,
the bucket histogram, captions missing / empty / cut by the text encoder, and skipped files by reason."""
from __future__ import annotations

import collections
import dataclasses
import math
from pathlib import Path
from typing import Any

from modules.config.train_config import ConceptConfig, TrainConfig
from modules.dataLoader.buckets import area_resolutions, choose_bucket
from modules.dataLoader.concept_options import concept_options
from modules.dataLoader.encoding_modules import caption_tokens
from modules.dataLoader.frames import largest_4k1
from modules.dataLoader.item_plan import PlannedItem
from modules.dataLoader.verdict import ConceptVerdict, DataVerdict
from modules.model.WanModel import TEXT_SEQ_LEN
from modules.util.enum import BalancingStrategy
from modules.util.resolution_text import clip_text


@dataclasses.dataclass
class ConceptStatistics:
    name: str
    path: str
    type: str  # STANDARD or VALIDATION
    files: int  # media files found
    samples: int  # files that give at least one item
    items: int  # training items per epoch: windows x lengths x resolutions, balanced (concepts[].balancing)
    items_per_length: dict[int, int]
    seconds: float  # length of the usable samples at the training fps
    buckets: dict[str, int]  # "832x480, 81 frames" (resolution_text.clip_text) -> items
    captions: dict[str, int | None]  # missing (no .txt), empty, truncated (None: no tokenizer to count with)
    skipped: dict[str, int]  # reason -> files
    error: str = ""  # what refuses the run at start-up (an Animate-2 copy, no clip with its inputs)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["items_per_length"] = {str(k): v for k, v in sorted(self.items_per_length.items())}
        return data


def dataset_statistics(config: TrainConfig, run_fps: float, tokenizer=None,
                       use_cache: bool = True) -> list[ConceptStatistics]:
    """Statistics of every enabled concept, from start-up's own data verdict (`verdict.py`: what is usable and
    what is skipped is what training finds). `run_fps`: config.fps or the variant's. `tokenizer`: UMT5's, to count
    captions the text encoder cuts (None: not counted). With `use_cache` the probes are read from (and written to)
    the run's cache, as training does."""
    return [_concept(verdict, config, tokenizer) for verdict in DataVerdict(config, run_fps, use_cache).all()]


def _concept(verdict: ConceptVerdict, config: TrainConfig, tokenizer) -> ConceptStatistics:
    concept, items, files = verdict.concept, verdict.items, verdict.files
    options = concept_options(concept, config)
    per_length: collections.Counter = collections.Counter()
    buckets: collections.Counter = collections.Counter()
    for item in items:
        bucket = _bucket(item, config.aspect_bucketing)
        per_length[bucket[0]] += 1
        buckets[clip_text(*bucket)] += 1
    # per epoch, as the loader's epoch_members: REPEATS b -> b per item (rounded over the concept); SAMPLES s -> s
    scale = _epoch_items(len(items), concept) / len(items) if items else 0
    per_length = collections.Counter({k: round(v * scale) for k, v in per_length.items()})
    buckets = collections.Counter({k: round(v * scale) for k, v in buckets.items()})
    samples = {item.sample.media_path: item for item in items}
    seconds = sum(item.probe.frames / item.clip["fps"] for item in samples.values())
    return ConceptStatistics(
        name=concept.display_name(), path=concept.path, type=concept.type.name, files=len(files),
        samples=len(samples), items=_epoch_items(len(items), concept), items_per_length=dict(per_length),
        seconds=round(seconds, 3), buckets=dict(sorted(buckets.items())),
        captions=_captions(files, options.caption, tokenizer), skipped=verdict.skip_counts(), error=verdict.error)


def _epoch_items(count: int, concept: ConceptConfig) -> int:
    """Items of an epoch from `count` planned ones, as `batching.epoch_members` selects them."""
    if concept.balancing_strategy == BalancingStrategy.SAMPLES:
        return max(1, round(concept.balancing)) if count else 0
    whole = math.floor(concept.balancing)
    return whole * count + round((concept.balancing - whole) * count)


def _bucket(item: PlannedItem, aspect_bucketing: bool) -> tuple[int, int, int]:
    """(frames, height, width) the item trains at, as the loader's decoder chooses it."""
    height, width = item.clip["resolution"]
    targets = area_resolutions(height * width) if aspect_bucketing else [(height, width)]
    available = item.probe.frames - (item.clip["start"] or 0)
    count = largest_4k1(min(item.clip["frames"], available))
    bucket = choose_bucket(*item.probe.size, count, targets, [count])
    return bucket.frames, bucket.height, bucket.width


def _captions(files, caption, tokenizer) -> dict[str, int | None]:
    missing = sum(1 for s in files if Path(s.source).is_dir() and not s.media_path.with_suffix(".txt").exists())
    empty = sum(1 for s in files if not s.caption.strip())
    truncated = None
    if tokenizer is not None:
        truncated = sum(1 for s in files if caption_tokens(tokenizer, caption(s.caption)) > TEXT_SEQ_LEN)
    return {"missing": missing, "empty": empty, "truncated": truncated}


def describe(stats: list[ConceptStatistics]) -> list[str]:
    """The statistics as text lines (the script's table, the GUI's concepts tab)."""
    lines = []
    for s in stats:
        truncated = "not counted (no tokenizer)" if s.captions["truncated"] is None else s.captions["truncated"]
        lines += [f"{s.name} ({s.type.lower()}, {s.path})",
                  f"  {s.files} files, {s.samples} usable samples, {s.seconds:.1f} s, {s.items} items per epoch",
                  "  items per length: " + ", ".join(f"{k} frames: {v}" for k, v in sorted(s.items_per_length.items())),
                  "  buckets: " + "; ".join(f"{k}: {v}" for k, v in s.buckets.items()),
                  f"  captions: {s.captions['missing']} missing, {s.captions['empty']} empty, {truncated} cut at 512 tokens"]
        if s.skipped:
            lines.append("  skipped: " + ", ".join(f"{reason}: {n}" for reason, n in s.skipped.items()))
        if s.error:
            lines.append(f"  refused: {s.error}")
    lines.append(f"{sum(s.items for s in stats if s.type == 'STANDARD')} training items per epoch")
    return lines


def model_facts(model_dir: Path, fps: float):
    """(training fps, UMT5 tokenizer or None) from the model folder's JSON configs and tokenizer files alone:
    the config's fps, else the variant's; no weights are read."""
    from modules.model.detection import detect_variant

    if not fps:
        fps = detect_variant(model_dir).fps
    tokenizer = None
    if (model_dir / "tokenizer").is_dir():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir / "tokenizer")
    return fps, tokenizer
