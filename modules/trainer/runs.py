"""Which run folder a training start writes to (util/run_folder.py has the layout).

- `continue_last_backup` with `run_name`: that run (an older flat workspace is moved into it when no run folder
  exists yet); a name no run has yet starts that run fresh, said in one line.
- `continue_last_backup` without `run_name`: the run holding the workspace's newest backup, said in one line
  (the flat layout of an older WanTrainer counts as a run, and is moved into a run folder to be resumed).
- otherwise a new run: `run_name`, or the output's name and the date and time; a name already taken gets the
  first free `<name>-N` (logged): a new run never writes into another run's folder.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from modules.util.atomic import atomic_write_text
from modules.util.run_folder import (
    RunFolder,
    create_run,
    default_run_name,
    find_run,
    flat_backups,
    flat_layout_time,
    list_runs,
    migrate_flat_layout,
)

logger = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 16 * 1024 * 1024


def open_run(workspace: Path, run_name: str, output_destination: str, resume: bool,
             when: float | None = None) -> RunFolder:
    """The run folder this start trains in, created or migrated as needed (the caller holds the workspace lock)."""
    when = time.time() if when is None else when
    if resume:
        run = _run_to_resume(workspace, run_name, output_destination, when)
        if run is not None:
            return run.mark_started(when)
    name = run_name or default_run_name(output_destination, when)
    run, renamed = create_run(workspace, name, when)
    if renamed:
        logger.warning("run folder %s already exists (another run's): this run writes to %s instead (set "
                       "continue_last_backup to resume that run)", workspace / name, run.path)
    return run


def _run_to_resume(workspace: Path, run_name: str, output_destination: str, when: float) -> RunFolder | None:
    runs = list_runs(workspace)
    if run_name:
        run = find_run(workspace, run_name)
        if run is not None:
            logger.info("continue_last_backup: resuming run '%s' (%s)", run.name, run.path)
            return run
        if not runs and flat_backups(workspace):
            return migrate_flat_layout(workspace, run_name, when)
        logger.info("continue_last_backup: no run '%s' in %s yet: it starts fresh", run_name, workspace)
        return None
    with_backups = [r for r in runs if r.backup_folders()]
    last = max(with_backups, key=lambda r: (r.newest_backup_time(), r.created), default=None)
    flat = flat_layout_time(workspace)
    if flat and (last is None or flat > last.newest_backup_time()):
        name = default_run_name(_flat_output(workspace) or output_destination, flat)
        run = migrate_flat_layout(workspace, name, when)
        logger.info("continue_last_backup: resuming the last run '%s' (moved from the flat layout; set run_name to "
                    "choose another)", run.name)
        return run
    if last is None:
        logger.info("continue_last_backup: no backup in %s yet, starting fresh", workspace)
        return None
    logger.info("continue_last_backup: resuming the last run '%s' (%s: the workspace's newest backup; set run_name "
                "to choose another)", last.name, last.path)
    return last


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
