#!/usr/bin/env python
"""How long the command-line scripts take to answer before any real work: `--help`, a config with one
unknown key, a config whose model folder is missing (the start-up path checks), and a sample with a bad output
name (issue #25: a one-line config error must come in under 3 s, not after importing the trainer).

Each command runs `--repeats` times in a fresh process; the median wall time is reported, beside the time of
`import torch` alone: reading and checking a config imports no torch (tests/test_cli_startup.py), so the config
error should take a fraction of it.

    python benchmarks/cli_startup.py [--repeats 3] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], repeats: int) -> dict:
    times, last = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        last = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - start)
    lines = (last.stdout + last.stderr).strip().splitlines()
    return {"median_s": round(statistics.median(times), 2), "times_s": [round(t, 2) for t in times],
            "exit_code": last.returncode, "first_line": lines[0] if lines else "", "last_line": lines[-1] if lines else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.json"
        bad.write_text(json.dumps({"base_model_name": "x", "epohcs": 1}))
        missing = Path(tmp) / "missing_model.json"
        missing.write_text(json.dumps({"base_model_name": str(Path(tmp) / "no such folder")}))
        prompts = Path(tmp) / "prompts.txt"
        prompts.write_text("a cat\n")
        commands = {
            "import torch": [python, "-c", "import torch"],
            "train.py --help": [python, "scripts/train.py", "--help"],
            "train.py (unknown config key)": [python, "scripts/train.py", "--config-path", str(bad)],
            "train.py (missing model folder)": [python, "scripts/train.py", "--config-path", str(missing)],
            "sample.py (bad output name)": [python, "scripts/sample.py", "--model", tmp, "--prompt", "a cat",
                                            "--output", "x.avi"],
            "sample.py --help": [python, "scripts/sample.py", "--help"],
            "evaluate.py (bad --frames)": [python, "scripts/evaluate.py", "--model", tmp, "--prompts", str(prompts),
                                           "--output", str(Path(tmp) / "report"), "--frames", "10"],
            "evaluate.py --help": [python, "scripts/evaluate.py", "--help"],
            "merge_lora.py --help": [python, "scripts/merge_lora.py", "--help"],
        }
        results = {name: timed(command, args.repeats) for name, command in commands.items()}
    for name, result in results.items():
        print(f"{name:32s} {result['median_s']:6.2f} s  (exit {result['exit_code']})  {result['first_line'][:70]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
