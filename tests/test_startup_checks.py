"""Settings that would be silently ignored, or refused only after the model loaded, are one-line errors at
start-up (before any model loads)."""
from __future__ import annotations

import json

import pytest

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import e2v_on_t2v_config, train_config_dict


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the config error")

    monkeypatch.setattr("modules.trainer.GenericTrainer.WanModelLoader.load_for_config", refuse)


def _start(values: dict) -> str:
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    with pytest.raises(UserError) as error:
        trainer.start()
    trainer.close()
    assert "\n" not in str(error.value)
    return str(error.value)


def test_only_validation_concepts_are_refused_before_the_model_loads(tiny_model, video_dataset, tmp_path, no_model):
    values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                               concepts=[{"path": str(video_dataset), "type": "VALIDATION"}])
    assert "config key 'concepts' has no enabled concept to train on (type STANDARD)" in _start(values)


def test_only_validation_datasets_are_refused_before_the_model_loads(tiny_model, tmp_path, no_model):
    values = e2v_on_t2v_config(tiny_model, tmp_path)
    dataset = json.loads((tmp_path / "dataset.json").read_text())
    for entry in dataset["datasets"]:
        entry["type"] = "VALIDATION"
    (tmp_path / "dataset.json").write_text(json.dumps(dataset))
    assert "has no dataset to train on (type STANDARD)" in _start(values)


def test_save_every_with_unit_never_is_refused():
    with pytest.raises(ConfigError, match="'save_every_unit' is NEVER, so save_every 5 writes no snapshot"):
        TrainConfig.from_dict({"save_every": 5})
    TrainConfig.from_dict({"save_every": 5, "save_every_unit": "STEP"})


@pytest.mark.parametrize("key, value", [("transformer_2_override", "low_noise.safetensors"),
                                        ("learning_rate_high_noise", 3e-5), ("learning_rate_low_noise", 1e-5),
                                        ("train_expert", "LOW")])
def test_two_expert_keys_on_a_one_expert_base_are_refused_before_the_model_loads(tiny_model, video_dataset, tmp_path,
                                                                                 no_model, key, value):
    values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **{key: value})
    message = _start(values)
    assert message.startswith(f"config key '{key}' is ") and "applies to two-expert models" in message
