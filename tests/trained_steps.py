"""Losses and every trained gradient of a started trainer's first steps: what the exactness tests
(tests/test_lean_block.py, tests/test_checkpoint_policy.py) compare between two ways of running the same step."""
from __future__ import annotations

import contextlib

from modules.model.step_inputs import StepRandom


def losses_and_gradients(trainer, steps: int, around: contextlib.AbstractContextManager | None = None):
    """The first `steps` steps (two samples each, where the data has two): their losses and each trained parameter's
    gradient by expert, step and name. `around` (entered for each step's forward and backward): e.g. a dispatch mode
    that counts kernels."""
    around = around if around is not None else contextlib.nullcontext()
    losses, grads = [], {}
    batch = list(range(min(2, len(trainer.data.items))))
    for index in range(steps):
        random = StepRandom.for_micro_step(0, index, len(batch))
        inputs = trainer.data.assemble(trainer.data.load_batch(batch, 0), random)
        with around:
            output = trainer.setup.predict(inputs, random)
            output.loss.backward()
        losses.append(output.loss.detach())
        for expert, transformer in trainer.setup.trained_transformers():
            grads.update({f"{expert}.{index}.{n}": p.grad.clone() for n, p in transformer.named_parameters()
                          if p.grad is not None})
            transformer.zero_grad(set_to_none=True)
    return losses, grads
