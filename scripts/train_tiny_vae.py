#!/usr/bin/env python
"""Train the tiny Wan VAE that really reconstructs (synthetic moving shapes) and write it as the committed
fixture tests/fixtures/tiny_wan_vae/ (or --output). Deterministic from --seed on a given torch build;
about an hour on one CPU core (9000 steps; OMP_NUM_THREADS=1 is the fastest on 2 cores). Prints the held-out PSNR (the learning tests need >= 25 dB)."""
from __future__ import annotations

import argparse
from pathlib import Path

from _bootstrap import OneLineArgumentParser, one_cpu_thread, run_main


def main() -> int:
    one_cpu_thread()
    from modules.synthetic.tiny_vae import FIXTURE, held_out_psnr, save_fixture, train_tiny_vae

    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the weights and the training clips (default %(default)s)")
    parser.add_argument("--steps", type=int, default=9000, help="training steps (default %(default)s)")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate (default %(default)s)")
    parser.add_argument("--output", default=str(FIXTURE), help="folder to write (diffusers layout)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # the same arithmetic everywhere, whatever OMP_NUM_THREADS says
    vae = train_tiny_vae(args.seed, args.steps, lr=args.lr, checkpoint=lambda vae: save_fixture(vae, Path(args.output)))
    folder = save_fixture(vae, Path(args.output))
    print(f"wrote {folder}; held-out PSNR {held_out_psnr(vae):.2f} dB")
    return 0


if __name__ == "__main__":
    run_main(main)
