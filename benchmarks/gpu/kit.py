"""What every part of the GPU kit shares (benchmarks/gpu/run.sh): the machine's description, one JSON file per part
written after every job (so a part stopped by its timeout still leaves what it measured), and jobs run in
subprocesses under the part's time budget (a hung job costs its own timeout, never the parts after it)."""
from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Dense bf16 peak TFLOP/s by card name (vendor data sheets, SXM parts); MFU is model FLOPs / s / this.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "RTX 4090": 165.0}
PACKAGES = ("torch", "triton", "diffusers", "transformers", "peft", "safetensors", "av", "numpy",
            "opencv-python-headless", "bitsandbytes", "flash-attn", "prodigyopt", "schedulefree", "pytorch-optimizer")


def peak_tflops(device_name: str) -> float | None:
    return next((peak for name, peak in PEAK_BF16_TFLOPS.items() if name in device_name), None)


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """GPU, driver, CUDA, torch and the packages the parts use, the date and the host (CPU-only where no GPU)."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    driver = None
    if gpu and shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True)
        driver = query.stdout.strip() or None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
            "driver_and_memory": driver, "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory
                                                                 / 2**30, 2) if gpu else None,
            "peak_bf16_tflops": peak_tflops(gpu) if gpu else None, "cuda": torch.version.cuda,
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "packages": {name: version(name) for name in PACKAGES}}


def write_json(path: Path, data) -> None:
    from modules.util.atomic import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1, default=str))


class Budget:
    """The part's seconds, counted from its start."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


@dataclasses.dataclass
class Job:
    name: str
    argv: list[str]  # a Python script and its arguments, run as `python argv...`; `--json FILE` is added
    timeout: float  # its own limit, seconds (the budget's remainder when less)
    needs: float = 30.0  # not started with fewer seconds left in the budget


def spawn(command: list[str], timeout: float | None, env: dict | None = None, log=None) -> int | None:
    """Runs `command` in the repo root in its own process group, so that a timeout ends it with its children
    (inductor's compile workers, the demo's trainer); its exit code, None on a timeout. `log`: an open file that
    takes its stdout and stderr."""
    proc = subprocess.Popen(command, cwd=ROOT, start_new_session=True, env=env, stdout=log,
                            stderr=subprocess.STDOUT if log is not None else None)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


class Part:
    """One part's JSON (`OUT/<name>.json`: the environment, the settings and a row per job) and its jobs' scratch
    folder (`WORK/<name>/`: outside OUT, whose files the device tool returns only 8 of)."""

    def __init__(self, name: str, out: Path, work: Path, seconds: float, dry_run: bool, settings: dict):
        self.name, self.out, self.dry_run = name, out, dry_run
        self.scratch = work / name
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.budget = Budget(seconds)
        self.data = {"part": name, "dry_run": dry_run, "budget_s": seconds, "environment": environment(),
                     "settings": settings, "rows": []}
        self.save()

    def save(self) -> None:
        write_json(self.out / f"{self.name}.json", self.data)

    def add(self, row: dict) -> dict:
        self.data["rows"].append(row)
        self.save()
        return row

    def run(self, job: Job) -> dict:
        """Runs the job (its JSON read back into the row), or records why it did not run."""
        left = self.budget.left()
        if left < job.needs:
            return {"name": job.name, "status": "skipped", "reason": f"out of time: {left:.0f} s left in the part's "
                    f"budget, it needs {job.needs:.0f}"}
        result = self.scratch / f"{job.name}.json"
        result.unlink(missing_ok=True)
        timeout = min(job.timeout, left)
        print(f"== {self.name}/{job.name} (limit {timeout:.0f} s): {' '.join(job.argv)}", flush=True)
        started = time.monotonic()
        rc = spawn([sys.executable, *job.argv, "--json", str(result)], timeout)
        row = json.loads(result.read_text()) if result.is_file() else {}
        row.update(name=job.name, rc=rc, wall_s=round(time.monotonic() - started, 1))
        if rc is None:
            row["status"] = "timeout"
        elif not result.is_file():
            row["status"] = "failed"
        return row
