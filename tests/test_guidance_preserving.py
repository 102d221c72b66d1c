"""The guidance-preserving target (`guidance_preserving`): the target's formula, s = 1 is the plain loss bit for bit,
the gradient comes from the conditional pass only, the unconditional pass keeps the image condition and the
expert, and the distilled timestep set. The learning test is in tests/test_learning_guidance.py."""
from __future__ import annotations

import pytest
import torch

from modules.config.guidance_preserving_config import LIGHTNING_4_STEPS, GuidancePreservingConfig
from modules.config.train_config import TrainConfig
from modules.modelSetup.flow_matching import SigmaSampler
from modules.modelSetup.guidance_preserving import guided_target, scales_at
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)


def test_the_target_is_u_plus_s_times_the_difference_and_exactly_the_target_at_1():
    target, u = torch.randn(2, 4, 3, 2, 2), torch.randn(2, 4, 3, 2, 2)
    assert torch.equal(guided_target(target, u, torch.ones(2)), target)
    torch.testing.assert_close(guided_target(target, u, torch.tensor([3.0, 5.0])),
                               u + torch.tensor([3.0, 5.0]).view(-1, 1, 1, 1, 1) * (target - u))


def test_the_taper_brings_the_scale_to_1_at_zero_noise():
    config = GuidancePreservingConfig(scale=5.0, taper_below_sigma=0.5)
    torch.testing.assert_close(scales_at(config, torch.tensor([0.0, 0.25, 0.5, 0.9])), torch.tensor([1.0, 3.0, 5.0, 5.0]))
    assert torch.equal(scales_at(GuidancePreservingConfig(scale=5.0), torch.tensor([0.0, 0.9])), torch.tensor([5.0, 5.0]))


def test_lightnings_timesteps_are_shift_5_over_four_even_steps():
    shifted = SigmaSampler(shift=5.0)._to_sigma(torch.tensor([1.0, 0.75, 0.5, 0.25], dtype=torch.float64))
    torch.testing.assert_close(1000 * shifted, torch.tensor(LIGHTNING_4_STEPS, dtype=torch.float64), atol=0.05, rtol=0)


@pytest.mark.parametrize("values, key", [({"scale": -1}, "scale"), ({"unconditional_prompt": "none"}, "unconditional_prompt"),
                                         ({"distilled_timesteps": [0]}, "distilled_timesteps")])
def test_bad_values_name_their_key(values, key):
    with pytest.raises(ConfigError, match=f"guidance_preserving.{key}"):
        TrainConfig.from_dict({"guidance_preserving": values})


def started(tiny_model, video_dataset, work, variant="t2v", **options) -> GenericTrainer:
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model(variant), video_dataset, work, epochs=1,
                                                                     **options)))
    trainer.start()
    return trainer


def step(trainer: GenericTrainer, micro_step: int = 0):
    """One training forward and backward; (loss, the trained parameters' gradients)."""
    from modules.model.step_inputs import StepRandom

    indices = trainer.data.epoch_batches(0)[0]
    inputs = trainer.data.assemble(trainer.data.load_batch(indices, 0), StepRandom.for_micro_step(0, micro_step, len(indices)))
    params = trainer.setup.trained_parameters()
    for p in params:
        p.grad = None
    output = trainer.setup.predict(inputs, StepRandom.for_micro_step(0, micro_step, len(indices)))
    output.loss.backward()
    return output, [p.grad.clone() for p in params]


@pytest.fixture(scope="module")
def plain(tiny_model, video_dataset, tmp_path_factory):
    return step(started(tiny_model, video_dataset, tmp_path_factory.mktemp("plain")))


def test_scale_1_gives_the_plain_loss_and_gradients_bit_for_bit(plain, tiny_model, video_dataset, tmp_path):
    trainer = started(tiny_model, video_dataset, tmp_path, guidance_preserving={"scale": 1.0})
    calls = []
    original = trainer.setup.unconditional_prediction
    trainer.setup.unconditional_prediction = lambda *a: calls.append(1) or original(*a)
    output, grads = step(trainer)
    assert calls  # the pass ran
    assert torch.equal(output.loss, plain[0].loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain[1]))


def test_the_gradient_comes_from_the_conditional_pass_only(plain, tiny_model, video_dataset, tmp_path):
    from modules.model.step_inputs import StepRandom

    trainer = started(tiny_model, video_dataset, tmp_path, guidance_preserving={"scale": 4.0})
    seen = []
    original = trainer.setup.unconditional_prediction
    trainer.setup.unconditional_prediction = lambda *a: seen.append(original(*a)) or seen[-1]
    indices = trainer.data.epoch_batches(0)[0]
    inputs = trainer.data.assemble(trainer.data.load_batch(indices, 0), StepRandom.for_micro_step(0, 0, len(indices)))
    output = trainer.setup.predict(inputs, StepRandom.for_micro_step(0, 0, len(indices)))
    (u,) = seen
    assert not u.requires_grad and not torch.equal(output.loss, plain[0].loss)
    assert not torch.equal(u, output.predicted)  # the pass saw another prompt
    torch.testing.assert_close(output.target, plain[0].target + 3 * (plain[0].target - u))
    # the step's gradient is the one of the same loss with its target a constant
    params = trainer.setup.trained_parameters()
    grads = torch.autograd.grad(output.loss, params, retain_graph=True)
    reference = torch.autograd.grad(((output.predicted.float() - output.target.detach()) ** 2).mean(), params)
    assert all(torch.allclose(g, r, rtol=1e-4, atol=1e-9) for g, r in zip(grads, reference))


