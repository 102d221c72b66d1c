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


def _transformer_weights(output_dir) -> dict:
    from safetensors.torch import load_file as load

    return load(str(output_dir / "transformer" / "diffusion_pytorch_model.safetensors"))


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_fsdp_full_fine_tune_matches_one_process_and_backups_move_between_strategies(tiny_model, tmp_path):
    """Full fine-tune: 4 optimizer steps in one process (global batch 4) against runs that switch between
    one process and 2 FSDP ranks (batch 2 each) at step 2 through a backup, in both directions. Exercises
    sharded training (with gradient accumulation, clipping and checkpointing), collective backup/resume in both optimizer
    state forms, collective sampling and the gathered final save."""
    from modules.util.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=8, frames=9, height=32, width=32)
    model = tiny_model("t2v")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29518"]

    def config(name: str, batch_size: int, max_steps: int, **extra) -> dict:
        return train_config_dict(
            model, data, tmp_path / name, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
            output_model_destination=str(tmp_path / name / "output"), batch_size=batch_size, epochs=4,
            gradient_accumulation_steps=2, max_steps=max_steps, learning_rate=1e-3, max_grad_norm=0.05,
            data_parallel="FSDP", gradient_checkpointing=True, **extra)

    def run(args: list[str], name: str, batch_size: int, max_steps: int, **extra):
        train(args, config(name, batch_size, max_steps, **extra), tmp_path / f"{name}-{max_steps}.json")
        return _transformer_weights(tmp_path / name / "output")

    reference = run([sys.executable], "one", 4, 4)  # data_parallel is ignored in a single process
    # one process for 2 steps, then 2 sharded ranks resume (torch's id-keyed optimizer state -> shards)
    halfway = run([sys.executable], "to_fsdp", 4, 2)
    sample = [{"prompt": "a cat", "frames": 5, "height": 32, "width": 32, "steps": 2}]
    resumed_sharded = run(torchrun, "to_fsdp", 2, 4, continue_last_backup=True, samples=sample,
                          sample_at_end=True)
    # 2 sharded ranks for 2 steps (name-keyed gathered state), then one process resumes
    first_half = run(torchrun, "from_fsdp", 2, 2)
    resumed_single = run([sys.executable], "from_fsdp", 4, 4, continue_last_backup=True)

    initial = load_file(str(model / "transformer" / "diffusion_pytorch_model.safetensors"))
    assert _max_difference(reference, initial) > 1e-3  # it trained
    assert _max_difference(first_half, initial) > 1e-4
    assert _max_difference(resumed_sharded, halfway) > 1e-4  # the sharded ranks did train steps 3-4
    print("max difference to one process: FSDP resumed", _max_difference(resumed_sharded, reference),
          "single resumed from FSDP", _max_difference(resumed_single, reference),
          "one process moved", _max_difference(reference, initial),
          "sharded steps 3-4 moved", _max_difference(resumed_sharded, halfway))
    assert _max_difference(resumed_sharded, reference) < 1e-5
    assert _max_difference(resumed_single, reference) < 1e-5
    # the sharded run sampled on every rank; rank 0 wrote the video
    assert len(list((tmp_path / "to_fsdp" / "workspace" / "samples").glob("*.mp4"))) == 1
