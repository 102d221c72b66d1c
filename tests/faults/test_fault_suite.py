"""Faults a user will meet: each one gives a clean one-line message (no traceback), loses nothing, and the
run goes on where it can (bad files are skipped and counted, bad cache entries re-encoded, NaN steps skipped).
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.dataLoader import cache as cache_module
from modules.synthetic.synthetic_data import render_clip
from modules.trainer.GenericTrainer import MAX_NONFINITE_STEPS, GenericTrainer
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, train_config_dict


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread):
    """Tiny models gain nothing from threads, and two threads on a busy 2-core machine wait on each other (other
    test modules import this autouse fixture)."""
    yield


def make_trainer(model_dir, data_dir, work, **overrides) -> GenericTrainer:
    return GenericTrainer(TrainConfig.from_dict(train_config_dict(model_dir, data_dir, work, **overrides)))


def trained_weights(trainer: GenericTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.setup.trainable_state().items()}


def all_finite(tensors: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors.values())


def messages(records, level=logging.WARNING) -> list[str]:
    return [r.getMessage() for r in records if r.levelno >= level]


class Records(logging.Handler):
    """Collects log records (for module-scoped fixtures, where caplog is not available)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


# --- bad media and captions ----------------------------------------------------------------------------

def png_bytes(image: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 1])
    assert ok
    return encoded.tobytes()


