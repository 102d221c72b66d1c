"""What one training step consumes: the assembled tensors and the step's random streams."""
from __future__ import annotations

import dataclasses

import torch

from modules.model.conditioning import ConditionPayload
from modules.util.seeds import derive_seed


@dataclasses.dataclass
class StepRandom:
    """Random streams of one micro step.

    `step` draws what all samples (and all data-parallel ranks) share, e.g. the expert of a two-expert
    model; `samples[j]` draws sample j's posterior sample, σ and noise. Seeding per *global* sample
    index makes a 2-process run draw exactly the numbers of a 1-process run with the same global batch.
    """

    step: torch.Generator
    samples: list[torch.Generator]

    @classmethod
    def for_micro_step(cls, seed: int, micro_step: int, batch_size: int, first_sample: int = 0) -> "StepRandom":
        step = torch.Generator().manual_seed(derive_seed(seed, "step", micro_step))
        samples = [torch.Generator().manual_seed(derive_seed(seed, "sample", micro_step, first_sample + j))
                   for j in range(batch_size)]
        return cls(step, samples)

    def randn(self, shape_per_sample: tuple[int, ...]) -> torch.Tensor:
        """(B, *shape) standard normal, row j from sample j's stream."""
        return torch.stack([torch.randn(shape_per_sample, generator=g) for g in self.samples])


@dataclasses.dataclass
class StepInputs:
    """Model-ready tensors of a batch (all on the train device, float32 unless noted)."""

    x0: torch.Tensor  # clean normalised latents, (B, C, T, h, w)
    prompt_embeds: torch.Tensor  # (B, 512, D)
    payload: ConditionPayload = dataclasses.field(default_factory=ConditionPayload)  # what the family reads
    # The text each row of prompt_embeds was encoded from ("" where the caption was dropped); None when unknown.
    captions: list[str] | None = None
    # guidance_preserving: the unconditional prompt's embeddings, (B, 512, D); None when it is off
    unconditional_embeds: torch.Tensor | None = None
