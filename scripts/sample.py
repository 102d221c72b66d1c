#!/usr/bin/env python
"""Generate a video: python scripts/sample.py --model DIR [--lora FILE] --prompt P [--image I] --output X.mp4"""
from __future__ import annotations

import argparse

import _bootstrap  # noqa: F401  (import path, offline mode)

from _bootstrap import run_main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="diffusers Wan folder (a base or a fine-tuned output)")
    parser.add_argument("--lora", help="LoRA file (diffusers, ComfyUI or musubi format); for two-expert models "
                                       "either expert's file, its sibling is found by name")
    parser.add_argument("--lora-scale", type=float, default=1.0)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--negative-prompt", default="")
    parser.add_argument("--image", help="first frame (needed by I2V models, optional for TI2V)")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cfg-scale", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--output", required=True, help="output .mp4 (a .png strip is written beside it)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    from modules.modelLoader.lora_inference import attach_lora_for_inference
    from modules.modelLoader.WanModelLoader import WanModelLoader, resolve_device
    from modules.modelSampler.WanModelSampler import WanModelSampler
    from modules.util.config.train_config import SampleConfig

    sample = SampleConfig.from_dict({
        "prompt": args.prompt, "negative_prompt": args.negative_prompt, "image": args.image or "",
        "frames": args.frames, "height": args.height, "width": args.width, "steps": args.steps,
        "cfg_scale": args.cfg_scale, "seed": args.seed,
    }, "sample")
    model = WanModelLoader().load(args.model, resolve_device(args.device))
    if args.lora:
        attach_lora_for_inference(model, args.lora, args.lora_scale)
    path = WanModelSampler(model).sample_to_file(sample, args.output)
    print(f"video written to {path} (frames strip: {path.with_suffix('.png')})")
    return 0


if __name__ == "__main__":
    run_main(main)
