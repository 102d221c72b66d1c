#!/usr/bin/env python
"""Part `learn` of the GPU kit: the default demo (scripts/demo.py: the shapes recipe of
modules/synthetic/shapes_training.py, a tiny T2V fine-tuned from scratch) trained on the GPU for its full step
count, sampled and judged exactly as the demo judges it; the same verdict as on the CPU is the proof that training
on the GPU learns. This script runs the demo and turns what it prints into JSON.

    python benchmarks/gpu/learn.py --folder /tmp/learn --json learn.json [--steps N]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.kit import spawn  # noqa: E402
VERDICT = re.compile(r"^\s+(\w+ \w+ moving \w+): (yes|no) \((\d+)/(\d+) seeds")
LOSS = re.compile(r"^\s+loss:\s+([\d.]+) .*-> ([\d.]+)")
# tqdm's training bar (stderr, carriage returns between updates): "training:  50%|...| 2/4 [00:01<00:01, 12.71step/s"
PROGRESS = re.compile(r"training:[^|]*\|[^|]*\|\s*(\d+)/(\d+) \[[^,\]]*,\s*([\d.]+)(step/s|s/step)")


def progress(log: str) -> dict:
    """The last training-bar update: steps done of the total and the rate (what a timed-out run reached)."""
    updates = PROGRESS.findall(log.replace("\r", "\n"))
    if not updates:
        return {}
    done, total, rate, unit = updates[-1]
    per_second = float(rate) if unit == "step/s" else 1.0 / float(rate) if float(rate) else None
    return {"steps_done": int(done), "steps_total": int(total), "steps_per_s": per_second}


def parse(output: str) -> dict:
    """The demo's verdict lines and its loss line."""
    verdicts = {m.group(1): {"shows": m.group(2) == "yes", "seeds": int(m.group(3)), "of": int(m.group(4))}
                for m in map(VERDICT.match, output.splitlines()) if m}
    loss = next((m for m in map(LOSS.match, output.splitlines()) if m), None)
    return {"verdicts": verdicts, "loss_first": float(loss.group(1)) if loss else None,
            "loss_last": float(loss.group(2)) if loss else None,
            "learned": bool(verdicts) and all(v["shows"] for v in verdicts.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, help="the demo's folder (model, data, workspace, outputs)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    parser.add_argument("--strip", default=None, help="also write seed 0's frames of each prompt as a PNG here")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--seconds", type=float, default=None, help="stop the demo at this deadline")
    args = parser.parse_args()
    command = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--folder", args.folder]
    command += ["--steps", str(args.steps)] if args.steps else []
    command += ["--strip", args.strip] if args.strip else []
    started = time.monotonic()
    log_path = Path(args.folder).parent / (Path(args.folder).name + ".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:  # a file, not a pipe: nothing is lost when the deadline ends it
        rc = spawn(command, args.seconds, log=log)
    output = log_path.read_text(encoding="utf-8", errors="replace")
    print(output[-4000:], flush=True)
    status = "timeout" if rc is None else "ok" if rc == 0 else "failed"
    result = {"status": status, "demo_rc": rc, "steps": args.steps or "recipe",
              "seconds": round(time.monotonic() - started, 1), **parse(output), **progress(output)}
    if rc:
        result["error"] = output.strip().splitlines()[-1:] or None
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if rc == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
