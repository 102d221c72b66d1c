"""Per-GEMM timings of the base-weight formats on Wan's block Linear shapes: bf16 `F.linear`, fp8 `torch._scaled_mm`
(SM >= 8.9), raw int8 `torch._int_mm`, and our whole int8 ConvRot layer (rotate, quantise, GEMM, epilogue) forward
and forward + input-gradient backward. For a lent GPU (not run in CI); `--dry-run` runs tiny shapes on the CPU.

    python benchmarks/int8_gemm.py [--models 1.3b 14b] [--tokens 32760] [--json OUT.json]   # 832x480x81: 32,760
    python benchmarks/int8_gemm.py --dry-run
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modules.modelSetup.int8_convrot import (  # noqa: E402
    group_size_for, int8_convrot_linear, int8_linear, quantize_rows, quantize_weight, rotate,
)

# (name, in_features, out_features) of the block Linears: Wan 2.1 1.3B (1536 wide, FFN 8960) and 14B (5120, 13824)
SHAPES = {"1.3b": [("attn q/k/v/o", 1536, 1536), ("ffn up", 1536, 8960), ("ffn down", 8960, 1536)],
          "14b": [("attn q/k/v/o", 5120, 5120), ("ffn up", 5120, 13824), ("ffn down", 13824, 5120)]}
DRY_SHAPES = [("attn", 256, 256), ("ffn up", 256, 512), ("ffn down", 512, 256)]


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of `fn()` after two warm-up calls."""
    times = []
    for i in range(repeats + 2):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def rows_for(name: str, k: int, n: int, tokens: int, device: torch.device, dtype: torch.dtype, repeats: int) -> dict:
    weight = torch.randn(n, k, device=device, dtype=dtype) * 0.02
    x = torch.randn(tokens, k, device=device, dtype=dtype)
    group = group_size_for(k)
    qweight, scale = quantize_weight(weight, group)
    row = {"layer": name, "k": k, "n": n, "tokens": tokens, "flops": 2 * tokens * k * n}
    row["bf16_linear_s"] = timed(lambda: torch.nn.functional.linear(x, weight), device, repeats)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9):
        fp8 = torch.float8_e4m3fn
        w8, x8 = weight.to(fp8), x.to(fp8)
        one = torch.ones((), device=device)
        row["fp8_scaled_mm_s"] = timed(lambda: torch._scaled_mm(x8, w8.T, one, one, out_dtype=dtype), device, repeats)
    xq, _ = quantize_rows(rotate(x, group))
    # B = qweight.T: a column-major [K, N] view, the layout cuBLASLt's int8 GEMM wants (as int8_convrot.int_matmul)
    row["int8_int_mm_s"] = timed(lambda: torch._int_mm(xq, qweight.T), device, repeats)
    backend = "int_mm" if device.type == "cuda" else "emulate"
    row["int8_convrot_forward_s"] = timed(lambda: int8_linear(x, qweight, scale, None, group, backend), device, repeats)
    xg = x.detach().requires_grad_(True)

    def forward_backward():
        int8_convrot_linear(xg, qweight, scale, None, group, backend).sum().backward()

    def bf16_forward_backward():
        torch.nn.functional.linear(xg, weight).sum().backward()

    row["int8_convrot_fwd_bwd_s"] = timed(forward_backward, device, repeats)
    row["bf16_fwd_bwd_s"] = timed(bf16_forward_backward, device, repeats)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=["14b"])
    parser.add_argument("--tokens", type=int, default=32760, help="rows of the GEMM (tokens of one clip)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (float32)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.dry_run
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    shapes = [(f"{model} {name}", k, n) for model in args.models for name, k, n in SHAPES[model]]
    shapes, tokens = (shapes, args.tokens) if cuda else (DRY_SHAPES, 64)
    rows = [rows_for(name, k, n, tokens, device, dtype, args.repeats if cuda else 2) for name, k, n in shapes]
    for row in rows:
        times = {key: f"{value * 1e3:.2f} ms" for key, value in row.items() if key.endswith("_s")}
        print(f"{row['layer']} {row['tokens']}x{row['k']}->{row['n']}: {times}")
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    if args.json:
        Path(args.json).write_text(json.dumps({"status": "ok", "device": device_name, "torch": torch.__version__,
                                               "dry_run": not cuda, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
