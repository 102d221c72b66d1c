#!/usr/bin/env python
"""The embedded demo. Default: Elements-to-Video on a tiny random Wan I2V model — synthetic videos with
three reference elements each (subject, object, background), a few hundred LoRA steps on the CPU, then a
video generated from held-out elements. `--plain` runs a text-to-video LoRA demo instead.
Everything is made if missing; the script prints where it is."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


from _bootstrap import REPO_ROOT, run_main


def e2v_setup(folder: Path, steps: int) -> tuple[dict, list[str]]:
    from modules.util.synthetic_data import e2v_dataset_json, write_e2v_dataset

    data = folder / "e2v-data"
    held_out = folder / "e2v-held-out"
    if not (held_out / "009_subject.png").is_file():
        write_e2v_dataset(data, count=9, frames=17, height=32, width=32)
        held_out.mkdir(parents=True, exist_ok=True)
        for file in data.glob("009*"):  # sample 009 is never trained on: its elements drive the final sample
            shutil.move(str(file), held_out / file.name)
    dataset_json = folder / "e2v-dataset.json"
    dataset_json.write_text(json.dumps(e2v_dataset_json(data, 32, 32, 17), indent=2))
    elements = [str(held_out / f"009_{name}.png") for name in ("subject", "object", "background")]
    config = {"dataset_config": str(dataset_json), "concepts": [], "lora_rank": 16, "lora_alpha": 16,
              "learning_rate": 2e-3, "batch_size": 2, "max_steps": steps, "timestep_distribution": "LOGIT_NORMAL",
              "samples": [{"prompt": (held_out / "009.txt").read_text(), "frames": 17, "height": 32, "width": 32,
                           "steps": 10, "elements": elements}]}
    return config, elements


def plain_setup(folder: Path, steps: int, variant: str) -> dict:
    from modules.util.synthetic_data import write_video_dataset

    data = write_video_dataset(folder / "data", count=6, frames=17, height=64, width=64)
    size = 64 if variant == "ti2v" else 32  # TI2V's VAE compresses 16x spatially
    image = ""
    if variant == "i2v":
        from PIL import Image

        from modules.dataLoader.video_io import read_video_frames

        frames, _ = read_video_frames(data / "000.mp4")
        Image.fromarray(frames[0]).save(data / "000.png")
        image = str(data / "000.png")
    return {"concepts": [{"path": str(data)}], "resolution": [size, size], "frames": 9, "max_steps": steps,
            "learning_rate": 1e-3, "lora_rank": 8, "lora_alpha": 8,
            "samples": [{"prompt": "a red circle moving left to right", "frames": 9, "height": size, "width": size,
                         "steps": 8, "image": image}]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", action="store_true", help="text/image-to-video LoRA demo instead of E2V")
    parser.add_argument("--variant", default=None, choices=["t2v", "i2v", "ti2v", "a14b"],
                        help="tiny model variant (default: i2v for E2V, t2v with --plain)")
    parser.add_argument("--folder", default=str(REPO_ROOT / "demo"), help="where the demo's files go")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    from modules.trainer.GenericTrainer import GenericTrainer
    from modules.util.config.loading import load_train_config
    from modules.util.tiny_model import write_tiny_model

    variant = args.variant or ("t2v" if args.plain else "i2v")
    name = f"{variant}-plain" if args.plain else f"{variant}-e2v"
    folder = Path(args.folder)
    model_dir = folder / f"tiny-{variant}"
    if not (model_dir / "model_index.json").is_file():
        print(f"making a tiny random {variant} model in {model_dir}")
        write_tiny_model(variant, model_dir)
    config = plain_setup(folder, args.steps, variant) if args.plain else e2v_setup(folder, args.steps)[0]
    config.update({
        "base_model_name": str(model_dir), "epochs": 100000, "gradient_checkpointing": False,
        "workspace_dir": str(folder / "workspace" / name), "cache_dir": str(folder / "cache"),
        "output_model_destination": str(folder / "output" / f"{name}-lora.safetensors"),
        "backup_after": 100, "backup_after_unit": "STEP",
    })
    config_path = folder / f"demo-{name}.json"
    config_path.write_text(json.dumps(config, indent=4))
    trainer = GenericTrainer(load_train_config(config_path))
    losses: list[float] = []
    trainer.callbacks.on_update = lambda update: losses.append(update.loss)
    trainer.start()
    trainer.train()
    outputs = trainer.end()  # samples once more with the final weights, then saves
    window = max(1, min(20, len(losses) // 4))
    first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
    print("\nDemo finished.")
    print(f"  loss:     {first:.4f} (first {window} steps) -> {last:.4f} (last {window}), {first / last:.2f}x lower")
    print(f"  config:   {config_path}   (re-run: python scripts/train.py --config-path {config_path})")
    for path in outputs:
        print(f"  LoRA:     {path}")
    for path in trainer.sample_paths[-1:]:
        what = "from held-out elements" if not args.plain else ""
        print(f"  sample:   {path} {what} (+ {path.with_suffix('.png').name})")
    print(f"  logs:     {Path(config['workspace_dir']) / 'logs'}  tensorboard: {Path(config['workspace_dir']) / 'tensorboard'}")
    return 0


if __name__ == "__main__":
    run_main(main)
