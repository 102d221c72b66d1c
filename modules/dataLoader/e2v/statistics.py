"""What each dataset of an E2V config trains on, counted without loading any model (scripts/dataset_stats.py):
the same numbers as the clips' concepts (`modules/dataLoader/statistics.py`), from the loader's own discovery,
window plan (`plan.py`) and frame rule (`DecodeTargetVideo`)."""
from __future__ import annotations

import collections
from pathlib import Path

from modules.config.e2v_dataset_config import E2VDatasetConfig, load_dataset_config
from modules.config.train_config import TrainConfig
from modules.dataLoader.cache import DiskCache, file_fingerprint
from modules.dataLoader.discovery import read_caption
from modules.dataLoader.e2v.discovery import discover_e2v_samples
from modules.dataLoader.e2v.modules import DecodeTargetVideo
from modules.dataLoader.e2v.plan import e2v_windows
from modules.dataLoader.encoding_modules import caption_tokens
from modules.dataLoader.errors import TOO_FEW_FRAMES, DataError
from modules.dataLoader.item_plan import ItemPlanner
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.statistics import ConceptStatistics
from modules.model.condition_layout import layout_elements
from modules.model.detection import detect_variant
from modules.model.WanModel import TEXT_SEQ_LEN
from modules.util.resolution_text import clip_text


def e2v_dataset_statistics(config: TrainConfig, run_fps: float, tokenizer=None,
                           use_cache: bool = True) -> list[ConceptStatistics]:
    """Statistics of every dataset of `config.dataset_config` (STANDARD and VALIDATION), as ConceptStatistics
    named `datasets[i]`. A sample's reference frames count with the VAE pathway unless e2v_type is `clip` or the
    base is a VACE model (its references are latent frames of their own, outside the clip)."""
    variant = detect_variant(config.base_model_name)
    spatial = variant.vae_scale_spatial * variant.patch_size[1]
    cache = DiskCache(config.cache_dir) if use_cache and config.latent_caching else None
    planner = ItemPlanner(run_fps, config.transparent_background, cache, config.seed)
    takes_frames = config.e2v.e2v_type != "clip" and not variant.vace_layers
    return [_dataset(f"datasets[{index}]", dataset, planner, config, run_fps, spatial, tokenizer, takes_frames)
            for index, dataset in enumerate(load_dataset_config(config.dataset_config).datasets)]


def _dataset(name: str, dataset: E2VDatasetConfig, planner: ItemPlanner, config: TrainConfig, fps: float,
             spatial: int, tokenizer, takes_frames: bool) -> ConceptStatistics:
    height, width = (max(spatial, v // spatial * spatial) for v in dataset.vae_resolution)  # as the loader's
    decoder = DecodeTargetVideo(dataset, fps, config.e2v.target_layout, height, width)
    skips = SkipCounter()
    samples, skipped = discover_e2v_samples(dataset.data_root, dataset.elements) \
        if Path(dataset.data_root).is_dir() else ([], [])
    for path, reason in skipped:
        skips.record(path, "missing element", reason)
    per_length: collections.Counter = collections.Counter()
    seconds, usable, captions = 0.0, [], []
    for sample in samples:
        try:
            fp = file_fingerprint(sample.video)
            p = sum(r for _, r in layout_elements(dataset.elements, sample.present())) if takes_frames else 0
            frames = planner.probe(sample.video, fp, fps, False).frames
            windows = e2v_windows(planner, decoder, dataset, sample.video, fp, p)
        except OSError as e:
            skips.record(sample.video, "unreadable file", str(e))
            continue
        except DataError as e:
            skips.record_error(e)
            continue
        if not decoder.usable(frames, p):
            skips.record(sample.video, TOO_FEW_FRAMES, f"{frames} frames at {fps:g} fps are too few for {p} "
                         f"reference frames and a {config.e2v.target_layout} target")
            continue
        per_length[decoder.target_frames(frames, p)] += len(windows)
        seconds += frames / fps
        usable.append(sample)
        captions.append(read_caption(sample.caption_path) if sample.caption_path else None)
    truncated = None if tokenizer is None else \
        sum(1 for c in captions if c and caption_tokens(tokenizer, c) > TEXT_SEQ_LEN)
    return ConceptStatistics(
        name=name, path=dataset.data_root, type=dataset.type.name, files=len(samples) + len(skipped),
        samples=len(usable), items=sum(per_length.values()), items_per_length=dict(per_length),
        seconds=round(seconds, 3),
        buckets={clip_text(length, height, width): count for length, count in sorted(per_length.items())},
        captions={"missing": captions.count(None), "empty": sum(1 for c in captions if c == ""),
                  "truncated": truncated},
        skipped=dict(collections.Counter(entry.category for entry in skips.entries)))
