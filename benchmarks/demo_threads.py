#!/usr/bin/env python
"""The demo's training step on 1 and on 2 torch threads: seconds and CPU seconds per step of scripts/demo.py's shapes
run (the tiny T2V with the trained VAE, the learning tests' recipe: 48 px, 9 frames, batch 4), each thread count in
a process of its own (OpenMP sizes its pool once). The steps after the first WARM_UP are timed; the machine's load
average is printed beside them, as the verdict depends on it.

    python benchmarks/demo_threads.py [--steps 40] [--threads 1 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = 8  # the first epochs read the fresh cache and warm the allocator


def child(threads: int, steps: int, folder: Path) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    import torch

    from modules.config.train_config import TrainConfig
    from modules.synthetic.tiny_model import write_tiny_model
    from modules.trainer.GenericTrainer import GenericTrainer
    from scripts.demo import shapes_setup

    torch.set_num_threads(threads)
    config = {**shapes_setup(folder, WARM_UP + steps), "samples": [], "sample_at_end": False, "tensorboard": False,
              "base_model_name": str(write_tiny_model("t2v", folder / "model", trained_vae=True)),
              "workspace_dir": str(folder / "workspace"), "cache_dir": str(folder / "cache"),
              "output_model_destination": str(folder / "output"), "backup_after_unit": "NEVER"}
    marks: list[tuple[float, float]] = []
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.callbacks.on_update = lambda update: marks.append((time.perf_counter(), time.process_time()))
    trainer.start()
    trainer.train()
    (wall0, cpu0), (wall1, cpu1) = marks[WARM_UP - 1], marks[-1]
    timed = len(marks) - WARM_UP
    return {"threads": torch.get_num_threads(), "steps_timed": timed, "s_per_step": (wall1 - wall0) / timed,
            "cpu_s_per_step": (cpu1 - cpu0) / timed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps timed per thread count (default %(default)s)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, Path(args.folder))))
        return 0
    for threads in args.threads:
        with tempfile.TemporaryDirectory(prefix="demo-threads-") as folder:
            load = os.getloadavg()[0]
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
            out = subprocess.run([sys.executable, __file__, "--child", str(threads), "--steps", str(args.steps),
                                  "--folder", folder], env=env, capture_output=True, text=True, check=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            print(json.dumps({**result, "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
