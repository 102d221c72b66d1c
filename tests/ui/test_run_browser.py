"""The run browser (modules/ui/controllers/run_browser.py and the runs tab): every run of the workspace with its
state; Continue acts on the selected run and never "resumes" a finished one; viewing a run never names the next.

The issue's case, trained for real on the tiny model: run A stopped, run B finished, Continue used to resume B (the
workspace's newest backup), train nothing, sample again and write a duplicate lora-2.safetensors."""
from __future__ import annotations

import pytest

from modules.trainer.run_catalog import RunState
from modules.ui.controllers.app_controller import AppController
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.ui.test_training_controller import run_until

STEPS = dict(epochs=2, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2)  # 3 steps an epoch


def train_in(app, stop_at=None):
    """Start the editor's config in `app` and let it run (to `stop_at`, then Stop)."""
    app.start()
    if stop_at is not None:
        run_until(app.training, lambda: app.training.state.step >= stop_at, 240)
        app.stop()
    run_until(app.training, lambda: not app.training.running, 240)
    assert not app.training.state.error, app.training.state.error


@pytest.fixture
def two_runs(tiny_model, video_dataset, tmp_path):
    """An app whose workspace holds run A (stopped at step 2 of 6) and run B (finished), B the newest."""
    app = AppController(tmp_path / "presets")
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **STEPS)
    app.config.load_dict({**config, "run_name": "A"})
    train_in(app, stop_at=2)
    app.config.set("run_name", "B")
    train_in(app)
    return app, tmp_path


@pytest.mark.slow
def test_continue_resumes_the_selected_run_and_a_finished_run_is_not_resumed(two_runs):
    app, work = two_runs
    app.runs.reload(app.workspace())
    rows = {row.name: row for row in app.runs.rows()}
    assert rows["A"].state.startswith("stopped at step 2 of 6") and rows["B"].state == "finished at step 6 of 6"
    assert rows["B"].outputs == "lora.safetensors" and rows["A"].backup == "step-00000002"

    app.select_run("B")  # viewing B: its samples and curves; it names no next run
    assert app.run_folder() == work / "workspace" / "B" and app.config.value("run_name") == "B"
    with pytest.raises(UserError, match="^run 'B' finished at step 6 of 6: there is nothing to resume"):
        app.continue_selected()
    assert not app.training.running

    app.config.set("run_name", "")
    app.select_run("A")
    app.continue_selected()
    assert app.training.state.status == "continuing run 'A' from step-00000002"
    run_until(app.training, lambda: not app.training.running, 240)
    assert not app.training.state.error, app.training.state.error
    app.runs.reload(app.workspace())
    a, b = app.runs.summary("A"), app.runs.summary("B")
    assert a.state == RunState.FINISHED and a.step == 6  # A trained its remaining 4 steps
    assert b.state == RunState.FINISHED and b.step == 6
    assert sorted(p.name for p in (work / "output").iterdir()) == ["lora-2.safetensors", "lora.safetensors"]
    assert app.training.state.outputs == [str(work / "output" / "lora-2.safetensors")]  # A's, not B's again
    assert app.config.value("run_name") == "" and not app.config.value("continue_last_backup")  # editor untouched


def test_the_runs_are_listed_with_their_state_and_selecting_one_names_no_next_run(tmp_path):
    from modules.trainer.run_record import FINISHED, STOPPED, new_record, write_record
    from tests.run_paths import make_run

    app = AppController(tmp_path / "presets")
    app.config.set("workspace_dir", str(tmp_path / "ws"))
    stopped, finished = make_run(tmp_path / "ws", "A"), make_run(tmp_path / "ws", "B")
    write_record(stopped.path, new_record(STOPPED, step=40, total_steps=600, reason="stopped by the user"))
    (tmp_path / "out.safetensors").write_bytes(b"x")
    write_record(finished.path, new_record(FINISHED, step=600, total_steps=600,
                                           outputs=[str(tmp_path / "out.safetensors")]))
    app.runs.reload(app.workspace())
    states = {row.name: row.state for row in app.runs.rows()}
    assert states["B"] == "finished at step 600 of 600"
    assert states["A"].startswith("stopped at step")
    app.config.set("run_name", "next one")
    app.select_run("A")
    assert app.run_folder() == stopped.path and app.config.value("run_name") == "next one"
    assert any(line.startswith("no backup") for line in app.runs.details())
    with pytest.raises(UserError, match="no backup to resume"):
        app.continue_selected()
    app.select_run("B")
    app.train_more()  # a finished run trains further as a new run from its weights
    assert app.config.value("lora_weight_path") == str(tmp_path / "out.safetensors")
    with pytest.raises(UserError, match="no run 'C'"):
        app.select_run("C")


def test_the_runs_tab_lists_the_runs_and_acts_on_the_clicked_one(make_ui, tmp_path):
    from modules.trainer.run_record import FINISHED, STOPPED, new_record, write_record
    from tests.run_paths import make_run

    ui = make_ui()
    ui.app.config.set("workspace_dir", str(tmp_path / "ws"))
    runs = ui.show_tab("runs")
    ui.update()
    assert runs.row_texts() == [] and "no run in" in runs.empty.cget("text")
    stopped, finished = make_run(tmp_path / "ws", "A"), make_run(tmp_path / "ws", "B")
    (stopped.path / "backup" / "step-00000040").mkdir(parents=True)
    (stopped.path / "backup" / "step-00000040" / "progress.json").write_text('{"progress": {"global_step": 40}}')
    write_record(stopped.path, new_record(STOPPED, step=40, total_steps=600, reason="stopped by the user"))
    write_record(finished.path, new_record(FINISHED, step=600, total_steps=600))
    runs._reload()
    ui.update()  # the new rows mapped: a click reaches them
    texts = {row[0]: row for row in runs.row_texts()}
    assert texts["A"][1:3] == ("stopped at step 40 of 600 (stopped by the user)", "step-00000040")
    assert texts["B"][1] == "finished at step 600 of 600"
    row = [name for name, *_ in runs.row_texts()].index("B")
    runs.cells[row][1]._label.event_generate("<Button-1>", x=2, y=2)  # a click on its state (inside CTkLabel)
    ui.update()
    assert ui.app.runs.selected == "B" and runs.continue_button.cget("state") == "disabled"
    assert runs.details.cget("text").startswith("B: finished at step 600 of 600")
    runs._select("A")
    ui.update()
    assert runs.continue_button.cget("state") == "normal" and ui.app.run_folder() == stopped.path
    assert ui.app.config.value("run_name") == ""  # viewing a run never names the next one
