"""Data parallel: 2 processes (gloo, CPU) end with the weights of 1 process with the same global batch."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from tests.conftest import REPO_ROOT, train_config_dict

pytestmark = pytest.mark.slow


def train(args: list[str], config: dict, path) -> None:
    path.write_text(json.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*args, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(path)],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tiny_model, tmp_path):
    from modules.util.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=4, frames=9, height=32, width=32)
    common = dict(epochs=2, backup_before_save=False)
    single = train_config_dict(tiny_model("t2v"), data, tmp_path / "one", batch_size=4, **common)
    double = train_config_dict(tiny_model("t2v"), data, tmp_path / "two", batch_size=2, **common)
    train([sys.executable], single, tmp_path / "one.json")
    train([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517"],
          double, tmp_path / "two.json")
    one = load_file(single["output_model_destination"])
    two = load_file(double["output_model_destination"])
    assert one.keys() == two.keys()
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < 1e-4
    assert max(float(v.abs().max()) for v in one.values()) > 1e-2  # the LoRA did train
    # only rank 0 wrote: one log file
    assert len(list((tmp_path / "two" / "workspace" / "logs").iterdir())) == 1
