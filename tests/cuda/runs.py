"""Runs of the learning-size tiny T2V through the project's own entry points (`TrainConfig.from_dict`,
`GenericTrainer`, `BaseWanSetup.predict`), on the suite's device, and how two runs are compared.

Two kinds of comparison:
- bit-exact (`assert_same_run`): the feature changes where tensors live or when they are recomputed, not the
  math (checkpointing, block swap, activation offload, expert offload, EMA placement). Equal losses and trained
  weights after several optimizer steps; a missing stream sync or a copy read before it lands shows as a difference.
- within a stated bf16 tolerance (`assert_close_step`): the feature changes the kernels or the summation order
  (attention backends, compile, split FFN) or rounds the weights (fp8). The first step's loss and LoRA gradients
  are compared (relative L2 norm): later steps of Adam would amplify any rounding (its first update is the sign
  of the gradient), which says nothing about the feature.
"""
from __future__ import annotations

import dataclasses
import gc
from pathlib import Path

import torch

from tests.conftest import train_config_dict
from tests.cuda.device import DEVICE

STEPS = 4  # optimizer steps of a compared run: two epochs of the 4-clip dataset at batch 2
# bf16 keeps 8 bits of mantissa: one rounding is up to 2^-8 = 0.4 % relative. A kernel that sums in another order
# moves a few roundings through 4 blocks and back; a wrong kernel (bad layout, missing scale, wrong dtype contract)
# is off by O(1). So: the loss within 1 %, the gradients' relative L2 distance within 5 %.
BF16_LOSS = 0.01
BF16_GRAD = 0.05
# fp8 e4m3 keeps 3 bits of mantissa (up to 6 % per weight, ~2 % RMS); the frozen weights of every block are
# rounded, so the loss within 5 % (as tests/test_memory_features.py on the CPU) and the gradients within 25 %.
FP8_LOSS = 0.05
FP8_GRAD = 0.25


@dataclasses.dataclass
class Result:
    losses: list[float]
    state: dict[str, torch.Tensor]  # the trained weights, float32 on the CPU
    initial: dict[str, torch.Tensor]  # the same before the first step
    trainer: object

    def update(self) -> dict[str, torch.Tensor]:
        """What training changed in each weight."""
        return {name: value - self.initial[name] for name, value in self.state.items()}


@dataclasses.dataclass
class Settings:
    model: Path
    data: Path
    cache_dir: Path
    work: Path
    overrides: dict

    def config(self, **more):
        from modules.config.train_config import TrainConfig

        values = dict(resolution=[48, 48], frames=9, batch_size=2, epochs=100, max_steps=STEPS, lora_rank=8,
                      lora_alpha=8, learning_rate=1e-3, output_dtype="FLOAT32", train_device=DEVICE,
                      memory_preset="MANUAL", attention_backend="NATIVE", sample_attention_backend="NATIVE",
                      compile="OFF",  # AUTO compiles on a GPU: the compile test asks for it
                      train_dtype="BFLOAT16", transformer_dtype="BFLOAT16", cache_dir=str(self.cache_dir))
        values.update(self.overrides)
        values.update(more)
        return TrainConfig.from_dict(train_config_dict(self.model, self.data, self.work, **values))

    def trainer(self, **more):
        from modules.trainer.GenericTrainer import GenericTrainer

        return GenericTrainer(self.config(**more))

    def train(self, **more) -> Result:
        """Trains to max_steps; the losses of every optimizer step and the trained weights."""
        trainer = self.trainer(**more)
        losses: list[float] = []
        trainer.callbacks.on_update = lambda update: losses.append(update.loss)
        trainer.start()
        initial = cpu_state(trainer.setup.trainable_state())
        trainer.train()
        return Result(losses, cpu_state(trainer.setup.trainable_state()), initial, trainer)

    def first_step(self, **more) -> tuple[float, dict[str, torch.Tensor]]:
        """The loss and the LoRA gradients (float32, CPU) of the first step on the first batch."""
        from modules.model.step_inputs import StepRandom

        trainer = self.trainer(**more)
        trainer.start()
        random = StepRandom.for_micro_step(trainer.config.seed, 0, 2)
        output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch([0, 1], 0), random), random)
        output.loss.backward()
        grads = {name: p.grad.detach().float().cpu() for t in trainer.model.transformers()
                 for name, p in t.named_parameters() if p.grad is not None}
        loss = float(output.loss.detach())
        release(trainer)
        return loss, grads


def cpu_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value.detach().float().cpu().clone() for name, value in state.items()}


def release(trainer) -> None:
    """Frees the trainer's device memory before the next run."""
    trainer.close()
    del trainer
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def relative_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """|a - b| / |b| over all tensors together (L2)."""
    assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())[:5]
    difference = sum(float((a[k].float() - b[k].float()).pow(2).sum()) for k in b)
    norm = sum(float(b[k].float().pow(2).sum()) for k in b)
    assert norm > 0, "the reference is all zeros: nothing was compared"
    return (difference / norm) ** 0.5


def assert_same_run(actual: Result, expected: Result) -> None:
    assert len(expected.losses) == STEPS and actual.losses == expected.losses, (actual.losses, expected.losses)
    assert actual.state.keys() == expected.state.keys()
    same = all(torch.equal(actual.state[k], expected.state[k]) for k in expected.state)
    assert same, f"trained weights differ: max |difference| {max_difference(actual.state, expected.state):.3g}"
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in expected.state.items() if "lora_B" in k), \
        "the LoRA did not train"


def assert_close_step(actual: tuple[float, dict], expected: tuple[float, dict], loss_tolerance: float,
                      grad_tolerance: float) -> None:
    (loss, grads), (reference_loss, reference_grads) = actual, expected
    assert abs(loss - reference_loss) <= loss_tolerance * abs(reference_loss), (loss, reference_loss)
    distance = relative_distance(grads, reference_grads)
    assert distance <= grad_tolerance, f"gradients {distance:.3g} apart (relative L2), allowed {grad_tolerance}"
