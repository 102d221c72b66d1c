"""The pure logic behind the sample viewer and the curves (no display): sample records and their sidecars,
browsing samples by step and index, playback timing, smoothing, ticks and pixel layout."""
from __future__ import annotations

import json
import math

import pytest

from modules.config.train_config import SampleConfig
from modules.ui.controllers.curves import (
    LOSS,
    LR,
    VALIDATION,
    Box,
    ScalarHistory,
    decimate,
    format_value,
    layout_chart,
    loss_chart,
    nice_ticks,
    read_tensorboard_scalars,
    smooth,
    to_pixels,
)
from modules.ui.controllers.sample_gallery import Playback, SampleGallery, fit_size, record_title
from modules.util.sample_record import SampleRecord, read_records, sample_video_path


def record(folder, step, index=0, prompt="a red fox", elements=(), epoch=0) -> SampleRecord:
    """A written sample: an (empty) video and sheet, and its sidecar."""
    video = sample_video_path(folder, step, index)
    video.parent.mkdir(parents=True, exist_ok=True)
    video.write_bytes(b"mp4")
    video.with_suffix(".png").write_bytes(b"png")
    sample = SampleConfig(prompt=prompt, elements=list(elements), frames=9, height=32, width=48, steps=3, seed=7)
    made = SampleRecord.of(sample, video, fps=16, step=step, epoch=epoch, index=index)
    made.write()
    return made


# --- sample records ------------------------------------------------------------------------------------------
def test_a_sidecar_round_trips_and_names_its_files_relative_to_its_folder(tmp_path):
    made = record(tmp_path, 10, 1, elements=("/data/001_person.png", "/data/001_object.png"))
    data = json.loads(made.sidecar.read_text())
    assert made.sidecar.name == "step-00000010-1.json"
    assert (data["video"], data["contact_sheet"]) == ("step-00000010-1.mp4", "step-00000010-1.png")
    assert (data["prompt"], data["step"], data["index"], data["frames"], data["width"]) == ("a red fox", 10, 1, 9, 48)
    assert data["elements"] == ["/data/001_person.png", "/data/001_object.png"]
    assert SampleRecord.read(made.sidecar) == made
    moved = tmp_path / "moved"
    (tmp_path / "samples").rename(moved)
    assert SampleRecord.read(moved / "step-00000010-1.json").video == moved / "step-00000010-1.mp4"


def test_read_records_orders_by_step_and_skips_foreign_or_orphaned_sidecars(tmp_path):
    later, earlier, second = record(tmp_path, 20), record(tmp_path, 5), record(tmp_path, 5, 1)
    folder = tmp_path / "samples"
    (folder / "notes.json").write_text('{"something": "else"}')
    (folder / "broken.json").write_text("{")
    orphan = record(tmp_path, 30)
    orphan.video.unlink()
    assert read_records(folder) == [earlier, second, later]
    assert read_records(tmp_path / "missing") == []


def test_record_title_names_step_epoch_index_and_settings(tmp_path):
    assert record_title(record(tmp_path, 12, 2, epoch=1)) == \
        "step 12 · epoch 2 · sample 2 · 48x32, 9 frames · 3 steps · CFG 5 · seed 7"


# --- browsing ------------------------------------------------------------------------------------------------
def test_the_gallery_shows_the_newest_step_of_a_folder_and_browses_steps(tmp_path):
    for step in (5, 10, 15):
        record(tmp_path, step, 0)
        record(tmp_path, step, 1, prompt="a blue bird")
    gallery = SampleGallery()
    gallery.load_folder(tmp_path / "samples")
    assert gallery.steps() == [5, 10, 15] and (gallery.step, gallery.index) == (15, 0) and gallery.follow
    gallery.select_index(1)
    assert gallery.current().prompt == "a blue bird"
    assert gallery.previous_step() and (gallery.step, gallery.index) == (10, 1)  # the same prompt, a step back
    assert not gallery.follow
    assert gallery.previous_step() and gallery.step == 5
    assert not gallery.previous_step() and gallery.step == 5  # the oldest
    assert [r.step for r in gallery.history()] == [5, 10, 15]
    assert gallery.next_step() and gallery.next_step() and not gallery.next_step()
    assert gallery.follow  # back at the newest: follows again
    with pytest.raises(ValueError):
        gallery.select_step(7)


