#!/usr/bin/env python
"""The embedded demo. Default (`--shapes`): a tiny T2V with the trained VAE (tests/fixtures/tiny_wan_vae) fully
fine-tuned from scratch on a red circle moving right and a blue square moving down; it samples both prompts and
prints what the samples show (colour masks, blob shape, centroids): "red circle moving right: yes". `--e2v`:
Elements-to-Video on a tiny random Wan I2V model (synthetic videos with three reference elements each: subject,
object, background), a few hundred LoRA steps, then a video generated from held-out elements. `--plain` runs a
text-to-video LoRA demo. Everything is made if missing; the script prints where it is."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from _bootstrap import REPO_ROOT, OneLineArgumentParser, one_cpu_thread, run_main

from modules.synthetic.shapes_training import STEPS as SHAPES_STEPS  # (a plain dict module: --help stays instant)


def e2v_setup(folder: Path, steps: int) -> tuple[dict, list[str]]:
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset

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
    from modules.synthetic.synthetic_data import write_video_dataset

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


def shapes_setup(folder: Path, steps: int) -> dict:
    from modules.synthetic.shape_clips import BLUE_SQUARE_DOWN, RED_CIRCLE_RIGHT, write_motif_dataset
    from modules.synthetic.shapes_training import FRAMES, RECIPE, SIZE

    data = folder / "shapes-data"
    if not (data / "011.txt").is_file():
        write_motif_dataset(data, [RED_CIRCLE_RIGHT, BLUE_SQUARE_DOWN], 6, FRAMES, SIZE, SIZE, seed=1)
    # the learning tests' recipe (a full fine-tune from scratch), with a sample of each prompt at the end
    return {**RECIPE, "concepts": [{"path": str(data)}], "max_steps": steps,
            "samples": [{"prompt": motif.prompt, "frames": FRAMES, "height": SIZE, "width": SIZE,
                         "steps": 12, "cfg_scale": 1.0, "seed": 0} for motif in (RED_CIRCLE_RIGHT, BLUE_SQUARE_DOWN)]}


def shapes_verdict(model, strip: Path | None) -> None:
    """Samples each prompt with 5 seeds, prints what they show, and writes the frame strip if asked."""
    import numpy as np

    from modules.config.train_config import SampleConfig
    from modules.modelSampler.WanModelSampler import WanModelSampler
    from modules.synthetic.shape_clips import BLUE_SQUARE_DOWN, RED_CIRCLE_RIGHT, SQUARE_CORNER_RATIO, matches, measure
    from modules.synthetic.shapes_training import FRAMES, SAMPLER, SIZE

    sampler = WanModelSampler(model)
    rows = []
    for motif in (RED_CIRCLE_RIGHT, BLUE_SQUARE_DOWN):
        videos = [sampler.generate(SampleConfig(prompt=motif.prompt, frames=FRAMES, height=SIZE,
                                                width=SIZE, steps=12, cfg_scale=1.0, seed=seed,
                                                sampler=SAMPLER), False)
                  for seed in range(5)]
        hits = sum(matches(video, motif) for video in videos)
        first = measure(videos[0], motif)
        seen = (f"median corner ratio {first.corners:.2f} (square >= {SQUARE_CORNER_RATIO}), centroid "
                f"{first.slope_along:+.2f} px/frame {motif.direction}"
                if first.shape_ok else f"no {motif.colour} shape")
        print(f"  {motif.colour} {motif.shape} moving {motif.direction}: {'yes' if hits >= 4 else 'no'} "
              f"({hits}/5 seeds show it; seed 0: {first.coverage:.0%} {motif.colour} pixels, {seen})")
        rows.append(np.concatenate(list(videos[0]), axis=1))
    if strip is not None:
        from PIL import Image

        image = Image.fromarray(np.concatenate(rows, axis=0))
        image.resize((image.width * 2, image.height * 2), Image.NEAREST).save(strip)
        print(f"  strip:    {strip}")


def main() -> int:
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", action="store_true",
                        help="the default: fine-tune a tiny T2V with the trained VAE on moving shapes and measure its "
                             "samples")
    parser.add_argument("--e2v", action="store_true", help="Elements-to-Video LoRA demo on a tiny random I2V model")
    parser.add_argument("--plain", action="store_true", help="text/image-to-video LoRA demo")
    parser.add_argument("--variant", default=None, choices=["t2v", "i2v", "ti2v", "a14b"],
                        help="tiny model variant (default: i2v for E2V, t2v with --plain)")
    parser.add_argument("--folder", default=str(REPO_ROOT / "demo"), help="where the demo's files go")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"training steps (default: {SHAPES_STEPS} shapes, 300 LoRA demos)")
    parser.add_argument("--strip", default=None, help="--shapes: also write a PNG strip of seed 0's frames here")
    args = parser.parse_args()
    if args.shapes + args.e2v + args.plain > 1:
        parser.error("--shapes, --e2v and --plain are different demos: choose one")
    shapes = not (args.e2v or args.plain)
    if args.variant and shapes:
        parser.error("--variant applies to the LoRA demos (--e2v, --plain); the shapes demo trains the tiny T2V")
    steps = args.steps or (SHAPES_STEPS if shapes else 300)
    one_cpu_thread()

    from modules.config.loading import load_train_config
    from modules.synthetic.tiny_model import write_tiny_model
    from modules.trainer.GenericTrainer import GenericTrainer

    variant = args.variant or ("t2v" if args.plain or shapes else "i2v")
    name = "t2v-shapes" if shapes else f"{variant}-plain" if args.plain else f"{variant}-e2v"
    folder = Path(args.folder)
    model_dir = folder / ("tiny-t2v-trained-vae" if shapes else f"tiny-{variant}")
    if not (model_dir / "model_index.json").is_file():
        print(f"making a tiny {variant} model{' with the trained VAE' if shapes else ''} in {model_dir}")
        write_tiny_model(variant, model_dir, trained_vae=shapes)
    if shapes:
        config = shapes_setup(folder, steps)
    else:
        config = plain_setup(folder, steps, variant) if args.plain else e2v_setup(folder, steps)[0]
    output = f"{name}-model" if shapes else f"{name}-lora.safetensors"
    config.update({
        "base_model_name": str(model_dir), "epochs": 100000, "checkpointing": {"policy": "NONE"},
        "workspace_dir": str(folder / "workspace" / name), "cache_dir": str(folder / "cache"),
        "output_model_destination": str(folder / "output" / output), "overwrite_output": True,  # the demo's own
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
        print(f"  {'model:' if shapes else 'LoRA: '}    {path}")
    for path in trainer.sample_paths[-len(config["samples"]):]:
        what = "from held-out elements" if not (args.plain or shapes) else ""
        print(f"  sample:   {path} {what} (+ {path.with_suffix('.png').name})")
    print(f"  run:      {trainer.run.path}  (logs/, tensorboard/, samples/, backup/)")
    if shapes:
        print("What the samples show (colour masks and centroids of 5 seeds per prompt):")
        shapes_verdict(trainer.model, Path(args.strip) if args.strip else None)
    return 0


if __name__ == "__main__":
    run_main(main)
