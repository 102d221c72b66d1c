#!/usr/bin/env python
"""E2V data throughput in samples/s on a synthetic E2V set (A2's three elements, repeats 1/4/4) and the tiny i2v model.

- decode_preprocess: the pipeline's decoding / preprocessing modules only (DecodeTargetVideo,
  LoadReferences, BuildConditionClip), no encoder and no cache;
- cold_cache: `WanE2VDataLoader.prepare()` on an empty cache (decoding plus the tiny model's VAE, UMT5
  and CLIP encoders, writing the cache);
- warm_epoch: `load_batch` over every batch of an epoch after `prepare()` (cache reads only);
- windows: frame windows of concept clips (benchmarks/window_throughput.py): decode + preprocess items/s of HEAD
  against SLIDE (stride 17) on the same 10 s clips, and the cold caching cost per window (tiny t2v model).

Prints one JSON object with the three rates and warm_over_cold = warm_epoch / cold_cache.

    python benchmarks/data_throughput.py [--samples 16] [--frames 33] [--size 64]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def make_loader(model, dataset: Path, cache: Path):
    from modules.config.train_config import TrainConfig
    from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader

    config = TrainConfig.from_dict({"base_model_name": str(model.model_dir), "dataset_config": str(dataset),
                                    "cache_dir": str(cache), "train_device": "cpu"})
    return WanE2VDataLoader(config, model)


def decode_preprocess_rate(loader) -> tuple[float, int]:
    """Samples/s of DecodeTargetVideo -> LoadReferences -> BuildConditionClip over every sample."""
    from modules.dataLoader.e2v.discovery import discover_e2v_samples
    from modules.dataLoader.e2v.modules import BuildConditionClip, DecodeTargetVideo, LoadReferences
    from modules.dataLoader.pipeline.module import ItemContext, run_module
    from modules.model.condition_layout import layout_elements

    dataset = loader.datasets[0]
    height, width = loader._resolution(dataset)
    vae = dataset.processors.vae
    modules = [DecodeTargetVideo(dataset, loader.fps, loader.layout, height, width),
               LoadReferences(dataset, height, width), BuildConditionClip(vae.frame_conditioning, vae.frame_index)]
    samples, _ = discover_e2v_samples(dataset.data_root, dataset.elements)
    items = []
    for sample in samples:
        paths = {name: str(p) for name, p in sample.element_images.items() if p is not None}
        p = sum(r for _, r in layout_elements(dataset.elements, {n: True for n in paths}))
        items.append({"video_path": str(sample.video), "element_paths": paths, "num_reference_frames": p,
                      "window": None})
    start = time.perf_counter()
    for index, item in enumerate(items):
        fields = dict(item)
        ctx = ItemContext(seed=0, index=index, epoch=None)
        for module in modules:
            fields.update(run_module(module, fields, ctx))
        assert fields["condition_clip"].shape[1] == fields["num_frames"]
    return len(items) / (time.perf_counter() - start), len(items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16, help="synthetic E2V samples (default 16)")
    parser.add_argument("--frames", type=int, default=33, help="video frames, 4k+1 (default 33)")
    parser.add_argument("--size", type=int, default=64, help="video height and width, a multiple of 16 (default 64)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="repeat the warm epoch at least this long")
    args = parser.parse_args()
    if args.frames < 13 or (args.frames - 1) % 4 or args.size < 16 or args.size % 16 or args.samples < 1:
        parser.error("--frames must be 4k+1 >= 13 (9 reference frames need 4K + 1 = 13), --size a multiple of 16, "
                     "--samples >= 1")
    logging.basicConfig(level=logging.WARNING)

    import torch

    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
    from modules.synthetic.tiny_model import write_tiny_model

    with tempfile.TemporaryDirectory(prefix="e2v-throughput-") as tmp:
        work = Path(tmp)
        model = WanModelLoader().load(str(write_tiny_model("i2v", work / "model")), torch.device("cpu"))
        data = write_e2v_dataset(work / "data", count=args.samples, frames=args.frames, height=args.size,
                                 width=args.size)
        dataset = work / "dataset.json"
        dataset.write_text(json.dumps(e2v_dataset_json(data, args.size, args.size, args.frames)))

        decode_rate, count = decode_preprocess_rate(make_loader(model, dataset, work / "unused-cache"))

        loader = make_loader(model, dataset, work / "cache")
        start = time.perf_counter()
        loader.prepare()
        cold_rate = len(loader.items) / (time.perf_counter() - start)

        warm = make_loader(model, dataset, work / "cache")
        warm.prepare()  # warm: reads the cache
        epochs, loaded, start = 0, 0, time.perf_counter()
        while epochs < 1 or time.perf_counter() - start < args.min_seconds:
            for indices in warm.epoch_batches(epochs):
                warm.load_batch(indices, epochs)
                loaded += len(indices)
            epochs += 1
        warm_rate = loaded / (time.perf_counter() - start)

        from window_throughput import window_rates

        t2v = WanModelLoader().load(str(write_tiny_model("t2v", work / "t2v")), torch.device("cpu"))
        windows = window_rates(t2v, work / "windows")

    result = {
        "samples": count, "frames": args.frames, "size": args.size, "torch_threads": torch.get_num_threads(),
        "decode_preprocess_samples_per_s": round(decode_rate, 2),
        "cold_cache_samples_per_s": round(cold_rate, 2),
        "warm_epoch_samples_per_s": round(warm_rate, 2),
        "warm_epochs_timed": epochs,
        "warm_over_cold": round(warm_rate / cold_rate, 1),
        "windows": windows,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
