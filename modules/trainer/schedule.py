"""When something recurring (a backup, a sample) is due: every N steps, epochs or minutes."""
from __future__ import annotations

import time

from modules.util.enum import TimeUnit


class Schedule:
    """`skip_first` units (steps, epochs or minutes of this run) pass before the first time it is due."""

    def __init__(self, every: int, unit: TimeUnit, clock=time.monotonic, skip_first: int = 0):
        self.every = every
        self.unit = unit
        self.clock = clock
        self.skip_first = skip_first
        self.start_time = self.last_time = clock()

    def due(self, global_step: int, epoch: int, epoch_end: bool) -> bool:
        """Called after every optimizer step (epoch_end False) and after every epoch (epoch_end True)."""
        if self.every <= 0 or self.unit == TimeUnit.NEVER:
            return False
        if self.unit == TimeUnit.STEP:
            return not epoch_end and global_step > max(0, self.skip_first) and global_step % self.every == 0
        if self.unit == TimeUnit.EPOCH:
            return epoch_end and epoch > self.skip_first and epoch % self.every == 0
        now = self.clock()
        if now - self.start_time < 60 * self.skip_first:
            return False
        if now - self.last_time >= 60 * self.every:
            self.last_time = now
            return True
        return False
