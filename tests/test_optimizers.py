"""Optimizers through one registry (issue #12, deliverable 2): every optimizer trains, changes the weights, backs
up and resumes bit-identically; schedule-free saves its averaged weights without disturbing training; old
`adam_*` configs load through the migration; a missing package is a one-line error at start-up."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file

from modules.config.loading import load_train_config
from modules.config.train_config import CONFIG_VERSION, TrainConfig
from modules.optimizer.registry import OPTIMIZERS, spec_of
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import stop_and_resume, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)

NEW = ["PRODIGY", "ADAFACTOR", "CAME", "LION", "ADAMW_SCHEDULE_FREE", "MUON"]
# Learning rates that move the tiny LoRA visibly in 3 steps (Prodigy estimates its own step size).
LEARNING_RATES = {"PRODIGY": 1.0, "LION": 1e-3}


def make_trainer(tiny_model, video_dataset, work, optimizer: str, **overrides) -> GenericTrainer:
    values = train_config_dict(tiny_model("t2v"), video_dataset, work, epochs=1, optimizer=optimizer,
                               learning_rate=LEARNING_RATES.get(optimizer, 1e-2), output_dtype="FLOAT32")
    return GenericTrainer(TrainConfig.from_dict({**values, **overrides}))


def state(trainer: GenericTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.setup.trainable_state().items()}


def optimizer_tensors(trainer: GenericTrainer) -> list[torch.Tensor]:
    return [v for s in trainer.optimizer.state_dict()["state"].values() for v in s.values() if isinstance(v, torch.Tensor)]


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", NEW)
def test_trains_changes_the_weights_and_resumes_bit_identically(optimizer, tiny_model, video_dataset, tmp_path):
    whole = make_trainer(tiny_model, video_dataset, tmp_path / "whole", optimizer)
    whole.start()
    initial = state(whole)
    whole.train()
    assert whole.progress.global_step == 3
    expected = state(whole)
    assert any(not torch.equal(expected[k], initial[k]) for k in initial), "training changed no weight"
    assert type(whole.optimizer).__module__.split(".")[0] == (spec_of(whole.config.optimizer).module or "torch")

    resumed = stop_and_resume(lambda **o: make_trainer(tiny_model, video_dataset, tmp_path / "resumed", optimizer, **o),
                              step=2)
    resumed.train()
    actual = state(resumed)
    assert actual.keys() == expected.keys()
    assert all(torch.equal(actual[k], expected[k]) for k in expected)
    assert all(torch.equal(a, b) for a, b in zip(optimizer_tensors(resumed), optimizer_tensors(whole), strict=True))


@pytest.mark.slow
def test_schedule_free_saves_its_averaged_weights_and_snapshots_leave_training_as_it_was(
        tiny_model, video_dataset, tmp_path):
    plain = make_trainer(tiny_model, video_dataset, tmp_path / "plain", "ADAMW_SCHEDULE_FREE")
    plain.start()
    plain.train()
    snapshots = make_trainer(tiny_model, video_dataset, tmp_path / "snapshots", "ADAMW_SCHEDULE_FREE",
                             save_every=1, save_every_unit="STEP")
    snapshots.start()
    snapshots.train()
    assert len(snapshots.snapshot_paths) == 3
    trained = state(plain)
    assert all(torch.equal(state(snapshots)[k], trained[k]) for k in trained)  # eval() and back changed nothing

    (final,) = snapshots.end()
    saved = load_file(str(final))
    snapshots.optimizer.eval()  # the averaged weights x, as schedulefree documents for saving
    x = state(snapshots)
    snapshots.optimizer.train()
    assert any(not torch.equal(x[k], trained[k]) for k in trained), "x equals y: nothing to average"
    written_from_x = load_file(str(_write_lora(snapshots, tmp_path / "x.safetensors", x)))
    written_from_y = load_file(str(_write_lora(snapshots, tmp_path / "y.safetensors", trained)))
    assert saved.keys() == written_from_x.keys()
    assert all(torch.equal(saved[k], written_from_x[k]) for k in saved)
    assert any(not torch.equal(saved[k], written_from_y[k]) for k in saved)


def _write_lora(trainer: GenericTrainer, path, weights: dict[str, torch.Tensor]):
    """The output file the trainer's saver writes when the trained tensors are `weights`."""
    from modules.modelSaver.WanModelSaver import WanModelSaver

    kept = state(trainer)
    trainer.setup.load_trainable_state(weights)
    try:
        (written,) = WanModelSaver(trainer.model, trainer.setup, trainer.config).save(str(path), exports=False)
    finally:
        trainer.setup.load_trainable_state(kept)
    return written


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here")
def test_adamw_8bit_without_bitsandbytes_is_a_one_line_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_train_config(overrides=["optimizer=ADAMW_8BIT"])
    message = str(error.value)
    assert message.startswith("config key 'optimizer' is ADAMW_8BIT, which needs the 'bitsandbytes' package")
    assert "pip install bitsandbytes" in message and "\n" not in message


