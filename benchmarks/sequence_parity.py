#!/usr/bin/env python
"""Sequence parallelism's code path on one GPU: the LoRA step with Ulysses in a sequence group of one (the token
hooks, the all-to-alls on NCCL, the gathered prediction; N = 1 moves no data between GPUs) against the plain step,
on the same weights, inputs, σ and noise: the loss and every LoRA gradient compared, and the median step time of each.

    python benchmarks/sequence_parity.py --model 1.3b --size 832x480 --frames 81 --attention-backend FLASH --json out.json
    python benchmarks/sequence_parity.py --device cpu --smoke --size 64x64 --frames 9      # the CPU proof (gloo)

A lent machine has one GPU, so this is what can be checked there: that the kernels take Ulysses' layouts and that the
hooks and collectives add little time. Splitting over N > 1 GPUs is checked on the CPU (tests/test_sequence_parallel.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import gpu_step  # noqa: E402


def group_of_one(device_type: str):
    """A process group of this process alone (NCCL on a GPU, gloo on the CPU), without torchrun."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = dist.FileStore(tempfile.mktemp(prefix="wantrainer-sp-"), 1)
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", store=store, rank=0, world_size=1)
    return dist.group.WORLD


def one_step(setup, inputs, sigmas, noise, params) -> tuple[float, list, float]:
    """Forward and backward at fixed σ and noise: the loss, each parameter's gradient, the seconds it took."""
    import torch

    device = setup.model.train_device
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    output = setup.predict_at(inputs, sigmas, noise, 0)
    output.loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    grads = [p.grad.detach().float().clone() for p in params]
    for p in params:
        p.grad = None
    return float(output.loss.detach()), grads, seconds


def measure(args) -> dict:
    import torch

    from modules.model.attention.ulysses import SequenceShards
    from modules.model.sequence_parallel import shard_tokens

    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "BFLOAT16" else torch.float32
    config = gpu_step.transformer_config(args.model, args.layers, smoke=args.smoke)
    width, height = (int(v) for v in args.size.split("x"))
    shape = gpu_step.latent_shape(config, width, height, args.frames)
    train = gpu_step.train_config(rank=args.lora_rank, checkpointing=True, blocks_to_swap=0, fp8=False,
                                  activation_offload=False, dtype_name=args.dtype,
                                  attention_backend=args.attention_backend, device=args.device)
    transformer = gpu_step.build_transformer(config, device, dtype)
    setup, params, _ = gpu_step.prepare(transformer, config, train, device, dtype)
    inputs = gpu_step.make_inputs(config, shape, 1, device)
    generator = torch.Generator().manual_seed(1)
    sigmas = torch.tensor([0.7])
    noise = torch.randn(inputs.x0.shape, generator=generator)
    shards = SequenceShards(group_of_one(device.type), 1, 0)
    handles = []
    times = {"plain": [], "ulysses": []}
    results = {}
    for turn in range(args.steps + 1):  # the first turn warms up both paths
        for path in ("plain", "ulysses"):
            if path == "ulysses":
                handles = shard_tokens(setup.model.transformer, shards)
            loss, grads, seconds = one_step(setup, inputs, sigmas, noise, params)
            if path == "ulysses":
                for handle in handles:
                    handle.remove()
                for module in setup.model.transformer.modules():
                    if hasattr(getattr(module, "processor", None), "_sequence_shards"):
                        module.processor._sequence_shards = None
            if turn:
                times[path].append(seconds)
            results[path] = (loss, grads)
    (plain_loss, plain_grads), (split_loss, split_grads) = results["plain"], results["ulysses"]
    largest = max(float(g.abs().max()) for g in plain_grads)
    difference = max(float((a - b).abs().max()) for a, b in zip(plain_grads, split_grads))
    plain_s, split_s = statistics.median(times["plain"]), statistics.median(times["ulysses"])
    return {"model": args.model, "layers": config["num_layers"], "size": args.size, "frames": args.frames,
            "tokens": gpu_step.video_tokens(config, shape), "tokens_cut": list(shards.lengths),
            "attention_backend": args.attention_backend,
            "dtype": args.dtype, "device_name": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
            "loss_plain": plain_loss, "loss_ulysses": split_loss, "loss_difference": abs(plain_loss - split_loss),
            "largest_gradient": largest, "gradient_difference": difference, "parameters": len(params),
            "s_per_step_plain": round(plain_s, 4), "s_per_step_ulysses": round(split_s, 4),
            "overhead": round(split_s / plain_s - 1, 4), "step_times": times,
            "peak_vram_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 3) if device.type == "cuda" else None,
            # bf16 kernels may pick other algorithms for other strides: parity to bf16's own noise
            "status": "ok" if difference <= (1e-2 if dtype == torch.bfloat16 else 1e-5) * max(largest, 1e-12)
            and abs(plain_loss - split_loss) <= (1e-2 if dtype == torch.bfloat16 else 1e-5) * abs(plain_loss)
            else "differs"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(gpu_step.MODELS), default="1.3b")
    parser.add_argument("--layers", type=int, help="only the first N blocks")
    parser.add_argument("--smoke", action="store_true", help="2 narrow blocks (the CPU proof)")
    parser.add_argument("--size", default="832x480")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=["BFLOAT16", "FLOAT32"], default="BFLOAT16")
    parser.add_argument("--attention-backend", default="AUTO")
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed steps of each path after one warm-up each")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args()
    from modules.util.base_config import ConfigError

    try:
        result = measure(args)
    except ConfigError as e:  # e.g. FLASH without flash_attn: a result too ("unavailable"), not a traceback
        result = {"status": "unavailable", "error": str(e), "model": args.model,
                  "attention_backend": args.attention_backend}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if result["status"] in ("ok", "unavailable") else 1


if __name__ == "__main__":
    sys.exit(main())
