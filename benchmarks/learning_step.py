#!/usr/bin/env python
"""CPU seconds of the learning tests' training runs (tests/learning_runs.py, the shapes recipe), and proof that a
speed-up left them bit for bit as they were.

Trains the first `--steps` steps of one run (T2V, I2V, A14B or E2V on the T2V / I2V base; the recipe's cosine
schedule still spans its full length, so the steps are the real run's first ones) on one torch thread, prints the
CPU seconds of start-up (model load, caching) and of the step loop, and the CPU seconds of a few of the tests'
samples. `--save FILE` writes the trained transformer weights and the samples (safetensors); `--compare FILE`
checks, with torch.equal, that this run's are the same bit for bit (run it on the old code with --save first).

    OMP_NUM_THREADS=1 python benchmarks/learning_step.py --run t2v --steps 200 --save /tmp/before.safetensors
    OMP_NUM_THREADS=1 python benchmarks/learning_step.py --run t2v --steps 200 --compare /tmp/before.safetensors
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = ("t2v", "i2v", "a14b", "e2v-t2v", "e2v-i2v")


def run_config(run: str, work: Path, steps: int) -> tuple[dict, list[dict]]:
    """The run's training config (as tests/learning_runs.py builds it) with max_steps cut to `steps` but the
    learning-rate schedule of the full run, and the keyword arguments of two of its tests' samples."""
    from modules.synthetic.shape_clips import Motif, write_motif_dataset
    from modules.synthetic.tiny_model import write_tiny_model
    from tests import learning_runs as lr

    if run == "a14b":
        base = lr.write_a14b_base(work / "base")
    else:
        base = write_tiny_model(run.removeprefix("e2v-"), work / "base", trained_vae=True)
    if run in ("t2v", "a14b"):
        data = write_motif_dataset(work / "data", list(lr.T2V_MOTIFS), clips_per_motif=6, frames=lr.FRAMES,
                                   height=lr.SIZE, width=lr.SIZE, seed=1)
        config = lr.learning_config(base, data, work)
        if run == "a14b":
            config.update({"train_expert": "BOTH", "expert_step_share": 0.5, "max_steps": lr.A14B_STEPS})
        samples = [{"prompt": m.prompt, "seed": 0} for m in lr.T2V_MOTIFS]
    elif run == "i2v":
        motifs = [Motif("circle", colour, "right") for colour in lr.I2V_COLOURS]
        data = write_motif_dataset(work / "data", motifs, clips_per_motif=4, frames=lr.FRAMES, height=lr.SIZE,
                                   width=lr.SIZE, seed=2, caption=lr.I2V_CAPTION)
        config = lr.learning_config(base, data, work)
        image = str(lr.I2V_FIRST_FRAMES[0].write(work / "first.png"))
        samples = [{"prompt": lr.I2V_CAPTION, "seed": s, "image": image} for s in (0, 1)]
    else:
        dataset = lr.write_e2v_motif_dataset(work / "data", clips_per_colour=4, seed=3)
        config = lr.learning_config(base, work / "data", work)
        config.update({"concepts": [], "dataset_config": str(dataset), "frames": lr.E2V_SAMPLE_FRAMES})
        colour, centre = lr.E2V_HELD_OUT[0]
        element = str(lr.write_element(work / "element.png", colour, centre))
        samples = [{"prompt": lr.E2V_CAPTION, "seed": s, "elements": [element], "frames": lr.E2V_SAMPLE_FRAMES}
                   for s in (0, 1)]
    return config, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", choices=RUNS, default="t2v")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save", type=Path, help="write the trained weights and samples here (safetensors)")
    parser.add_argument("--compare", type=Path, help="check them against a file written by --save")
    args = parser.parse_args()

    import torch
    from safetensors.torch import load_file, save_file

    from modules.config.train_config import TrainConfig
    from modules.trainer.GenericTrainer import GenericTrainer, TrainingStopped
    from tests.learning_runs import sample
    from tests.torch_threads import one_torch_thread

    with tempfile.TemporaryDirectory() as tmp, one_torch_thread():
        work = Path(tmp)
        config, samples = run_config(args.run, work, args.steps)
        full_steps = config["max_steps"]
        # the full run's schedule, cut short: the cosine decay spans its max_steps, so stop by callback instead
        trainer = GenericTrainer(TrainConfig.from_dict(config))
        trainer.callbacks.on_update = (
            lambda update: trainer.commands.stop() if update.global_step == args.steps else None)
        cpu = time.process_time()
        trainer.start()
        start_cpu = time.process_time() - cpu
        cpu = time.process_time()
        with contextlib.suppress(TrainingStopped):  # the stop writes a backup (~1 % of 200 steps' time)
            trainer.train()
        loop_cpu = time.process_time() - cpu
        cpu = time.process_time()
        frames = [sample(trainer.model, **kwargs) for kwargs in samples]
        sample_cpu = time.process_time() - cpu
        print(f"{args.run}: start-up {start_cpu:.1f} CPU-s; {args.steps} steps {loop_cpu:.1f} CPU-s "
              f"({loop_cpu / args.steps:.3f} a step, {loop_cpu / args.steps * full_steps / 60:.1f} CPU-min for "
              f"the run's {full_steps}); {len(frames)} samples {sample_cpu:.1f} CPU-s")
        tensors = {f"weights.{name}": value.detach().clone().contiguous()
                   for index, transformer in enumerate(trainer.model.transformers())
                   for name, value in [(f"{index}.{k}", v) for k, v in transformer.state_dict().items()]}
        tensors.update({f"sample.{i}": torch.from_numpy(f).contiguous() for i, f in enumerate(frames)})
        if args.save:
            save_file(tensors, str(args.save))
        if args.compare:
            expected = load_file(str(args.compare))
            differ = sorted(k for k in expected.keys() | tensors.keys()
                            if k not in expected or k not in tensors or not torch.equal(expected[k], tensors[k]))
            weights = sum(k.startswith("weights.") for k in tensors)
            print(f"compared {weights} weight tensors and {len(frames)} samples: "
                  + ("all bit-identical" if not differ else f"{len(differ)} differ, e.g. {differ[:3]}"))
            if differ:
                sys.exit(1)


if __name__ == "__main__":
    main()
