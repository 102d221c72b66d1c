"""The GPU kit (benchmarks/gpu/) works before a GPU is lent: the wheel plan resolves from requirements.txt and the
lock, the folder check catches a wrong folder, the jobs cover the table, and `run.sh --dry-run` runs every part at
tiny size on the CPU and writes every JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def test_the_wheel_plan_is_what_the_gpu_machine_lacks_as_pinned():
    from benchmarks.gpu.build_wheels import MACHINE_HAS, lock_entries, plan, requirements

    wanted = plan(REPO_ROOT)
    pins = requirements(REPO_ROOT / "requirements.txt")
    lock = lock_entries(REPO_ROOT / "requirements.lock")
    assert {"diffusers", "av", "ftfy", "prodigyopt", "schedulefree", "pytorch-optimizer"} <= wanted.keys()
    assert "wcwidth" in wanted and "importlib-metadata" in wanted  # dependencies the machine lacks too
    assert not wanted.keys() & (MACHINE_HAS | {"torch", "customtkinter", "comfy-kitchen"})  # 68 MiB: over the limit
    assert all(wanted[name] == pins[name] for name in wanted if name in pins)
    assert all(wanted[name] == lock[name][0] for name in wanted)


def test_a_stopped_demo_still_says_how_far_it_trained():
    """The 2026-11-28 H200 run lost the demo's progress at its deadline; the part now reads it from tqdm's bar."""
    from benchmarks.gpu.learn import progress

    log = ("caching: 100%|##| 4/4\rtraining:   0%|  | 0/4000 [00:00<?, ?step/s]"
           "\rtraining:  52%|#####  | 2080/4000 [02:40<02:27, 13.02step/s, epoch=3/6, loss=0.2]")
    assert progress(log) == {"steps_done": 2080, "steps_total": 4000, "steps_per_s": 13.02}
    slow = progress("training:   1%|  | 3/4000 [00:10<3:40:00,  2.50s/step]")
    assert slow["steps_done"] == 3 and slow["steps_per_s"] == pytest.approx(0.4)
    assert progress("no bar here") == {}


def test_the_folder_check_names_missing_extra_and_doubled_wheels(tmp_path):
    from benchmarks.gpu.build_wheels import check

    for name in ("av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl", "ftfy-6.3.1-py3-none-any.whl",
                 "ftfy-6.3.0-py3-none-any.whl", "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"):
        (tmp_path / name).write_bytes(b"")
    problems = check(tmp_path, {"av": "18.1.0", "ftfy": "6.3.1", "diffusers": "0.42.1"})
    assert sorted(problems) == ["missing diffusers==0.42.1", "missing ftfy==6.3.1",
                                "not in the plan: bitsandbytes ['0.50.2']"]
    assert check(tmp_path, {"av": "18.1.0", "bitsandbytes": "0.50.2", "ftfy": "6.3.1"}) == ["missing ftfy==6.3.1"]


def test_the_speed_jobs_cover_each_model_backend_eager_and_compiled():
    from benchmarks.gpu.speed import BACKENDS, STEP, jobs

    names = [job.name for job in jobs(["13b", "14b8", "5b"], dry_run=False)]
    for model in ("13b", "14b8"):
        assert {f"{model}_{b}_{mode}" for b in BACKENDS for mode in ("eager", "compiled")} <= set(names)
    assert names[:2] == ["13b_NATIVE_eager", "13b_NATIVE_compiled"] and "5b_NATIVE_compiled" in names
    # the checkpointing policies right after full checkpointing, eager and compiled, on the 1.3B and the 14B stack
    assert names[2] == "13b_NATIVE_compiled_again"  # the cross-run graph cache: its first step is short
    assert names[3:5] == ["13b_NATIVE_keepattn_eager", "13b_NATIVE_keepattn_compiled"]
    for model, kept in (("13b", "keepattn_kept7"), ("14b8", "keepattn_kept4")):
        assert {f"{model}_NATIVE_{tag}_{mode}" for tag in ("keepattn", kept, "allbutffn")
                for mode in ("eager", "compiled")} <= set(names)
    assert "lean_vs_diffusers_1536w_4blocks" in names  # the lean block against diffusers' block forward
    assert all("--steps" in job.argv and int(job.argv[job.argv.index("--steps") + 1]) >= 5
               for job in jobs(["13b"], dry_run=False) if job.argv[0] == STEP)  # lean_block_speed.py times its own repeats


def test_every_memory_row_becomes_gpu_step_arguments_it_accepts():
    from benchmarks.gpu.memory import step_arguments
    from benchmarks.memory_fullsize import CONFIGS

    args = step_arguments(CONFIGS["a14b_light_split"])
    assert args[args.index("--blocks-to-swap") + 1] == "30" and args[args.index("--ffn-chunks") + 1] == "8"
    assert {"--fp8", "--activation-offload", "--offload-inactive-expert", "--checkpoint-attention",
            "--checkpointing"} <= set(args) and args[args.index("--experts") + 1] == "2"
    int8 = step_arguments(CONFIGS["14b_light_int8"])
    assert int8[int8.index("--base-weight-format") + 1] == "INT8_CONVROT" and "--fp8" not in int8
    help_text = subprocess.run([sys.executable, "benchmarks/gpu_step.py", "--help"], cwd=REPO_ROOT,
                               capture_output=True, text=True).stdout
    assert all(flag in help_text for flag in args + int8 if flag.startswith("--"))


def test_a_sequence_parallel_memory_row_is_skipped_on_one_gpu_and_the_sequence_part_plans_its_parity_rows():
    from benchmarks.gpu.sequence import jobs
    from benchmarks.memory_fullsize import CONFIGS

    assert CONFIGS["14b_720p_sp4"].sequence_parallel == 4  # part `memory` skips it: one rank of four GPUs
    planned = [job.name for job in jobs(dry_run=False)]
    assert planned[0] == "sp1_parity_13b_NATIVE" and "sp1_parity_14b2_720p_NATIVE" in planned
    help_text = subprocess.run([sys.executable, "benchmarks/sequence_parity.py", "--help"], cwd=REPO_ROOT,
                               capture_output=True, text=True).stdout
    assert all(flag in help_text for job in jobs(dry_run=False) for flag in job.argv if flag.startswith("--"))


def test_the_int8_part_times_the_gemms_then_each_model_with_and_without_int8():
    from benchmarks.gpu.int8 import jobs

    planned = jobs(dry_run=False)
    assert [job.name for job in planned][:5] == ["gemm", "13b_BF16", "13b_INT8_CONVROT", "14b8_BF16",
                                                 "14b8_INT8_CONVROT"]
    assert planned[0].argv[planned[0].argv.index("--models") + 1:] == ["1.3b", "14b"]
    for job in planned[1:]:
        fmt = job.argv[job.argv.index("--base-weight-format") + 1]
        assert job.name.endswith(fmt) and "--checkpointing" in job.argv and "5" in job.argv
    assert [job.name for job in planned][5:] == ["13b_FP8_SCALED", "14b8_FP8_SCALED"]  # a budget cut loses these


@pytest.mark.slow
def test_run_sh_dry_run_runs_every_part_on_the_cpu_and_writes_its_json(tmp_path):
    out = tmp_path / "out"
    # ~2 minutes of one core in all; the part budgets leave room for a busy machine
    env = {**os.environ, "OUT": str(out), "WORK": str(tmp_path / "work"), "OMP_NUM_THREADS": "1",
           "PY": sys.executable, "PART_SECONDS": "400"}
    done = subprocess.run(["bash", "benchmarks/gpu/run.sh", "--dry-run", "all"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=2700)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "run.json").read_text())
    assert summary["dry_run"] is True
    parts = ["correct", "learn", "speed", "profile", "memory", "auto", "int8", "sequence"]
    assert all(summary[part]["rc"] == 0 for part in parts), summary
    results = {part: json.loads((out / f"{part}.json").read_text()) for part in parts}
    assert all(r["dry_run"] and r["environment"]["packages"]["torch"] and r["rows"] for r in results.values())
    assert results["correct"]["counts"]["passed"] >= 1 and not results["correct"]["counts"]["failed"]
    (demo,) = results["learn"]["rows"]
    assert demo["status"] == "ok" and len(demo["verdicts"]) == 2 and demo["loss_first"] > 0
    (step,) = results["speed"]["rows"]
    assert step["status"] == "ok" and step["s_per_step_median"] > 0 and step["mfu_at_median"] > 0
    assert (step["checkpoint_policy"], step["kept_blocks"]) == ("KEEP_ATTENTION", 1)
    assert len(results["speed"]["settings"]["planned"]) >= 16
    assert results["profile"]["rows"][0]["profile_top"] and (out / "profile_13b.trace.json.gz").stat().st_size > 0
    (row,) = [r for r in results["memory"]["rows"] if r["name"] == "dry_1.3b_gc"]
    assert row["status"] == "ok" and row["fake_gib"] > 0 and row["estimate_training_gib"] > 0
    (plan,) = results["auto"]["rows"]
    assert plan["status"] == "ok" and plan["changes"] and plan["estimate_fits"] and len(plan["losses"]) == 3
    gemm, *steps = results["int8"]["rows"]
    assert gemm["status"] == "ok" and len(gemm["rows"]) == 3 and all(r["int8_int_mm_s"] > 0 for r in gemm["rows"])
    assert [(r["base_weight_format"], r["status"]) for r in steps] == [("BF16", "ok"), ("INT8_CONVROT", "ok")]
    (parity,) = results["sequence"]["rows"]  # the Ulysses path in a group of one against the plain step
    assert parity["status"] == "ok" and parity["tokens_cut"] == [parity["tokens"]] and parity["largest_gradient"] > 0
    assert parity["gradient_difference"] == 0.0 and parity["loss_difference"] == 0.0  # float32 on the CPU
    assert len(results["sequence"]["settings"]["planned"]) == 4
    # the device tool returns 8 files a command: any 3 parts' files with run.json and run.log fit
    per_part = sorted((sum(f.name.startswith(part) for f in out.iterdir()) for part in parts), reverse=True)
    assert sum(per_part[:3]) + 2 <= 8 and len(list(out.iterdir())) == sum(per_part) + 2
