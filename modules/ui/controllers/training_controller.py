"""Runs the trainer on a worker thread and hands its reports to the UI thread through a queue.

Threading rule: the worker never touches a widget. The trainer's callbacks (`on_update`,
`on_status`, `on_scalar`, `on_sample`) and the worker's outcome (finished / stopped / error) are put on a `queue.Queue`; the Tk
thread calls `poll()` from an `after` loop, which drains the queue, updates `state` and returns the
events the view reacts to (an error dialog, ...). Scalars go into `scalars` (the curves), samples into
`gallery` (the sample viewer). Stop, "backup now" and "sample now" set flags on
`TrainCommands`, which the trainer polls between steps; Stop makes it write a backup and raise
`TrainingStopped`, reported here as a "stopped" event with the backup's path.
"""
from __future__ import annotations

import dataclasses
import gc
import logging
import queue
import sys
import threading
import time
from typing import Any, Callable

from modules.ui.controllers.curves import ScalarHistory
from modules.ui.controllers.sample_gallery import SampleGallery
from modules.util.commands import TrainCallbacks, TrainCommands, TrainUpdate
from modules.util.errors import UserError
from modules.util.sample_record import samples_folder

logger = logging.getLogger(__name__)

IDLE, STARTING, TRAINING, STOPPING = "idle", "starting", "training", "stopping"
# What a request to the running trainer says until the trainer begins it.
REQUESTS = {"backup": "a backup follows this step", "sample": "samples follow this step"}
# Tasks of the running loop, said with the step they belong to.
STEP_TASKS = ("sampling", "writing backup", "validating", "saving snapshot")


@dataclasses.dataclass
class TrainState:
    """What the window shows of a run. One status model: `task` is what the run does now, with its count
    (caching 13/40, training step N/M, sampling k/n, writing backup), `status` the newest message (an action's
    result, the run's news, how the last run ended), `run_error` a failure of the running run only while it is
    true (a failed backup, until the next one is written)."""

    phase: str = IDLE
    step: int = 0
    total_steps: int = 0
    epoch: int = 0
    epochs: int = 0
    loss: float | None = None
    eta_seconds: float | None = None
    status: str = "ready"  # the newest message: it replaces the one before (an old error too)
    status_is_error: bool = False
    task: tuple[str, int, int] = ("", 0, 0)  # what the run does now: (what, done, total); total 0: no count
    requests: tuple[str, ...] = ()  # asked of the running trainer and not begun yet: "backup", "sample"
    run_error: str = ""
    outputs: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)  # what the finished run skipped
    backup_path: str = ""
    error: str = ""
    run_name: str = ""  # the run's folder in the workspace (util/run_folder.py), once the trainer chose it
    run_dir: str = ""

    @property
    def running(self) -> bool:
        return self.phase != IDLE

    @property
    def fraction(self) -> float:
        if not self.total_steps and self.task[2]:  # caching: its own progress until the first step
            return min(1.0, self.task[1] / self.task[2])
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0

    def activity_text(self) -> str:
        """What the run does now: "caching (vae) 13/40", "training step 60/600", "sampling 1/2 at step 40"."""
        what, done, total = self.task
        if what == TRAINING:
            return f"training step {self.step}/{self.total_steps}"
        if not what:
            return "starting"
        at = f" at step {self.step}" if self.total_steps and what in STEP_TASKS else ""
        return (f"{what} {done}/{total}" if total else what) + at

    def shown_status(self) -> str:
        """The status line while a run goes: the run, what it does now, what was asked of it, a failure that is
        still true, then the newest message on its own line."""
        if not self.running:
            return self.status
        line = self.activity_text()
        if self.phase == STOPPING:
            line += " · stopping after this step (a backup is written)"
        line += "".join(f" · {REQUESTS[r]}" for r in self.requests)
        if self.run_error:
            line += f" · {self.run_error}"
        if self.run_name:
            line = f"run {self.run_name}: {line}"
        return "\n".join(filter(None, (line, self.status)))

    @property
    def shows_error(self) -> bool:
        return bool(self.run_error) if self.running and not self.status_is_error else self.status_is_error

    def progress_text(self) -> str:
        if not self.total_steps and self.task[2]:
            return f"{self.task[0]} {self.task[1]}/{self.task[2]}"
        if not self.total_steps:
            return "step – · epoch –"
        epoch = min(self.epoch + 1, self.epochs) if self.epochs else self.epoch + 1
        return f"step {self.step}/{self.total_steps} · epoch {epoch}/{self.epochs}"

    def loss_text(self) -> str:
        return "loss –" if self.loss is None else f"loss {self.loss:.4f}"

    def eta_text(self) -> str:
        return "ETA –" if self.eta_seconds is None else f"ETA {format_duration(self.eta_seconds)}"


