"""The run browser's logic (no Tk): every run of the workspace (trainer/run_catalog.py), the run the window shows,
and what *Continue* does with it.

The selected run is what the samples and curves tabs show; selecting a run never names the next one (the config's
`run_name` does, for *Start* only). *Continue* resumes the selected run from its last backup with the config of its
last start (its folder's `config.json`), whatever the editor holds; a finished run is not resumed (one line says how
to train it further), a running one is not started twice.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

from modules.trainer.run_catalog import RunState, RunSummary, list_runs
from modules.util.errors import UserError

RELOAD_SECONDS = 2.0  # how stale the list may be while nothing asks for it anew (a running run's step)


@dataclasses.dataclass(frozen=True)
class RunRow:
    """One line of the browser: the run's name, its state in words, its last backup and its outputs."""

    name: str
    state: str
    backup: str
    outputs: str
    started: str


def row_of(run: RunSummary) -> RunRow:
    backup = run.last_backup.name if run.last_backup is not None else "—"
    outputs = ", ".join(p.name for p in run.outputs) or "—"
    return RunRow(run.name, run.describe(), backup, outputs, run.last_started or run.created)


class RunBrowser:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.workspace: Path | None = None
        self.runs: list[RunSummary] = []
        self.selected = ""  # the name of the run the window shows ("": the one this window started, else the newest)
        self._loaded_at = -RELOAD_SECONDS

    def reload(self, workspace: str | Path, force: bool = True) -> bool:
        """Read the workspace's runs again (at most every RELOAD_SECONDS unless `force`); True when read. Another
        workspace drops the selection."""
        workspace = Path(workspace)
        if workspace != self.workspace:
            self.workspace, self.selected, force = workspace, "", True
        if not force and self.clock() - self._loaded_at < RELOAD_SECONDS:
            return False
        self.runs = list_runs(workspace)
        self._loaded_at = self.clock()
        return True

    def rows(self) -> list[RunRow]:
        return [row_of(run) for run in self.runs]

    def select(self, name: str) -> None:
        if name and name not in {run.name for run in self.runs}:
            raise UserError(f"there is no run '{name}' in {self.workspace}")
        self.selected = name

    def summary(self, name: str = "") -> RunSummary | None:
        name = name or self.selected
        return next((run for run in self.runs if run.name == name), None)

    def details(self) -> list[str]:
        """The selected run, line by line, for the panel beside the list."""
        run = self.summary()
        if run is None:
            return ["Select a run to see its state, samples and curves."]
        lines = [f"{run.name}: {run.describe()}", f"folder: {run.folder}"]
        if run.created:
            lines.append(f"created {run.created}" + (f", last started {run.last_started}" if run.last_started else ""))
        lines.append(f"last backup: {run.last_backup}" if run.last_backup else "no backup (nothing to resume)")
        lines += [f"output: {path}" for path in run.outputs]
        if run.samples_dir is not None:
            lines.append(f"samples: {sum(1 for _ in run.samples_dir.glob('*.json'))} in {run.samples_dir}")
        return lines

    def continue_config(self, load: Callable[[Path], Any]) -> tuple[Any, str]:
        """The config that resumes the selected run, and the line saying so. `load(path)` reads a config file as the
        command line does. Refused in one line: no run selected, a running or finished run, no backup."""
        run = self.summary()
        if run is None:
            raise UserError("select a run in the runs tab to continue it")
        if run.state == RunState.RUNNING:
            raise UserError(f"run '{run.name}' is running: it cannot be continued twice")
        if run.state == RunState.FINISHED:
            raise UserError(f"run '{run.name}' {run.describe()}: there is nothing to resume; to train it further, "
                            "start a new run from its weights (Train more) or with more epochs")
        if not run.resumable:
            raise UserError(f"run '{run.name}' {run.describe()}: it has no backup to resume")
        if run.config_path is None:
            raise UserError(f"run '{run.name}' has no config.json of its last start: load its config and continue "
                            "it with continue_last_backup and run_name set")
        config = load(run.config_path)
        resumed = dataclasses.replace(config, continue_last_backup=True, run_name=run.name)
        return resumed, f"continuing run '{run.name}' from {run.last_backup.name}"

    def train_more_weights(self) -> Path:
        """The LoRA file of the selected finished run, to start a new run from (lora_weight_path)."""
        run = self.summary()
        if run is None or run.state != RunState.FINISHED:
            raise UserError("select a finished run to train more from its weights")
        loras = [path for path in run.outputs if path.suffix == ".safetensors" and path.is_file()]
        if not loras:
            raise UserError(f"run '{run.name}' wrote no LoRA file that is still there (outputs: "
                            f"{', '.join(str(p) for p in run.outputs) or 'none'}): train more with more epochs")
        return loras[0]
