"""Epochs of bucketed batches from a `Pipeline`, loaded in the main process or in worker processes.

Determinism: the batch order of an epoch is a pure function of (seed, epoch), and every item's random
streams are a pure function of (pipeline seed, module name, epoch, variation, index) (see `ItemContext`).
Nothing depends on which process loads an item or in what order, so `num_workers` changes speed only,
and `state_dict()` (epoch, next batch) is all it takes to resume at exactly the next batch.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import multiprocessing
import pickle
import random
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from modules.dataLoader.buckets import batch_by_bucket
from modules.dataLoader.errors import DataError
from modules.dataLoader.pipeline.module import PipelineError, derive_seed
from modules.dataLoader.pipeline.pipeline import Pipeline, PipelineBuildError
from modules.dataLoader.skips import SkipCounter
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

Collate = Callable[[list[dict[str, Any]]], Any]
BucketKey = Callable[[dict[str, Any]], Hashable]


def default_collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack each field's tensors when they all share shape and dtype; keep any other field as a list."""
    batch: dict[str, Any] = {}
    for name in items[0]:
        values = [item[name] for item in items]
        first = values[0]
        if isinstance(first, torch.Tensor) and all(
            isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values
        ):
            batch[name] = torch.stack(values)
        else:
            batch[name] = values
    return batch


@dataclasses.dataclass
class _SkipRecord:
    index: int
    path: str
    category: str
    reason: str


@dataclasses.dataclass
class _LoadedBatch:
    position: int  # index of this batch in the epoch's batch list
    batch: Any  # collated batch, or None when every item of it was skipped
    skips: list[_SkipRecord]


def _identity(value: Any) -> Any:
    return value


def _init_worker(seed: int, epoch: int, worker_id: int) -> None:
    """One thread per worker (workers already parallelise), and seeded global RNGs so that a module that
    wrongly uses them is at least reproducible; correct modules use `ItemContext` streams only."""
    torch.set_num_threads(1)
    worker_seed = derive_seed("worker", seed, epoch, worker_id)
    random.seed(worker_seed)
    torch.manual_seed(worker_seed)
    try:
        import numpy

        numpy.random.seed(worker_seed % 2**32)
    except ImportError:  # numpy is optional here
        pass


class _EpochBatches(Dataset):
    """Batch k of the remaining batches of one epoch; the same code runs in the main process and in workers."""

    def __init__(
        self,
        pipeline: Pipeline,
        items: Sequence[Mapping[str, Any]],
        epoch: int,
        start: int,
        batches: Sequence[Sequence[int]],
        collate: Collate,
        bucket_key: BucketKey | None,
        buckets: Mapping[int, Hashable] | None,
    ):
        self.pipeline, self.items, self.epoch, self.start = pipeline, items, epoch, start
        self.batches, self.collate, self.bucket_key, self.buckets = batches, collate, bucket_key, buckets

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, k: int) -> _LoadedBatch:
        loaded: list[dict[str, Any]] = []
        skips: list[_SkipRecord] = []
        for index in self.batches[k]:
            try:
                fields = self.pipeline.run(self.items[index], self.pipeline.context(index, self.epoch))
            except DataError as error:
                skips.append(_SkipRecord(index, error.path, error.category, error.reason))
                continue
            if self.bucket_key is not None and self.buckets is not None:
                bucket = self.bucket_key(fields)
                if bucket != self.buckets[index]:
                    raise PipelineError(
                        f"item {index}: bucket {bucket!r} in epoch {self.epoch} differs from {self.buckets[index]!r} "
                        f"found by prepare(); the bucket must not depend on the epoch or the cache variation"
                    )
            loaded.append(fields)
        return _LoadedBatch(self.start + k, self.collate(loaded) if loaded else None, skips)