@dataclasses.dataclass(frozen=True)
class Event:
    kind: str  # status | update | scalar | sample | progress | warning | run | finished | stopped | error | done
    payload: Any = None


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def default_trainer_factory(config: Any, callbacks: TrainCallbacks, commands: TrainCommands) -> Any:
    from modules.trainer.GenericTrainer import GenericTrainer

    return GenericTrainer(config, callbacks, commands)


class TrainingController:
    def __init__(self, trainer_factory: Callable[[Any, TrainCallbacks, TrainCommands], Any] | None = None):
        self.trainer_factory = trainer_factory or default_trainer_factory
        self.state = TrainState()
        self.queue: queue.Queue[Event] = queue.Queue()
        self.commands: TrainCommands | None = None
        self.thread: threading.Thread | None = None
        self.scalars = ScalarHistory()  # this run's logged values (the curves)
        self.gallery = SampleGallery()  # the samples in the workspace, this run's as they are written
        self.sample_requested = False  # "Sample now" was pressed: the view shows its result when it comes

    @property
    def running(self) -> bool:
        return self.state.running

    # --- Tk thread ---------------------------------------------------------------------------------
    def say(self, text: str, error: bool = False) -> None:
        """Replace the status line: the newest message wins, the one before it (an old error too) is gone."""
        self.state.status, self.state.status_is_error = text, error

    def start(self, config: Any) -> None:
        """Start training `config` (a TrainConfig) on a worker thread."""
        if self.running:
            raise UserError("training is already running: stop it first")
        self.state = TrainState(phase=STARTING, status="", epochs=getattr(config, "epochs", 0))
        self.commands = TrainCommands()
        self.scalars.clear()
        self.sample_requested = False
        gc.collect()  # on the Tk thread: a collection in the worker would run Tk objects' __del__ there
        self.thread = threading.Thread(target=self._work, args=(config, self.commands), name="training", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Ask the trainer to stop after the current step; it writes a backup first."""
        if self.running and self.commands is not None:
            self.commands.stop()
            self.state.phase = STOPPING

    def backup_now(self) -> bool:
        if self.running and self.commands is not None:
            self.commands.backup()
            self._request("backup")
            return True
        return False

    def sample_now(self, samples: list | None = None) -> bool:
        """Sample after the current step: `samples` (the sampling tab's list as it is now: new prompts load the text
        encoder again for the round), or the run's own."""
        if self.running and self.commands is not None:
            self.commands.sample(samples)
            self.sample_requested = True
            self._request("sample")
            return True
        return False

    def _request(self, what: str) -> None:
        if what not in self.state.requests:
            self.state.requests += (what,)

    def poll(self) -> list[Event]:
        """Drain the worker's messages into `state`; returns them for the view (Tk thread only)."""
        events: list[Event] = []
        while True:
            try:
                event = self.queue.get_nowait()
            except queue.Empty:
                return events
            self._apply(event)
            events.append(event)

    def _apply(self, event: Event) -> None:
        state = self.state
        if event.kind == "status":  # the run's news (validation loss, a failed backup): the newest message
            self._news(event.payload)
        elif event.kind in ("phase", "progress"):  # what the run does now (caching's count comes as progress)
            self._begin(event.payload)
        elif event.kind == "update":
            update: TrainUpdate = event.payload
            state.step, state.total_steps = update.global_step, update.total_steps
            state.epoch, state.epochs = update.epoch, update.epochs
            state.loss, state.eta_seconds = update.loss, update.eta_seconds
            if state.phase == STARTING:
                state.phase = TRAINING
            state.task = (TRAINING, update.global_step, update.total_steps)  # back to training after a sample
        elif event.kind == "scalar":
            self.scalars.add(*event.payload)
        elif event.kind == "sample":
            self.gallery.add(event.payload)
        elif event.kind == "warning":
            state.warnings.append(event.payload)
        elif event.kind == "run":  # the run's own samples, not another run's of the workspace
            state.run_name, state.run_dir = event.payload
            self.gallery.load_folder(samples_folder(state.run_dir))
            self.scalars.start_run(state.run_dir)  # a resumed run's earlier starts, under what it trains now
        elif event.kind == "finished":
            state.outputs = list(event.payload)
            done = "done: " + ", ".join(state.outputs) if state.outputs else "done"
            # What the run skipped is said here, in red, not only in the log.
            self.say("; ".join([done, *state.warnings]), error=bool(state.warnings))
        elif event.kind == "stopped":
            state.backup_path = event.payload
            at = f" at step {state.step}/{state.total_steps}" if state.total_steps else ""
            self.say(f"stopped{at}; backup written to {event.payload} (resume it: runs tab, Continue)")
        elif event.kind == "error":
            state.error = event.payload
            self.say(f"error: {event.payload}", error=True)
        elif event.kind == "done":
            state.phase = IDLE
            state.eta_seconds = None
            state.task = ("", 0, 0)  # a run that ended while caching leaves no count behind
            state.requests, state.run_error = (), ""

    def _begin(self, task: tuple[str, int, int]) -> None:
        """The run begins (or counts on in) a task: a request it answers is no longer pending, a failed backup is
        no longer the state once the next one is being written."""
        state = self.state
        what = task[0]
        state.task = tuple(task)
        answered = {"writing backup": "backup", "sampling": "sample"}.get(what)
        state.requests = tuple(r for r in state.requests if r != answered)
        if what == "writing backup":
            state.run_error = ""

    def _news(self, text: str) -> None:
        if text.startswith("backup failed"):  # true until a backup is written again
            self.state.run_error = text
        else:
            self.say(text)

    def wait(self, timeout: float | None = None) -> bool:
        """Join the worker (tests, shutdown); True when it has ended."""
        if self.thread is not None:
            self.thread.join(timeout)
            return not self.thread.is_alive()
        return True

    # --- worker thread --------------------------------------------------------------------------------
    def _put(self, kind: str, payload: Any = None) -> None:
        self.queue.put(Event(kind, payload))

    def _work(self, config: Any, commands: TrainCommands) -> None:
        trainer = None
        started = time.monotonic()
        try:
            callbacks = TrainCallbacks(on_update=lambda update: self._put("update", update),
                                       on_status=lambda text: self._put("status", text),
                                       on_phase=lambda what, done, total: self._put("phase", (what, done, total)),
                                       on_scalar=lambda name, value, step: self._put("scalar", (name, value, step)),
                                       on_sample=lambda record: self._put("sample", record),
                                       on_progress=lambda what, done, total: self._put("progress", (what, done, total)),
                                       on_warning=lambda text: self._put("warning", text),
                                       on_run=lambda name, folder: self._put("run", (name, str(folder))))
            self._put("phase", ("loading", 0, 0))
            trainer = self.trainer_factory(config, callbacks, commands)
            trainer.start()
            trainer.train()
            paths = trainer.end()
            self._put("finished", [str(p) for p in paths])
            logger.info("training finished in %.1f s", time.monotonic() - started)
        except Exception as e:
            self._close(trainer)
            path = _stopped_backup(e)
            if path is not None:
                self._put("stopped", path)
            elif isinstance(e, UserError):
                self._put("error", str(e))
            else:  # a bug: keep the traceback in the log, show one line
                logger.exception("training failed")
                self._put("error", f"{type(e).__name__}: {e} (the log has the details)")
        finally:
            self._put("done")

    @staticmethod
    def _close(trainer: Any) -> None:
        close = getattr(trainer, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing must not hide the original outcome
                logger.exception("closing the trainer failed")


def _stopped_backup(error: Exception) -> str | None:
    """The backup path of a `TrainingStopped` (the trainer's answer to Stop), else None."""
    trainer_module = sys.modules.get("modules.trainer.GenericTrainer")  # loaded if it was raised
    stopped = getattr(trainer_module, "TrainingStopped", None)
    return str(error.path) if stopped is not None and isinstance(error, stopped) else None
