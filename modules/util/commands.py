"""Thread-safe requests from a UI (or a signal handler) to a running trainer, and its progress reports."""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable


class TrainCommands:
    """Flags the trainer polls between steps; safe to set from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = False
        self._backup = False
        self._sample = False

    def stop(self) -> None:
        with self._lock:
            self._stop = True

    def backup(self) -> None:
        with self._lock:
            self._backup = True

    def sample(self) -> None:
        with self._lock:
            self._sample = True

    @property
    def stop_requested(self) -> bool:
        with self._lock:
            return self._stop

    def take_backup(self) -> bool:
        with self._lock:
            requested, self._backup = self._backup, False
            return requested

    def take_sample(self) -> bool:
        with self._lock:
            requested, self._sample = self._sample, False
            return requested


@dataclasses.dataclass
class TrainUpdate:
    global_step: int
    total_steps: int
    epoch: int
    epochs: int
    loss: float
    eta_seconds: float | None
    status: str


@dataclasses.dataclass
class TrainCallbacks:
    """Called from the training thread; a UI must marshal them to its own thread."""

    on_update: Callable[[TrainUpdate], None] = lambda update: None
    on_status: Callable[[str], None] = lambda text: None
