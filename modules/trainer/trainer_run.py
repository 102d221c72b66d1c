"""The trainer's run folder: opening it, the state record it keeps there, its log file and tensorboard writer, and
finding it again when it moves (mixed into GenericTrainer; rank 0 does all of it).

- Opening (`_open_run`): the workspace lock, the run trainer/runs.py picks (a run resumed only when it writes only
  inside its own folder: no symbolic link among its sub-folders), the log file, the config copy. A full disk or a
  read-only workspace at this point is one line, before any model loads.
- The record (run_record.py): `running` when training begins (a new run: as soon as its folder exists), after
  each backup and every minute; `stopped`, `failed` with its one-line reason, or `finished` with its files when
  it ends. A resume that fails before training leaves the record of the run it tried to resume as it was.
- Moving (`_follow_run_folder`, between steps and before every backup): a run folder renamed by hand is
  followed (the later backups, samples and curves go to its new name), a deleted one is made again with its
  run.json, a new log file and a new event file: every backup stays findable by a resume.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from modules.trainer import run_record
from modules.trainer.backup import remove_interrupted_writes
from modules.trainer.run_record import failure_reason, new_record, write_record
from modules.trainer.runs import open_run, write_config_copy
from modules.trainer.workspace_lock import WorkspaceLock
from modules.util.errors import UserError
from modules.util.numbered_names import numbered_names
from modules.util.run_folder import relocate_run
from modules.util.write_errors import is_write_failure, write_failure

logger = logging.getLogger(__name__)

RECORD_EVERY_S = 60.0  # a running record's step is at most this old (and exact after every backup)


class TrainingStopped(Exception):
    """Training was stopped on request; a backup was written to `path` (None: an immediate stop of a
    sharded run, which cannot write one, or a stop before training began); `reason` says why not."""

    def __init__(self, path: Path | None, reason: str = ""):
        super().__init__(f"training stopped; backup written to {path}" if path else "training stopped; no backup")
        self.path = path
        self.reason = reason


def recorded(phase: str) -> Callable:
    """Decorates GenericTrainer.start / train / end: the run's record says how the phase ended when it raised
    (`end` records a finished run itself, before it releases the workspace lock)."""
    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(self: "TrainerRun", *args, **kwargs):
            with self._recording(phase):
                result = method(self, *args, **kwargs)
            if phase == "start":
                self._record_progress(force=True)
            return result
        return wrapper
    return decorate


class TrainerRun:
    """Mixed into GenericTrainer: reads its config, workspace, run, progress, dist, callbacks and tensorboard."""

    _resuming = False  # this start continues a run that has backups: a failure before training leaves its record
    _record_written_at = 0.0
    _record_failure_said = False
    _last_backup: Path | None = None

    # --- opening --------------------------------------------------------------------------------------
    def _open_run(self) -> None:
        """Rank 0: lock the workspace, open (create, resume or migrate) the run folder, start its log."""
        config = self.config
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
            self._lock = WorkspaceLock.take(self.workspace)
            self.run = open_run(self.workspace, config.run_name, config.output_model_destination,
                                config.continue_last_backup, limits=(config.epochs, config.max_steps),
                                training_method=config.training_method.name)
            self._resuming = config.continue_last_backup and bool(self.run.backup_folders())
            self._lock.name_run(self.run.name)
            remove_interrupted_writes(self.workspace)
            self._start_log_file()
            write_config_copy(self.run, config.to_dict())
        except Exception as e:
            if isinstance(e, UserError) or not is_write_failure(e):
                raise
            raise UserError(f"cannot prepare the run in workspace_dir '{self.workspace}' ({write_failure(e)}): "
                            "free space there, or set workspace_dir to a writable folder with room for backups")
        if self.run.recovered:
            logger.warning("run '%s': its run.json was missing or damaged; who the run is was read from its backups "
                           "(run.json is written again)", self.run.name)
        if not self._resuming:
            self._record(run_record.RUNNING)
        logger.info("run '%s': its backups, samples, curves and logs go to %s", self.run.name, self.run.path)
        self.callbacks.on_run(self.run.name, self.run.path)

    def _start_log_file(self) -> None:
        log_dir = self.run.logs
        log_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(new_log_path(log_dir), encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        if logging.getLogger().level > logging.INFO:
            logging.getLogger().setLevel(logging.INFO)
        self._log_handler = handler

    def _close_log_file(self) -> None:
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    def _open_tensorboard(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        _quiet_tensorboard_thread_failures()
        self.tensorboard = SummaryWriter(str(self.run.tensorboard))

    def _close_tensorboard(self) -> None:
        if self.tensorboard is not None:
            with contextlib.suppress(Exception):  # a writer whose file went away: nothing more to keep
                self.tensorboard.close()
            self.tensorboard = None

    # --- the record -------------------------------------------------------------------------------------
    def _record(self, state: str, reason: str = "", outputs: tuple[str, ...] = ()) -> None:
        """Write the run's record now (rank 0). A failed write (a full disk) is said once; training goes on."""
        if self.run is None or not self.dist.is_main:
            return
        record = new_record(state, step=self.progress.global_step, total_steps=getattr(self, "total_steps", None),
                            reason=reason, last_backup=str(self._last_backup or ""), outputs=outputs,
                            epochs=self.config.epochs, max_steps=self.config.max_steps)
        try:
            write_record(self.run.path, record)
            self._record_written_at = time.monotonic()
        except Exception as e:
            if not is_write_failure(e):
                raise
            if not self._record_failure_said:
                self._record_failure_said = True
                logger.warning("cannot write the run's state to %s (%s); training goes on", self.run.path,
                               write_failure(e))

    def _record_finished(self, outputs: list[Path]) -> None:
        """The model is saved: called before the workspace lock is released."""
        self._record(run_record.FINISHED, outputs=tuple(str(p) for p in outputs))

    def _record_progress(self, force: bool = False) -> None:
        """The running record's step, at most RECORD_EVERY_S old."""
        if force or time.monotonic() - self._record_written_at >= RECORD_EVERY_S:
            self._record(run_record.RUNNING)

    @contextlib.contextmanager
    def _recording(self, phase: str) -> Iterator[None]:
        try:
            yield
        except TrainingStopped as stopped:
            if not (phase == "start" and self._resuming):
                reason = stopped.reason or ("stopped by the user" if stopped.path else
                                            "stopped at once by the user: no backup written")
                self._record(run_record.STOPPED, reason)
            raise
        except Exception as error:
            if not (phase == "start" and self._resuming):
                self._record(run_record.FAILED, failure_reason(error))
            raise
        except BaseException as interrupt:  # KeyboardInterrupt, SystemExit
            if not (phase == "start" and self._resuming):
                self._record(run_record.STOPPED, f"interrupted ({type(interrupt).__name__})")
            raise

    # --- following the folder ------------------------------------------------------------------------
    def _follow_run_folder(self) -> None:
        """Rank 0: where the run folder is now (renamed: followed; deleted: made again), said in one line."""
        if self.run is None or not self.dist.is_main:
            return
        old = self.run.path
        try:
            run, what = relocate_run(self.run)
        except OSError as e:
            if not self._record_failure_said:
                self._record_failure_said = True
                logger.error("the run folder %s is gone and cannot be made again (%s); training goes on", old,
                             write_failure(e))
            return
        if not what:
            return
        log_file = Path(self._log_handler.baseFilename) if self._log_handler is not None else None
        if what == "marked" and (log_file is None or log_file.exists()):
            logger.warning("the run folder %s lost its run.json while the run trained: written again", old)
            return
        self.run = run
        if what == "renamed":
            logger.warning("the run folder %s was renamed to %s while the run trained: this run goes on there",
                           old, run.path)
        else:
            self._close_log_file()
            self._start_log_file()
            logger.warning("the run folder %s was deleted (or replaced) while the run trained: it is made again at %s "
                           "with its run.json; the later backups, samples and logs go there", old, run.path)
            write_config_copy(run, self.config.to_dict())
        if self.tensorboard is not None:  # its writer appends to the old path: a new event file
            self._close_tensorboard()
            self._open_tensorboard()
        if self._lock is not None:
            self._lock.name_run(run.name)
        self._record(run_record.RUNNING)
        self.callbacks.on_run(run.name, run.path)

    def _write_backup_following_the_run(self, write: Callable[[], Path | None]) -> Path | None:
        """`write()` the backup into the run folder where it is now; a rename that hits the write mid-way moves its
        target: the backup is written again there (not under FSDP, whose ranks write together)."""
        self._follow_run_folder()
        before = self.run.path if self.run is not None else None
        try:
            path = write()
        except Exception:
            self._follow_run_folder()
            if self.setup.sharded or self.run is None or self.run.path == before:
                raise
            logger.warning("the run folder moved while its backup was written: writing it again in %s", self.run.path)
            path = write()
        if path is not None:
            self._last_backup = path
            self._record_progress(force=True)
        return path

    def _to_tensorboard(self, write: Callable[[object], None]) -> None:
        """One tensorboard write; a writer whose file went away (the run folder moved, a full disk) is opened
        anew once, and turned off with one line when that fails too: the curves never end a run."""
        if self.tensorboard is None:
            return
        try:
            write(self.tensorboard)
            return
        except Exception as e:
            if not is_write_failure(e):
                raise
            error = e
        self._follow_run_folder()
        try:
            self._close_tensorboard()
            self._open_tensorboard()
            write(self.tensorboard)
        except Exception as e:
            if not is_write_failure(e):
                raise
            logger.error("cannot write the curves to %s (%s, then %s): tensorboard logging is off for the rest of "
                         "this run", self.run.tensorboard, write_failure(error), write_failure(e))
            self.tensorboard = None


def _quiet_tensorboard_thread_failures() -> None:
    """tensorboard's writer thread appends to its event file by path: when the run folder is renamed or deleted
    under it, the write fails in that thread, which Python reports with a traceback on the console. That failure
    is one line in the log instead; the trainer's next write opens a new event file (`_to_tensorboard`)."""
    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        thread = args.thread
        if thread is not None and type(thread).__module__.startswith("tensorboard.") and \
                issubclass(args.exc_type, OSError):
            logger.warning("tensorboard could not write its event file (%s); the curves go on in a new one",
                           write_failure(args.exc_value))
            return
        previous(args)

    hook.quiets_tensorboard = True
    threading.excepthook = hook


def new_log_path(log_dir: Path) -> Path:
    """`train-<time>.log`, numbered when a run of the same second (a quick resume) has that name: each start of a
    run keeps its own log."""
    names = numbered_names(time.strftime("train-%Y%m%d-%H%M%S"), ".log")
    return next(path for path in (log_dir / name for name in names) if not path.exists())