def transformer_calls(trainer: GenericTrainer, micro_step: int = 0) -> tuple[list[tuple[int, dict]], torch.Tensor]:
    """(expert, kwargs) of every transformer call of one training forward, and its σ."""
    from modules.model.step_inputs import StepRandom

    calls = []
    hooks = [t.register_forward_pre_hook(lambda m, a, kw, e=e: calls.append((e, kw)), with_kwargs=True)
             for e, t in enumerate(trainer.model.transformers())]
    indices = trainer.data.epoch_batches(0)[0]
    random = StepRandom.for_micro_step(0, micro_step, len(indices))
    output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch(indices, 0), random), random)
    for hook in hooks:
        hook.remove()
    return calls, output.sigmas


def test_the_unconditional_pass_keeps_the_image_condition_and_changes_only_the_prompt(tiny_model, video_dataset, tmp_path):
    from modules.config.guidance_preserving_config import WAN_NEGATIVE_PROMPT
    from modules.dataLoader.batching import encode_caption

    trainer = started(tiny_model, video_dataset, tmp_path, "i2v",
                      guidance_preserving={"scale": 3.0, "unconditional_prompt": "wan_negative"})
    (_, unconditional), (_, conditional) = transformer_calls(trainer)[0]
    assert unconditional["encoder_hidden_states_image"] is not None
    for name in ("hidden_states", "timestep", "encoder_hidden_states_image"):  # the first frame's latents and CLIP
        assert torch.equal(unconditional[name], conditional[name]), name
    negative = encode_caption(trainer.model, WAN_NEGATIVE_PROMPT)
    rows = unconditional["encoder_hidden_states"]
    assert torch.equal(rows[:, : negative.shape[0]], negative.expand(rows.shape[0], -1, -1).to(rows.dtype))
    assert not torch.equal(rows, conditional["encoder_hidden_states"])


def test_two_experts_train_at_the_distilled_steps_each_pass_on_the_expert_that_owns_sigma(tiny_model, video_dataset,
                                                                                          tmp_path):
    trainer = started(tiny_model, video_dataset, tmp_path, "a14b", train_expert="BOTH", batch_size=2,
                      guidance_preserving={"scale": 2.0, "distilled_timesteps": LIGHTNING_4_STEPS})
    boundary = trainer.model.conditioning.boundary_sigma
    seen = set()
    for micro_step in range(6):
        calls, sigmas = transformer_calls(trainer, micro_step)
        experts = {expert for expert, _ in calls}
        assert len(calls) == 2 and len(experts) == 1  # both passes on one expert
        assert experts == {0 if float(sigmas[0]) >= boundary else 1}
        seen.update(round(1000 * float(s), 1) for s in sigmas)
    assert seen <= set(LIGHTNING_4_STEPS) and len(seen) >= 3


def test_an_expert_without_a_distilled_step_in_its_range_is_refused_at_setup(tiny_model, video_dataset, tmp_path):
    from modules.util.errors import UserError

    with pytest.raises(UserError, match="distilled_timesteps.*transformer_2"):
        started(tiny_model, video_dataset, tmp_path, "a14b", train_expert="LOW",
                guidance_preserving={"distilled_timesteps": [1000, 937.5]})


def test_e2v_keeps_its_references_in_the_unconditional_pass(tiny_model, tmp_path):
    from tests.conftest import e2v_on_t2v_config

    trainer = GenericTrainer(TrainConfig.from_dict(e2v_on_t2v_config(tiny_model, tmp_path,
                                                                     guidance_preserving={"scale": 3.0})))
    trainer.start()
    (_, unconditional), (_, conditional) = transformer_calls(trainer)[0]
    for name in ("hidden_states", "encoder_hidden_states_image"):  # the reference frames' latents and CLIP tokens
        assert torch.equal(unconditional[name], conditional[name]), name
    assert not torch.equal(unconditional["encoder_hidden_states"], conditional["encoder_hidden_states"])


def test_under_gradient_checkpointing_the_unconditional_pass_is_not_recomputed(tiny_model, video_dataset, tmp_path):
    trainer = started(tiny_model, video_dataset, tmp_path, gradient_checkpointing=True,
                      guidance_preserving={"scale": 3.0})
    runs = []
    block = trainer.model.transformer.blocks[0]
    hook = block.register_forward_pre_hook(lambda m, a: runs.append(torch.is_grad_enabled()))  # recompute stops early
    output, _ = step(trainer)
    hook.remove()
    # the unconditional pass (no grad), the conditional one and its recompute in the backward pass: nothing more
    assert runs == [False, True, True]
