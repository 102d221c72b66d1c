"""Part `speed` of the GPU kit: s/step, MFU and device memory of the LoRA r32 step (benchmarks/gpu_step.py) with
gradient checkpointing: Wan 2.1 1.3B and the 14B block stack (its first 8 blocks) at 832x480x81 on each attention
backend, eager and compiled, and the Wan 2.2 TI2V 5B at 1280x704x121. Part `profile`: one 1.3B step under
torch.profiler (the top ops in the JSON, the Chrome trace gzipped beside it).

s/step is the median of the timed steps (>= 5, after the warm-up, which holds compile's compiling); model FLOPs
per step are docs/performance.md's formula (gpu_step.step_flops: 3 x the forward, recompute not credited); MFU is
model FLOPs / median s / the card's dense bf16 peak (kit.PEAK_BF16_TFLOPS)."""
from __future__ import annotations

import gzip
import shutil
import statistics

from benchmarks.gpu.kit import Job, Part, peak_tflops

BACKENDS = ["NATIVE", "CUDNN", "FLEX", "FLASH"]
MODELS = {  # name -> gpu_step arguments
    "13b": ["--model", "1.3b", "--size", "832x480", "--frames", "81"],
    "14b8": ["--model", "14b", "--layers", "8", "--size", "832x480", "--frames", "81"],
    "5b": ["--model", "5b", "--size", "1280x704", "--frames", "121"],
}
STEP = "benchmarks/gpu_step.py"
LEAN = "benchmarks/lean_block_speed.py"
# checkpointing policies against full checkpointing (the NATIVE rows), on the models the issue names: name -> gpu_step
# arguments. The kept blocks: AUTO's choice for a 24 GiB card on the 1.3B (docs/memory.md), half the 14B stack's 8.
POLICIES = {
    "13b": {"keepattn": ["--checkpoint-policy", "KEEP_ATTENTION"],
            "keepattn_kept7": ["--checkpoint-policy", "KEEP_ATTENTION", "--kept-blocks", "7"],
            "allbutffn": ["--checkpoint-policy", "KEEP_ALL_BUT_FFN"]},
    "14b8": {"keepattn": ["--checkpoint-policy", "KEEP_ATTENTION"],
             "keepattn_kept4": ["--checkpoint-policy", "KEEP_ATTENTION", "--kept-blocks", "4"],
             "allbutffn": ["--checkpoint-policy", "KEEP_ALL_BUT_FFN"]},
}


