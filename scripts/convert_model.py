#!/usr/bin/env python
"""Convert a LoRA file between DIFFUSERS_LORA and COMFY_LORA (musubi-tuner files can be read too).

    python scripts/convert_model.py --input in.safetensors --output out.safetensors --format COMFY_LORA

LoHa, LoKr and DoRA files convert to COMFY_LORA only (diffusers loads none of them for Wan; merge them with
scripts/merge_lora.py for a diffusers model).
"""
from __future__ import annotations

import argparse
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from scripts._bootstrap import OneLineArgumentParser  # noqa: E402  (after the import path is set)

FORMATS = ("DIFFUSERS_LORA", "COMFY_LORA")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="LoRA .safetensors (diffusers, ComfyUI or musubi-tuner keys)")
    parser.add_argument("--output", required=True, help="the .safetensors file to write")
    parser.add_argument("--format", required=True, type=str.upper, choices=FORMATS, help="format of the output")
    args = parser.parse_args(argv)

    from modules.util.errors import UserError
    from modules.util.path_checks import check_not_an_input

    try:  # before torch imports: the output is never the input (by path, symlink or hard link)
        check_not_an_input("--output", [args.output], [("--input", args.input)])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from modules.modelFile.lora_formats import VARIANT_KEY
    from modules.modelFile.lora_header import EXPERT_KEY
    from modules.modelFile.lora_reading import load_lora_file
    from modules.modelSaver.WanLoRASaver import save_lora

    try:
        weights, metadata = load_lora_file(args.input)
        bad = weights.non_finite()
        if bad is not None:
            raise UserError(f"--input '{args.input}' holds NaN or inf values (in '{bad}'): converting it would write "
                            "a broken LoRA; use an intact file (nothing was written)")
        save_lora(weights, args.output, args.format, metadata)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    made_for = ", ".join(v for v in (metadata.get(VARIANT_KEY, ""), metadata.get(EXPERT_KEY, "")) if v)
    print(f"wrote {args.output} ({args.format}, {len(weights.layers)} {weights.spec.title} modules"
          f"{f'; made for {made_for}' if made_for else ''})")  # the header (variant, expert, ...) is carried over
    return 0


if __name__ == "__main__":
    sys.exit(main())
