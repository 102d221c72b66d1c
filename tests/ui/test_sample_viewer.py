"""The samples and curves tabs under Xvfb: a tiny run started from the window shows its sample (the video
playing, its prompt, step and contact sheet) and its loss curve while it trains, and "Sample now" shows its
result there; a finished run's samples are browsed by step, with an E2V sample's element images."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from modules.config.train_config import SampleConfig
from modules.dataLoader.video_io import read_video_frames
from modules.ui.controllers.sample_gallery import fit_size
from modules.ui.views.samples_tab import PLAYER_SIZE
from modules.ui.views.screenshots import pump_until as pump
from modules.ui.views.screenshots import settle
from modules.util.sample_record import SampleRecord, sample_video_path
from modules.util.video_write import write_png_strip, write_video
from tests.run_paths import run_dir
from tests.ui.test_gui_training import configure


@pytest.fixture(scope="module")
def tiny_videos(tmp_path_factory):
    from modules.synthetic.synthetic_data import write_video_dataset

    return write_video_dataset(tmp_path_factory.mktemp("viewer-videos"), count=2, frames=9, height=32, width=32)


def expected_frame(record: SampleRecord, index: int) -> np.ndarray:
    """Frame `index` of the video as the player draws it: decoded, then enlarged to the player's size."""
    frames, _ = read_video_frames(record.video)
    size = fit_size(frames.shape[2], frames.shape[1], *PLAYER_SIZE)
    return np.asarray(Image.fromarray(frames[index]).resize(size, Image.NEAREST))


def test_a_gui_run_shows_its_samples_and_loss_curve_while_it_trains(make_ui, tiny_model, tiny_videos, tmp_path):
    ui = make_ui()
    configure(ui, tiny_model("t2v"), tiny_videos, tmp_path, epochs=500)  # tensorboard off: curves need none
    ui.app.config.set("sample_after", "2")
    ui.app.config.set("sample_after_unit", "STEP")
    ui.app.samples.add(prompt="a red square drifting", frames=5, height=32, width=32, steps=2, cfg_scale=1.0, seed=3)
    ui.update()
    assert ui.app.problems() == []
    samples = ui.show_tab("samples")
    assert samples.shown_record is None and "No samples" in samples.empty_label.cget("text")
    ui.bottom_bar.start_button.invoke()
    pump(ui, lambda: samples.shown_record is not None and len(ui.app.curves.points("loss")) >= 2, 240,
         "the first sample in the viewer and two loss values")
    assert ui.app.training.running  # shown while the run goes on

    record = samples.shown_record
    assert record == SampleRecord.read(record.sidecar)  # what the trainer wrote beside the video
    # the newest sample: step 2's, or a later one when the run wrote another before the window polled (a loaded CI)
    assert record.step >= 2 and record.step % 2 == 0
    assert record.video == sample_video_path(run_dir(tmp_path / "workspace"), record.step, 0)  # the run's folder
    assert ui.app.training.state.run_dir == str(run_dir(tmp_path / "workspace"))
    assert ui.bottom_bar.status_text.startswith(f"run {ui.app.training.state.run_name}: ")
    assert record.prompt == "a red square drifting" and "a red square drifting" in samples.prompt_label.cget("text")
    assert samples.title_label.cget("text").startswith(f"step {record.step} · epoch ")
    assert samples.step_menu.get() == f"step {record.step}"
    pump(ui, lambda: samples._shown_index >= 1, 10, "playback to advance")  # the video plays
    # the frame of the record shown now: a newer sample may have replaced step 2's while the video played
    assert np.array_equal(np.asarray(samples.shown_frame), expected_frame(samples.shown_record, samples._shown_index))
    assert samples.shown_frame.size == (256, 256)  # 32 × 32 enlarged 8× for the player
    assert samples.sheet_image is not None and samples.sheet_image.width > samples.sheet_image.height

    curves = ui.show_tab("curves")
    ui.update()
    curves.redraw()
    loss = curves.charts[0].line("loss")
    logged = ui.app.curves.points("loss")
    assert len(loss.data) >= 2 and loss.data == tuple(logged[:len(loss.data)])
    assert all(np.isfinite(value) and value > 0 for _, value in loss.data)
    assert curves.charts[0].line("smoothed (0.6)") is not None
    assert curves.charts[1].line("learning rate").data[0][1] == pytest.approx(0.001)
    assert curves.canvas.find_withtag("raw") and curves.canvas.find_withtag("smooth")

    ui.show_tab("sampling")
    pressed_at = ui.app.training.state.step
    ui.tab("sampling").sample_button.invoke()  # "Sample now": the window shows its result in the viewer
    assert ui.app.training.sample_requested
    pump(ui, lambda: ui.tabview.get() == "samples", 120, "the result of Sample now in the viewer")
    assert samples.shown_record.step >= pressed_at and not ui.app.training.sample_requested
    ui.bottom_bar.stop_button.invoke()
    pump(ui, lambda: not ui.app.training.running, 120, "the stop")


def write_sample(workspace, step, index, prompt, color, elements=()) -> SampleRecord:
    video = sample_video_path(workspace, step, index)
    video.parent.mkdir(parents=True, exist_ok=True)
    frames = np.zeros((5, 32, 48, 3), np.uint8)
    frames[..., 0] = color
    frames[:, :, : 10 * (step % 4 + 1)] = 255  # a bar whose width tells the steps apart
    write_video(video, frames, 16)
    write_png_strip(video.with_suffix(".png"), frames)
    sample = SampleConfig(prompt=prompt, elements=[str(p) for p in elements], frames=5, height=32, width=48)
    record = SampleRecord.of(sample, video, fps=16, step=step, epoch=0, index=index)
    record.write()
    return record


def test_a_finished_runs_samples_are_browsed_by_step_with_their_element_images(make_ui, tmp_path):
    workspace = tmp_path / "workspace"
    person = tmp_path / "001_person.png"
    Image.new("RGB", (40, 60), (0, 200, 0)).save(person)
    records = {step: write_sample(workspace, step, 0, f"a fox at step {step}", 6 * step, elements=[person])
               for step in (10, 20, 30)}
    ui = make_ui()
    ui.app.config.set("workspace_dir", str(workspace))
    tab = ui.show_tab("samples")
    ui.update()
    assert tab.shown_record == records[30]  # the newest
    assert tab.elements_title.cget("text") == "E2V element images"
    texts = [w.cget("text") for cell in tab.elements_frame.winfo_children() for w in cell.winfo_children()]
    assert "element 0: 001_person.png" in texts
    assert tab._element_photos[0].width() == 80 and tab._element_photos[0].height() == 120  # 40 × 60, enlarged
    assert len(tab.history_frame.grid_slaves(column=1)) == 3  # the sample at each step, to compare
    tab.previous_button.invoke()
    ui.update()
    assert tab.shown_record == records[20] and tab.step_menu.get() == "step 20"
    assert np.array_equal(np.asarray(tab.shown_frame), expected_frame(records[20], tab._shown_index))
    tab.play_button.invoke()  # pause: the frame stays
    shown = tab._shown_index
    settle(ui, 0.3)
    assert tab._shown_index == shown and tab.play_button.cget("text") == "Play"
    tab._step_chosen("step 10")
    ui.update()
    assert tab.shown_record == records[10] and tab.previous_button.cget("state") == "disabled"
