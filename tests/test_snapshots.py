"""Snapshots every N units to workspace_dir/save/, LoRA headers that say what a file is, and the
LoRA output dtype (issue #11, deliverables 2 and 3)."""
from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from modules.config.train_config import TrainConfig
from modules.model.detection import detect_variant
from modules.trainer.GenericTrainer import GenericTrainer
from modules.trainer.schedule import Schedule
from modules.util.enum import TimeUnit
from tests.conftest import train_config_dict
from tests.run_paths import run_dir


def run(tiny_model, variant, video_dataset, tmp_path, **overrides) -> GenericTrainer:
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model(variant), video_dataset, tmp_path,
                                                                     **overrides)))
    trainer.start()
    trainer.train()
    trainer.end()
    return trainer


def header(path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


def tensors(path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_snapshots_every_step_after_the_skipped_ones_keep_the_newest(tiny_model, video_dataset, tmp_path):
    trainer = run(tiny_model, "t2v", video_dataset, tmp_path, epochs=2, save_every=1, save_every_unit="STEP",
                  save_skip_first=2, rolling_save_count=3)  # 6 steps: snapshots of steps 3..6, the newest 3 kept
    save = run_dir(tmp_path / "workspace") / "save"
    assert sorted(p.name for p in save.iterdir()) == [f"lora-step00000{s}.safetensors" for s in (4, 5, 6)]
    assert [header(save / f"lora-step00000{s}.safetensors")["wantrainer.steps"] for s in (4, 5, 6)] == ["4", "5", "6"]
    # The last snapshot holds the final weights: the same tensors as the output file.
    final = tensors(tmp_path / "output" / "lora.safetensors")
    last = tensors(save / "lora-step000006.safetensors")
    assert final.keys() == last.keys() and all(torch.equal(final[k], last[k]) for k in final)
    assert len(trainer.snapshot_paths) == 4  # written (the oldest was pruned later)


def test_epoch_snapshots_of_a_two_expert_model_are_one_file_per_expert(tiny_model, video_dataset, tmp_path):
    run(tiny_model, "a14b", video_dataset, tmp_path, epochs=2, save_every=1, save_every_unit="EPOCH")
    save = run_dir(tmp_path / "workspace") / "save"
    names = sorted(p.name for p in save.iterdir())
    assert names == [f"lora-step00000{s}_{e}_noise.safetensors" for s in (3, 6) for e in ("high", "low")]
    for name in names:
        meta = header(save / name)
        assert meta["wantrainer.expert"] == ("high_noise" if "_high_noise" in name else "low_noise")
        assert meta["wantrainer.boundary_ratio"] == "0.875"
    for expert in ("high", "low"):
        final = header(tmp_path / "output" / f"lora_{expert}_noise.safetensors")
        assert final["wantrainer.expert"] == f"{expert}_noise" and final["wantrainer.epochs"] == "2"


def test_the_header_says_what_the_file_is(tiny_model, video_dataset, tmp_path):
    run(tiny_model, "t2v", video_dataset, tmp_path, epochs=1, output_model_format="COMFY_LORA")
    meta = header(tmp_path / "output" / "lora.safetensors")
    assert meta["wantrainer.variant"] == "wan-2.1-t2v" and "wantrainer.expert" not in meta
    assert meta["wantrainer.base_model"] == str(tiny_model("t2v"))
    assert meta["wantrainer.base_transformer_config"] == detect_variant(tiny_model("t2v")).transformer_config_hash
    assert (meta["wantrainer.steps"], meta["wantrainer.epochs"]) == ("3", "1")
    assert (meta["wantrainer.rank"], meta["wantrainer.alpha"], meta["wantrainer.adapter"]) == ("4", "4", "lora")
    # COMFY_LORA keys are Wan's own module names: the implementation says so
    assert meta["modelspec.implementation"] == "https://github.com/Wan-Video/Wan2.1"
    assert meta["wantrainer.format"] == "COMFY_LORA"


def test_the_transformer_config_hash_ignores_diffusers_bookkeeping(tiny_model, tmp_path):
    import json
    import shutil

    copy = shutil.copytree(tiny_model("t2v"), tmp_path / "copy")
    config_file = copy / "transformer" / "config.json"
    config = json.loads(config_file.read_text())
    config["_diffusers_version"] = "0.0.1"
    config_file.write_text(json.dumps(config))
    assert detect_variant(copy).transformer_config_hash == detect_variant(tiny_model("t2v")).transformer_config_hash
    config["num_layers"] += 1
    config_file.write_text(json.dumps(config))
    assert detect_variant(copy).transformer_config_hash != detect_variant(tiny_model("t2v")).transformer_config_hash


@pytest.mark.parametrize("dtype, torch_dtype", [("BFLOAT16", torch.bfloat16), ("FLOAT16", torch.float16),
                                                ("FLOAT32", torch.float32)])
def test_output_dtype_sets_the_lora_tensor_dtype(tiny_model, video_dataset, tmp_path, dtype, torch_dtype):
    run(tiny_model, "t2v", video_dataset, tmp_path, epochs=1, max_steps=1, output_dtype=dtype,
        output_model_format="COMFY_LORA")
    found = tensors(tmp_path / "output" / "lora.safetensors")
    assert {t.dtype for k, t in found.items() if not k.endswith(".alpha")} == {torch_dtype}
    assert {t.dtype for k, t in found.items() if k.endswith(".alpha")} == {torch.float32}


@pytest.mark.parametrize("unit, skip, calls, expected", [
    (TimeUnit.STEP, 2, [(1, 0, False), (2, 0, False), (3, 0, False), (4, 0, False)], [False, False, True, True]),
    (TimeUnit.EPOCH, 1, [(3, 1, True), (6, 2, True), (9, 3, True)], [False, True, True]),
])
def test_skip_first_delays_the_first_due_unit(unit, skip, calls, expected):
    schedule = Schedule(1, unit, skip_first=skip)
    assert [schedule.due(*call) for call in calls] == expected


def test_skip_first_minutes():
    now = [0.0]
    schedule = Schedule(1, TimeUnit.MINUTE, clock=lambda: now[0], skip_first=3)
    now[0] = 120.0
    assert not schedule.due(1, 0, False)  # two minutes in: still skipped
    now[0] = 200.0
    assert schedule.due(2, 0, False)
