#!/usr/bin/env python
"""Write a tiny randomly initialised Wan model in diffusers format (for tests, demos and benchmarks).

    python scripts/make_tiny_model.py --variant {t2v,i2v,ti2v,a14b,a14b_i2v,flf2v,skyreels_v2,skyreels_v2_i2v,vace,a14b_vace,animate_2} --output DIR [--seed N] [--trained-vae]

Prints the folder it wrote.  Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VARIANT_CHOICES = ("t2v", "i2v", "ti2v", "a14b", "a14b_i2v", "flf2v", "skyreels_v2", "skyreels_v2_i2v", "vace", "a14b_vace",
                   "animate_2")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, non-zero exit
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: give a non-negative integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: give a non-negative integer")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--variant", required=True, choices=VARIANT_CHOICES,
                        help="t2v (Wan 2.1 T2V), i2v (Wan 2.1 I2V 14B), ti2v (Wan 2.2 TI2V 5B), "
                             "a14b (Wan 2.2 T2V A14B), a14b_i2v (Wan 2.2 I2V A14B), flf2v (Wan 2.1 FLF2V 14B), "
                             "skyreels_v2 / skyreels_v2_i2v (SkyReels-V2 T2V / I2V), "
                             "vace (Wan 2.1 VACE), "
                             "a14b_vace (Wan 2.2 VACE-Fun A14B), animate_2 (Wan2.2-Animate-2)")
    parser.add_argument("--output", required=True, help="folder to write (new, empty, or a previous tiny model)")
    parser.add_argument("--trained-vae", action="store_true",
                        help="use the committed VAE trained on synthetic shape clips (Wan 2.1 layouts) and a "
                             "transformer of the learning size (4 blocks 128 wide, random), so trained samples can "
                             "be seen; default: a random VAE and the smallest transformer")
    parser.add_argument("--seed", type=_seed, default=0, help="weight seed (default 0); same seed, same weights")
    args = parser.parse_args(argv)

    from modules.util.errors import UserError
    from modules.synthetic.tiny_model import write_tiny_model

    try:
        if args.variant == "animate_2":  # its own writer (modules/synthetic/tiny_animate2.py)
            from modules.synthetic.tiny_animate2 import write_tiny_animate2

            if args.trained_vae:
                raise UserError("--trained-vae: the tiny Animate-2 folder has a random VAE only")
            path = write_tiny_animate2(args.output, seed=args.seed)
        else:
            path = write_tiny_model(args.variant, args.output, seed=args.seed, trained_vae=args.trained_vae)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
