"""Where a test's run wrote its files: each run has its own folder in the workspace (modules/util/run_folder.py)."""
from __future__ import annotations

import time
from pathlib import Path

from modules.util.run_folder import RunFolder, create_run, last_started_run


def last_run(workspace: str | Path) -> RunFolder:
    """The workspace's last started run (a test fails when there is none)."""
    run = last_started_run(workspace)
    assert run is not None, f"no run folder in {workspace}"
    return run


def run_dir(workspace: str | Path) -> Path:
    """The last started run's folder; before any run started, a path that does not exist."""
    run = last_started_run(workspace)
    return run.path if run is not None else Path(workspace) / "(no run yet)"


def make_run(workspace: str | Path, name: str = "run") -> RunFolder:
    """A new run folder, as a trainer's start makes one."""
    return create_run(workspace, name, time.time())[0]
