#!/usr/bin/env python
"""Time of a LoRA training step with the lean Wan block against diffusers' own block forward (CPU; `--device cuda`
for a GPU).

A random Wan transformer (1.3B's block layout, narrowed: `--width`, `--layers`) with LoRA r16 on the default
targets, the project's attention processor, under gradient checkpointing or not, in float32 or under bf16 autocast;
each step is forward, loss and backward. The two forwards alternate, `--repeats` times, and the best of each is kept
(the machine is shared). Prints one JSON object: seconds per step of each and the ratio lean / diffusers (the goal:
no slower, a ratio at or under 1).

    python benchmarks/lean_block_speed.py                         # 4 blocks 384 wide, 4,096 tokens
    python benchmarks/lean_block_speed.py --dtype bfloat16 --no-checkpointing
    python benchmarks/lean_block_speed.py --device cuda --dtype bfloat16 --width 1536 --frames 21  # a 1.3B-wide stack
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build(width: int, layers: int, checkpointing: bool):
    import torch
    from diffusers import WanTransformer3DModel
    from peft import LoraConfig

    from modules.config.train_config import DEFAULT_LORA_TARGETS
    from modules.model.attention.attention_processor import install

    torch.manual_seed(0)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=width // 64, attention_head_dim=64,
                                  in_channels=16, out_channels=16, text_dim=256, freq_dim=64, ffn_dim=4 * width,
                                  num_layers=layers, rope_max_seq_len=1024)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=list(DEFAULT_LORA_TARGETS)))
    install(model)
    if checkpointing:
        model.enable_gradient_checkpointing()
    return model


def step_seconds(model, inputs: dict, dtype, steps: int) -> float:
    import torch

    device = inputs["hidden_states"].device
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = model(**inputs, return_dict=False)[0]
        out.float().pow(2).mean().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--frames", type=int, default=4, help="latent frames (tokens: frames x 32 x 32)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--no-checkpointing", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    from modules.modelSetup.lean_block import BlockSaves, lean_blocks

    checkpointing = not args.no_checkpointing
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    model = build(args.width, args.layers, checkpointing).to(device)
    inputs = {"hidden_states": torch.randn(1, 16, args.frames, 64, 64, device=device),
              "timestep": torch.tensor([500.0], device=device),
              "encoder_hidden_states": torch.randn(1, 64, 256, device=device)}
    saves = {"lean": BlockSaves(ffn_in_backward=checkpointing), "diffusers": None}
    best = {name: float("inf") for name in saves}
    step_seconds(model, inputs, dtype, 1)  # warm-up
    for _ in range(args.repeats):
        for name, kept in saves.items():
            lean_blocks(model, kept)
            best[name] = min(best[name], step_seconds(model, inputs, dtype, args.steps))
    text = json.dumps({"status": "ok", "device": args.device, "width": args.width, "layers": args.layers,
                       "tokens": args.frames * 32 * 32, "dtype": args.dtype, "checkpointing": checkpointing,
                       "threads": torch.get_num_threads(), "seconds_per_step": {k: round(v, 4) for k, v in best.items()},
                       "ratio_lean_over_diffusers": round(best["lean"] / best["diffusers"], 3)})
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