def test_a_new_sample_is_shown_while_following_and_not_while_browsing_back(tmp_path):
    gallery = SampleGallery()
    gallery.load_folder(tmp_path / "samples")  # empty yet
    assert gallery.current() is None
    first = record(tmp_path, 2)
    gallery.add(first)
    assert gallery.current() == first
    second = record(tmp_path, 4)
    gallery.add(second)
    assert gallery.current() == second  # following the newest
    gallery.select_step(2)
    version = gallery.version
    gallery.add(record(tmp_path, 6))
    assert gallery.current() == first and gallery.version > version  # browsing back: stays, menus update
    assert gallery.steps() == [2, 4, 6]


def test_following_keeps_the_chosen_sample_index(tmp_path):
    gallery = SampleGallery()
    for index in (0, 1):
        gallery.add(record(tmp_path, 3, index))
    gallery.select_index(1)
    gallery.add(record(tmp_path, 6, 0))
    assert (gallery.step, gallery.index) == (6, 0)  # index 1 of step 6 is not written yet
    gallery.add(record(tmp_path, 6, 1))
    assert (gallery.step, gallery.index) == (6, 1)


def test_reloading_the_same_folder_keeps_the_choice_and_another_folder_starts_over(tmp_path):
    for step in (1, 2):
        record(tmp_path, step)
    gallery = SampleGallery()
    gallery.load_folder(tmp_path / "samples")
    gallery.select_step(1)
    gallery.load_folder(tmp_path / "samples")
    assert gallery.step == 1
    gallery.load_folder(tmp_path / "other")
    assert len(gallery) == 0 and gallery.current() is None


# --- playback ------------------------------------------------------------------------------------------------
def test_playback_loops_at_the_video_frame_rate_and_pauses():
    playback = Playback(frame_count=4, fps=10)
    playback.start(now=100.0)
    assert [playback.frame_at(100.0 + t) for t in (0.0, 0.09, 0.1, 0.35, 0.4, 0.55)] == [0, 0, 1, 3, 0, 1]
    playback.pause(now=100.25)
    assert playback.paused and playback.frame_at(200.0) == 2
    playback.start(now=300.0)  # resumes where it paused
    assert playback.frame_at(300.0) == 2 and playback.frame_at(300.1) == 3
    playback.seek(5, now=400.0)
    assert playback.frame_at(400.0) == 1
    assert playback.delay_ms() == 100 and Playback(3, 0).delay_ms() == 62  # unknown fps: 16


def test_fit_size_keeps_the_aspect_ratio_and_enlarges_small_samples_within_limits():
    assert fit_size(832, 480, 640, 400) == (640, 369)
    assert fit_size(480, 832, 640, 400) == (231, 400)
    assert fit_size(32, 32, 640, 400) == (256, 256)  # at most 8× larger
    assert fit_size(32, 32, 640, 400, max_upscale=20) == (400, 400)