def jobs(models: list[str], dry_run: bool) -> list[Job]:
    """In order of what matters most, so that a budget cut loses the least: NATIVE eager and compiled first (full
    checkpointing), then the checkpointing policies of the 1.3B and the 14B stack (eager and compiled) against them,
    then the other backends."""
    common = ["--checkpointing", "--lora-rank", "32"]
    if dry_run:  # the first model at 2 narrow blocks on the CPU: the same script and JSON, under a policy that keeps
        # one block and the other's self-attention (both ways a policy keeps)
        return [Job(f"{models[0]}_NATIVE_keepattn_kept1_eager",
                    [STEP, *MODELS[models[0]], "--device", "cpu", "--smoke", "--size", "64x64", "--frames", "9",
                     "--lora-rank", "32", "--checkpoint-policy", "KEEP_ATTENTION", "--kept-blocks", "1",
                     "--attention-backend", "NATIVE", "--steps", "2", "--warmup", "1", "--peak-tflops", "1"], 300,
                    needs=5)]
    out = []
    for backend in BACKENDS:
        for model in models:
            backends = [backend] if model != "5b" else (["NATIVE"] if backend == "NATIVE" else [])
            for b in backends:
                out.append(Job(f"{model}_{b}_eager", [STEP, *MODELS[model], *common, "--attention-backend", b,
                                                      "--steps", "5", "--warmup", "2"], 240, needs=40))
                out.append(Job(f"{model}_{b}_compiled", [STEP, *MODELS[model], *common, "--attention-backend", b,
                                                         "--compile", "--steps", "5", "--warmup", "3"], 300, needs=60))
            if backend == "NATIVE" and model == "13b":  # a second process, the same shape: the graphs cached across
                # runs (compile.graph_cache_dir) make its first warm-up step short (it was 98 s on the H200)
                out.append(Job(f"{model}_{backend}_compiled_again", [STEP, *MODELS[model], *common,
                                                                     "--attention-backend", backend, "--compile",
                                                                     "--steps", "5", "--warmup", "3"], 300, needs=40))
            if backend == "NATIVE":  # the checkpointing policies: the recompute each one skips
                for tag, policy in POLICIES.get(model, {}).items():
                    args = [STEP, *MODELS[model], "--lora-rank", "32", "--attention-backend", backend, *policy]
                    out.append(Job(f"{model}_{backend}_{tag}_eager", [*args, "--steps", "5", "--warmup", "2"], 240,
                                   needs=40))
                    out.append(Job(f"{model}_{backend}_{tag}_compiled", [*args, "--compile", "--steps", "5",
                                                                         "--warmup", "3"], 300, needs=60))
            if model == "13b" and backend == "NATIVE":  # the lean block against diffusers' block forward (issue 54)
                out.append(Job("lean_vs_diffusers_1536w_4blocks", [LEAN, "--device", "cuda", "--dtype", "bfloat16",
                                                                   "--width", "1536", "--layers", "4", "--frames",
                                                                   "21", "--steps", "5", "--repeats", "3"],
                               240, needs=60))
    return out


def summary(row: dict) -> dict:
    """The table's columns from gpu_step's JSON: median s/step and the MFU at it."""
    times = row.get("step_times") or []
    if times:
        median = statistics.median(times)
        peak = row.get("peak_tflops") or peak_tflops(row.get("device_name") or "")
        row["s_per_step_median"] = round(median, 4)
        row["mfu_at_median"] = round(row["model_flops_per_step"] / median / 1e12 / peak, 4) if peak else None
    keep = ("name", "status", "error", "rc", "wall_s", "model", "layers", "size", "frames", "attention_backend",
            "compile", "checkpoint_policy", "kept_blocks", "tokens", "steps", "warmup", "s_per_step_median",
            "s_per_step_min", "step_times",
            "warmup_times", "model_flops_per_step", "mfu_at_median", "hfu", "peak_tflops", "peak_vram_gib",
            "peak_vram_reserved_gib", "setup_peak_vram_gib", "estimate_training_gib", "compiled_graphs", "loss",
            "profile_top", "device", "width", "seconds_per_step", "ratio_lean_over_diffusers")
    return {key: row[key] for key in keep if key in row}


def run(part: Part, models: list[str]) -> int:
    part.data["settings"]["planned"] = [job.name for job in jobs(models, False)]  # what a real run measures
    failed = 0
    for job in jobs(models, part.dry_run):
        row = part.add(summary(part.run(job)))
        failed += row.get("status") not in ("ok", "unavailable", "skipped")
    return failed


def run_profile(part: Part) -> int:
    """One 1.3B step under torch.profiler after 2 warm-up steps."""
    trace = part.scratch / "profile_13b.trace.json"
    size = ["--device", "cpu", "--smoke", "--size", "64x64", "--frames", "9"] if part.dry_run else MODELS["13b"]
    job = Job("profile_13b", [STEP, *size, "--checkpointing", "--steps", "1", "--warmup", "2", "--profile",
                              str(trace)], 300, needs=5 if part.dry_run else 60)
    row = part.add(summary(part.run(job)))
    if trace.is_file():  # gzipped: the device tool returns files of at most 16 MiB
        with open(trace, "rb") as source, gzip.open(part.out / "profile_13b.trace.json.gz", "wb") as target:
            shutil.copyfileobj(source, target)
    return int(row.get("status") != "ok")