@pytest.mark.parametrize("version", [1, None])
def test_an_old_config_with_adam_keys_loads_through_the_migration(version, tmp_path):
    old = {"optimizer": "ADAMW", "adam_beta1": 0.8, "adam_beta2": 0.95, "adam_epsilon": 1e-6, "weight_decay": 0.1}
    if version is not None:
        old["config_version"] = version
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    config = load_train_config(path)
    for name in ("ADAMW", "ADAMW_8BIT"):
        options = getattr(config.optimizer_options, name)
        assert (options.beta1, options.beta2, options.eps) == (0.8, 0.95, 1e-6)
    assert config.weight_decay == 0.1 and config.config_version == CONFIG_VERSION
    assert config.optimizer_options.PRODIGY.beta1 == 0.9  # other optimizers keep their defaults


def test_an_old_key_on_the_command_line_lands_where_it_lives_now():
    config = load_train_config(overrides=["adam_beta2=0.9"])
    assert config.optimizer_options.ADAMW.beta2 == 0.9


def test_an_unknown_option_is_one_line_naming_the_key_and_the_closest():
    with pytest.raises(ConfigError, match=r"unknown config key 'optimizer_options.PRODIGY.d_cof'; did you mean "
                                          r"'optimizer_options.PRODIGY.d_coef'"):
        load_train_config(overrides=["optimizer_options.PRODIGY.d_cof=0.5"])


def test_options_reach_the_optimizer(tiny_model, video_dataset, tmp_path):
    from modules.modelSetup.optimization import create_optimizer

    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, optimizer="LION",
                                                     optimizer_options={"LION": {"beta1": 0.7, "beta2": 0.9}}))
    optimizer = create_optimizer([torch.nn.Parameter(torch.zeros(2, 2))], config)
    assert optimizer.param_groups[0]["betas"] == (0.7, 0.9)
    muon = create_optimizer([torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2))],
                            TrainConfig.from_dict({**config.to_dict(), "optimizer": "MUON"}))
    assert [(g["use_muon"], [p.ndim for p in g["params"]]) for g in muon.param_groups] == [(True, [2]), (False, [1])]


def test_every_registered_optimizer_has_documented_options_and_a_gui_place():
    from modules.ui.controllers.layout import OPTIMIZER_OPTION_KEYS, shown

    docs = (__import__("pathlib").Path(__file__).parents[1] / "docs" / "config.md").read_text(encoding="utf-8")
    for name in OPTIMIZERS:
        assert f"## `optimizer_options.{name}`" in docs
        assert any(key.startswith(f"optimizer_options.{name}.") for key in OPTIMIZER_OPTION_KEYS)
    assert shown("optimizer_options.PRODIGY.d_coef", {"optimizer": "PRODIGY"}.get)
    assert not shown("optimizer_options.PRODIGY.d_coef", {"optimizer": "ADAMW"}.get)


@pytest.mark.parametrize("name", [name for name, spec in OPTIMIZERS.items() if not spec.shards and not spec.missing()])
def test_fsdp_refuses_an_optimizer_whose_state_it_cannot_shard_in_one_line(name):
    with pytest.raises(ConfigError) as error:
        load_train_config(overrides=["data_parallel=FSDP", "training_method=FINE_TUNE",
                                     "output_model_format=DIFFUSERS", f"optimizer={name}"])
    assert str(error.value) == f"config key 'data_parallel' FSDP cannot shard the state of optimizer {name}: use ADAMW"


def test_ema_with_a_schedule_free_optimizer_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^config key 'ema' is not needed with optimizer ADAMW_SCHEDULE_FREE, whose "
                                          r"saves and samples already use its own average of the weights: set ema OFF$"):
        load_train_config(overrides=["optimizer=ADAMW_SCHEDULE_FREE", "ema=CPU"])
