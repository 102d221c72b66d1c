"""What both Wan data loaders (plain and E2V) do the same way: epoch order, caption dropout, text padding."""
from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Callable

import torch

from modules.dataLoader.buckets import batch_by_bucket
from modules.modelSetup.step_inputs import derive_seed

TEXT_LENGTH = 512  # the transformer splits image from text context at "length - 512"


def epoch_batches(buckets: Sequence[Hashable], batch_size: int, seed: int, epoch: int, world_size: int) -> list[list[int]]:
    """Item indices per global batch of `epoch`: a pure function of (seed, epoch), one bucket per batch.
    Batches smaller than the number of data-parallel ranks are dropped (every rank needs a sample)."""
    rng = random.Random(derive_seed(seed, "order", epoch))
    batches = batch_by_bucket(list(enumerate(buckets)), batch_size, rng, False)
    return [b for b in batches if len(b) >= world_size]


def caption_dropped(seed: int, probability: float, epoch: int, index: int) -> bool:
    """Whether item `index` trains with an empty caption in `epoch` (for classifier-free guidance)."""
    return probability > 0 and random.Random(derive_seed(seed, "caption_dropout", epoch, index)).random() < probability


def prompt_batch(embeds: list[torch.Tensor], indices: list[int], epoch: int, seed: int, probability: float,
                 empty: Callable[[], torch.Tensor]) -> torch.Tensor:
    """(B, 512, D): each item's real-token embeddings (or the empty caption's), zero-padded to 512."""
    rows = [empty() if caption_dropped(seed, probability, epoch, i) else e for e, i in zip(embeds, indices)]
    return torch.stack([torch.cat([e, e.new_zeros(TEXT_LENGTH - e.shape[0], e.shape[1])]) for e in rows])


def encode_caption(model, caption: str) -> torch.Tensor:
    """UMT5 embeddings of the caption's real tokens only (seq, D); batches pad them back to 512."""
    embeds = model.encode_prompts([caption])[0]
    nonzero = (embeds.abs().sum(-1) > 0).nonzero()
    length = int(nonzero.max()) + 1 if len(nonzero) else 1
    return embeds[:length].clone()


class FieldMemo:
    """Keeps the cached fields of items in RAM (up to `limit_mb`), so an epoch after the first reads no
    file: on small steps the disk reads and deserialisation were a measurable share of the step."""

    def __init__(self, limit_mb: int):
        self.limit = limit_mb * 2**20
        self.used = 0
        self.fields: dict[Hashable, dict] = {}

    def get(self, key: Hashable, load: Callable[[], dict]) -> dict:
        if key in self.fields:
            return self.fields[key]
        fields = load()
        size = sum(v.numel() * v.element_size() for v in fields.values() if isinstance(v, torch.Tensor))
        if self.used + size <= self.limit:
            self.fields[key] = fields
            self.used += size
        return fields
