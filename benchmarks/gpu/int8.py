"""Part `int8` of the GPU kit: what the int8 ConvRot base (docs/base_weights.md) costs and saves on this card.

1. Per-GEMM timings on Wan 2.1 1.3B's and 14B's block Linear shapes at 832x480x81 (benchmarks/int8_gemm.py):
   bf16 `F.linear`, fp8 `torch._scaled_mm` (SM >= 8.9), raw int8 `torch._int_mm`, and our whole int8 ConvRot
   layer forward and forward + input-gradient backward beside bf16's.
2. Step times (benchmarks/gpu_step.py, LoRA r32, gradient checkpointing) of the 1.3B and the 14B block stack (its
   first 8 blocks) with the base in BF16, INT8_CONVROT and FP8_SCALED: what memory_plan.INT8_FASTER needs for this
   card's compute capability.
Not here: comfy-kitchen's Triton int8 kernels (the kit does not carry comfy-kitchen)."""
from __future__ import annotations

from benchmarks.gpu.kit import Job, Part
from benchmarks.gpu.speed import MODELS, STEP, summary

GEMM = "benchmarks/int8_gemm.py"


def jobs(dry_run: bool) -> list[Job]:
    """The GEMM table first (a minute), then each model's steps, bf16 beside int8 before fp8."""
    common = ["--checkpointing", "--lora-rank", "32", "--attention-backend", "NATIVE"]
    if dry_run:  # the same scripts at tiny size on the CPU
        smoke = ["--model", "1.3b", "--device", "cpu", "--smoke", "--size", "64x64", "--frames", "9", *common,
                 "--steps", "2", "--warmup", "1", "--peak-tflops", "1"]
        return [Job("gemm", [GEMM, "--dry-run"], 120, needs=5),
                *[Job(f"13b_{fmt}", [STEP, *smoke, "--base-weight-format", fmt], 300, needs=5)
                  for fmt in ("BF16", "INT8_CONVROT")]]
    order = [("13b", "BF16"), ("13b", "INT8_CONVROT"), ("14b8", "BF16"), ("14b8", "INT8_CONVROT"),
             ("13b", "FP8_SCALED"), ("14b8", "FP8_SCALED")]
    return [Job("gemm", [GEMM, "--models", "1.3b", "14b"], 180, needs=30),
            *[Job(f"{model}_{fmt}", [STEP, *MODELS[model], *common, "--base-weight-format", fmt, "--steps", "5",
                                     "--warmup", "2"], 240, needs=45) for model, fmt in order]]


def step_summary(row: dict) -> dict:
    keep = summary(row)
    keep["base_weight_format"] = row.get("base_weight_format")
    return keep


def run(part: Part) -> int:
    part.data["settings"]["planned"] = [job.name for job in jobs(False)]
    failed = 0
    for job in jobs(part.dry_run):
        row = part.run(job)
        row = row if job.name == "gemm" else step_summary(row)
        part.add(row)
        failed += row.get("status", "ok" if row.get("rc") == 0 else "failed") not in ("ok", "unavailable", "skipped")
    return failed
