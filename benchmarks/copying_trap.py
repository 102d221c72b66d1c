#!/usr/bin/env python
"""Animate-2's copying trap (`dataLoader/animate2_triplets.py`): the scores of legitimate triplets against those of
copies and their evasions, through the real check (mp4 files written with PyAV, read back as training reads them).

    .venv/bin/python benchmarks/copying_trap.py [--frames 49] [--size 256] [--takes 6]

The clips are made, not filmed (`modules/synthetic/performances.py`: a textured room, a textured figure walking a
path with swinging arms, a panning camera, sensor noise). "Another take" is the same room and figure on another path
and camera: the hardest legitimate case (same background, same person). The limit (COPY_PSNR_DB) must sit between the
highest legitimate score and the lowest evasion score.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modules.dataLoader.animate2_triplets import COPY_PSNR_DB, reference_match, stream_match  # noqa: E402
from modules.synthetic.performances import evasions, room, take, texture  # noqa: E402
from modules.util.video_write import write_video  # noqa: E402

FPS = 16.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=49)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--takes", type=int, default=6, help="rooms; each gives a target and another take")
    parser.add_argument("--figure", type=float, default=1 / 6, help="the torso's half-height / the frame's")
    args = parser.parse_args()
    legit: list[tuple[str, float]] = []
    evaded: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        def mp4(name: str, video: np.ndarray) -> Path:
            path = Path(folder) / f"{name}.mp4"
            write_video(path, video, FPS)
            return path

        def png(name: str, image: np.ndarray) -> Path:
            path = Path(folder) / f"{name}.png"
            cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
            return path

        for room_number in range(args.takes):
            rng = np.random.default_rng(room_number)
            here, figure = room(rng, args.size), texture(rng, args.size, args.size)
            target = take(here, figure, args.frames, args.size, rng, args.figure)
            other = take(here, figure, args.frames, args.size, rng, args.figure)
            elsewhere = take(room(rng, args.size), figure, args.frames, args.size, rng, args.figure)
            target_file = mp4(f"t{room_number}", target)
            other_file = mp4(f"o{room_number}", other)
            legit.append((f"room {room_number}: another take, same room", stream_match(target_file, other_file).psnr))
            elsewhere_file = mp4(f"e{room_number}", elsewhere)
            legit.append((f"room {room_number}: another room", stream_match(target_file, elsewhere_file).psnr))
            reference = png(f"r{room_number}", target[0])  # the usual reference: a frame of the target
            legit.append((f"room {room_number}: reference = target frame 0 vs another take",
                          reference_match(reference, other_file)[0].psnr))
            if room_number < 2:
                for name, video in evasions(target).items():
                    driving = mp4(f"{room_number}-{name}", video)
                    evaded.append((f"room {room_number}: {name}", stream_match(target_file, driving).psnr))
                for k in (0, args.frames // 2, args.frames - 1):
                    frame = png(f"f{room_number}-{k}", other[k])
                    evaded.append((f"room {room_number}: reference = driving frame {k}",
                                   reference_match(frame, other_file)[0].psnr))
                mirrored = png(f"m{room_number}", other[args.frames // 2][:, ::-1].copy())
                evaded.append((f"room {room_number}: reference = driving frame, mirrored",
                               reference_match(mirrored, other_file)[0].psnr))
    print(f"limit COPY_PSNR_DB = {COPY_PSNR_DB:g} dB; {args.frames} frames of {args.size}x{args.size} at {FPS:g} fps, "
          f"figure {args.figure:.3g}")
    print("legitimate (must stay under the limit):")
    for name, psnr in legit:
        print(f"  {psnr:6.1f} dB  {name}")
    print("copies and evasions (must reach the limit):")
    for name, psnr in evaded:
        print(f"  {psnr:6.1f} dB  {name}")
    highest, lowest = max(p for _, p in legit), min(p for _, p in evaded)
    print(f"highest legitimate {highest:.1f} dB, lowest evasion {lowest:.1f} dB: "
          f"{'separated' if highest < COPY_PSNR_DB <= lowest else 'NOT separated'} by the limit")
    return 0 if highest < COPY_PSNR_DB <= lowest else 1


if __name__ == "__main__":
    sys.exit(main())
