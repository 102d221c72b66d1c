"""Loading the next batch while the current one trains."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader


class BatchPrefetcher:
    """Loads batch i+1 on a worker thread while batch i trains (loading is a pure function of the indices)."""

    def __init__(self, data: WanBaseDataLoader, batches: list[list[int]], epoch: int, start: int):
        self.data, self.batches, self.epoch = data, batches, epoch
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self.pending: dict[int, Future] = {}
        self._submit(start)

    def _submit(self, index: int) -> None:
        if index < len(self.batches) and index not in self.pending:
            self.pending[index] = self.pool.submit(self.data.load_batch, self.batches[index], self.epoch)

    def get(self, index: int) -> dict[str, torch.Tensor]:
        self._submit(index)
        batch = self.pending.pop(index).result()
        self._submit(index + 1)
        if index + 1 >= len(self.batches):
            self.pool.shutdown(wait=False)
        return batch
