"""The data verdict beside each concept, before Start: the same per-family check start-up, dataset_stats.py and Count
clips use (dataLoader/verdict.py). A concept start-up refuses (Animate-2 clips without their driving video and
reference) blocks Start and marks the concepts tab; the GUI used to allow Start on it."""
from __future__ import annotations

import time

from modules.ui.controllers.app_controller import AppController
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder
from tests.ui.test_gui_applies_controllers import animate2_folder


def judged(app, timeout=120.0):
    app.check_data()
    end = time.monotonic() + timeout
    while not app.verdicts.poll():
        assert time.monotonic() < end, "the data verdict did not come"
        time.sleep(0.05)
    return [app.verdicts.line(i) for i in range(len(app.concepts))]


def configured(tmp_path, base, data):
    app = AppController(tmp_path / "presets")
    for key, value in (("base_model_name", str(base)), ("resolution", "32x32"), ("frames", "9"),
                       ("workspace_dir", str(tmp_path / "ws")), ("cache_dir", str(tmp_path / "cache"))):
        app.config.set(key, value)
    app.concepts.add(path=str(data))
    return app


def test_each_concept_shows_its_skips_and_reasons(tmp_path, video_dataset):
    import shutil

    data = tmp_path / "clips"
    shutil.copytree(video_dataset, data)
    (data / "broken.mp4").write_bytes(b"not a video")
    app = configured(tmp_path, write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B), data)
    [(line, error)] = judged(app)
    files = len([p for p in data.iterdir() if p.suffix == ".mp4"])
    assert line.startswith(f"{files} files: {files - 1} usable, 1 skipped (") and not error
    assert app.can_start() == (True, "")


def test_a_concept_start_up_refuses_blocks_start_and_marks_its_tab(tmp_path, video_dataset):
    app = configured(tmp_path, animate2_folder(tmp_path / "animate2"), video_dataset)  # no _driving / _reference
    [(line, error)] = judged(app)
    assert error and "driving" in line, line
    ok, reason = app.can_start()
    assert not ok and reason == line
    assert app.error_tabs().get("concepts") == 1


def test_the_verdict_line_shows_on_the_concepts_card(make_ui, tmp_path, video_dataset):
    from modules.ui.views.screenshots import pump_until

    ui = make_ui(configured(tmp_path, write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B), video_dataset))
    tab = ui.show_tab("concepts")
    pump_until(ui, lambda: "usable" in tab.list_view.notes[0].cget("text"), 120, "the data verdict")
    assert tab.list_view.notes[0].cget("text").endswith("usable")
    ui.app.vram.wait(120)
