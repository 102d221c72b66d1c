#!/usr/bin/env python
"""Memory features: same loss and gradients with each combination, and (on a GPU) the peak memory of each.

Every combination of gradient checkpointing, activation offload, block swap and fp8 weight storage (plain,
and scaled per tensor / per channel: `fp8_scale`) trains the same random Wan transformer (same weights, same LoRA init, same inputs and step random
streams) for a few optimizer steps through the project's own step (`WanLoRASetup`, `prepare_device`,
`predict`, AdamW; see benchmarks/gpu_step.py). Each step's loss and the first step's LoRA gradients
are compared with the run without any feature: they must agree to float tolerance (float32: 1e-5
relative loss, 1e-4 relative gradient; bfloat16: 1e-2 / 5e-2), fp8 storage to within 5 % of the loss
(its gradients are reported, not checked). On a GPU each combination also reports its peak
`max_memory_allocated` during the steps and the memory resident before them.

    python benchmarks/memory_features.py                       # CPU: smoke (2 narrow blocks, 64x64x9, float32)
    python benchmarks/memory_features.py --device cuda         # 1.3B, first 8 blocks, 832x480x81, bfloat16
    python benchmarks/memory_features.py --device cuda --model 14b --layers 4 --size 512x512

VAE tiling only changes how the cache is filled (not the step) and is covered by tests/test_memory_features.py.
Prints one JSON object; exits 1 when a combination does not match.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_step import (MODELS, build_transformer, gib, host_peak_rss_gib, latent_shape,  # noqa: E402
                                 make_inputs, parse_size, prepare, train_config, transformer_config, video_tokens)

FEATURES = ("checkpointing", "activation_offload", "block_swap", "fp8", "fp8_tensor", "fp8_channel")
# block swap needs checkpointing (refused at start-up without it): it only appears beside it below
FP8_SCALES = {"fp8": "NONE", "fp8_tensor": "TENSOR", "fp8_channel": "CHANNEL"}  # fp8 storage, by its fp8_scale
COMBOS = [
    ("baseline", ()),
    ("checkpointing", ("checkpointing",)),
    ("activation_offload", ("activation_offload",)),
    ("checkpointing+activation_offload", ("checkpointing", "activation_offload")),
    ("block_swap+checkpointing", ("block_swap", "checkpointing")),
    ("fp8", ("fp8",)),
    ("fp8+checkpointing", ("fp8", "checkpointing")),
    ("fp8+block_swap+checkpointing+activation_offload", ("fp8", "block_swap", "checkpointing", "activation_offload")),
    ("fp8_tensor+checkpointing", ("fp8_tensor", "checkpointing")),  # ComfyUI's fp8_scaled: one scale per weight
    ("fp8_channel+checkpointing", ("fp8_channel", "checkpointing")),  # one scale per output channel
]
TOLERANCE = {  # dtype -> (relative loss, relative gradient)
    "FLOAT32": (1e-5, 1e-4),
    "BFLOAT16": (1e-2, 5e-2),
}
FP8_LOSS_TOLERANCE = 0.05


def init_lora(transformer, seed: int) -> None:
    """The same LoRA weights in every run, B non-zero so that A gets gradients too (peft starts B at 0)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(transformer.named_parameters()):
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)


def run_combo(features: tuple[str, ...], args, device, dtype, swap: int) -> dict:
    """Steps of one feature combination: losses, first-step LoRA gradients (CPU), memory."""
    import torch

    from modules.model.step_inputs import StepRandom

    cuda = device.type == "cuda"
    config = transformer_config(args.model, args.layers, args.smoke)
    train = train_config(rank=args.lora_rank, checkpointing="checkpointing" in features,
                         blocks_to_swap=swap if "block_swap" in features else 0,
                         fp8=any(f in FP8_SCALES for f in features),
                         fp8_scale=next((FP8_SCALES[f] for f in features if f in FP8_SCALES), "NONE"),
                         activation_offload="activation_offload" in features, dtype_name=args.dtype,
                         device=device.type)
    shape = latent_shape(config, *args.size, args.frames)
    out: dict = {"status": "ok"}
    losses, grads, times = [], None, []
    setup = params = optimizer = inputs = None
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    try:
        torch.manual_seed(args.seed)
        transformer = build_transformer(config, device, dtype, args.seed)
        setup, params, optimizer = prepare(transformer, config, train, device, dtype)
        init_lora(transformer, args.seed)
        inputs = make_inputs(config, shape, args.batch_size, device, args.seed)
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            out["resident_vram_gib"] = gib(torch.cuda.memory_allocated(device))
            torch.cuda.reset_peak_memory_stats(device)
        for step in range(args.steps):
            start = time.perf_counter()
            random = StepRandom.for_micro_step(args.seed, step, args.batch_size)
            output = setup.predict(inputs, random)
            output.loss.backward()
            if step == 0:
                grads = torch.cat([p.grad.detach().float().flatten().cpu() for p in params])
            torch.nn.utils.clip_grad_norm_(params, train.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(output.loss.detach()))
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    except torch.OutOfMemoryError as e:
        out["status"] = "oom"
        out["error"] = str(e).splitlines()[0]
    if cuda:
        out["peak_vram_gib"] = gib(torch.cuda.max_memory_allocated(device))
    out["losses"] = losses
    out["s_per_step"] = round(sum(times[1:]) / len(times[1:]), 4) if len(times) > 1 else None
    for swapper in getattr(setup, "swappers", []) if setup is not None else []:
        swapper.remove()
    del setup, params, optimizer, inputs
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out, grads


