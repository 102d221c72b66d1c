"""The status line under Xvfb tells the run as it is now: its phase and progress (caching, training step N/M,
sampling k/n, back to training), an error only while it is true, nothing left from another run or config."""
from __future__ import annotations

import json

from modules.ui.controllers.training_controller import STARTING, Event, TrainState
from modules.ui.views.screenshots import pump_until
from modules.util.commands import TrainUpdate
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder


def startable_config(tmp_path) -> str:
    """A config file the GUI can start: a base folder of configs and a concept folder."""
    base = write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)
    (tmp_path / "clips").mkdir(exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"base_model_name": str(base), "concepts": [{"path": str(tmp_path / "clips")}]}))
    return str(path)


def send(ui, *events) -> str:
    for event in events:
        ui.app.training.queue.put(event)
    pump_until(ui, lambda: ui.app.training.queue.empty(), 10, "the events")
    ui.update()
    return ui.bottom_bar.status_text


def test_the_status_line_shows_the_runs_phase_now_and_goes_back_to_training(make_ui):
    ui = make_ui()
    training = ui.app.training
    training.state = TrainState(phase=STARTING, status="")  # as start() leaves it; the events: the worker's
    assert send(ui, Event("run", ("demo", "ws/demo")), Event("progress", ("caching (vae)", 13, 40))) == \
        "run demo: caching (vae) 13/40"
    step = Event("update", TrainUpdate(40, 600, 0, 1, 0.1, 50.0, "training"))
    assert send(ui, step, Event("phase", ("sampling", 1, 2))) == "run demo: sampling 1/2 at step 40"
    later = Event("update", TrainUpdate(60, 600, 0, 1, 0.1, 50.0, "training"))
    assert send(ui, Event("phase", ("sampling", 2, 2)), later) == "run demo: training step 60/600"
    assert ui.bottom_bar.step_label.cget("text") == "step 60/600 · epoch 1/1"
    for event in (Event("finished", ["out/lora.safetensors"]), Event("done")):
        training.queue.put(event)
    pump_until(ui, lambda: not training.running, 10, "the end")


def test_nothing_of_an_earlier_run_or_config_stays_after_load_config(make_ui, tmp_path):
    ui = make_ui()
    ui.app.training.say("done: out/lora.safetensors; 3 clips skipped", error=True)  # the last run's end
    ui.load_config(startable_config(tmp_path))
    ui.update()
    assert ui.bottom_bar.start_button.cget("state") == "normal"  # Start is green
    assert ui.bottom_bar.status_text == f"loaded {tmp_path / 'config.json'}"
    ui.load_config(str(tmp_path / "missing.json"))  # refused: said in red while it is the newest thing said
    assert ui.bottom_bar.status_text.startswith("cannot do that:")
    ui.app.config.set("epochs", "3")  # a new edit: the refusal is no longer the state
    ui.update()
    assert ui.bottom_bar.status_text == "ready" and ui.app.status_line() == ("ready", False)


def test_the_export_message_gives_the_command_the_readme_gives(make_ui, tmp_path):
    from tests.conftest import REPO_ROOT

    ui = make_ui()
    ui.load_config(startable_config(tmp_path))
    ui.export_config(str(tmp_path / "exported.json"))
    command = f".venv/bin/python scripts/train.py --config-path {tmp_path / 'exported.json'}"
    assert ui.bottom_bar.status_text.endswith(f"run it with {command}")
    assert ".venv/bin/python scripts/train.py --config-path" in (REPO_ROOT / "README.md").read_text()
