"""Which run folder a training start writes to (util/run_folder.py has the layout, run_catalog.py the states).

- `continue_last_backup` with `run_name`: that run (also when renamed by hand: found by the name it was started
  under; an older flat workspace is moved into it when no run folder exists yet); a name no run has yet starts
  that run fresh, said in one line.
- `continue_last_backup` without `run_name`: the newest *unfinished* run with a backup (the flat layout of an
  older WanTrainer counts as one, and is moved into a run folder to be resumed), said in one line.
- A finished run is not resumed unless the config trains it further (more epochs, or a higher max_steps after a
  run that max_steps ended): the start is refused in one line that says how to train more (its weights as the
  start of a new run, or more epochs).
- otherwise a new run: `run_name`, or the output's name and the date and time; a name already taken gets the
  first free `<name>-N` (logged): a new run never writes into another run's folder, and a run picked for a resume
  never names the next new one.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from modules.trainer.run_catalog import RunState, RunSummary, describe_run, list_runs
from modules.util.atomic import atomic_write_text
from modules.util.errors import UserError
from modules.util.run_folder import (
    RunFolder,
    create_run,
    default_run_name,
    find_run,
    flat_backups,
    flat_layout_time,
    foreign_link,
    migrate_flat_layout,
    read_run,
)

logger = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 16 * 1024 * 1024
# what starts a new run from a finished run's weights, by training_method (trainer/initial_weights.py)
WEIGHTS_KEY = {"LORA": "lora_weight_path", "EMBEDDING": "embedding_weight_path", "FINE_TUNE": "base_model_name"}


def open_run(workspace: Path, run_name: str, output_destination: str, resume: bool, when: float | None = None,
             limits: tuple[int, int] | None = None, training_method: str = "LORA") -> RunFolder:
    """The run folder this start trains in, created or migrated as needed (the caller holds the workspace lock).
    `limits`: the config's (epochs, max_steps), which decide whether a finished run would train further."""
    when = time.time() if when is None else when
    if resume:
        run = _run_to_resume(workspace, run_name, output_destination, when, limits, training_method)
        if run is not None:
            link = foreign_link(run)  # before anything is written into it
            if link:
                raise UserError(f"run '{run.name}': {link}; a run writes only inside its own folder: remove the "
                                "link (what it points to is left as it is), or set another run_name")
            return run.mark_started(when)
    name = run_name or default_run_name(output_destination, when)
    run, renamed = create_run(workspace, name, when)
    if renamed:
        logger.warning("run folder %s already exists (another run's): this run writes to %s instead (set "
                       "continue_last_backup to resume that run)", workspace / name, run.path)
    return run


def trains_further(run: RunSummary, limits: tuple[int, int] | None) -> bool:
    """Whether a finished run resumed with the config's (epochs, max_steps) would train more steps: more epochs
    than it ran, or a higher max_steps after a run that max_steps ended (None: not known, so yes)."""
    if limits is None or run.epochs is None:
        return True
    epochs, max_steps = limits
    if max_steps and run.step >= max_steps:
        return False
    if epochs > run.epochs:
        return True
    ended_by_max_steps = bool(run.max_steps) and run.step >= run.max_steps
    return ended_by_max_steps and (max_steps == 0 or max_steps > run.max_steps) and \
        (run.epoch is None or run.epoch < epochs)


def finished_refusal(run: RunSummary, training_method: str) -> str:
    """The one line refusing to 'resume' a finished run, and how to train more."""
    key = WEIGHTS_KEY.get(training_method, "lora_weight_path")
    output = str(run.outputs[0]) if run.outputs else "its output file"
    return (f"continue_last_backup: run '{run.name}' has finished ({run.describe()}): there is nothing to resume; to "
            f"train more, start a new run from its weights ({key}={output}, continue_last_backup=false), or raise "
            f"epochs (or max_steps) and resume it with run_name={run.name}")


def _run_to_resume(workspace: Path, run_name: str, output_destination: str, when: float,
                   limits: tuple[int, int] | None, training_method: str) -> RunFolder | None:
    if run_name:
        run = find_run(workspace, run_name)
        if run is not None:
            summary = describe_run(run.path)
            if summary.state == RunState.FINISHED and not trains_further(summary, limits):
                raise UserError(finished_refusal(summary, training_method))
            if run.name != run_name:
                logger.warning("continue_last_backup: run '%s' was renamed to '%s' by hand: resuming it there (it "
                               "keeps its new name)", run_name, run.name)
            logger.info("continue_last_backup: resuming run '%s' (%s; %s)", run.name, summary.describe(), run.path)
            return run
        if not _has_runs(workspace) and flat_backups(workspace):
            return migrate_flat_layout(workspace, run_name, when)
        logger.info("continue_last_backup: no run '%s' in %s yet: it starts fresh", run_name, workspace)
        return None
    runs = [r for r in list_runs(workspace) if r.last_backup is not None and r.state != RunState.RUNNING]
    candidates = [r for r in runs if r.state != RunState.FINISHED or trains_further(r, limits)]
    last = max(candidates, key=lambda r: (_newest_backup_time(r), r.created), default=None)
    flat = flat_layout_time(workspace)
    if flat and (last is None or flat > _newest_backup_time(last)):
        name = default_run_name(_flat_output(workspace) or output_destination, flat)
        run = migrate_flat_layout(workspace, name, when)
        logger.info("continue_last_backup: resuming the last run '%s' (moved from the flat layout; set run_name to "
                    "choose another)", run.name)
        return run
    finished = [r for r in runs if r not in candidates]
    if last is None:
        if finished:
            raise UserError(finished_refusal(max(finished, key=_newest_backup_time), training_method))
        logger.info("continue_last_backup: no backup in %s yet, starting fresh", workspace)
        return None
    newer = [r.name for r in finished if _newest_backup_time(r) > _newest_backup_time(last)]
    skipped = f"; {', '.join(repr(n) for n in newer)} finished, nothing to resume there" if newer else ""
    logger.info("continue_last_backup: resuming the last run '%s' (%s: the newest unfinished run%s; set run_name to "
                "choose another)", last.name, last.describe(), skipped)
    return read_run(last.folder)


def _newest_backup_time(run: RunSummary) -> float:
    return max((_mtime(p) for p in run.backups), default=0.0)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _has_runs(workspace: Path) -> bool:
    return bool(list_runs(workspace))


def _flat_output(workspace: Path) -> str:
    """The output name the flat layout's newest backup was trained for ('' when unreadable)."""
    for backup in reversed(flat_backups(workspace)):
        path = backup / "config.json"
        try:
            if path.stat().st_size > MAX_CONFIG_BYTES:  # a config is a few kB: this one is not
                continue
            value = json.loads(path.read_text(encoding="utf-8")).get("output_model_destination")
        except (OSError, ValueError, AttributeError):
            continue
        return value if isinstance(value, str) else ""
    return ""


def write_config_copy(run: RunFolder, config: dict[str, Any]) -> Path:
    """The run's config as this start used it, with its run name: training it again with continue_last_backup
    resumes this run."""
    atomic_write_text(run.config_copy, json.dumps({**config, "run_name": run.name}, indent=4) + "\n")
    return run.config_copy
