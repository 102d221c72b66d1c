"""What both Wan data loaders (plain and E2V) do the same way: epoch order, caption dropout, text padding,
samples lost during training, and stopping the caching pass."""
from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Hashable, Iterator, Sequence
from typing import Callable, TypeVar

import torch
from tqdm import tqdm

from modules.dataLoader.buckets import batch_by_bucket
from modules.dataLoader.errors import CachingStopped, DataError
from modules.dataLoader.skips import SkipCounter
from modules.util.enum import BalancingStrategy
from modules.util.seeds import derive_seed
from modules.util.errors import UserError

T = TypeVar("T")

TEXT_LENGTH = 512  # the transformer splits image from text context at "length - 512"


def epoch_batches(buckets: Sequence[Hashable], batch_size: int, seed: int, epoch: int, world_size: int) -> list[list[int]]:
    """Item indices per global batch of `epoch`: a pure function of (seed, epoch), one bucket per batch.
    Batches smaller than the number of data-parallel ranks are dropped (every rank needs a sample)."""
    rng = random.Random(derive_seed(seed, "order", epoch))
    batches = batch_by_bucket(list(enumerate(buckets)), batch_size, rng, False)
    return [b for b in batches if len(b) >= world_size]


@dataclasses.dataclass(frozen=True)
class ConceptSlots:
    """Where a concept's items sit in a loader's item list: `first[j]` is item j's first copy; `copies` copies
    of each (REPEATS: the whole part of `balancing`, at least 1; SAMPLES: 1) follow the concept's start."""

    first: tuple[int, ...]
    copies: int
    strategy: BalancingStrategy
    balancing: float

    @property
    def slots(self) -> list[int]:
        n = len(self.first)
        return [self.first[0] + k for k in range(n * self.copies)] if n else []


def copies_for(strategy: BalancingStrategy, balancing: float) -> int:
    """How many copies of each item a concept keeps in the item list (`ConceptSlots.copies`)."""
    return max(1, math.floor(balancing)) if strategy == BalancingStrategy.REPEATS else 1


