"""Loss options (issue #13, deliverable 3, without masks): MSE / HUBER / PSEUDO_HUBER with a constant or
σ-scheduled threshold, σ weighting (CONSTANT / SIGMA_SQRT / COSMAP) and `concepts[].loss_weight`."""
from __future__ import annotations

import math

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.modelSetup.losses import elementwise_loss, huber_c_for, sigma_weights
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.enum import HuberSchedule, LossType, LossWeightFn
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)


def test_huber_types_are_quadratic_for_small_errors_and_linear_for_large_ones():
    c = torch.tensor([0.1])
    small, large = torch.full((1, 1, 1, 1, 1), 0.01), torch.full((1, 1, 1, 1, 1), 3.0)
    zero = torch.zeros(1, 1, 1, 1, 1)
    assert torch.allclose(elementwise_loss(small, zero, LossType.HUBER, c), small ** 2)
    assert torch.allclose(elementwise_loss(large, zero, LossType.HUBER, c), 2 * 0.1 * 3.0 - 0.1 ** 2 + 0 * large)
    # HUBER is twice torch's own Huber loss
    x = torch.randn(2, 3, 2, 4, 4)
    torch.testing.assert_close(elementwise_loss(x, zero.expand_as(x), LossType.HUBER, torch.tensor([0.1, 0.1])),
                               2 * torch.nn.functional.huber_loss(x, torch.zeros_like(x), reduction="none", delta=0.1))
    pseudo_small = elementwise_loss(small, zero, LossType.PSEUDO_HUBER, c)
    assert math.isclose(float(pseudo_small), 0.01 ** 2, rel_tol=0.01)
    pseudo_large = elementwise_loss(large, zero, LossType.PSEUDO_HUBER, c)
    assert math.isclose(float(pseudo_large), 2 * 0.1 * (math.sqrt(9 + 0.01) - 0.1), rel_tol=1e-6)
    assert torch.equal(elementwise_loss(x, zero.expand_as(x), LossType.MSE), x ** 2)


def test_the_exponential_schedule_goes_from_1_at_clean_to_huber_c_at_noise():
    sigmas = torch.tensor([0.0, 0.5, 1.0])
    assert torch.allclose(huber_c_for(sigmas, 0.1, HuberSchedule.EXPONENTIAL), torch.tensor([1.0, 0.1 ** 0.5, 0.1]))
    assert torch.equal(huber_c_for(sigmas, 0.1, HuberSchedule.CONSTANT), torch.full((3,), 0.1))


def test_sigma_weights_are_sd3s():
    sigmas = torch.tensor([0.25, 0.5, 0.75])
    assert sigma_weights(sigmas, LossWeightFn.CONSTANT) is None
    assert torch.allclose(sigma_weights(sigmas, LossWeightFn.SIGMA_SQRT), sigmas ** -2)
    assert torch.allclose(sigma_weights(sigmas, LossWeightFn.COSMAP), 2 / (math.pi * (1 - 2 * sigmas + 2 * sigmas ** 2)))


def started(tiny_model, video_dataset, work, **options) -> GenericTrainer:
    values = train_config_dict(tiny_model("t2v"), video_dataset, work, epochs=1, **options)
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    return trainer


def one_step_loss(trainer: GenericTrainer) -> float:
    from modules.model.step_inputs import StepRandom

    batch = trainer.data.load_batch(trainer.data.epoch_batches(0)[0], 0)
    random = StepRandom.for_micro_step(0, 0, len(trainer.data.epoch_batches(0)[0]))
    inputs = trainer.data.assemble(batch, random)
    return float(trainer.setup.predict(inputs, StepRandom.for_micro_step(0, 0, inputs.x0.shape[0])).loss)


@pytest.mark.parametrize("options", [dict(loss_type="HUBER"), dict(loss_type="PSEUDO_HUBER", huber_schedule="EXPONENTIAL"),
                                     dict(loss_weight_fn="COSMAP"), dict(loss_weight_fn="SIGMA_SQRT")])
def test_each_option_changes_the_trained_loss_and_defaults_do_not(options, tiny_model, video_dataset, tmp_path):
    plain = one_step_loss(started(tiny_model, video_dataset, tmp_path / "plain"))
    again = one_step_loss(started(tiny_model, video_dataset, tmp_path / "again", loss_type="MSE",
                                  loss_weight_fn="CONSTANT"))
    assert plain == again
    assert one_step_loss(started(tiny_model, video_dataset, tmp_path / "option", **options)) != plain


def test_a_concepts_loss_weight_scales_its_samples_loss(tiny_model, video_dataset, tmp_path):
    plain = one_step_loss(started(tiny_model, video_dataset, tmp_path / "plain"))
    half = started(tiny_model, video_dataset, tmp_path / "half", concepts=[{"path": str(video_dataset), "loss_weight": 0.5}])
    assert math.isclose(one_step_loss(half), plain * 0.5, rel_tol=1e-6)
    silent = started(tiny_model, video_dataset, tmp_path / "zero", weight_decay=0.0,
                     concepts=[{"path": str(video_dataset), "loss_weight": 0.0}])
    before = {k: v.clone() for k, v in silent.setup.trainable_state().items()}
    silent.train()
    after = silent.setup.trainable_state()
    assert all(torch.equal(after[k], before[k]) for k in before)  # no gradient reached the weights


def test_bad_values_are_one_line_naming_the_key(tiny_model, video_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'huber_c' must be greater than 0"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, huber_c=0))
    with pytest.raises(ConfigError, match=r"config key 'concepts\[0\].loss_weight' must not be negative"):
        TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                concepts=[{"path": str(video_dataset), "loss_weight": -1}]))