def write_messy_dataset(folder: Path, good_clips: Path) -> Path:
    from modules.util.video_write import write_video

    shutil.copytree(good_clips, folder)  # 000-002.mp4, 17 frames, with captions
    clip = (folder / "000.mp4").read_bytes()
    (folder / "truncated.mp4").write_bytes(clip[: len(clip) // 2])
    (folder / "garbage.mp4").write_bytes(np.random.default_rng(0).bytes(4096))
    empty = cv2.VideoWriter(str(folder / "zero_frames.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 16.0, (64, 64))
    empty.release()  # a container without a single frame
    write_video(folder / "one_frame.mp4", render_clip("square", "blue", "left to right", 1, 64, 64), 16.0)
    image = png_bytes(render_clip("circle", "red", "left to right", 1, 48, 48)[0])
    (folder / "truncated.png").write_bytes(image[: len(image) // 2])
    (folder / "garbage.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 100)
    huge = np.full((3000, 4000, 3), 96, np.uint8)
    huge[1000:2000, 1500:2500] = (220, 40, 40)
    (folder / "huge.png").write_bytes(png_bytes(huge))
    (folder / "huge.txt").write_text("a red square on gray, very large", encoding="utf-8")
    (folder / "001.txt").write_bytes("un carré rouge, café".encode("latin-1"))  # not UTF-8
    (folder / "002.txt").write_bytes(b"")  # empty caption
    return folder


@pytest.fixture(scope="module")
def messy_run(tiny_model, video_dataset, tmp_path_factory):
    """One epoch on a concept full of broken, odd and huge files (batch 1: one step per usable file)."""
    work = tmp_path_factory.mktemp("messy")
    data = write_messy_dataset(work / "data", video_dataset)
    records = Records()
    logging.getLogger().addHandler(records)
    try:
        trainer = make_trainer(tiny_model("t2v"), data, work, epochs=1)
        trainer.start()
        trainer.train()
        outputs = trainer.end()
    finally:
        logging.getLogger().removeHandler(records)
    return trainer, outputs, records.records


def test_broken_media_are_skipped_with_one_line_each_and_training_goes_on(messy_run):
    trainer, outputs, records = messy_run
    assert trainer.skips.counts() == {"unreadable video": 3, "unreadable image": 2}
    skipped = {Path(e.path).name for e in trainer.skips.entries}
    assert skipped == {"truncated.mp4", "garbage.mp4", "zero_frames.mp4", "truncated.png", "garbage.png"}
    for name in skipped:
        (line,) = [m for m in messages(records) if m.startswith("skipping") and name in m]
        assert "\n" not in line and "Traceback" not in line
    summary = "skipped 5 samples: 3 unreadable video, 2 unreadable image"
    assert any(summary in m for m in messages(records, logging.INFO))
    # Everything usable trained: 3 clips + the 1-frame video + the huge image, one step each.
    assert sorted(i.sample.media_path.name for i in trainer.data.items) == \
        ["000.mp4", "001.mp4", "002.mp4", "huge.png", "one_frame.mp4"]
    assert trainer.progress.global_step == 5
    assert outputs[0].is_file() and all_finite(load_file(str(outputs[0])))


def test_a_one_frame_video_trains_as_a_one_frame_bucket_like_an_image(messy_run):
    trainer, _, _ = messy_run
    buckets = {i.sample.media_path.name: i.bucket for i in trainer.data.items}
    assert buckets["one_frame.mp4"].frames == 1 and buckets["huge.png"].frames == 1
    assert {buckets[f"00{i}.mp4"].frames for i in range(3)} == {9}


def test_a_huge_image_is_bucketed_and_downscaled(messy_run):
    trainer, _, _ = messy_run
    (item,) = [i for i in trainer.data.items if i.sample.media_path.name == "huge.png"]
    assert (item.bucket.height, item.bucket.width) in trainer.data.resolutions  # the 4:3 bucket near 32x32
    assert item.bucket.width >= item.bucket.height and item.bucket.height * item.bucket.width <= 48 * 48
    latents = trainer.data.cache.get(item.latent_key)["latent_mean"]
    assert latents.shape[-2:] == (item.bucket.height // 8, item.bucket.width // 8)  # VAE: 8x down


def test_non_utf8_and_empty_captions_train_with_a_warning(messy_run):
    trainer, _, records = messy_run
    captions = {i.sample.media_path.name: i.sample.caption for i in trainer.data.items}
    assert captions["001.mp4"] == "un carré rouge, café"  # read as latin-1
    assert captions["002.mp4"] == "" and captions["one_frame.mp4"] == ""  # trained with the empty prompt
    warnings = messages(records)
    assert any("001.txt: caption is not valid UTF-8, reading it as latin-1" in m for m in warnings)
    (missing,) = [m for m in warnings if "have no caption" in m]
    assert "002.mp4" in missing and "one_frame.mp4" in missing


# --- the command line: user errors are one line, exit code 1 ------------------------------------------

def test_cli_user_errors_are_one_line_with_exit_code_1(tiny_model, video_dataset, tmp_path):
    cases = {
        "wrong_type": (dict(epochs="three"), "error: config key 'epochs' must be an integer, got 'three'"),
        "missing_model": (dict(base_model_name=str(tmp_path / "no-such-model")),
                          f"error: config key 'base_model_name': '{tmp_path / 'no-such-model'}' does not exist"),
    }
    procs = {}
    for name, (overrides, _) in cases.items():  # both at once: most of their time is importing torch
        config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path / name, **overrides)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        procs[name] = subprocess.Popen([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config-path",
                                        str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, (_, expected) in cases.items():
        stdout, stderr = procs[name].communicate(timeout=300)
        assert procs[name].returncode == 1, stderr
        assert "Traceback" not in stderr + stdout
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith(expected), stderr
    assert not (tmp_path / "missing_model" / "output").exists()


# --- disk full while caching ---------------------------------------------------------------------------

def test_disk_full_while_caching_stops_with_one_line_naming_the_cache_folder(tiny_model, video_dataset, tmp_path,
                                                                             monkeypatch):
    real_atomic_path = cache_module.atomic_path
    writes = []

    @contextlib.contextmanager
    def disk_fills_up(path):
        with real_atomic_path(path) as temp:
            writes.append(path)
            if len(writes) > 6:  # after start-up's 3 clip probes and 3 captions, the first clip hits a full disk
                temp.write_bytes(b"\0" * 100)
                raise OSError(errno.ENOSPC, "No space left on device", str(temp))
            yield temp

    monkeypatch.setattr(cache_module, "atomic_path", disk_fills_up)
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path)
    with pytest.raises(UserError) as error:
        trainer.start()
    trainer.close()
    message = str(error.value)
    assert "\n" not in message
    assert f"no space left for the cache folder '{tmp_path / 'cache'}'" in message
    assert "free some space" in message and "cache_dir" in message and "latent_caching" in message
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.startswith(".")]  # no half-written temp file left behind
    assert sorted(files) == sorted(writes[:6])  # earlier entries kept, readable
    assert all(isinstance(load_file(str(p)), dict) for p in files)

    # With room again, the run goes on: the 3 good caption entries are reused, only the rest is encoded.
    monkeypatch.setattr(cache_module, "atomic_path", real_atomic_path)
    again = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=1)
    again.start()
    again.close()
    assert again.data.encoder_calls == 2 * 3 - 3 and len(again.data.items) == 3


# --- NaN / inf loss ------------------------------------------------------------------------------------

def poison_loss(trainer: GenericTrainer, bad) -> None:
    """Make the loss of the micro steps where `bad(micro_step)` holds NaN / inf."""
    predict = trainer.setup.predict

    def predict_with_faults(inputs, random):
        output = predict(inputs, random)
        step = trainer.progress.micro_step  # counted up after predict
        if bad(step):
            output.loss = output.loss * (float("nan") if step % 2 else float("inf"))
        return output

    trainer.setup.predict = predict_with_faults


def test_nan_and_inf_losses_are_skipped_and_counted(tiny_model, video_dataset, tmp_path, caplog):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=2)  # 6 batches
    trainer.start()
    poison_loss(trainer, lambda step: step in (1, 4))
    with caplog.at_level(logging.WARNING):
        trainer.train()
        trainer.end()
    assert trainer.nonfinite_total == 2 and trainer.progress.global_step == 4  # 6 batches, 2 skipped updates
    warnings = messages(caplog.records)
    assert sum("loss is nan" in m for m in warnings) == 1 and sum("loss is inf" in m for m in warnings) == 1
    assert "2 steps were skipped for a NaN/inf loss" in warnings
    assert all_finite(trained_weights(trainer))
    assert all(all_finite({k: v for k, v in state.items() if torch.is_tensor(v)})
               for state in trainer.optimizer.state.values())
    assert all_finite(load_file(str(trainer.output_paths[0])))


def test_nan_losses_in_a_row_stop_with_one_line_and_leave_the_weights_alone(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=4)  # 12 batches
    trainer.start()
    poison_loss(trainer, lambda step: step >= 2)
    before_nan = {}
    trainer.callbacks.on_update = lambda update: before_nan.update(trained_weights(trainer)) \
        if update.global_step == 2 else None
    with pytest.raises(UserError) as error:
        trainer.train()
    trainer.close()
    assert str(error.value) == (f"the loss was NaN/inf {MAX_NONFINITE_STEPS} times in a row: lower learning_rate or "
                                "use FLOAT32 dtypes, then resume with continue_last_backup=true and "
                                "resume_changed_config=true")
    assert trainer.progress.global_step == 2 and trainer.nonfinite_total == MAX_NONFINITE_STEPS
    after = trained_weights(trainer)
    assert all_finite(after) and all(torch.equal(after[k], before_nan[k]) for k in before_nan)


# --- a corrupt cache entry -----------------------------------------------------------------------------

def test_a_corrupt_cache_entry_is_detected_re_encoded_logged_and_never_trained_on(tiny_model, video_dataset,
                                                                                  tmp_path, caplog):
    cache_dir = str(tmp_path / "cache")
    clean = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "clean", cache_dir=cache_dir, epochs=1)
    clean.start()
    clean.train()
    clean.close()
    expected = trained_weights(clean)

    cache = clean.data.cache
    items = sorted(clean.data.items, key=lambda i: i.sample.media_path.name)
    garbage = cache.path_for(items[0].latent_key)
    garbage.write_bytes(np.random.default_rng(1).bytes(garbage.stat().st_size))  # a latent file full of garbage
    truncated = cache.path_for(items[1].text_key)
    truncated.write_bytes(truncated.read_bytes()[:-100])  # a caption embedding cut short

    again = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "again", cache_dir=cache_dir, epochs=1)
    with caplog.at_level(logging.WARNING):
        again.start()
        again.train()
    again.close()
    warnings = messages(caplog.records)
    for path in (garbage, truncated):
        (line,) = [m for m in warnings if str(path) in m]
        assert "is corrupt" in line and "\n" not in line
    assert again.data.encoder_calls >= 2  # the two damaged entries were encoded again ...
    assert all(load_file(str(cache.path_for(k))) for k in (items[0].latent_key, items[1].text_key))  # ... and stored
    actual = trained_weights(again)  # ... and the training saw exactly what the clean run saw
    assert actual.keys() == expected.keys() and all(torch.equal(actual[k], expected[k]) for k in expected)
