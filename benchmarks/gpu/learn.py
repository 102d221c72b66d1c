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
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERDICT = re.compile(r"^\s+(\w+ \w+ moving \w+): (yes|no) \((\d+)/(\d+) seeds")
LOSS = re.compile(r"^\s+loss:\s+([\d.]+) .*-> ([\d.]+)")


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
    args = parser.parse_args()
    command = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--folder", args.folder]
    command += ["--steps", str(args.steps)] if args.steps else []
    command += ["--strip", args.strip] if args.strip else []
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout + done.stderr[-4000:], flush=True)
    result = {"status": "ok" if done.returncode == 0 else "failed", "demo_rc": done.returncode,
              "steps": args.steps or "recipe", "seconds": round(time.monotonic() - started, 1), **parse(done.stdout)}
    if done.returncode:
        result["error"] = done.stderr.strip().splitlines()[-1:] or None
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if done.returncode == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
