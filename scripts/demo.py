#!/usr/bin/env python
"""The embedded demo: a tiny random Wan model and synthetic videos (made if missing), a short LoRA
training on the CPU (or GPU), a sample video. Prints where everything is."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import _bootstrap  # noqa: F401  (import path, offline mode)

from _bootstrap import REPO_ROOT, run_main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", default="t2v", choices=["t2v", "i2v", "ti2v", "a14b"])
    parser.add_argument("--folder", default=str(REPO_ROOT / "demo"), help="where the demo's files go")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()

    from modules.trainer.GenericTrainer import GenericTrainer
    from modules.util.config.loading import load_train_config
    from modules.util.synthetic_data import write_video_dataset
    from modules.util.tiny_model import write_tiny_model

    folder = Path(args.folder)
    model_dir = folder / f"tiny-{args.variant}"
    if not (model_dir / "model_index.json").is_file():
        print(f"making a tiny random {args.variant} model in {model_dir}")
        write_tiny_model(args.variant, model_dir)
    data_dir = write_video_dataset(folder / "data", count=6, frames=17, height=64, width=64)
    size = 64 if args.variant == "ti2v" else 32  # TI2V's VAE compresses 16x spatially
    config_path = folder / f"demo-{args.variant}.json"
    config = {
        "base_model_name": str(model_dir), "concepts": [{"path": str(data_dir)}],
        "resolution": [size, size], "frames": 9, "epochs": 1000, "max_steps": args.steps,
        "learning_rate": 1e-3, "lora_rank": 8, "lora_alpha": 8, "gradient_checkpointing": False,
        "workspace_dir": str(folder / "workspace" / args.variant), "cache_dir": str(folder / "cache"),
        "output_model_destination": str(folder / "output" / f"{args.variant}-lora.safetensors"),
        "backup_after": 1, "backup_after_unit": "EPOCH" if args.steps > 40 else "NEVER",
        "samples": [{"prompt": "a red circle moving left to right", "frames": 9, "height": size, "width": size,
                     "steps": 8, "image": str(data_dir / "000.png") if args.variant == "i2v" else ""}],
    }
    if args.variant == "i2v":
        from modules.dataLoader.video_io import read_video_frames
        from PIL import Image

        frames, _ = read_video_frames(data_dir / "000.mp4")
        Image.fromarray(frames[0]).save(data_dir / "000.png")
    config_path.write_text(json.dumps(config, indent=4))
    trainer = GenericTrainer(load_train_config(config_path))
    trainer.start()
    trainer.train()
    outputs = trainer.end()  # samples once more with the final weights, then saves
    samples = trainer.sample_paths[-1:]
    print("\nDemo finished.")
    print(f"  config:   {config_path}   (re-run: python scripts/train.py --config-path {config_path})")
    for path in outputs:
        print(f"  LoRA:     {path}")
    for path in samples:
        print(f"  sample:   {path}  (+ {path.with_suffix('.png').name})")
    print(f"  logs:     {Path(config['workspace_dir']) / 'logs'}  tensorboard: {Path(config['workspace_dir']) / 'tensorboard'}")
    return 0


if __name__ == "__main__":
    run_main(main)
