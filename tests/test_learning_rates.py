"""Learning-rate options (issue #13, deliverable 4): COSINE_WITH_RESTARTS, REX and a minimum factor; LoRA+ per
adapter type; per-expert rates and the high-noise expert's share of steps for two-expert models."""
from __future__ import annotations

import math

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSetup.optimization import lr_factor
from modules.modelSetup.WanLoRASetup import WanLoRASetup
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.enum import LearningRateScheduler as Schedule
from tests.conftest import stop_and_resume, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)


# --- schedules ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule, step, cycles, min_factor, expected", [
    (Schedule.COSINE_WITH_RESTARTS, 10, 2.0, 0.0, 1.0),  # progress 0
    (Schedule.COSINE_WITH_RESTARTS, 35, 2.0, 0.0, 0.5),  # a quarter: half-way down the first cycle
    (Schedule.COSINE_WITH_RESTARTS, 60, 2.0, 0.0, 1.0),  # half: the second cycle restarts at the peak
    (Schedule.COSINE_WITH_RESTARTS, 85, 2.0, 0.0, 0.5),
    (Schedule.COSINE_WITH_RESTARTS, 110, 2.0, 0.0, 0.0),  # the end
    (Schedule.COSINE_WITH_RESTARTS, 35, 1.0, 0.0, 0.5 * (1 + math.cos(math.pi * 0.25))),  # one cycle = COSINE
    (Schedule.REX, 60, 1.0, 0.0, 0.5 / 0.75),  # (1 - p) / (1 - p/2) at p = 0.5
    (Schedule.REX, 110, 1.0, 0.0, 0.0),
    (Schedule.LINEAR, 110, 1.0, 0.1, 0.1),  # the floor
    (Schedule.LINEAR, 60, 1.0, 0.1, 0.1 + 0.9 * 0.5),
    (Schedule.COSINE, 110, 1.0, 0.2, 0.2),
    (Schedule.REX, 60, 1.0, 0.2, 0.2 + 0.8 * (0.5 / 0.75)),
    (Schedule.COSINE_WITH_RESTARTS, 5, 2.0, 0.2, 6 / 11),  # warm-up is the same for every schedule
])
def test_schedules(schedule, step, cycles, min_factor, expected):
    actual = lr_factor(step, total_steps=110, warmup_steps=10, schedule=schedule, cycles=cycles, min_factor=min_factor)
    assert math.isclose(actual, expected, abs_tol=1e-9)


@pytest.mark.parametrize("total, warmup, cycles", [(20, 2, 3), (110, 10, 2), (48, 0, 4), (31, 1, 5)])
def test_restart_peaks_land_where_the_formula_puts_them(total, warmup, cycles):
    """Regression: with warm-up 2, 3 cycles over 20 steps the peaks were at steps 1, 2, 8 and 14 (the warm-up's last
    step reached the peak, then the first cycle started there again). The factor is 1 exactly at the cycle starts
    W + k·(T − W)/C (integers here) and below 1 everywhere else."""
    factors = [lr_factor(step, total, warmup, Schedule.COSINE_WITH_RESTARTS, cycles=cycles) for step in range(total)]
    peaks = [step for step, factor in enumerate(factors) if math.isclose(factor, 1.0, abs_tol=1e-12)]
    assert peaks == [warmup + k * (total - warmup) // cycles for k in range(cycles)]
    assert all(factor < 1.0 for step, factor in enumerate(factors) if step not in peaks)


def test_old_schedules_are_unchanged_by_the_new_defaults():
    for step in range(0, 120, 7):
        for schedule in (Schedule.CONSTANT, Schedule.LINEAR, Schedule.COSINE):
            progress = min(1.0, max(0, step - 10) / 100)
            old = {Schedule.CONSTANT: 1.0, Schedule.LINEAR: 1.0 - progress,
                   Schedule.COSINE: 0.5 * (1.0 + math.cos(math.pi * progress))}[schedule]
            expected = (step + 1) / 11 if step < 10 else old  # the warm-up stays below the peak
            assert lr_factor(step, 110, 10, schedule) == pytest.approx(expected, abs=1e-12)


# --- parameter groups -----------------------------------------------------------------------------------------
def started(tiny_model, video_dataset, work, variant="t2v", **options) -> GenericTrainer:
    values = train_config_dict(tiny_model(variant), video_dataset, work, epochs=1, learning_rate=1e-3, **options)
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    return trainer


def group_of(trainer: GenericTrainer) -> dict[str, float]:
    """Parameter name (with the expert's prefix) -> the peak rate of its optimizer group."""
    rate = {id(p): group["initial_lr"] for group in trainer.optimizer.param_groups for p in group["params"]}
    return {f"{expert}.{name}": rate[id(p)] for expert, t in trainer.setup.trained_transformers()
            for name, p in t.named_parameters() if id(p) in rate}


def test_by_default_every_parameter_trains_at_learning_rate_in_one_group(tiny_model, video_dataset, tmp_path):
    trainer = started(tiny_model, video_dataset, tmp_path)
    assert len(trainer.optimizer.param_groups) == 1 and set(group_of(trainer).values()) == {1e-3}


@pytest.mark.parametrize("peft_type, up", [("LORA", {"lora_B"}), ("LOHA", {"hada_w1_a", "hada_w2_a"})])
def test_lora_plus_trains_the_up_matrices_faster(peft_type, up, tiny_model, video_dataset, tmp_path):
    trainer = started(tiny_model, video_dataset, tmp_path, peft_type=peft_type, lora_plus_ratio=4.0)
    rates = group_of(trainer)
    assert len(rates) == len(trainer.params)
    for name, rate in rates.items():
        is_up = any(f".{kind}." in f".{name}." for kind in up)
        assert rate == pytest.approx(4e-3 if is_up else 1e-3), name
    assert any(rate == pytest.approx(4e-3) for rate in rates.values())


def test_lora_plus_on_lokr_is_refused_naming_the_key(tiny_model, video_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'lora_plus_ratio' applies to adapters with up \(B\) matrices"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, peft_type="LOKR",
                                                lora_plus_ratio=4.0))


