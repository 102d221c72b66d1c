"""Round 5's data causes and #50 deliverables 5 and 11: one verdict on the data (dataset_stats.py, the GUI's Count
clips and the trainer's start-up count the same usable and skipped samples, skips reported before any model loads);
a clip linked to /dev/zero is a counted skip; and Animate-2's copying trap sees through a time shift, a brightness or
contrast change and a mirroring, and flags a reference image taken from the driving video."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from modules.config.train_config import TrainConfig
from modules.dataLoader.animate2_triplets import COPY_PSNR_DB, reference_match, stream_match
from modules.dataLoader.statistics import dataset_statistics
from modules.dataLoader.verdict import concept_verdict
from modules.synthetic import performances as perf
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse fixture)
from tests.test_animate2_training import FRAMES, SIZE, triplets


def test_stats_the_gui_and_training_judge_animate_2_data_alike_before_any_model_loads(tiny_model, tmp_path, caplog):
    data = triplets(tmp_path / "data")  # 001 complete; 002 without its inputs; 003's driving video too short
    config = TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), data, tmp_path, frames=FRAMES,
                                                     resolution=[SIZE, SIZE], max_steps=1))
    (stats,) = dataset_statistics(config, 16.0, use_cache=False)
    assert (stats.files, stats.samples) == (3, 1)  # old code: 3 usable, none skipped
    assert stats.skipped == {"missing file": 1, "bad driving video or reference image": 1}
    gui = concept_verdict(config, 0)
    assert gui.summary() == ("3 files: 1 usable, 2 skipped (missing file: 1, bad driving video or reference image: "
                             "1)") and gui.key == "concepts[0]"
    trainer = GenericTrainer(config)
    with caplog.at_level(logging.INFO):
        trainer.start()
    trainer.close()
    trained = {item.sample.media_path.name for item in trainer.data.items}
    assert trained == {"001.mp4"}
    records = [r.getMessage() for r in caplog.records]
    skipped = next(i for i, m in enumerate(records) if "002.mp4" in m and "no driving video" in m)
    loading = records.index("loading model")
    assert skipped < loading  # old code: the skips were logged after the model loaded
    assert trainer.skips.summary() == "skipped 2 samples: 1 bad driving video or reference image, 1 missing file"


def test_a_clip_linked_to_a_device_is_a_counted_skip(tiny_model, video_dataset, tmp_path):
    data = Path(shutil.copytree(video_dataset, tmp_path / "data"))
    os.symlink("/dev/zero", data / "zero.mp4")
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), data, tmp_path))
    verdict = concept_verdict(config, 0)
    assert verdict.usable == 3 and [(Path(e.path).name, e.category) for e in verdict.skipped] == [
        ("zero.mp4", "unsupported file")]  # old code: a warning, counted nowhere
    trainer = GenericTrainer(config)
    trainer.start()
    trainer.close()
    assert trainer.skips.summary() == "skipped 1 sample: 1 unsupported file"


# --- the copying trap --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def takes(tmp_path_factory):
    """A target and another take in the same room (the hardest legitimate driving video), 33 frames of 96 px."""
    rng = np.random.default_rng(1)
    room, figure = perf.room(rng, 96), perf.texture(rng, 96, 96)
    target = perf.take(room, figure, 33, 96, rng, figure_share=0.25)
    other = perf.take(room, figure, 33, 96, rng, figure_share=0.25)
    return tmp_path_factory.mktemp("takes"), target, other


def mp4(folder: Path, name: str, video: np.ndarray) -> Path:
    write_video(folder / f"{name}.mp4", video, 16.0)
    return folder / f"{name}.mp4"


def png(folder: Path, name: str, image: np.ndarray) -> Path:
    cv2.imwrite(str(folder / f"{name}.png"), cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR))
    return folder / f"{name}.png"


def test_another_take_in_the_same_room_is_no_copy(takes):
    folder, target, other = takes
    assert stream_match(mp4(folder, "target", target), mp4(folder, "other", other)).psnr < COPY_PSNR_DB - 3
    assert reference_match(png(folder, "target0", target[0]), folder / "other.mp4")[0].psnr < COPY_PSNR_DB - 3


@pytest.mark.parametrize("evasion", ["1 frame later", "3 frames earlier", "brightness +25", "contrast x1.3",
                                     "mirrored", "mirrored, 1 frame later, +25"])
def test_a_disguised_copy_of_the_target_is_caught(takes, evasion):
    folder, target, _ = takes
    driving = mp4(folder, evasion.replace(" ", "_").replace(",", ""), perf.evasions(target)[evasion])
    match = stream_match(mp4(folder, "target", target), driving)
    assert match.psnr >= COPY_PSNR_DB + 2, (evasion, match)  # old code: 28.6 dB one frame later, mirrored ~15


def test_a_reference_taken_from_the_driving_video_is_flagged(tiny_model, takes, tmp_path):
    folder, target, other = takes
    data = tmp_path / "data"
    data.mkdir()
    write_video(data / "001.mp4", target, 16.0)
    write_video(data / "001_driving.mp4", other, 16.0)
    png(data, "001_reference", perf.mirrored(other[None, 20])[0])  # any frame, mirrored: still the driving video
    config = TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), data, tmp_path))
    message = concept_verdict(config, 0).error
    assert message.startswith(f"'{data / '001_reference.png'}' is frame 20 of its driving video '001_driving.mp4'")
    with pytest.raises(UserError, match="is frame 20 of its driving video"):  # old code: accepted
        from modules.trainer.preflight import check_before_loading

        check_before_loading(config)
    png(data, "001_reference", target[0])  # a frame of the target: what a reference is
    assert concept_verdict(config, 0).error == ""
