#!/usr/bin/env python
"""One part of the GPU kit (benchmarks/gpu/run.sh calls this once per part): writes OUT/<part>.json.

    python benchmarks/gpu/part.py PART --out DIR [--work DIR] [--seconds N] [--dry-run]

PART: correct (`pytest -m cuda`), learn (the shapes demo on the GPU), speed (gpu_step's s/step and MFU table;
SPEED_MODELS="13b 14b8 5b" picks the models), profile (one 1.3B step under torch.profiler), memory (the full-size
table real beside fake and estimate), auto (AUTO's plans on 8-24 GiB cards), int8 (per-GEMM timings and step times
of the int8 ConvRot base against bf16 and fp8), sequence (sequence parallelism's path at N = 1 against the plain
step). --dry-run: the same code at tiny size
on the CPU. Exit status: 0 when every job ran as expected, 1 otherwise (the JSON says which).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.kit import Part, spawn  # noqa: E402

PARTS = ("correct", "learn", "speed", "profile", "memory", "auto", "int8", "sequence")
# The one test the dry run runs on the CPU (WANTRAINER_CUDA_TESTS_DEVICE=cpu): fixtures, runs and comparison.
DRY_TESTS = "test_gradient_checkpointing_trains_bit_for_bit_as_without"


def report_rows(path: Path) -> list[dict]:
    """Each test's outcome as tests/cuda/conftest.py wrote it (one JSON line per test phase that decided it)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def correct(part: Part) -> int:
    report = part.scratch / "tests.jsonl"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/cuda", "-p", "no:cacheprovider", "-q", "-rfEs",
               "--durations=15"]
    env = {**os.environ, "WANTRAINER_CUDA_TESTS_REPORT": str(report)}
    if part.dry_run:
        command += ["-k", DRY_TESTS]
        env["WANTRAINER_CUDA_TESTS_DEVICE"] = "cpu"
    started = time.monotonic()
    rc = spawn(command, part.budget.left(), env)
    rows = report_rows(report) if report.is_file() else []
    for row in rows:
        part.data["rows"].append(row)
    counts = {outcome: sum(r["outcome"] == outcome for r in rows) for outcome in ("passed", "failed", "skipped")}
    part.data.update(pytest_rc=rc, counts=counts, wall_s=round(time.monotonic() - started, 1),
                     status="timeout" if rc is None else "ok" if rc == 0 else "failed")
    part.save()
    return int(rc != 0 or not rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=PARTS)
    parser.add_argument("--out", type=Path, required=True, help="where <part>.json goes")
    parser.add_argument("--work", type=Path, default=Path("/tmp/wantrainer-gpu-kit"), help="scratch files")
    parser.add_argument("--seconds", type=float, default=540, help="the part's budget")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = os.environ.get("SPEED_MODELS", "13b 14b8 5b").split()
    part = Part(args.part, args.out, args.work, args.seconds, args.dry_run,
                {"speed_models": models} if args.part == "speed" else {})
    if args.part == "correct":
        return correct(part)
    if args.part == "learn":
        from benchmarks.gpu.kit import Job

        # a real run stops the demo itself before the part's limit, so that the JSON says how far it got
        steps = ["--steps", "3"] if args.dry_run else ["--seconds", str(max(args.seconds - 20, 10))]
        job = Job("demo", ["benchmarks/gpu/learn.py", "--folder", str(part.scratch / "demo"), "--strip",
                           str(args.out / "learn_strip.png"), *steps], args.seconds, needs=0)
        row = part.add(part.run(job))
        return int(row.get("status") != "ok" or (not args.dry_run and not row.get("learned")))
    if args.part in ("speed", "profile"):
        from benchmarks.gpu import speed

        return int(bool(speed.run(part, models) if args.part == "speed" else speed.run_profile(part)))
    if args.part == "int8":
        from benchmarks.gpu import int8

        return int(bool(int8.run(part)))
    if args.part == "sequence":
        from benchmarks.gpu import sequence

        return int(bool(sequence.run(part)))
    from benchmarks.gpu import memory

    if args.part == "auto":
        return int(bool(memory.run_auto(part)))
    card = part.data["environment"]["gpu_memory_gib"]
    return int(bool(memory.run_rows(part, card)))


if __name__ == "__main__":
    sys.exit(main())
