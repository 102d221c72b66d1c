#!/usr/bin/env python
"""Merge a LoRA into its base model and write a full model:

    python scripts/merge_lora.py --model DIR --lora FILE [--strength S] --output OUT [--format DIFFUSERS|COMFY]

DIFFUSERS: a diffusers folder (`DiffusionPipeline.from_pretrained(OUT)`). COMFY: a single .safetensors in Wan's
original key names for ComfyUI's models/diffusion_models (two-expert models: OUT_high_noise / OUT_low_noise).
An E2V LoRA of a T2V base becomes a Wan I2V model (`WanImageToVideoPipeline`; `SkyReelsV2ImageToVideoPipeline` on a
SkyReels-V2 base; its folder needs --image-encoder).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode

DTYPES = ("BFLOAT16", "FLOAT16", "FLOAT32")


def parse_args() -> argparse.Namespace:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the diffusers Wan folder the LoRA was trained on")
    parser.add_argument("--lora", required=True, help="LoRA file (diffusers, ComfyUI or musubi format); for two-expert "
                                                      "models either expert's file, its sibling is found by name")
    parser.add_argument("--strength", type=float, default=1.0, help="LoRA strength (default 1.0)")
    parser.add_argument("--output", required=True, help="a folder (DIFFUSERS) or a .safetensors file (COMFY)")
    parser.add_argument("--format", type=str.upper, choices=("DIFFUSERS", "COMFY"),
                        help="default: COMFY when --output ends in .safetensors, else DIFFUSERS")
    parser.add_argument("--dtype", type=str.upper, choices=DTYPES,
                        help="weight dtype; default: BFLOAT16 for COMFY, the base model's for DIFFUSERS")
    parser.add_argument("--image-encoder", type=Path, help="folder with image_encoder/ + image_processor/ (the I2V "
                                                           "checkpoint an E2V run on a T2V base used)")
    parser.add_argument("--force", action="store_true", help="merge a LoRA whose header names another Wan variant")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    from modules.config.limits import check_lora_strength
    from modules.modelSaver.merged_model import COMFY, DIFFUSERS, MergeInputs, merge_lora_into_model
    from modules.util.dtypes import torch_dtype
    from modules.util.enum import DataType
    from modules.util.errors import UserError
    from modules.util.path_checks import (
        check_input_file,
        check_input_folder,
        check_writable_file,
        check_writable_folder,
    )

    output = Path(args.output)
    fmt = args.format or (COMFY if output.suffix == ".safetensors" else DIFFUSERS)
    # everything that can be checked before the weights are read is
    check_input_folder("--model", args.model, "the diffusers Wan folder the LoRA was trained on")
    check_input_file("--lora", args.lora, "a LoRA .safetensors file")
    check_lora_strength("--strength", args.strength)
    if fmt == COMFY and output.suffix != ".safetensors":
        raise UserError(f"--output '{output}': a COMFY model is a .safetensors file: give a path ending in .safetensors")
    (check_writable_file if fmt == COMFY else check_writable_folder)("--output", output)
    inputs = MergeInputs(model_dir=Path(args.model), lora=Path(args.lora), strength=args.strength,
                         image_encoder_dir=args.image_encoder, force=args.force)
    dtype = torch_dtype(DataType[args.dtype]) if args.dtype else None
    for path in merge_lora_into_model(inputs, output, fmt, dtype):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_main(main)
