"""Frame windows' data cost (called by benchmarks/data_throughput.py): decode + preprocess items/s of HEAD
against SLIDE on the same 10 s clips, and the cold caching cost per window (decode, the tiny model's VAE and
UMT5, the cache write)."""
from __future__ import annotations

import time
from pathlib import Path


def window_rates(model, work: Path, clips: int = 4, frames: int = 161, size: int = 64, stride: int = 17) -> dict:
    from modules.config.train_config import TrainConfig
    from modules.dataLoader.pipeline.module import ItemContext, run_module
    from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(work / "clips", count=clips, frames=frames, height=size, width=size)
    result = {"clips": clips, "clip_frames": frames, "size": size, "window_frames": 17}
    for strategy in ("HEAD", "SLIDE"):
        config = TrainConfig.from_dict({
            "base_model_name": str(model.model_dir), "concepts": [{"path": str(data)}], "frames": 17,
            "resolution": [size, size], "frame_sample_strategy": strategy, "frame_stride": stride,
            "cache_dir": str(work / f"cache-{strategy}"), "train_device": "cpu"})
        loader = WanBaseDataLoader(config, model)
        decode = loader.pipeline.modules[0].modules[0]  # the video cache stage's DecodeClip
        sources = [item.source for item, _ in loader._discover()]
        run_module(decode, sources[0], ItemContext(seed=0, index=0, epoch=None))  # warm-up (codec, caches)
        start = time.perf_counter()
        for index, source in enumerate(sources):
            run_module(decode, source, ItemContext(seed=0, index=index, epoch=None))
        decode_seconds = time.perf_counter() - start
        start = time.perf_counter()
        loader.prepare()
        cold_seconds = time.perf_counter() - start
        result[strategy] = {"items": len(loader.items),
                            "decode_preprocess_items_per_s": round(len(sources) / decode_seconds, 2),
                            "decode_preprocess_clip_seconds_per_s": round(len(sources) * 17 / 16 / decode_seconds, 2),
                            "cold_cache_seconds_per_window": round(cold_seconds / len(loader.items), 4)}
    return result
