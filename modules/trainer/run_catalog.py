"""The runs of a workspace as a user sees them: who each run is, what state it is in, where its files are.

A run is a folder of the workspace (util/run_folder.py): its `run.json`, or when that is lost its backups'
manifests, say who it is. Its state comes from the record its trainer keeps (run_record.py) and the workspace
lock (workspace_lock.py):

- RUNNING: a live process holds the workspace's lock and names this run in it;
- FINISHED: its trainer saved the model (the record lists the files that are still there);
- FAILED: an error ended it (the record's one line);
- STOPPED: a stop ended it (the record says how), or its process is gone while the record still says running
  (a kill, a crash, a power loss): it resumes from its last backup, whose step it shows;
- NEW: started, no step trained yet (nothing to resume).

A run folder of an earlier release has no record: it reads as FINISHED when its newest backup reached the end
its config copy asked for, else STOPPED at that backup. Reading never writes, and never raises on a damaged
folder: what cannot be read is said in the run's `reason`.

Torch-free: the GUI's run browser and scripts/runs.py use it.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
import time
from pathlib import Path

from modules.trainer import run_record
from modules.trainer.run_record import RunRecord, read_record
from modules.trainer.workspace_lock import live_holder
from modules.util import run_folder as folders
from modules.util.run_folder import RunFolder, read_run

MAX_SMALL_JSON_BYTES = 16 * 1024 * 1024  # a config copy or progress.json is a few kB


class RunState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class RunSummary:
    name: str
    folder: Path
    state: RunState
    step: int  # optimizer steps done (STOPPED: the last backup's, where a resume continues)
    total_steps: int | None  # None: not known
    reason: str  # FAILED: the one-line reason; STOPPED: how (user stop, crash...); else ''
    last_backup: Path | None
    outputs: tuple[Path, ...]  # the final model's files (FINISHED), those still there
    samples_dir: Path | None  # None: the run wrote none
    tensorboard_dir: Path | None
    config_path: Path | None  # the config copy of its last start: training it with continue_last_backup resumes it
    created: str  # local 'YYYY-MM-DD HH:MM:SS' ('' not known)
    last_started: str
    run_id: str = ""
    last_activity: float = 0.0  # time.time() of the newest thing it wrote (the list's order)
    backups: tuple[Path, ...] = ()  # its backup folders, oldest step first
    epochs: int | None = None  # the epochs and max_steps it trained for (record, else config copy)
    max_steps: int | None = None
    epoch: int | None = None  # the epoch counter of its last backup (an epoch ended: the next one)
    recovered: bool = False  # run.json was missing or damaged: who it is was read from its backups

    def describe(self) -> str:
        """One line, e.g. "stopped at step 40 of 600 (stopped by the user)"."""
        of = f" of {self.total_steps}" if self.total_steps else ""
        if self.state == RunState.RUNNING:
            text = f"running, step {self.step}{of}"
        elif self.state == RunState.FINISHED:
            text = f"finished at step {self.step}{of}"
        elif self.state == RunState.FAILED:
            text = f"failed at step {self.step}{of}"
        elif self.state == RunState.STOPPED:
            text = f"stopped at step {self.step}{of}"
        else:
            text = "new: no step trained yet"
        return f"{text} ({self.reason})" if self.reason else text

    def to_json(self) -> dict:
        """Plain JSON types (paths as strings, the state by its value), with the one-line description."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(state=self.state.value, description=self.describe())
        return {k: str(v) if isinstance(v, Path) else [str(p) for p in v] if isinstance(v, tuple) else v
                for k, v in data.items()}

    @property
    def resumable(self) -> bool:
        """Whether continue_last_backup has a backup of it to resume (a finished run: only to train further)."""
        return self.last_backup is not None and self.state not in (RunState.RUNNING, RunState.FINISHED)


def list_runs(workspace_dir: str | os.PathLike) -> list[RunSummary]:
    """Every run of the workspace, the newest (last written to) first. Never raises: a folder that cannot be read
    is listed with the reason."""
    try:
        runs = folders.list_runs(workspace_dir)
    except OSError:
        return []
    lock = live_holder(workspace_dir)
    summaries = [_summary_or_damage(run, lock) for run in runs]
    return sorted(summaries, key=lambda s: (s.last_activity, s.name), reverse=True)


def describe_run(run_folder: str | os.PathLike) -> RunSummary:
    """The summary of one run folder; ValueError when the folder is no run (no run.json and no backup of a run)."""
    path = Path(run_folder)
    run = read_run(path)
    if run is None:
        raise ValueError(f"'{path}' is not a run folder (it holds no {folders.RUN_FILE} and no backup of a run)")
    return _summary_or_damage(run, live_holder(path.parent))


