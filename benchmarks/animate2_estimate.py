#!/usr/bin/env python
"""The VRAM estimate (`modules/modelSetup/memory_estimate.py`) of Wan2.2-Animate-2-14B LoRA training, for the
table in docs/animate2.md: a config-only folder with diffusers' full-size `WanAnimate2Transformer3DModel` config
(its defaults are the 14B's: dim 5120, 40 layers, 40 heads, ffn 13824) beside the tiny Animate-2 folder's VAE, UMT5
and CLIP configs, estimated for a few resolutions, frame counts and memory features. An estimate, not a fake-CUDA
measurement: the Animate-2 step has not been measured at full size (its terms beyond Wan's are modelled).

    python benchmarks/animate2_estimate.py          # prints one JSON object
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [((256, 256), 17), ((480, 480), 33), ((832, 480), 81)]
FEATURES = {"gradient checkpointing": {}, "+ fp8 base": {"base_weight_format": "FP8"},
            "+ fp8 base, 30 blocks swapped": {"base_weight_format": "FP8", "blocks_to_swap": 30}}


def main() -> None:
    from diffusers import WanAnimate2Transformer3DModel

    from modules.config.train_config import TrainConfig
    from modules.modelSetup.memory_estimate import estimate
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.synthetic.tiny_animate2 import write_tiny_animate2

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_tiny_animate2(Path(tmp) / "model")
        small = WanAnimate2Transformer3DModel.from_config({"num_layers": 1, "dim": 64, "num_heads": 2, "ffn_dim": 64})
        full = {**{k: v for k, v in small.config.items() if not k.startswith("_")}, "dim": 5120, "num_heads": 40,
                "num_layers": 40, "ffn_dim": 13824, "_class_name": "WanAnimate2Transformer3DModel"}
        (folder / "transformer" / "config.json").write_text(json.dumps(full), encoding="utf-8")
        data = write_video_dataset(Path(tmp) / "data", count=1)
        rows = []
        for (width, height), frames in CASES:
            for name, extra in FEATURES.items():
                config = TrainConfig.from_dict({
                    "base_model_name": str(folder), "concepts": [{"path": str(data)}], "resolution": [width, height],
                    "frames": frames, "checkpointing": {"policy": "FULL"}, "lora_rank": 32, "lora_alpha": 32,
                    "workspace_dir": str(Path(tmp) / "ws"), "cache_dir": str(Path(tmp) / "cache"),
                    "output_model_destination": str(Path(tmp) / "out.safetensors"), **extra})
                result = estimate(config)
                rows.append({"size": f"{width}x{height}x{frames}", "features": name,
                             "peak_gib": round(result.peak_gib, 1),
                             "driving_kv_cache_gib": round(result.phases["training"]["activations.driving_kv_cache"],
                                                           1)})
    print(json.dumps({"model": "Wan2.2-Animate-2-14B (config)", "lora_rank": 32, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
