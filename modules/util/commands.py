"""Thread-safe requests from a UI (or a signal handler) to a running trainer, and its progress reports."""
from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pathlib import Path

    from modules.util.sample_record import SampleRecord


class TrainCommands:
    """Flags the trainer polls between steps; safe to set from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = False
        self._backup = False
        self._sample = False
        self._samples: list | None = None  # "Sample now" with the samples as the GUI shows them now

    def stop(self) -> None:
        with self._lock:
            self._stop = True

    def backup(self) -> None:
        with self._lock:
            self._backup = True

    def sample(self, samples: list | None = None) -> None:
        """Sample after the current step: `samples` (SampleConfig, e.g. the GUI's list as edited since the start),
        or the run's own samples."""
        with self._lock:
            self._sample = True
            self._samples = samples

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

    def take_samples(self) -> list | None:
        """The samples the last `sample()` asked for (None: the run's own), once."""
        with self._lock:
            samples, self._samples = self._samples, None
            return samples


class StopSignalHandler:
    """SIGINT/SIGTERM handler: the first signal asks for a stop after the current step (with a backup);
    a second one, given at least `repeat_after_s` later, stops at once.

    Signals closer together are one stop: under torchrun a Ctrl-C reaches each worker twice — SIGINT
    from the terminal and, a moment later, the signal torchrun forwards — and an immediate stop would
    leave the ranks at different points of the step.
    """

    def __init__(self, commands: TrainCommands, repeat_after_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.commands = commands
        self.repeat_after_s = repeat_after_s
        self.clock = clock
        self.first_at: float | None = None

    def __call__(self, signum, frame) -> None:
        now = self.clock()
        if self.first_at is None:
            self.first_at = now
            print("\nstopping after this step (press Ctrl-C again to stop at once)", file=sys.stderr)
            self.commands.stop()
        elif now - self.first_at >= self.repeat_after_s:
            raise KeyboardInterrupt


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
    """Called from the training thread (rank 0 only for scalars and samples); a UI must marshal them to its own
    thread. `on_scalar(name, value, step)` receives every value the trainer writes to tensorboard, with
    tensorboard on or off ("loss", "lr", "loss/validation", ...); `on_sample` a `SampleRecord`
    (modules/util/sample_record.py) once a sample's video, contact sheet and sidecar are written; `on_progress(what,
    done, total)` the caching phase, item by item ("caching (vae)", 3, 40); `on_warning` each thing a finished run
    skipped (trainer/end_report.py), which a GUI shows at the end; `on_run(name, folder)` the run's name and folder
    (util/run_folder.py) once it is chosen, before any model loads; `on_phase(what, done, total)` what the run does
    now ("loading model", "sampling" 1 of 2, "writing backup"; total 0: no count), until the next phase or step
    (`on_update`): the status a GUI shows is the phase, never an old one; `on_status` is news said once
    ("validation loss 0.12", "backup failed: ...")."""

    on_update: Callable[[TrainUpdate], None] = lambda update: None
    on_status: Callable[[str], None] = lambda text: None
    on_scalar: Callable[[str, float, int], None] = lambda name, value, step: None
    on_sample: Callable[["SampleRecord"], None] = lambda record: None
    on_progress: Callable[[str, int, int], None] = lambda what, done, total: None
    on_warning: Callable[[str], None] = lambda text: None
    on_run: Callable[[str, "Path"], None] = lambda name, folder: None
    on_phase: Callable[[str, int, int], None] = lambda what, done, total: None