class PipelineDataLoader:
    """Iterates a pipeline over `items` in bucketed, shuffled batches, one epoch at a time.

    Usage: `loader.prepare()` (optional: runs the cacheable part of the pipeline for every item, records
    skips and learns each item's bucket), then `for batch in loader.iter_epoch(epoch)`. With
    `num_workers` > 0 items load in `torch.utils.data.DataLoader` worker processes with identical
    results; the pipeline, items, `bucket_key` and `collate` are then sent to the workers (picklable, i.e.
    module-level functions, unless the start method is fork). Cache counters of a `CacheStage` only
    count work done in the main process.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        items: list[dict[str, Any]],
        batch_size: int,
        seed: int,
        bucket_key: BucketKey | None = None,
        num_workers: int = 0,
        collate: Collate | None = None,
        *,
        drop_last: bool = False,
        skips: SkipCounter | None = None,
        multiprocessing_context: str | None = None,
    ):
        if batch_size < 1:
            raise PipelineBuildError(f"batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise PipelineBuildError(f"num_workers must be >= 0, got {num_workers}")
        for index, item in enumerate(items):
            pipeline.check_item(item, f"item {index}")
        self.pipeline = pipeline
        self.items = items
        self.batch_size = batch_size
        self.seed = int(seed)
        self.bucket_key = bucket_key
        self.num_workers = num_workers
        self.collate: Collate = collate if collate is not None else default_collate
        self.drop_last = drop_last
        self.skips = skips if skips is not None else SkipCounter()
        self.multiprocessing_context = multiprocessing_context
        if num_workers > 0 and (multiprocessing_context or multiprocessing.get_start_method()) != "fork":
            self._check_picklable()
        self._buckets: dict[int, Hashable] | None = None  # item index -> bucket, for items prepare() kept
        self._recorded: set[tuple[int, str, str, str]] = set()
        self._order: dict[int, list[list[int]]] = {}
        self._epoch = 0
        self._batch = 0

    def _check_picklable(self) -> None:
        for what, value in (("bucket_key", self.bucket_key), ("collate", self.collate)):
            try:
                pickle.dumps(value)
            except Exception as error:  # pickling raises several types
                raise PipelineBuildError(
                    f"{what} cannot be sent to worker processes ({error}): use a module-level function or num_workers=0"
                ) from None

    # --- preparation and batch order ------------------------------------------------------------------
    def prepare(self, epoch: int = 0) -> None:
        """Run the cacheable prefix of the pipeline on every item (filling caches for `epoch`'s
        variation), record skipped items and learn each remaining item's bucket."""
        stop = self.pipeline.cacheable_prefix
        buckets: dict[int, Hashable] = {}
        for index, item in enumerate(tqdm(self.items, desc="preparing", unit="item", disable=not self.items)):
            try:
                fields = self.pipeline.run(item, self.pipeline.context(index, epoch), stop=stop)
            except DataError as error:
                self._record_skip(_SkipRecord(index, error.path, error.category, error.reason))
                continue
            buckets[index] = self.bucket_key(fields) if self.bucket_key is not None else 0
        if not buckets:
            raise UserError(f"no usable item among {len(self.items)} ({self.skips.summary()}): check the dataset")
        try:
            sorted(set(buckets.values()))
        except TypeError:
            raise PipelineBuildError("bucket_key must return values that can be sorted (e.g. tuples of ints)") from None
        self._buckets = buckets
        self._order.clear()
        logger.info("%d items in %d buckets (%s)", len(buckets), len(set(buckets.values())), self.skips.summary())

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Item indices of each batch of `epoch`, a pure function of (seed, epoch); a batch holds one bucket."""
        if epoch not in self._order:
            if self._buckets is None and self.bucket_key is not None:
                logger.info("bucketing needs every item's bucket: running prepare()")
                self.prepare()
            keyed = list(self._buckets.items()) if self._buckets is not None else [(i, 0) for i in range(len(self.items))]
            rng = random.Random(derive_seed("order", self.seed, epoch))
            self._order[epoch] = batch_by_bucket(keyed, self.batch_size, rng, self.drop_last)
        return [list(batch) for batch in self._order[epoch]]

    # --- iteration and resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """The position to resume from: the epoch and the index of its next batch not yet handed out."""
        return {"epoch": self._epoch, "batch": self._batch}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume at `state`: the next iteration starts at exactly that batch of that epoch."""
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0 or batch > len(self.epoch_batches(epoch)):
            raise ValueError(f"data loader state {dict(state)} is out of range for this dataset")
        self._epoch, self._batch = epoch, batch

    def iter_epoch(self, epoch: int) -> Iterator[Any]:
        """The batches of `epoch`, continuing where the loader stopped if it is already inside `epoch`
        (after `load_state_dict` or an interrupted loop), from its start otherwise."""
        if epoch != self._epoch:
            self._epoch, self._batch = epoch, 0
        return iter(self)

    def __iter__(self) -> Iterator[Any]:
        """The remaining batches of the current epoch; afterwards the position moves to the next epoch."""
        epoch, start = self._epoch, self._batch
        remaining = self.epoch_batches(epoch)[start:]
        dataset = _EpochBatches(
            self.pipeline, self.items, epoch, start, remaining, self.collate, self.bucket_key, self._buckets
        )
        for loaded in self._load(dataset, epoch):
            for skip in loaded.skips:
                self._record_skip(skip)
            self._batch = loaded.position + 1  # set before yielding: a backup taken after this step resumes after it
            if loaded.batch is not None:
                yield loaded.batch
        self._epoch, self._batch = epoch + 1, 0

    def _load(self, dataset: _EpochBatches, epoch: int) -> Iterator[_LoadedBatch]:
        if self.num_workers == 0 or len(dataset) == 0:
            return (dataset[k] for k in range(len(dataset)))
        return iter(
            DataLoader(
                dataset,
                batch_size=None,
                shuffle=False,
                num_workers=min(self.num_workers, len(dataset)),
                collate_fn=_identity,
                worker_init_fn=functools.partial(_init_worker, self.seed, epoch),
                multiprocessing_context=self.multiprocessing_context,
            )
        )

    def _record_skip(self, skip: _SkipRecord) -> None:
        """Record a skip once per (item, reason), however many epochs it recurs in."""
        key = (skip.index, skip.path, skip.category, skip.reason)
        if key not in self._recorded:
            self._recorded.add(key)
            self.skips.record(skip.path, skip.category, skip.reason)
