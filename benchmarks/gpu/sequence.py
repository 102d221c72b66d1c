"""Part `sequence` of the GPU kit: sequence parallelism's code path on the lent GPU at N = 1 (benchmarks/
sequence_parity.py): the LoRA step with the token hooks, Ulysses' all-to-alls on NCCL and the gathered prediction
against the plain step, on each attention backend's kernels: loss and gradients, and the time the path adds. The
split over N > 1 GPUs is tested on the CPU (gloo); its speed needs more than one GPU."""
from __future__ import annotations

from benchmarks.gpu.kit import Job, Part

SCRIPT = "benchmarks/sequence_parity.py"
MODELS = {"13b": ["--model", "1.3b", "--size", "832x480", "--frames", "81"],
          # 2 blocks of the 14B at the 1280x720x81 (75,600 tokens): the layouts at full width and length
          "14b2_720p": ["--model", "14b", "--layers", "2", "--size", "1280x720", "--frames", "81"]}


def jobs(dry_run: bool) -> list[Job]:
    if dry_run:  # 2 narrow blocks on the CPU in float32 (gloo's group of one)
        return [Job("sp1_parity_13b_NATIVE", [SCRIPT, *MODELS["13b"], "--device", "cpu", "--smoke", "--size",
                                              "64x64", "--frames", "9", "--dtype", "FLOAT32", "--attention-backend",
                                              "NATIVE", "--steps", "2"], 300, needs=5)]
    out = [Job(f"sp1_parity_13b_{backend}", [SCRIPT, *MODELS["13b"], "--attention-backend", backend, "--steps", "3"],
               200, needs=60) for backend in ("NATIVE", "FLASH", "CUDNN")]
    out.append(Job("sp1_parity_14b2_720p_NATIVE", [SCRIPT, *MODELS["14b2_720p"], "--attention-backend", "NATIVE",
                                                   "--steps", "1"], 240, needs=90))
    return out


def run(part: Part) -> int:
    part.data["settings"]["planned"] = [job.name for job in jobs(False)]
    failed = 0
    for job in jobs(part.dry_run):
        row = part.add(part.run(job))
        failed += row.get("status") not in ("ok", "unavailable", "skipped")
    return failed
