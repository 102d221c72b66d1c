"""EMA of the trained weights (issue #13, deliverable 1): the average is the hand-computed one, CPU and GPU modes
agree, saves hold the average (and say so), `ema_save_raw` writes the raw weights beside them, samples use either,
and a resume from a backup continues the average bit-identically."""
from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import stop_and_resume, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.torch_threads import one_torch_thread

DECAY = 0.8


def make(tiny_model, video_dataset, work, **options) -> GenericTrainer:
    values = train_config_dict(tiny_model("t2v"), video_dataset, work, epochs=2, max_steps=5, learning_rate=1e-2,
                               output_dtype="FLOAT32", ema="GPU", ema_decay=DECAY)
    return GenericTrainer(TrainConfig.from_dict({**values, **options}))


def as_ema_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """trainable_state keys (`transformer.<name>`) as the EMA's (`0.<name>`)."""
    return {"0." + key.removeprefix("transformer."): value for key, value in state.items()}


@pytest.fixture(scope="module")
def gpu_run(tiny_model, video_dataset, tmp_path_factory):
    """A 5-step run with the trained weights recorded after every step."""
    trainer = make(tiny_model, video_dataset, tmp_path_factory.mktemp("gpu"))
    trainer.start()
    history = [as_ema_keys(trainer.setup.trainable_state())]
    trainer.callbacks.on_update = lambda update: history.append(as_ema_keys(trainer.setup.trainable_state()))
    trainer.train()
    return trainer, history


def test_the_average_is_the_hand_computed_one(gpu_run):
    trainer, history = gpu_run
    assert trainer.progress.global_step == 5 and len(history) == 6
    expected = {name: value.clone() for name, value in history[0].items()}
    for weights in history[1:]:
        for name in expected:
            expected[name] = DECAY * expected[name] + (1 - DECAY) * weights[name]
    actual = trainer.ema.state_dict()
    assert actual.keys() == expected.keys()
    assert all(torch.allclose(actual[k], expected[k], rtol=0, atol=1e-6) for k in expected)
    assert any(not torch.allclose(actual[k], history[-1][k]) for k in expected)  # it is not the last weights


def test_cpu_and_gpu_modes_give_equal_averages(gpu_run, tiny_model, video_dataset, tmp_path):
    cpu = make(tiny_model, video_dataset, tmp_path, ema="CPU")
    cpu.start()
    cpu.train()
    gpu = gpu_run[0].ema.state_dict()
    assert all(torch.equal(value, gpu[name]) for name, value in cpu.ema.state_dict().items())


def test_the_saved_file_holds_the_average_and_says_so_and_raw_weights_go_beside(tiny_model, video_dataset, tmp_path):
    trainer = make(tiny_model, video_dataset, tmp_path / "run", ema_save_raw=True)
    trainer.start()
    trainer.train()
    average, raw = trainer.ema.state_dict(), as_ema_keys(trainer.setup.trainable_state())
    written = trainer.end()
    final = tmp_path / "run" / "output" / "lora.safetensors"
    raw_file = final.with_name("lora-raw.safetensors")
    assert final in written and raw_file in written
    with safe_open(str(final), "pt") as f:
        assert f.metadata()["wantrainer.weights"] == f"ema {DECAY:g}"
    with safe_open(str(raw_file), "pt") as f:
        assert "wantrainer.weights" not in f.metadata()
    # continuing from each file gives back the weights it holds
    for path, expected in ((final, average), (raw_file, raw)):
        follow = make(tiny_model, video_dataset, tmp_path / path.stem, ema="OFF", lora_weight_path=str(path))
        follow.start()
        loaded = as_ema_keys(follow.setup.trainable_state())
        assert all(torch.allclose(loaded[k], expected[k], rtol=1e-5, atol=1e-6) for k in expected), path.name
    assert trainer.setup.trainable_state().keys()  # the trainer's own weights were restored after saving
    assert all(torch.equal(as_ema_keys(trainer.setup.trainable_state())[k], raw[k]) for k in raw)


@pytest.mark.slow
def test_resume_from_a_backup_continues_the_average_bit_identically(gpu_run, tiny_model, video_dataset, tmp_path):
    whole = gpu_run[0]
    resumed = stop_and_resume(lambda **o: make(tiny_model, video_dataset, tmp_path, **o), step=2)
    resumed.train()
    assert all(torch.equal(value, whole.ema.state_dict()[name]) for name, value in resumed.ema.state_dict().items())
    expected = whole.setup.trainable_state()
    assert all(torch.equal(value, expected[name]) for name, value in resumed.setup.trainable_state().items())


def test_bad_ema_settings_are_one_line_naming_the_key(tiny_model, video_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'ema_decay' must be between 0 and 1"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, ema="GPU", ema_decay=1.0))
    with pytest.raises(ConfigError, match=r"config key 'ema' does not work with data_parallel FSDP"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, ema="CPU",
                                                data_parallel="FSDP", training_method="FINE_TUNE"))


@pytest.mark.slow
def test_sigkill_then_resume_with_ema_equals_an_uninterrupted_run(tiny_model, video_dataset, tmp_path):
    from modules.trainer.backup import list_backups
    from tests.faults.test_kill_and_resume import RUN, Run, assert_same_tensors, lora_tensors
    from tests.faults.test_kill_and_resume import make_trainer as make_run
    from tests.run_paths import last_run

    options = {**RUN, "ema": "CPU", "ema_decay": DECAY}
    with one_torch_thread():  # as the subprocesses run
        reference = make_run(tiny_model("t2v"), video_dataset, tmp_path / "reference", **options)
        reference.start()
        reference.train()
        (expected,) = reference.end()
    run = Run(tiny_model("t2v"), video_dataset, tmp_path / "killed", cache_dir=reference.config.cache_dir,
              ema="CPU", ema_decay=DECAY)
    try:
        run.start(FAULT_STEP_DELAY="0.3")
        run.kill_when(lambda: (run.backups / "step-00000004").is_dir())
        assert not run.lora.exists()
        assert "ema.safetensors" in {p.name for p in list_backups(last_run(run.config["workspace_dir"]))[-1].iterdir()}
        run.start("continue_last_backup=true")
        run.finish()
    finally:
        run.close()
    assert_same_tensors(lora_tensors(run.lora), lora_tensors(expected))
