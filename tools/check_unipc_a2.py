"""Checks `unipc_a2` against diffusers 0.33.1 itself (the flow sigmas SkyReels-A2 ran on, unchanged through 0.36):
the same sigmas, timesteps and 50-step UniPC trajectory of a toy flow model, at A2's settings (shift 8,
flow_prediction, use_flow_sigmas).

Not a test: it needs diffusers 0.33 beside the installed one. From the repo root:

    pip install --no-deps --target /tmp/d033 diffusers==0.33.1
    .venv/bin/python tools/check_unipc_a2.py /tmp/d033

Each side runs in its own process (one diffusers per interpreter) and prints its numbers as JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS, SHIFT = 50, 8.0

RUN = r"""
import json, sys, torch, diffusers
sys.path.insert(0, {repo!r})
if {ours}:
    from modules.modelSampler.schedulers import A2FlowUniPC as Solver
else:
    from diffusers import UniPCMultistepScheduler as Solver
scheduler = Solver(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift={shift})
scheduler.set_timesteps({steps})
g = torch.Generator().manual_seed(0)
x = torch.randn(1, 16, 2, 4, 4, generator=g, dtype=torch.float64)
target = torch.randn(1, 16, 2, 4, 4, generator=g, dtype=torch.float64)
for t in scheduler.timesteps:
    velocity = x - target  # a toy flow model: the exact velocity towards `target` from the current sample
    x = scheduler.step(velocity * (1 + t / 4000), t, x).prev_sample
print(json.dumps({{"version": diffusers.__version__, "sigmas": scheduler.sigmas.tolist(),
                  "timesteps": scheduler.timesteps.tolist(), "final": x.flatten().tolist()}}))
"""


def run(ours: bool, path: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=path) if path else dict(os.environ)
    code = RUN.format(repo=str(REPO), ours=ours, shift=SHIFT, steps=STEPS)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(diffusers_033: str) -> int:
    old, ours, new = run(False, diffusers_033), run(True, None), run(False, None)
    assert old["version"].startswith("0.33"), old["version"]
    sigma_gap = max(abs(a - b) for a, b in zip(old["sigmas"], ours["sigmas"]))
    final_gap = max(abs(a - b) for a, b in zip(old["final"], ours["final"]))
    new_gap = max(abs(a - b) for a, b in zip(old["final"], new["final"]))
    print(f"diffusers {old['version']} UniPC: first sigma {old['sigmas'][0]:.6f}, timesteps {old['timesteps'][:3]}...")
    print(f"unipc_a2 on diffusers {ours['version']}: first sigma {ours['sigmas'][0]:.6f}, timesteps "
          f"{ours['timesteps'][:3]}...; max |sigma gap| {sigma_gap:.2e}, timesteps equal "
          f"{old['timesteps'] == ours['timesteps']}, 50-step result max gap {final_gap:.2e}")
    print(f"unipc on diffusers {new['version']}: first sigma {new['sigmas'][0]:.6f}, 50-step result max gap to "
          f"0.33 {new_gap:.2e}")
    ok = sigma_gap == 0 and old["timesteps"] == ours["timesteps"] and final_gap < 1e-12
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