# --- curves --------------------------------------------------------------------------------------------------
def test_smoothing_is_tensorboards_debiased_moving_average():
    assert smooth([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
    got = smooth([1.0, 2.0, 3.0], 0.5)
    # by hand: EMA 0.5, 1.25, 2.125; debias by 1 - 0.5^n = 0.5, 0.75, 0.875
    assert got == pytest.approx([1.0, 1.25 / 0.75, 2.125 / 0.875])
    assert smooth([4.0] * 5, 0.9) == pytest.approx([4.0] * 5)  # no pull towards zero at the start
    with pytest.raises(ValueError):
        smooth([1.0], 1.0)


def test_the_history_keeps_finite_values_and_a_resumed_run_replaces_later_steps():
    history = ScalarHistory()
    for step, value in ((1, 0.5), (2, math.nan), (3, 0.3), (4, 0.2)):
        history.add(LOSS, value, step)
    assert history.points(LOSS) == [(1, 0.5), (3, 0.3), (4, 0.2)]
    history.add(LOSS, 0.25, 3)  # resumed from a backup at step 2
    assert history.points(LOSS) == [(1, 0.5), (3, 0.25)]
    version = history.version
    history.clear()
    assert history.points(LOSS) == [] and history.version > version


def test_ticks_are_round_numbers_inside_the_range():
    assert nice_ticks(0, 10, 5) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0.13, 0.52, 4) == pytest.approx([0.2, 0.3, 0.4, 0.5])
    assert nice_ticks(1, 7, 10, integer=True) == [1, 2, 3, 4, 5, 6, 7]
    assert nice_ticks(1, 3, 10, integer=True) == [1, 2, 3]  # never half steps
    assert format_value(0.25, 0.05) == "0.25" and format_value(12, 2) == "12" and format_value(0, 1) == "0"
    assert format_value(1e-4, 2e-5) == "1.0e-4"


def test_points_map_to_the_plot_box_with_y_growing_downwards():
    box = Box(left=10, top=20, right=110, bottom=220)
    pixels = to_pixels([(0, 0.0), (5, 1.0), (10, 0.5)], (0, 10), (0.0, 1.0), box)
    assert pixels == [(10, 220), (60, 20), (110, 120)]


def test_decimation_keeps_every_columns_extremes():
    pixels = [(x / 10, float(x % 7)) for x in range(1000)]  # 100 pixel columns, 10 points each
    kept = decimate(pixels, 200)
    assert len(kept) <= 400 and kept[0] == pixels[0] and kept[-1] == pixels[-1]
    for column in range(100):
        ys = [y for x, y in pixels if int(x) == column]
        kept_ys = [y for x, y in kept if int(x) == column]
        assert min(kept_ys) == min(ys) and max(kept_ys) == max(ys)
    assert decimate(pixels[:5], 200) == pixels[:5]


def test_the_loss_chart_holds_raw_smoothed_and_validation_lines_on_shared_axes():
    history = ScalarHistory()
    for step in range(1, 11):
        history.add(LOSS, 1.0 / step, step)
        history.add(LR, 1e-4, step)
    history.add(VALIDATION, 0.4, 5)
    history.add(VALIDATION, 0.2, 10)
    chart = loss_chart(history, 0.6, 600, 300)
    assert [line.label for line in chart.lines] == ["loss", "smoothed (0.6)", "validation loss"]
    raw = chart.line("loss")
    assert raw.data == tuple((float(s), 1.0 / s) for s in range(1, 11))
    assert chart.line("smoothed (0.6)").data[-1][1] == pytest.approx(smooth([1.0 / s for s in range(1, 11)], 0.6)[-1])
    box = chart.box
    xs = [x for line in chart.lines for x, _ in line.pixels]
    ys = [y for line in chart.lines for _, y in line.pixels]
    assert min(xs) == box.left and max(xs) == box.right  # steps 1..10 span the box
    assert box.top < min(ys) < max(ys) < box.bottom  # values inside, with a margin
    assert raw.pixels[0][1] < raw.pixels[-1][1]  # a falling loss goes down the screen... upward in pixels
    assert [t.label for t in chart.x_ticks][:2] == ["2", "4"] and all(box.left <= t.pixel <= box.right
                                                                      for t in chart.x_ticks)
    assert all(box.top <= t.pixel <= box.bottom for t in chart.y_ticks)


def test_a_chart_without_values_says_what_will_appear():
    chart = layout_chart("loss", [("loss", "raw", [])], 400, 200, empty_text="nothing yet")
    assert chart.lines == () and chart.empty_text == "nothing yet"
    flat = layout_chart("lr", [("lr", "lr", [(1.0, 1e-4)])], 400, 200)
    (x, y), = flat.lines[0].pixels
    assert flat.box.top < y < flat.box.bottom  # one value: in the middle of a band around it


def test_a_finished_runs_curves_are_read_from_its_newest_tensorboard_log(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path)) as old:
        old.add_scalar("loss", 9.0, 1)
    import os
    import time

    time.sleep(0.01)
    with SummaryWriter(str(tmp_path)) as new:
        for step in (1, 2, 3):
            new.add_scalar("loss", 1.0 / step, step)
            new.add_scalar("lr", 1e-3, step)
    newest = max(tmp_path.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    for path in tmp_path.glob("events.out.tfevents.*"):  # make the order unambiguous
        os.utime(path, (1, 2 if path == newest else 1))
    history = ScalarHistory()
    history.add("loss", 5.0, 1)
    assert read_tensorboard_scalars(tmp_path, history)
    assert history.points(LOSS) == [(1, 1.0), (2, pytest.approx(0.5)), (3, pytest.approx(1 / 3))]
    assert history.points(LR) == [(s, pytest.approx(1e-3)) for s in (1, 2, 3)]
    assert not read_tensorboard_scalars(tmp_path / "none", history) and len(history.points(LOSS)) == 3
