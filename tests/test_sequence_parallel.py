"""Sequence parallelism (`sequence_parallel` N, Ulysses on a data x sequence DeviceMesh): on gloo ranks one step's
loss and every gradient equal those of one process with the same global batch, for each family, under DDP and FSDP2;
a run continues in one process; settings it cannot run are refused in one line before any model loads."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.model.attention.ulysses import token_counts
from modules.trainer.preflight_base import check_sequence_parallel_base
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, TORCHRUN, train_config_dict
from tests.run_paths import run_dir
from tests.script_runner import run_script

CHECK = str(REPO_ROOT / "tests" / "sequence_parallel_check.py")
ROUND_OFF = 1e-6  # float32: the gradients are ~0.1, their differences ~1e-8 (one process vs two or four)


def test_tokens_are_cut_as_tensor_split_cuts_them():
    import torch

    for total, parts in ((27, 2), (27, 4), (75600, 8), (3, 4)):
        counts = token_counts(total, parts)
        assert counts == tuple(len(piece) for piece in torch.arange(total).tensor_split(parts))
        assert sum(counts) == total


@pytest.mark.parametrize("processes, families", [
    (2, ["t2v", "i2v", "ti2v", "flf2v", "a14b", "a14b_i2v", "vace", "a14b_vace", "skyreels_v2", "skyreels_v2_i2v"]),
    (4, ["t2v", "i2v", "a14b", "vace"]),  # data x sequence = 2 x 2
])
@pytest.mark.slow
def test_one_step_on_sequence_parallel_ranks_equals_one_process(tiny_model, tmp_path, processes, families):
    """27 tokens per clip (cut 14 + 13); I2V gets E2V's payload (two references' CLIP tokens, condition frames, the
    reference frame out of the loss); TI2V per-token timesteps with a clean frame; VACE its control context."""
    output = tmp_path / "result.json"
    models = [arg for family in families for arg in ("--model", f"{family}={tiny_model(family)}")]
    command = [*TORCHRUN[:-1], str(processes), CHECK, "--sequence-parallel", "2", *models, "--output", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(output.read_text())
    print(json.dumps(measured, indent=1))
    assert set(measured) == {f"{family} {wrapper}" for family in families for wrapper in ("DDP", "FSDP")}
    for name, row in measured.items():
        assert row["tokens_per_rank"] == [14, 13], name  # the uneven cut ran
        assert row["largest"] > 1e-3 and row["zero_gradients"] < row["parameters"], name  # it did backpropagate
        assert row["gradient"] < ROUND_OFF, (name, row)
        assert row["loss"] < 1e-6, (name, row)


@pytest.mark.slow
def test_a_sequence_parallel_run_with_samples_and_validation_continues_in_one_process(tiny_model, tmp_path):
    """LoRA on 2 ranks with sequence_parallel 2 (48x48 clips: 27 tokens, cut unevenly) for 2 steps, validating each
    step and sampling at step 2 (rank 0 alone, on whole clips), then resumed in one process to step 4: the LoRA of a
    4-step run in one process."""
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=4, frames=9, height=48, width=48)
    held_out = write_video_dataset(tmp_path / "held_out", count=1, frames=9, height=48, width=48, seed=3)

    def config(name: str, max_steps: int, **extra) -> dict:
        return train_config_dict(
            tiny_model("t2v"), data, tmp_path / name, resolution=[48, 48], batch_size=2, epochs=10,
            max_steps=max_steps, learning_rate=0.01, output_dtype="FLOAT32", backup_after=2, backup_after_unit="STEP",
            continue_last_backup=True, overwrite_output=True, validate_after=1, validate_after_unit="STEP",
            concepts=[{"path": str(data)}, {"path": str(held_out), "type": "VALIDATION"}], **extra)

    sample = [{"prompt": "a cat", "frames": 5, "height": 48, "width": 48, "steps": 2}]
    split = config("split", 2, sequence_parallel=2, samples=sample, sample_after=2, sample_after_unit="STEP")
    (tmp_path / "split.json").write_text(json.dumps(split))
    result = subprocess.run([*TORCHRUN, str(REPO_ROOT / "scripts" / "train.py"), "--config-path",
                             str(tmp_path / "split.json")], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    run = run_dir(tmp_path / "split" / "workspace")
    assert len(list((run / "samples").glob("*.mp4"))) == 1
    logs = "".join(p.read_text() for p in (run / "logs").iterdir())
    assert "validation loss at step 2: " in logs

    stderr = {}
    for name, values in (("split", config("split", 4)), ("one", config("one", 4))):  # one process: in this one
        (tmp_path / f"{name}-4.json").write_text(json.dumps(values))
        finished = run_script("train.py", "--config-path", str(tmp_path / f"{name}-4.json"))
        assert finished.returncode == 0, finished.stderr[-3000:]
        stderr[name] = finished.stderr
    assert "resumed from" in stderr["split"] and "step-00000002" in stderr["split"]
    assert "changed" not in stderr["split"]  # 1 data rank x 2 = 1 process x 2: the same global batch
    resumed, alone = (load_file(str(tmp_path / name / "output" / "lora.safetensors")) for name in ("split", "one"))
    difference = max(float((resumed[k] - alone[k]).abs().max()) for k in alone)
    print(f"2 sequence-parallel ranks then one process vs one process, 4 steps: max difference {difference}")
    assert max(float(v.abs().max()) for k, v in alone.items() if "lora_up" in k) > 1e-3  # it trained
    assert difference < 1e-4  # AdamW at lr 0.01 turns float32 round-off in small gradients into ~2e-5


def _check(tiny_model, monkeypatch, variant: str, n: int, world_size: int) -> str:
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    config = TrainConfig.from_dict({"base_model_name": str(tiny_model(variant)), "sequence_parallel": n})
    with pytest.raises(UserError) as error:
        check_sequence_parallel_base(config)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_sequence_parallel_settings_it_cannot_run_are_one_line_errors(tiny_model, monkeypatch):
    with pytest.raises(ConfigError, match="'sequence_parallel' must be 1"):
        TrainConfig.from_dict({"sequence_parallel": 0})
    assert "this run has one process (no torchrun): start it with torchrun --nproc_per_node a multiple of 2" in \
        _check(tiny_model, monkeypatch, "t2v", 2, 1)
    assert "this run has 3 processes" in _check(tiny_model, monkeypatch, "t2v", 2, 3)
    # the tiny transformer has 2 heads (1.3B: 12, 14B: 40)
    assert "has 2 attention heads, which 4 does not divide (each GPU takes heads/N of them): use one of 1, 2" in \
        _check(tiny_model, monkeypatch, "t2v", 4, 4)
    assert "is Wan2.2-Animate-2" in _check(tiny_model, monkeypatch, "animate_2", 2, 2)
    monkeypatch.setenv("WORLD_SIZE", "4")
    check_sequence_parallel_base(TrainConfig.from_dict({"base_model_name": str(tiny_model("t2v")),
                                                        "sequence_parallel": 2}))  # 2 x 2: accepted


def test_train_py_refuses_sequence_parallel_without_torchrun_before_the_model_loads(tiny_model, video_dataset,
                                                                                    tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, sequence_parallel=2)
    (tmp_path / "config.json").write_text(json.dumps(values))
    result = run_script("train.py", "--config-path", str(tmp_path / "config.json"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: config key 'sequence_parallel' is 2")
