"""Base LoRAs are known by their content: a file replaced at the same path refuses the resume in one line, and a
merge that makes the base NaN/inf (a NaN file) or a strength no LoRA loader accepts (1e30) names the file or key at
start-up instead of a "lower learning_rate" NaN loss later."""
from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from modules.config.train_config import TrainConfig
from modules.modelFile.base_loras import parse_base_lora
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_base_loras import merged_with, random_file


def test_a_nan_base_lora_is_named_when_it_is_merged(tiny_model, tmp_path):
    path, _ = random_file("lora", tiny_model("t2v"), tmp_path)
    state = load_file(str(path))
    key = next(k for k in state if k.endswith("lora_up.weight"))
    state[key] = torch.full_like(state[key], float("nan"))
    bad = tmp_path / "nan-lora.safetensors"
    save_file(state, str(bad))
    with pytest.raises(UserError, match=r"^base LoRA '.*nan-lora.safetensors' makes the model's '.*' NaN or inf"):
        merged_with(tiny_model("t2v"), (path, 1.0), (bad, 1.0))


def test_a_strength_no_lora_loader_accepts_is_refused_at_start_up(tiny_model, video_dataset, tmp_path):
    path, _ = random_file("lora", tiny_model("t2v"), tmp_path)
    with pytest.raises(ConfigError, match=r"config key 'base_loras\[0\]\.strength' is 1e\+30: .* from -100 to 100"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                base_loras=[{"path": str(path), "strength": 1e30}]))
    with pytest.raises(UserError, match=r"--base-lora 'l.safetensors:1e30': the strength is 1e\+30"):
        parse_base_lora("l.safetensors:1e30")


def test_a_base_lora_replaced_at_the_same_path_refuses_the_resume(tiny_model, video_dataset, tmp_path):
    model_dir = tiny_model("t2v")
    lora, _ = random_file("lora", model_dir, tmp_path)
    other, _ = random_file("loha", model_dir, tmp_path)  # another file, later copied over the first
    config = train_config_dict(model_dir, video_dataset, tmp_path / "work", epochs=1, max_steps=1,
                               base_loras=[{"path": str(lora), "strength": 1.0}])
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    trainer.backup()
    trainer.close()
    shutil.copyfile(other, lora)  # same path, same strength: only the content differs
    resumed = GenericTrainer(TrainConfig.from_dict({**config, "continue_last_backup": True, "max_steps": 2}))
    with pytest.raises(UserError) as error:
        try:
            resumed.start()
        finally:
            resumed.close()
    message = str(error.value)
    assert message.startswith("cannot resume from ") and "\n" not in message
    assert f"base LoRA '{lora}' is another file" in message and "sha256" in message
