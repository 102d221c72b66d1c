"""Validation loss: the loss of held-out samples (concepts of type VALIDATION), measured the same way every time.

Every sample is measured at the same `validation_sigma_count` σ values (`BaseWanSetup.validation_points`) with
the same posterior sample and noise, drawn from a generator keyed by a constant and the sample's index in the
validation set, not by the run's seed. An unchanged model therefore gives exactly the same number at every
validation and in every run over the same validation set, so the curve shows what training changed.

Under torchrun each data rank measures every data_world_size-th sample; the sums are added over the ranks. Ranks
with a sample fewer run one more (uncounted) forward pass, so sharded (FSDP) and sequence-parallel ranks run their
collectives together.
"""
from __future__ import annotations

import dataclasses
import logging

import torch

from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
from modules.model.step_inputs import StepRandom
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.util.distributed import DistributedContext
from modules.util.seeds import derive_seed

logger = logging.getLogger(__name__)

VALIDATION_SEED = 20260  # not the run's seed: runs with other seeds measure on the same noise


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    overall: float  # mean over every sample (and σ value)
    per_concept: dict[str, float]  # concept display name -> mean over its samples

    def describe(self) -> str:
        concepts = ", ".join(f"{name} {loss:.5f}" for name, loss in self.per_concept.items())
        return f"{self.overall:.5f} ({concepts})"


def validation_random(index: int) -> StepRandom:
    """The fixed streams of validation sample `index`: its posterior sample, then its noise."""
    stream = torch.Generator().manual_seed(derive_seed(VALIDATION_SEED, "validation", index))
    return StepRandom(step=torch.Generator().manual_seed(VALIDATION_SEED), samples=[stream])


class Validation:
    def __init__(self, data: WanBaseDataLoader, setup: BaseWanSetup, sigma_count: int,
                 dist: DistributedContext | None = None):
        self.data = data  # prepared, over the VALIDATION concepts
        self.setup = setup
        self.points = setup.validation_points(sigma_count)
        self.dist = dist or DistributedContext()
        self.groups = sorted({data.item_group(i) for i in range(len(data.items))})

    def run(self) -> ValidationResult:
        """Measure every validation sample (this rank's share) with the weights the model holds now."""
        model = self.setup.model
        modes = [(t, t.training) for t in model.transformers()]
        totals = [0.0] * (2 * len(self.groups))  # per concept: loss sum, sample count
        # by data rank: the ranks of a sequence group measure the same samples together (and add them up N times
        # over, in the losses and in the counts alike)
        mine = list(range(self.dist.data_rank, len(self.data.items), self.dist.data_world_size))
        rounds = -(-len(self.data.items) // self.dist.data_world_size)
        try:
            for transformer, _ in modes:
                transformer.eval()  # no LoRA dropout
            with torch.no_grad():
                for turn in range(rounds):
                    counted = turn < len(mine)
                    index = mine[turn] if counted else (mine or [0])[0]
                    loss = self._sample_loss(index)
                    if counted:
                        group = self.groups.index(self.data.item_group(index))
                        totals[2 * group] += loss
                        totals[2 * group + 1] += 1
        finally:
            for transformer, mode in modes:
                transformer.train(mode)
        totals = self.dist.all_sum(totals)
        per_concept = {name: totals[2 * g] / totals[2 * g + 1] for g, name in enumerate(self.groups)}
        overall = sum(totals[0::2]) / sum(totals[1::2])
        return ValidationResult(overall, per_concept)

    def _sample_loss(self, index: int) -> float:
        """Mean loss of one sample over the σ values, each with the same posterior sample and noise."""
        batch = self.data.load_batch([index], 0)
        losses = []
        for sigma, expert in self.points:
            random = validation_random(index)
            inputs = self.data.assemble(batch, random)
            inputs.payload.sample_weights = None  # a concept's loss_weight scales training, not the measurement
            noise = random.randn(tuple(inputs.x0.shape[1:]))
            output = self.setup.predict_at(inputs, torch.tensor([sigma]), noise, expert)
            losses.append(float(output.loss))
        return sum(losses) / len(losses)
