"""Part `memory` of the GPU kit: each row of the full-size memory table (benchmarks/memory_fullsize.py) that fits the
card, measured for real (benchmarks/gpu_step.py: `torch.cuda.max_memory_allocated` and `max_memory_reserved` of the
training steps) beside the fake-device figure and the estimate; then part `auto`: AUTO's plans for 8, 12, 16 and 24
GiB cards run under `set_per_process_memory_fraction` (benchmarks/gpu/auto_plan.py, which also records the pinned
host bytes: `torch.cuda.host_memory_stats`)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from benchmarks.gpu.kit import ROOT, Job, Part

STEP = "benchmarks/gpu_step.py"
FAKE_TABLE = ROOT / "benchmarks" / "gpu" / "fake_memory.json"  # `memory_fullsize.py --all --json` of this tree
CARDS_GIB = [8, 12, 16, 24]
AUTO_MODELS = ["1.3b", "5b", "14b"]


def step_arguments(spec) -> list[str]:
    """gpu_step.py's arguments for a memory_fullsize.MemoryConfig."""
    args = ["--model", spec.model, "--size", f"{spec.width}x{spec.height}", "--frames", str(spec.frames),
            "--lora-rank", str(spec.lora_rank), "--blocks-to-swap", str(spec.blocks_to_swap)]
    flags = {"--checkpointing": spec.checkpointing, "--fp8": spec.fp8, "--activation-offload": spec.activation_offload,
             "--offload-inactive-expert": spec.offload_inactive_expert,
             "--checkpoint-attention": spec.checkpoint_attention, "--keep-self-attention": spec.keep_self_attention}
    args += [flag for flag, on in flags.items() if on]
    if spec.checkpoint_policy:
        args += ["--checkpoint-policy", spec.checkpoint_policy, "--kept-blocks", str(spec.kept_blocks)]
    if spec.ffn_chunks:
        args += ["--ffn-chunks", str(spec.ffn_chunks)]
    if spec.base_weight_format != "BF16":
        args += ["--base-weight-format", spec.base_weight_format]
    if spec.experts == 2:
        args += ["--experts", "2"]
    if spec.layers:
        args += ["--layers", str(spec.layers)]
    return args


def fake_figures(path: Path) -> dict[str, float]:
    """config name -> fake-device peak GiB from `memory_fullsize.py --all --json` output (a list of rows)."""
    if not path.is_file():
        return {}
    return {row["config"]: row["measured"]["peak_gib"] for row in json.loads(path.read_text())}


def run_rows(part: Part, card_gib: float | None) -> int:
    from benchmarks.memory_fullsize import CONFIGS, MemoryConfig

    fake = fake_figures(FAKE_TABLE)
    part.data["settings"]["fake_table"] = str(FAKE_TABLE) if fake else (
        f"none: run `python benchmarks/memory_fullsize.py --all --json {FAKE_TABLE.relative_to(ROOT)}` on the CPU "
        "first and carry it (it is small)")
    rows = dict(CONFIGS)
    if part.dry_run:  # one block of the 1.3B at 64x64x9 on the CPU, its fake figure measured here and now
        rows = {"dry_1.3b_gc": MemoryConfig("1.3b", width=64, height=64, frames=9, layers=1)}
        spec = json.dumps(dataclasses.asdict(rows["dry_1.3b_gc"]))
        measured = part.run(Job("dry_fake", ["benchmarks/memory_fullsize.py", "--spec", spec], 300, needs=5))
        fake["dry_1.3b_gc"] = (measured.get("measured") or {}).get("peak_gib")
    failed = 0
    for name, spec in rows.items():
        if spec.sequence_parallel > 1:  # one rank of a group needs the group's other GPUs
            part.add({"name": name, "status": "skipped", "reason": f"one rank of {spec.sequence_parallel} sequence-"
                      "parallel GPUs: this machine has one (part `sequence` checks the path at N = 1)"})
            continue
        wanted = spec.limit_gib or spec.goal_gib or 0
        if card_gib is not None and wanted > 0.9 * card_gib:
            part.add({"name": name, "status": "skipped", "reason": f"needs ~{wanted} GiB, the card has {card_gib}"})
            continue
        # the CPU's bf16 matmuls are slow at full width: the dry run's step in float32 (its memory is not measured)
        device = ["--device", "cpu", "--peak-tflops", "1", "--dtype", "FLOAT32"] if part.dry_run else []
        job = Job(name, [STEP, *step_arguments(spec), *device, "--steps", "2", "--warmup", "1"],
                  timeout=300 if part.dry_run else 240, needs=5 if part.dry_run else 45)
        row = part.run(job)
        real = row.get("peak_vram_gib")
        row = {key: row.get(key) for key in ("name", "status", "error", "rc", "wall_s", "peak_vram_gib",
                                             "peak_vram_reserved_gib", "estimate_training_gib", "s_per_step")}
        row.update(note=spec.note, fake_gib=fake.get(name), goal_gib=spec.goal_gib)
        if real and row["fake_gib"]:
            row["fake_error"] = round(row["fake_gib"] / real - 1, 4)  # goal: within 5 %
        if real and row["estimate_training_gib"]:
            row["estimate_error"] = round(row["estimate_training_gib"] / real - 1, 4)
        if real and row["peak_vram_reserved_gib"]:
            row["reserved_minus_allocated_gib"] = round(row["peak_vram_reserved_gib"] - real, 3)
        part.add(row)
        failed += row["status"] not in ("ok", "skipped")
    return failed


def run_auto(part: Part) -> int:
    failed = 0
    models, cards = (["1.3b"], [8]) if part.dry_run else (AUTO_MODELS, CARDS_GIB)
    for model in models:
        for card in cards:
            dry = ["--device", "cpu", "--smoke"] if part.dry_run else []
            job = Job(f"auto_{model}_{card}gib", ["benchmarks/gpu/auto_plan.py", "--model", model, "--card-gib",
                                                  str(card), *dry], timeout=300 if part.dry_run else 200,
                      needs=5 if part.dry_run else 40)
            row = part.add(part.run(job))
            failed += row.get("status") not in ("ok", "skipped", "not run: the estimate says it does not fit")
    return failed
