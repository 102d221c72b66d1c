#!/usr/bin/env python
"""memory_preset AUTO's plan for a smaller card, run on the big one: the plan (memory_plan.plan_memory for
--card-gib), and where its estimate says it fits, two optimizer steps (after one warm-up) of the LoRA r32 step
(benchmarks/gpu_step.py) with the plan's settings under `torch.cuda.set_per_process_memory_fraction(card / total)`.
An out-of-memory error, or a peak over the card, is a defect of the estimate or of the plan.

    python benchmarks/gpu/auto_plan.py --model 14b --card-gib 16 --json out.json
    python benchmarks/gpu/auto_plan.py --model 1.3b --card-gib 8 --device cpu --smoke --json out.json

The weights are made on the GPU and moved to the host before the fraction is set (the loader leaves a checkpoint
on the host; prepare_device then places it as the plan says). The fraction caps PyTorch's allocator only: the CUDA
context and cuBLAS/cuDNN workspaces outside it come on top on a real card of that size.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import gpu_step  # noqa: E402


def plan_for(config: dict, card_gib: float, width: int, height: int, frames: int, device: str):
    """AUTO's plan of the LoRA r32 run with checkpointing (gpu_step.train_config with memory_preset AUTO)."""
    from modules.modelSetup.memory_plan import plan_memory

    train = gpu_step.train_config(rank=32, checkpointing=True, blocks_to_swap=0, fp8=False, activation_offload=False,
                                  dtype_name="BFLOAT16", device=device)
    with tempfile.TemporaryDirectory() as folder:  # the estimate reads the model's configs from a folder
        gpu_step.write_model_configs(Path(folder), config)
        run = dataclasses.replace(train, base_model_name=folder, resolution=[height, width], frames=frames)
        return plan_memory(run, gpu_gib=card_gib)


def two_steps(config: dict, plan, card_gib: float, shape, device) -> dict:
    import torch

    cuda = device.type == "cuda"
    transformer = gpu_step.build_transformer(config, device, torch.bfloat16).to("cpu")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, card_gib * 2**30 / total), device)
    result = {"status": "ok"}
    try:
        setup, params, optimizer = gpu_step.prepare(transformer, config, plan.config, device, torch.bfloat16)
        inputs = gpu_step.make_inputs(config, shape, 1, device)
        result["losses"] = [gpu_step.train_step(setup, params, optimizer, inputs, step) for step in range(3)]
    except torch.OutOfMemoryError as error:
        result.update(status="oom", error=str(error).splitlines()[0])
    if cuda:
        result["peak_allocated_gib"] = gpu_step.gib(torch.cuda.max_memory_allocated(device))
        result["peak_reserved_gib"] = gpu_step.gib(torch.cuda.max_memory_reserved(device))
        result["under_card"] = result["peak_reserved_gib"] <= card_gib and result["status"] == "ok"
        result["pinned_host"] = pinned_host_bytes()
    return result


def pinned_host_bytes() -> dict | None:
    """The caching host allocator's pinned bytes (block swap, activation and expert offload), if torch has the stats."""
    import torch

    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None or not torch.cuda.is_available():
        return None
    return {k: v for k, v in stats().items() if "bytes" in k.lower()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(gpu_step.MODELS), required=True)
    parser.add_argument("--card-gib", type=float, required=True)
    parser.add_argument("--size", type=gpu_step.parse_size, default=(832, 480))
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--smoke", action="store_true", help="the steps at 2 narrow blocks and 64x64x9 (the plan "
                        "is still the full-size one's, reported beside)")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    import torch

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    (width, height), frames = args.size, args.frames
    full = plan_for(gpu_step.transformer_config(args.model), args.card_gib, width, height, frames, device.type)
    result = {"model": args.model, "card_gib": args.card_gib, "size": f"{width}x{height}", "frames": frames,
              "device": str(device), "smoke": args.smoke, "changes": {k: str(v) for k, v in full.changes.items()},
              "summary": full.summary(), "estimate_gib": round(full.estimate.peak_gib, 3),
              "estimate_fits": full.estimate.fits, "status": "not run: the estimate says it does not fit"}
    config = gpu_step.transformer_config(args.model, smoke=args.smoke)
    if args.smoke:
        width, height, frames = 64, 64, 9
    plan = full if not args.smoke else plan_for(config, args.card_gib, width, height, frames, device.type)
    if full.estimate.fits:
        shape = gpu_step.latent_shape(config, width, height, frames)
        result.update(two_steps(config, plan, args.card_gib, shape, device))
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if result["status"] in ("ok", "not run: the estimate says it does not fit") else 3


if __name__ == "__main__":
    sys.exit(main())
