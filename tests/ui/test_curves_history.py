"""The curves tab under Xvfb keeps a run's whole history across resumes while it trains, Reload reads it again,
and the tab names its run. (A resumed run used to show only the steps after the resume until it ended and Reload
was pressed; the tab never said whose curves it showed.)"""
from __future__ import annotations

import time

import pytest

from modules.ui.controllers.curves import LOSS, ScalarHistory
from modules.ui.views.screenshots import pump_until as pump
from tests.ui.test_gui_training import configure


@pytest.fixture(scope="module")
def tiny_videos(tmp_path_factory):
    from modules.synthetic.synthetic_data import write_video_dataset

    return write_video_dataset(tmp_path_factory.mktemp("curve-videos"), count=2, frames=9, height=32, width=32)


def steps_of(points) -> list[int]:
    return [int(step) for step, _ in points]


@pytest.mark.slow
def test_a_resumed_run_shows_its_whole_history_while_it_trains(make_ui, tiny_model, tiny_videos, tmp_path):
    ui = make_ui()
    configure(ui, tiny_model("t2v"), tiny_videos, tmp_path, epochs=500)
    for key, value in (("tensorboard", True), ("backup_after", "1"), ("backup_after_unit", "STEP"),
                       ("run_name", "mine")):
        ui.app.config.set(key, value)
    bar = ui.bottom_bar
    bar.start_button.invoke()
    pump(ui, lambda: ui.app.training.state.step >= 3, 240, "three training steps")
    bar.stop_button.invoke()
    pump(ui, lambda: not ui.app.training.running, 120, "the stop")
    stopped_at = int(ui.app.training.state.backup_path.rsplit("-", 1)[1])
    first_start = ui.app.curves.points(LOSS)
    assert steps_of(first_start) == list(range(1, stopped_at + 1))

    ui.app.config.set("continue_last_backup", True)
    bar.start_button.invoke()
    pump(ui, lambda: ui.app.training.state.step >= stopped_at + 2, 240, "two steps after the resume")
    assert ui.app.training.running
    curves = ui.show_tab("curves")
    ui.update()
    curves.redraw()
    shown = curves.charts[0].line("loss").data
    now = ui.app.curves.points(LOSS)
    assert steps_of(now) == list(range(1, len(now) + 1)) and len(now) >= stopped_at + 2  # every step, once
    assert now[:stopped_at] == first_start  # the first start's values, read from its event file
    assert shown == tuple(now[:len(shown)])
    assert curves.run_label.cget("text") == "run mine"

    curves_before = len(ui.app.curves.points(LOSS))
    curves.reload_button.invoke()  # reads the event files again: nothing of the live history is lost
    ui.update()
    reloaded = ui.app.curves.points(LOSS)
    assert steps_of(reloaded) == list(range(1, len(reloaded) + 1)) and len(reloaded) >= curves_before
    bar.stop_button.invoke()
    pump(ui, lambda: not ui.app.training.running, 120, "the second stop")


def test_a_resumed_starts_values_replace_the_earlier_starts_from_its_first_step(tmp_path):
    """Start 1 logged steps 1-6 (loss and a validation at 5), was killed after its backup at step 4; start 2
    resumed at 5: from step 5 on, only start 2's values, in every series (start 1's validation at 5 is gone)."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "run"
    with SummaryWriter(str(folder / "tensorboard")) as first:
        for step in range(1, 7):
            first.add_scalar("loss", 1.0, step)
        first.add_scalar("loss/validation", 1.5, 5)
    time.sleep(1.1)  # the next start's file is named by a later second
    with SummaryWriter(str(folder / "tensorboard")) as second:
        second.add_scalar("loss", 2.0, 5)
    history = ScalarHistory()
    assert history.load_run(folder)
    assert history.points(LOSS) == [(s, 1.0) for s in range(1, 5)] + [(5, 2.0)]
    assert history.points("loss/validation") == []
    history.start_run(folder)  # this window resumes it: live values from step 6 on
    history.add(LOSS, 3.0, 6)
    assert history.points(LOSS)[-2:] == [(5, 2.0), (6, 3.0)]
    history.load_run(tmp_path / "other")  # viewing another run: its (no) curves, not the live ones
    assert history.points(LOSS) == []
    history.load_run(folder)
    assert history.points(LOSS)[-1] == (6, 3.0)