def _summary_or_damage(run: RunFolder, lock: dict | None) -> RunSummary:
    try:
        return _summary(run, lock)
    except Exception as e:  # noqa: BLE001 - a damaged folder is listed, never a reason to fail the listing
        return RunSummary(run.name, run.path, RunState.FAILED, 0, None, f"its folder cannot be read ({e})", None,
                          (), None, None, None, _when(run.created), _when(run.last_started), run.run_id)


def _summary(run: RunFolder, lock: dict | None) -> RunSummary:
    record = read_record(run.path)
    backups = tuple(p for p in run.backup_folders() if (p / "progress.json").is_file())
    last_backup = backups[-1] if backups else None
    progress = _progress(last_backup)
    backup_step = _step(last_backup) if last_backup is not None else 0
    config = _read_json(run.config_copy)
    epochs, max_steps = _config_limits(record, config)
    state, step, reason = _state(record, lock is not None and lock.get("run") == run.name, backup_step, progress,
                                 epochs, max_steps)
    total = record.total_steps if record is not None else None
    outputs = tuple(Path(p) for p in record.outputs if Path(p).exists()) \
        if record is not None and state == RunState.FINISHED else ()
    activity = max([run.created, run.last_started, record.updated if record else 0.0,
                    *(_mtime(p) for p in backups[-1:])])
    return RunSummary(
        name=run.name, folder=run.path, state=state, step=step, total_steps=total, reason=reason,
        last_backup=last_backup, outputs=outputs, samples_dir=_folder(run.samples),
        tensorboard_dir=_folder(run.tensorboard), config_path=run.config_copy if run.config_copy.is_file() else None,
        created=_when(run.created), last_started=_when(run.last_started), run_id=run.run_id, last_activity=activity,
        backups=backups, epochs=epochs, max_steps=max_steps,
        epoch=progress.get("epoch") if isinstance(progress.get("epoch"), int) else None, recovered=run.recovered)


def _state(record: RunRecord | None, running: bool, backup_step: int, progress: dict, epochs: int | None,
           max_steps: int | None) -> tuple[RunState, int, str]:
    """(state, step, reason) from the trainer's record, the live lock and the last backup."""
    if running:
        return RunState.RUNNING, record.step if record and record.state == run_record.RUNNING else backup_step, ""
    if record is None:  # a run of an earlier release, or one whose record was lost
        if not backup_step:
            return RunState.NEW, 0, ""
        if _reached_the_end(progress, epochs, max_steps):
            return RunState.FINISHED, backup_step, ""
        return RunState.STOPPED, backup_step, "no state recorded; it resumes from its last backup"
    if record.state == run_record.RUNNING:  # its process is gone: killed, crashed, power lost
        if backup_step:
            return RunState.STOPPED, backup_step, (f"its process ended without a stop after step {record.step} "
                                                   "(killed or crashed); it resumes from its last backup")
        if not record.step:
            return RunState.NEW, 0, "its process ended before the first step (killed or crashed)"
        return RunState.STOPPED, 0, (f"its process ended without a stop after step {record.step} (killed or "
                                     "crashed), before its first backup: nothing to resume")
    if record.state == run_record.STOPPED and not record.step and not backup_step:
        return RunState.NEW, 0, record.reason
    state = {run_record.STOPPED: RunState.STOPPED, run_record.FAILED: RunState.FAILED,
             run_record.FINISHED: RunState.FINISHED}[record.state]
    return state, record.step, record.reason


def _reached_the_end(progress: dict, epochs: int | None, max_steps: int | None) -> bool:
    step, epoch = progress.get("global_step"), progress.get("epoch")
    if not isinstance(step, int) or not isinstance(epoch, int):
        return False
    return bool(max_steps and step >= max_steps) or (epochs is not None and epoch >= epochs)


def _config_limits(record: RunRecord | None, config: dict) -> tuple[int | None, int | None]:
    if record is not None and record.epochs is not None:
        return record.epochs, record.max_steps
    values = [config.get(key) for key in ("epochs", "max_steps")]
    epochs, max_steps = (v if isinstance(v, int) and not isinstance(v, bool) else None for v in values)
    return epochs, max_steps


def _progress(backup: Path | None) -> dict:
    if backup is None:
        return {}
    progress = _read_json(backup / "progress.json").get("progress")
    return progress if isinstance(progress, dict) else {}


def _read_json(path: Path) -> dict:
    """A small JSON object file ({} when missing, too big, unreadable or not an object)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_SMALL_JSON_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _step(backup: Path) -> int:
    return int(backup.name.split("-", 1)[1])


def _folder(path: Path) -> Path | None:
    return path if path.is_dir() and not path.is_symlink() else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds > 0 else ""
