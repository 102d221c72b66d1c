"""Everything the main window does, without the window: the config and its list editors, the E2V
dataset document, presets, Start / Stop / Export / Load, and what blocks Start.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from modules.config.loading import PRESET_DIR, load_train_config
from modules.ui.controllers.config_controller import ConfigController
from modules.ui.controllers.data_verdict import ConceptVerdicts, signature_of
from modules.ui.controllers.e2v_dataset import DatasetController
from modules.ui.controllers.layout import dataset_tab_of, tab_of
from modules.ui.controllers.list_controller import (
    ConceptListController,
    RecordListController,
    SampleListController,
)
from modules.ui.controllers.run_browser import RunBrowser
from modules.ui.controllers.tensorboard_launcher import TensorboardLauncher
from modules.ui.controllers.training_controller import TrainingController
from modules.ui.controllers.vram_controller import VramEstimate
from modules.util.errors import UserError
from modules.util.run_folder import last_started_run
from modules.util.sample_record import samples_folder

APP_NAME = "WanTrainer"
WINDOW_TITLE = f"{APP_NAME} — Wan 2.1 / 2.2 video trainer"


class AppController:
    def __init__(self, preset_dir: str | os.PathLike = PRESET_DIR,
                 trainer_factory: Callable[..., Any] | None = None):
        self.config = ConfigController(preset_dir)
        self.concepts = ConceptListController(self.config)
        self.samples = SampleListController(self.config)
        self.base_loras = RecordListController(self.config, "base_loras")
        self.dataset = DatasetController()
        self.training = TrainingController(trainer_factory)
        self.vram = VramEstimate(self.config)
        self.tensorboard = TensorboardLauncher()
        self.verdicts = ConceptVerdicts()  # the data verdict beside each concept (start-up's data check)
        self.runs = RunBrowser()  # the workspace's runs; the selected one is what the samples and curves show
        self.gallery = self.training.gallery  # the sample viewer's samples
        self.curves = self.training.scalars  # the curves' values
        self.config.subscribe(self._config_changed)
        # the dataset JSON being edited is written at Start: its file is not there yet, or holds the last save
        self.config.start_exempt = lambda: {"dataset_config"} if self.uses_dataset() and self.dataset.dirty else set()
        self.dataset.subscribe(lambda _what: self.config.recheck_start())  # saved, or edited (then written at Start)

    def _config_changed(self, what: Any) -> None:
        """An error said about the config as it was (a refused action, a failed run) is not true of the edited one."""
        state = self.training.state
        if what not in ("presets", "start_problems") and not self.training.running and state.status_is_error:
            self.training.say("ready")

    # --- the run's results: samples and curves ----------------------------------------------------
    def workspace(self) -> Path:
        return Path(str(self.config.value("workspace_dir") or "."))

    def run_folder(self) -> Path:
        """The run whose results the views show (util/run_folder.py): the run selected in the runs tab; else the
        run this window started, while it is in the workspace set; else the workspace's last started run; a
        workspace of an older WanTrainer without run folders shows its flat layout (the workspace itself). Never the
        run `run_name` names: that names the next run."""
        workspace = self.workspace()
        self.runs.reload(workspace, force=False)
        selected = self.runs.summary()
        if selected is not None:
            return selected.folder
        started = self.training.state.run_dir
        if started and Path(started).parent == workspace:
            return Path(started)
        run = last_started_run(workspace)
        return run.path if run is not None else workspace

    def select_run(self, name: str) -> None:
        """Show run `name`'s samples and curves (the runs tab's selection); "" shows the current or newest run."""
        self.runs.reload(self.workspace())
        self.runs.select(name)
        self.load_run_results()

    def samples_folder(self) -> Path:
        return samples_folder(self.run_folder())

    def load_run_results(self) -> None:
        """The samples in the shown run's folder and its curves from the event files of all its starts; the run
        this window trains adds the values it sends over them (controllers/curves.py)."""
        self.gallery.load_folder(self.samples_folder())
        self.curves.load_run(self.run_folder())

    def open_tensorboard(self) -> str:
        """TensorBoard on the shown run's tensorboard folder, in the browser; its URL."""
        return self.tensorboard.open(self.run_folder() / "tensorboard")

    # --- what blocks Start ------------------------------------------------------------------------
    def uses_dataset(self) -> bool:
        return bool(str(self.config.value("dataset_config") or "").strip())

    def problems(self) -> list[str]:
        """Every error that blocks Start and Export, one line each."""
        problems = self.config.problems()
        if self.uses_dataset():
            problems += [f"E2V dataset: {p}" for p in self.dataset.problems()]
        return problems

    def error_tabs(self) -> dict[str, int]:
        """tab name -> how many errors its fields hold (a config error names its key; the key's field is on one
        tab), for marking the tabs."""
        counts: dict[str, int] = {}
        keys = {*self.config.errors, *self.config.start_problems, *self.concepts.path_problems(),
                *self.data_problems()}
        tabs = [tab_of(key) for key in keys]
        if self.uses_dataset():
            tabs += [dataset_tab_of(problem.path) for problem in self.dataset.problems()]
        for tab in filter(None, tabs):
            counts[tab] = counts.get(tab, 0) + 1
        return counts

    def missing_for_start(self) -> str:
        """What the run's start-up check refuses (trainer/preflight, the CLI's: a base model folder, base LoRAs,
        sample inputs, ...) and training data, which a config may leave out (an exported template may). The GUI keeps
        Start disabled and says why; each problem is shown beside its field."""
        no_data = not self.uses_dataset() and not self.concepts.has_data()
        for key, message in (*self.config.start_problems.items(), *self.data_problems().items()):
            if key == "concepts" and no_data:  # the check's "no enabled concept", said where the GUI adds data
                break
            return message
        if not self.uses_dataset():
            for key, problem in self.concepts.path_problems().items():
                return f"config key '{key}': {problem}"
        if no_data:
            return ("no training data: add a concept in the concepts tab, or set an E2V dataset JSON in the "
                    "E2V elements tab")
        return ""

    def status_line(self) -> tuple[str, bool]:
        """(text, is_error) of the status line: while a run goes, what it does now (TrainState.shown_status);
        else the newest message, and what keeps Start from starting, as it is now."""
        state = self.training.state
        if state.running:
            return state.shown_status(), state.shows_error
        can_start, reason = self.can_start()
        if not can_start:
            told = state.status if state.status and state.status != "ready" else ""
            return "\n".join(filter(None, (told, f"cannot start: {reason}"))), True
        return state.status, state.status_is_error

    def check_data(self) -> None:
        """Judge the concepts' data as start-up will (on a worker thread; `verdicts.poll()` takes the result)."""
        config = None if self.problems() or self.uses_dataset() else self.config.build()
        self.verdicts.ask(config, self.config.data)

    def data_problems(self) -> dict[str, str]:
        """concepts[i] -> why start-up would refuse that concept's data (the copying trap, ...), once judged for the
        config as it is."""
        if self.uses_dataset() or self.verdicts.checked_for != signature_of(self.config.data):
            return {}
        return self.verdicts.errors()

    def can_start(self) -> tuple[bool, str]:
        if self.training.running:
            return False, "training is running"
        problems = self.problems()
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            return False, problems[0] + more
        missing = self.missing_for_start()
        return (False, missing) if missing else (True, "")

    # --- actions ---------------------------------------------------------------------------------------
    def start(self) -> None:
        ok, reason = self.can_start()
        if not ok:
            raise UserError(reason)
        if self.uses_dataset() and self.dataset.dirty:
            self.save_dataset()
        self.training.start(self.config.build())
        self.runs.select("")  # the views follow the run this starts

    def continue_selected(self) -> None:
        """Resume the run selected in the runs tab from its last backup, with the config of its last start."""
        if self.training.running:
            raise UserError("training is running: stop it first")
        self.runs.reload(self.workspace())
        config, said = self.runs.continue_config(load_train_config)
        self.training.start(config)
        self.training.say(said)

    def train_more(self) -> None:
        """A new run from the selected finished run's LoRA (lora_weight_path); Start trains it."""
        weights = self.runs.train_more_weights()
        self.config.set("lora_weight_path", str(weights))
        self.config.set("continue_last_backup", False)
        self.training.say(f"the next run starts from {weights} (lora_weight_path): set its steps, then Start")
    def stop(self) -> None:
        self.training.stop()

    def sample_now(self) -> bool:
        """"Sample now" with the sampling tab's samples as they are now (edited since the start too); a sample
        with an error is one status line and nothing is asked."""
        from modules.config.sample_config import SampleConfig
        from modules.util.base_config import ConfigError

        try:
            samples = []
            for index, row in enumerate(self.samples.rows):
                sample = SampleConfig.from_dict(row, f"samples[{index}]")
                sample.validate(f"samples[{index}]")
                samples.append(sample)
        except ConfigError as e:
            self.training.say(f"cannot sample now: {e}", error=True)
            return False
        return self.training.sample_now(samples)

    def export(self, path: str | os.PathLike) -> Path:
        """Write the config for `scripts/train.py --config-path` (and the E2V dataset JSON it names)."""
        problems = self.problems()
        if problems:
            raise UserError(problems[0])
        if self.uses_dataset() and self.dataset.dirty:
            self.save_dataset()
        return self.config.export(path)

    def load(self, path: str | os.PathLike) -> None:
        """Load a config file as the CLI reads it, and the E2V dataset JSON it names."""
        self.config.load_file(path)
        self.load_dataset_from_config()
        self.training.say(f"loaded {path}")  # nothing said of the config before stays

    def apply_preset(self, name: str) -> None:
        self.config.apply_preset(name)
        self.training.say(f"preset '{name}' applied")

    # --- the E2V dataset JSON ------------------------------------------------------------------------
    def load_dataset_from_config(self) -> None:
        path = str(self.config.value("dataset_config") or "").strip()
        if path and Path(path).is_file():
            self.dataset.load(path)

    def set_dataset_path(self, path: str) -> None:
        """Point dataset_config at `path`; an existing file is loaded, a new one is written on save."""
        self.config.set("dataset_config", path)
        path = path.strip()
        if path and Path(path).is_file():
            self.dataset.load(path)
        else:
            self.dataset.path = Path(path) if path else None
            self.dataset.notify("path")

    def save_dataset(self) -> Path:
        path = str(self.config.value("dataset_config") or "").strip()
        if not path:
            raise UserError("set the E2V dataset file (dataset_config) before saving it")
        return self.dataset.save(path)

    # --- backups -------------------------------------------------------------------------------------
    def latest_backup(self) -> str:
        root = self.run_folder() / "backup"
        backups = sorted(p for p in root.glob("step-*") if p.is_dir()) if root.is_dir() else []
        return str(backups[-1]) if backups else ""