def compare(result: dict, grads, reference: dict, reference_grads, features, dtype_name: str) -> None:
    loss_tol, grad_tol = TOLERANCE[dtype_name]
    if any(f in FP8_SCALES for f in features):
        loss_tol, grad_tol = FP8_LOSS_TOLERANCE, None
    if result["status"] != "ok" or reference["status"] != "ok":
        result["match"] = None
        return
    rel_loss = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(result["losses"], reference["losses"]))
    rel_grad = float((grads - reference_grads).abs().max() / reference_grads.abs().max().clamp(min=1e-30))
    result["loss_rel_diff"] = float(f"{rel_loss:.3g}")
    result["grad_rel_diff"] = float(f"{rel_grad:.3g}")
    result["tolerance"] = {"loss": loss_tol, "grad": grad_tol}
    result["match"] = rel_loss <= loss_tol and (grad_tol is None or rel_grad <= grad_tol)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default; smoke) or cuda")
    parser.add_argument("--smoke", action=argparse.BooleanOptionalAction, default=None,
                        help="2 narrow blocks, 64x64x9, float32 (default on the CPU)")
    parser.add_argument("--model", choices=sorted(MODELS), default="1.3b")
    parser.add_argument("--layers", type=int, help="first N blocks (default: all with --smoke, 8 otherwise)")
    parser.add_argument("--size", type=parse_size, help="WIDTHxHEIGHT (default 64x64 smoke, 832x480 otherwise)")
    parser.add_argument("--frames", type=int, help="4k+1 (default 9 smoke, 81 otherwise)")
    parser.add_argument("--blocks-to-swap", type=int, help="blocks swapped in the block_swap combinations "
                        "(default: half the blocks)")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), help="default FLOAT32 smoke, BFLOAT16 otherwise")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per combination (default 2)")
    parser.add_argument("--only", help="comma-separated combination names (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()

    import logging

    import torch

    logging.basicConfig(level=logging.WARNING)
    device = torch.device(args.device)
    if args.smoke is None:
        args.smoke = device.type == "cpu"
    if args.layers is None and not args.smoke:
        args.layers = 8
    args.size = args.size or ((64, 64) if args.smoke else (832, 480))
    args.frames = args.frames or (9 if args.smoke else 81)
    args.dtype = args.dtype or ("FLOAT32" if args.smoke else "BFLOAT16")
    if (args.frames - 1) % 4 or args.steps < 1:
        parser.error("--frames must be 4k+1 and --steps >= 1")
    dtype = {"FLOAT32": torch.float32, "BFLOAT16": torch.bfloat16}[args.dtype]
    config = transformer_config(args.model, args.layers, args.smoke)
    layers = config["num_layers"]
    swap = args.blocks_to_swap or max(1, layers // 2)
    combos = COMBOS
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {name for name, _ in COMBOS}
        if unknown:
            parser.error(f"unknown combination(s) {sorted(unknown)}; known: {[name for name, _ in COMBOS]}")
        combos = [COMBOS[0]] + [c for c in COMBOS[1:] if c[0] in wanted]  # the baseline is the reference
    if layers < 2:
        combos = [c for c in combos if "block_swap" not in c[1]]  # BlockSwapper keeps at least one block

    result = {
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "smoke": args.smoke, "model": args.model, "layers": layers, "size": f"{args.size[0]}x{args.size[1]}",
        "frames": args.frames, "tokens": video_tokens(config, latent_shape(config, *args.size, args.frames)),
        "dtype": args.dtype, "batch_size": args.batch_size, "lora_rank": args.lora_rank, "steps": args.steps,
        "blocks_to_swap": swap, "combos": [],
    }
    reference = reference_grads = None
    for name, features in combos:
        combo, grads = run_combo(features, args, device, dtype, swap)
        combo = {"name": name, **{f: f in features for f in FEATURES}, **combo}
        if reference is None:
            reference, reference_grads = combo, grads
            combo["match"] = combo["status"] == "ok" or None
        else:
            compare(combo, grads, reference, reference_grads, features, args.dtype)
        result["combos"].append(combo)
    result["all_match"] = all(c["match"] is not False for c in result["combos"])
    result["peak_host_rss_gib"] = host_peak_rss_gib()
    combos_text = ",\n  ".join(json.dumps(c) for c in result.pop("combos"))  # one line per combination
    text = json.dumps(result, indent=1)[:-2] + f',\n "combos": [\n  {combos_text}\n ]\n}}'
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if result["all_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