def test_each_expert_trains_at_its_own_rate(tiny_model, video_dataset, tmp_path):
    trainer = started(tiny_model, video_dataset, tmp_path, variant="a14b", learning_rate_high_noise=3e-5)
    rates = group_of(trainer)
    assert {rate for name, rate in rates.items() if name.startswith("0.")} == {3e-5}
    assert {rate for name, rate in rates.items() if name.startswith("1.")} == {1e-3}  # 0 = learning_rate
    trainer.train()
    assert [group["lr"] for group in trainer.optimizer.param_groups] == [pytest.approx(3e-5), pytest.approx(1e-3)]


@pytest.mark.parametrize("share", [0.3, 0.8])
def test_the_high_noise_expert_gets_its_share_of_steps(share, tiny_model, video_dataset, tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("a14b"), video_dataset, tmp_path,
                                                     expert_step_share=share))
    model = WanModelLoader().load_for_config(config, torch.device("cpu"))
    setup = WanLoRASetup(model, config)
    boundary = model.conditioning.boundary_sigma
    drawn = [setup.sample_sigmas(StepRandom.for_micro_step(0, step, 2)) for step in range(200)]
    high = sum(expert == 0 for _, expert in drawn) / len(drawn)
    assert abs(high - share) <= 0.05
    assert all((sigmas >= boundary).all() if expert == 0 else (sigmas < boundary).all() for sigmas, expert in drawn)


@pytest.mark.slow
def test_resume_with_lora_plus_and_a_restart_schedule_is_bit_identical(tiny_model, video_dataset, tmp_path):
    options = dict(lora_plus_ratio=8.0, learning_rate_scheduler="COSINE_WITH_RESTARTS", learning_rate_cycles=2.0,
                   learning_rate_min_factor=0.1)
    whole = started(tiny_model, video_dataset, tmp_path / "whole", **options)
    whole.train()

    def make(**overrides) -> GenericTrainer:
        values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path / "resumed", epochs=1, learning_rate=1e-3,
                                   **options, **overrides)
        return GenericTrainer(TrainConfig.from_dict(values))

    resumed = stop_and_resume(make, step=2)
    assert [g["lr"] for g in resumed.optimizer.param_groups] != [g["initial_lr"] for g in resumed.optimizer.param_groups]
    resumed.train()
    expected, actual = whole.setup.trainable_state(), resumed.setup.trainable_state()
    assert actual.keys() == expected.keys() and all(torch.equal(actual[k], expected[k]) for k in expected)