def epoch_members(concepts: Sequence[ConceptSlots], seed: int, epoch: int) -> list[int]:
    """The item-list indices that train in `epoch` (a pure function of seed and epoch). Whole repeats are
    every copy, as a plain item list; the fraction of REPEATS and the SAMPLES count are drawn per epoch."""
    members: list[int] = []
    for number, concept in enumerate(concepts):
        n = len(concept.first)
        if not n:
            continue
        if concept.strategy == BalancingStrategy.SAMPLES:
            count = max(1, round(concept.balancing))  # walk permutations, one per pass over the concept
            for position in range(epoch * count, (epoch + 1) * count):
                cycle = random.Random(derive_seed(seed, "balancing", number, position // n)).sample(concept.first, n)
                members.append(cycle[position % n])
            continue
        whole = math.floor(concept.balancing)
        if whole >= 1:
            members += concept.slots
        extra = round((concept.balancing - whole) * n)
        if extra:
            members += sorted(random.Random(derive_seed(seed, "balancing", number, epoch)).sample(concept.first, extra))
    return members


def caption_dropped(seed: int, probability: float, epoch: int, index: int, stream: str = "caption_dropout") -> bool:
    """Whether item `index` trains with an empty caption in `epoch` (for classifier-free guidance); another
    `stream` draws another condition's dropout (E2V references) independently."""
    return probability > 0 and random.Random(derive_seed(seed, stream, epoch, index)).random() < probability


def dropped_captions(indices: list[int], epoch: int, seed: int, probability: float | Sequence[float]) -> list[bool]:
    """Per item of a batch, whether it trains with the empty caption this epoch. `probability`: the caption
    dropout of every item, or of each (a concept's own)."""
    chances = [probability] * len(indices) if isinstance(probability, (int, float)) else list(probability)
    return [caption_dropped(seed, p, epoch, i) for i, p in zip(indices, chances)]


def prompt_batch(embeds: list[torch.Tensor], dropped: list[bool], empty: Callable[[], torch.Tensor]) -> torch.Tensor:
    """(B, 512, D): each item's real-token embeddings (or the empty caption's, where `dropped`), zero-padded."""
    rows = [empty().to(e.device) if drop else e for e, drop in zip(embeds, dropped)]  # (encoded ahead: on the GPU)
    return torch.stack([torch.cat([e, e.new_zeros(TEXT_LENGTH - e.shape[0], e.shape[1])]) for e in rows])


def encode_caption(model, caption: str) -> torch.Tensor:
    """UMT5 embeddings of the caption's real tokens only (seq, D); batches pad them back to 512. Plain text
    always: a trained embedding changes every step, so captions holding its placeholder are encoded in the step."""
    embeds = model.encode_prompts([caption], with_embedding=False)[0]
    nonzero = (embeds.abs().sum(-1) > 0).nonzero()
    length = int(nonzero.max()) + 1 if len(nonzero) else 1
    return embeds[:length].clone()


def unconditional_embeds(model, config, placement) -> torch.Tensor | None:
    """guidance_preserving's unconditional prompt as caption rows are (real tokens, (seq, D)), encoded once in
    `prepare()` while the text encoder is placed for caching (it is parked afterwards); None when it is off."""
    guidance = config.guidance_preserving
    if not guidance.enabled:
        return None
    placement.use("text")
    return encode_caption(model, guidance.unconditional_text())


def add_unconditional(batch: dict, embeds: torch.Tensor | None, size: int) -> dict:
    """`batch` with `unconditional_embeds` (size, 512, D) when guidance_preserving is on."""
    if embeds is not None:
        batch["unconditional_embeds"] = prompt_batch([embeds] * size, [False] * size, lambda: embeds)
    return batch


def unconditional_on(batch: dict, device: torch.device) -> torch.Tensor | None:
    """The batch's `unconditional_embeds` on `device` (None when guidance_preserving is off)."""
    embeds = batch.get("unconditional_embeds")
    return embeds.to(device) if embeds is not None else None


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


def until_stopped(items: Sequence[T], should_stop: Callable[[], bool] | None) -> Iterator[T]:
    """`items`, but raises `CachingStopped` before the next one as soon as `should_stop()` is true."""
    for done, item in enumerate(items):
        if should_stop is not None and should_stop():
            raise CachingStopped(done, len(items))
        yield item


ProgressReport = Callable[[str, int, int], None]  # (what, done, total): the caching phase's progress, for a GUI


def caching_steps(items: Sequence[T], should_stop: Callable[[], bool] | None, desc: str, unit: str,
                  show: bool = True, report: ProgressReport | None = None) -> Iterator[T]:
    """`until_stopped(items)` with a progress bar on the console and, when `report` is given, `report(desc, done,
    total)` before each item and once at the end (the GUI shows it: caching can take longer than training)."""
    total = len(items)
    report = report if show and total else None
    for done, item in enumerate(tqdm(until_stopped(items, should_stop), total=total, desc=desc, unit=unit,
                                     disable=not show or not total)):
        if report is not None:
            report(desc, done, total)
        yield item
    if report is not None:
        report(desc, total, total)


class LostItems:
    """Items that became unreadable after `prepare()` (e.g. a video deleted mid-run without latent caching).

    Each is skipped and counted once and never read again. A batch that holds one trains a readable item of
    the same shape in its place, drawn from a stream of (seed, epoch, batch): every step keeps its size and
    shape (so each data-parallel rank keeps a share, and loss weights and the schedule stay as planned) and
    the epoch order stays what `epoch_batches` planned, as a resume expects. `samples[i]` names the sample
    behind item i: the repeats of a sample are lost together.
    """

    def __init__(self, buckets: Sequence[Hashable], samples: Sequence[Hashable], seed: int, skips: SkipCounter):
        self.buckets, self.samples, self.seed, self.skips = list(buckets), list(samples), seed, skips
        self.lost: set[Hashable] = set()

    def load(self, indices: Sequence[int], epoch: int, load: Callable[[int], T]) -> tuple[list[int], list[T]]:
        """(indices actually loaded, their `load(index)` results); a `DataError` loses that item."""
        rng = random.Random(derive_seed(self.seed, "substitute", epoch, list(indices)))
        bucket = self.buckets[indices[0]]
        used: list[int] = []
        loaded: list[T] = []
        for index in indices:
            while True:
                if self.samples[index] not in self.lost:
                    try:
                        loaded.append(load(index))
                        used.append(index)
                        break
                    except DataError as error:
                        self._lose(index, error)
                index, bucket = self._substitute(bucket, rng)
        return used, loaded

    def _lose(self, index: int, error: DataError) -> None:
        self.lost.add(self.samples[index])
        self.skips.record(error.path, error.category,
                          f"{error.reason} (found during training: other samples of its shape train in its place)")

    def _substitute(self, bucket: Hashable, rng: random.Random) -> tuple[int, Hashable]:
        """A readable item of `bucket`; when none is left, of another bucket (the whole batch was lost then,
        since every item loaded before is a readable one of `bucket`)."""
        readable = [i for i, sample in enumerate(self.samples) if sample not in self.lost]
        if not readable:
            raise UserError(f"every training sample became unreadable during training ({self.skips.summary()}): "
                            "check the dataset, then resume with continue_last_backup=true")
        same = [i for i in readable if self.buckets[i] == bucket]
        if not same:
            bucket = self.buckets[rng.choice(readable)]
            same = [i for i in readable if self.buckets[i] == bucket]
        return rng.choice(same), bucket
