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


def train(args: list[str], config: dict, path) -> subprocess.CompletedProcess:
    path.write_text(json.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*args, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(path)],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


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
    """Full fine-tune in one process (global batch 4) against runs that switch between one process and
    2 FSDP ranks (batch 2 each) every 2 steps through a backup: a whole-tensor backup scattered to the
    shards, a sharded backup (each rank wrote its part) resumed by 2 ranks and by one process. Exercises
    sharded training (gradient accumulation, clipping, checkpointing), collective backups and resume,
    collective sampling and the gathered final save."""
    from modules.util.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=8, frames=9, height=32, width=32)
    model = tiny_model("t2v")
    single = [sys.executable]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29518"]

    def run(args: list[str], name: str, max_steps: int, **extra) -> dict:
        config = train_config_dict(
            model, data, tmp_path / name, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
            output_model_destination=str(tmp_path / name / "output"), batch_size=4 if args is single else 2,
            epochs=10, gradient_accumulation_steps=2, max_steps=max_steps, learning_rate=1e-3, max_grad_norm=0.05,
            data_parallel="FSDP", gradient_checkpointing=True, continue_last_backup=True, **extra)
        result = train(args, config, tmp_path / f"{name}-{max_steps}.json")
        assert "changed since it was written" not in result.stderr  # 1 GPU x 4 = 2 GPUs x 2, DDP or FSDP
        return _transformer_weights(tmp_path / name / "output")

    reference = {4: run(single, "one", 4)}  # data_parallel is ignored in a single process
    reference[6] = run(single, "one", 6)
    halfway = run(single, "to_fsdp", 2)
    sample = [{"prompt": "a cat", "frames": 5, "height": 32, "width": 32, "steps": 2}]
    sharded_from_whole = run(torchrun, "to_fsdp", 4, samples=sample, sample_at_end=True)
    sharded_from_shards = run(torchrun, "to_fsdp", 6)
    first_half = run(torchrun, "from_fsdp", 2)
    single_from_shards = run(single, "from_fsdp", 4)

    initial = load_file(str(model / "transformer" / "diffusion_pytorch_model.safetensors"))
    differences = {"2 ranks resumed a whole-tensor backup (step 4)": _max_difference(sharded_from_whole, reference[4]),
                   "2 ranks resumed a sharded backup (step 6)": _max_difference(sharded_from_shards, reference[6]),
                   "one process resumed a sharded backup (step 4)": _max_difference(single_from_shards, reference[4])}
    print("max difference to one process:", differences)
    assert _max_difference(reference[4], initial) > 1e-3  # it trained
    assert _max_difference(first_half, initial) > 1e-4
    assert _max_difference(sharded_from_whole, halfway) > 1e-4  # the sharded ranks did train steps 3-4
    assert all(value < 1e-5 for value in differences.values()), differences
    assert (tmp_path / "from_fsdp" / "workspace" / "backup" / "step-00000002" / "shards").is_dir()
    # the sharded run sampled on every rank; rank 0 wrote the video
    assert len(list((tmp_path / "to_fsdp" / "workspace" / "samples").glob("*.mp4"))) == 1
