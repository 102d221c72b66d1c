"""Issue #10's data-side faults: a sample lost mid-run, captions with a byte order mark, captions the text
encoder cuts, crops/upscales and transparent images, a stop request while caching, and OpenCV's noise
around the one-line skip messages."""
from __future__ import annotations

import codecs
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
from PIL import Image
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.dataLoader.batching import LostItems
from modules.dataLoader.discovery import read_caption, read_jsonl_manifest
from modules.dataLoader.errors import MISSING_FILE, CachingStopped, DataError
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.video_io import read_video_frames
from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
from modules.model.WanModel import TEXT_SEQ_LEN
from modules.synthetic.synthetic_data import e2v_dataset_json, render_clip, write_e2v_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.conftest import REPO_ROOT, train_config_dict
from tests.faults.test_fault_suite import (
    all_finite,
    messages,
    one_thread,  # noqa: F401  (autouse: one torch thread here too)
    png_bytes,
    write_messy_dataset,
)

F, H, W = 17, 32, 32
LONG_CAPTION = "a red circle moving left to right over a gray background, " * 60  # well over 512 tokens


@pytest.fixture(scope="module")
def load_model(tiny_model):
    """load_model(variant) -> a loaded tiny WanModel on the CPU (one per variant for the module)."""
    from modules.modelLoader.WanModelLoader import WanModelLoader

    loaded = {}

    def load(variant: str):
        if variant not in loaded:
            loaded[variant] = WanModelLoader().load(str(tiny_model(variant)), torch.device("cpu"))
        return loaded[variant]

    return load


def plain_loader(model, data: Path, work: Path, **overrides) -> WanBaseDataLoader:
    should_stop = overrides.pop("should_stop", None)
    config = TrainConfig.from_dict(train_config_dict(model.model_dir, data, work, **overrides))
    return WanBaseDataLoader(config, model, SkipCounter(), should_stop=should_stop)


def copy_clips(video_dataset: Path, folder: Path) -> Path:
    shutil.copytree(video_dataset, folder)  # 000-002.mp4, 17 frames of 64x64, with captions
    return folder


# --- #3: a sample that cannot be read any more during training -----------------------------------------

def test_a_video_deleted_mid_run_without_caching_is_skipped_once_and_the_run_finishes(tiny_model, video_dataset,
                                                                                     tmp_path, caplog):
    data = copy_clips(video_dataset, tmp_path / "data")
    config = train_config_dict(tiny_model("t2v"), data, tmp_path, latent_caching=False, epochs=3)  # 9 steps
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.callbacks.on_update = lambda update: (data / "001.mp4").unlink() if update.global_step == 2 else None
    with caplog.at_level(logging.WARNING):
        trainer.start()
        planned = [trainer.data.epoch_batches(epoch) for epoch in range(3)]
        trainer.train()
        outputs = trainer.end()
    assert trainer.progress.global_step == trainer.total_steps == 9  # every planned step trained
    assert [trainer.data.epoch_batches(epoch) for epoch in range(3)] == planned  # the epoch order is unchanged
    assert trainer.skips.counts() == {MISSING_FILE: 1}  # counted once, though later epochs hold it again
    (line,) = [m for m in messages(caplog.records) if m.startswith("skipping") and "001.mp4" in m]
    assert "file not found" in line and "found during training" in line
    assert outputs[0].is_file() and all_finite(load_file(str(outputs[0])))


def test_a_batch_trains_a_readable_sample_of_the_same_shape_in_place_of_a_lost_one():
    reads: list[int] = []

    def load(index: int) -> str:
        reads.append(index)
        if index == 1:
            raise DataError("data/001.mp4", "file not found", MISSING_FILE)
        return f"fields {index}"

    skips = SkipCounter()
    lost = LostItems(["a", "a", "a", "b"], [0, 1, 2, 3], seed=7, skips=skips)
    used, loaded = lost.load([0, 1], 0, load)
    assert used[0] == 0 and used[1] in (0, 2)  # bucket "a" only: the batch keeps one shape
    assert loaded == [f"fields {i}" for i in used]
    assert lost.load([0, 1], 0, load) == (used, loaded)  # the same stand-in every time (exact resume)
    assert lost.load([1, 2], 1, load)[0][1] == 2
    assert reads.count(1) == 1 and len(skips) == 1  # read once, skipped and counted once


def test_a_batch_whose_whole_shape_is_lost_trains_another_shape_and_repeats_are_lost_together():
    def load(index: int) -> int:
        if index < 3:
            raise DataError(f"data/{index}.mp4", "file not found", MISSING_FILE)
        return index

    skips = SkipCounter()
    lost = LostItems(["a", "a", "a", "b"], [0, 0, 1, 2], seed=7, skips=skips)  # items 0 and 1: one sample twice
    used, _ = lost.load([0, 1, 2], 0, load)
    assert used == [3, 3, 3]
    assert [Path(e.path).name for e in skips.entries] == ["0.mp4", "2.mp4"]
    with pytest.raises(UserError, match="every training sample became unreadable"):
        LostItems(["a"], [0], 7, SkipCounter()).load([0], 0, load)


def test_a_clip_replaced_by_one_of_another_shape_is_skipped_not_stacked(load_model, video_dataset, tmp_path):
    data = copy_clips(video_dataset, tmp_path / "data")
    loader = plain_loader(load_model("t2v"), data, tmp_path, latent_caching=False)
    loader.prepare()
    index = next(i for i, item in enumerate(loader.items) if item.sample.media_path.name == "002.mp4")
    write_video(data / "002.mp4", render_clip("circle", "red", "left to right", 5, 64, 64), 16.0)
    batch = loader.load_batch([index], 0)
    assert batch["latent_mean"].shape == loader.load_batch([(index + 1) % 3], 0)["latent_mean"].shape
    (entry,) = loader.skips.entries
    assert entry.category == "changed file" and "now 5 frames" in entry.message


@pytest.fixture(scope="module")
def e2v_root(tmp_path_factory) -> Path:
    """Three E2V samples; 003 has a caption far over 512 tokens, 002's subject is half transparent."""
    data = write_e2v_dataset(tmp_path_factory.mktemp("e2v") / "data", count=3, frames=F, height=H, width=W)
    (data / "003.txt").write_text(LONG_CAPTION, encoding="utf-8")
    subject = np.zeros((H, W * 3 // 4, 4), np.uint8)
    subject[:, W // 4:] = (220, 40, 40, 255)  # opaque red on the right, fully transparent black on the left
    Image.fromarray(subject, "RGBA").save(data / "002_subject.png")
    return data


def e2v_loader(model, data: Path, work: Path, **overrides) -> WanE2VDataLoader:
    work.mkdir(parents=True, exist_ok=True)
    (work / "dataset.json").write_text(json.dumps(e2v_dataset_json(data, H, W, F)))
    should_stop = overrides.pop("should_stop", None)
    config = TrainConfig.from_dict(train_config_dict(model.model_dir, work / "unused", work, concepts=[], frames=F,
                                                     dataset_config=str(work / "dataset.json"), **overrides))
    return WanE2VDataLoader(config, model, SkipCounter(), should_stop=should_stop)


def test_the_e2v_loader_trains_another_sample_in_place_of_one_lost_mid_run(load_model, e2v_root, tmp_path):
    data = shutil.copytree(e2v_root, tmp_path / "data")
    loader = e2v_loader(load_model("i2v"), data, tmp_path, ram_cache_mb=0)
    loader.prepare()
    ids = [item.source["sample_id"] for item in loader.items]
    shutil.rmtree(tmp_path / "cache")  # a cache entry that must be encoded again ...
    (data / "001.mp4").unlink()  # ... from a video that is gone
    batch = loader.load_batch([ids.index("001")], 0)
    others = [loader.load_batch([i], 0)["video_mean"] for i, name in enumerate(ids) if name != "001"]
    assert any(torch.equal(batch["video_mean"], other) for other in others)
    (entry,) = loader.skips.entries
    assert entry.category == MISSING_FILE and entry.path.endswith("001.mp4")


# --- #4: captions and manifests with a byte order mark ---------------------------------------------------

CAPTION = "un carré rouge – café, 猫"


@pytest.mark.parametrize("encoding, bom", [("utf-8", codecs.BOM_UTF8), ("utf-16-le", codecs.BOM_UTF16_LE),
                                           ("utf-16-be", codecs.BOM_UTF16_BE), ("utf-32-le", codecs.BOM_UTF32_LE),
                                           ("utf-32-be", codecs.BOM_UTF32_BE)])
def test_a_caption_with_a_byte_order_mark_is_read_in_its_encoding(tmp_path, caplog, encoding, bom):
    path = tmp_path / "clip.txt"
    path.write_bytes(bom + f"{CAPTION}\r\n".encode(encoding))
    with caplog.at_level(logging.WARNING):
        assert read_caption(path) == CAPTION
    assert not caplog.records


def test_a_utf16_caption_with_a_bad_byte_keeps_its_encoding_and_says_so(tmp_path, caplog):
    path = tmp_path / "clip.txt"
    path.write_bytes(codecs.BOM_UTF16_LE + "a red car".encode("utf-16-le") + b"\x00")  # an odd byte at the end
    with caplog.at_level(logging.WARNING):
        assert read_caption(path) == "a red car\ufffd"
    (line,) = messages(caplog.records)
    assert "not valid UTF-16-LE although its byte order mark says so" in line and "latin-1" not in line


def test_a_utf16_manifest_with_a_byte_order_mark_loads(tmp_path):
    lines = [json.dumps({"path": "clip.mp4", "prompt": CAPTION}, ensure_ascii=False)]
    (tmp_path / "data.jsonl").write_bytes(codecs.BOM_UTF16_LE + "\n".join(lines).encode("utf-16-le"))
    (sample,) = read_jsonl_manifest(tmp_path / "data.jsonl")
    assert sample.media_path == tmp_path / "clip.mp4" and sample.caption == CAPTION


# --- #5: captions longer than the text encoder's 512 tokens ----------------------------------------------

def truncation_lines(records) -> list[str]:
    return [m for m in messages(records) if m.startswith("caption of")]


def test_a_caption_over_512_tokens_is_logged_once_per_run_and_counted_not_skipped(load_model, video_dataset,
                                                                                  tmp_path, caplog):
    model = load_model("t2v")
    data = copy_clips(video_dataset, tmp_path / "data")
    (data / "001.txt").write_text(LONG_CAPTION, encoding="utf-8")
    total = len(model.tokenizer(LONG_CAPTION.strip()).input_ids)
    assert total > TEXT_SEQ_LEN
    for run in range(2):  # the second run reads every embedding from the cache and reports it all the same
        caplog.clear()
        loader = plain_loader(model, data, tmp_path)
        with caplog.at_level(logging.WARNING):
            loader.prepare()
        assert truncation_lines(caplog.records) == [
            f"caption of {data / '001.mp4'} is cut to {TEXT_SEQ_LEN} of its {total} tokens (the text encoder's limit)"]
        assert loader.skips.summary() == "skipped 0 samples; 1 caption cut to 512 tokens"
        assert len(loader.skips) == 0 and len(loader.items) == 3
    assert loader.encoder_calls == 0

    uncached = plain_loader(model, data, tmp_path / "uncached", latent_caching=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        uncached.prepare()
        for epoch in range(2):  # epochs encode the caption again, but say nothing more
            for batch in uncached.epoch_batches(epoch):
                uncached.load_batch(batch, epoch)
    assert len(truncation_lines(caplog.records)) == 1


def test_an_e2v_prompt_over_512_tokens_is_logged_and_counted(load_model, e2v_root, tmp_path, caplog):
    loader = e2v_loader(load_model("i2v"), e2v_root, tmp_path)
    with caplog.at_level(logging.WARNING):
        loader.prepare()
    (line,) = truncation_lines(caplog.records)
    assert line.startswith(f"caption of {e2v_root / '003.mp4'} is cut to 512 of its ")
    assert [(t.name, t.kept) for t in loader.skips.truncated_captions] == [(str(e2v_root / "003.mp4"), 512)]


# --- #8: crops, upscales and transparency --------------------------------------------------------------

def framing_lines(records) -> list[str]:
    return [m for m in messages(records) if "trains at" in m]


def test_a_big_crop_or_upscale_is_warned_once_per_sample_and_run(load_model, video_dataset, tmp_path, caplog):
    model = load_model("t2v")
    data = copy_clips(video_dataset, tmp_path / "data")  # 64x64 clips into 32x32: no warning
    (data / "wide.png").write_bytes(png_bytes(np.full((100, 10000, 3), 200, np.uint8)))
    (data / "tiny.png").write_bytes(png_bytes(np.full((4, 4, 3), 50, np.uint8)))
    expected = [f"{data / 'tiny.png'}: 4x4 trains at 32x32: it is upscaled 8.0x",
                f"{data / 'wide.png'}: 10000x100 trains at 48x16: the crop keeps 300x100 (3% of the pixels)"]
    for run in range(2):  # the second run finds every clip in the cache
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            plain_loader(model, data, tmp_path).prepare()
        assert sorted(framing_lines(caplog.records)) == expected

    uncached = plain_loader(model, data, tmp_path / "uncached", latent_caching=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        uncached.prepare()
        for epoch in range(2):  # every epoch decodes again, but warns no more
            for batch in uncached.epoch_batches(epoch):
                uncached.load_batch(batch, epoch)
    assert sorted(framing_lines(caplog.records)) == expected


def rgba_png(path: Path) -> None:
    """16x16: the left half fully transparent black, the right half opaque blue, one half-transparent red pixel."""
    image = np.zeros((16, 16, 4), np.uint8)
    image[:, 8:] = (40, 80, 220, 255)
    image[0, 15] = (255, 0, 0, 128)
    Image.fromarray(image, "RGBA").save(path)


def test_transparent_pixels_are_composited_on_white_or_the_given_background(tmp_path):
    rgba_png(tmp_path / "rgba.png")
    frames, _ = read_video_frames(tmp_path / "rgba.png")
    assert (frames[0, :, :8] == 255).all() and (frames[0, 1:, 8:] == (40, 80, 220)).all()
    assert tuple(frames[0, 0, 15]) == (255, 127, 127)  # half red over white
    frames, _ = read_video_frames(tmp_path / "rgba.png", background=(0, 255, 0))
    assert (frames[0, :, :8] == (0, 255, 0)).all()


@pytest.mark.parametrize("mode", ["LA", "P"])
def test_grey_alpha_and_palette_transparency_are_composited_too(tmp_path, mode):
    grey = np.zeros((8, 8, 2), np.uint8)
    grey[:, 4:] = (30, 255)
    if mode == "LA":
        Image.fromarray(grey, "LA").save(tmp_path / "image.png")
    else:  # a palette PNG whose colour 0 is transparent
        Image.fromarray((grey[..., 1] > 0).astype(np.uint8), "P").save(tmp_path / "image.png", transparency=0)
    frames, _ = read_video_frames(tmp_path / "image.png", background=(10, 20, 30))
    assert (frames[0, :, :4] == (10, 20, 30)).all()


def test_the_plain_path_composites_on_transparent_background(load_model, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rgba_png(data / "rgba.png")
    loader = plain_loader(load_model("t2v"), data, tmp_path, latent_caching=False, resolution=[16, 16],
                          transparent_background=[0, 255, 0])
    loader.prepare()
    (item,) = loader.items
    frames = loader.pipeline.run(item.source, loader.pipeline.context(item.position, 0), stop=1)["video_frames"]
    assert torch.equal(frames[:, 0, :, :7], torch.tensor([-1.0, 1.0, -1.0])[:, None, None].expand(-1, 16, 7))


def test_e2v_element_images_are_composited_on_transparent_background(load_model, e2v_root, tmp_path):
    loader = e2v_loader(load_model("i2v"), e2v_root, tmp_path, transparent_background=[0, 255, 0])
    loader.prepare()
    _, references = loader.preview("002")
    # The 24x32 subject is padded white to 32x32 (pad_white: 4 columns each side, no resize): its transparent
    # left third (columns 4-11) shows the background colour, never the black stored under it.
    subject = references[:, 0]
    assert torch.allclose(subject[:, :, 4:12], torch.tensor([-1.0, 1.0, -1.0])[:, None, None].expand(-1, H, 8))
    assert torch.allclose(subject[:, :, :4], torch.ones(3, H, 4))  # the pad stays white


# --- #14: a stop request while caching -------------------------------------------------------------------

def stop_before_sample(n: int):
    """A should_stop that turns true when asked before sample `n` (after n samples were done)."""
    asked = []

    def should_stop() -> bool:
        asked.append(True)
        return len(asked) > n

    return should_stop


def test_a_stop_while_caching_ends_it_at_once_and_the_next_run_reuses_what_was_cached(load_model, video_dataset,
                                                                                      tmp_path):
    model = load_model("t2v")
    loader = plain_loader(model, video_dataset, tmp_path, should_stop=stop_before_sample(1))
    with pytest.raises(CachingStopped, match="caching stopped after 1 of 3 samples"):
        loader.prepare()
    assert loader.encoder_calls == 1  # one caption (captions go first, issue #24), nothing more
    again = plain_loader(model, video_dataset, tmp_path)
    again.prepare()
    assert again.encoder_calls == 2 * 3 - 1 and len(again.items) == 3


def test_a_stop_while_caching_e2v_ends_it_at_once_and_the_next_run_reuses_what_was_cached(load_model, e2v_root,
                                                                                          tmp_path):
    model = load_model("i2v")

    def misses(loader: WanE2VDataLoader) -> int:
        return sum(stage.misses for pipeline in loader.pipelines for stage in pipeline.modules)

    loader = e2v_loader(model, e2v_root, tmp_path, should_stop=stop_before_sample(1))
    with pytest.raises(CachingStopped, match="caching stopped after 1 of 3 samples"):
        loader.prepare()
    stages = len(loader.pipelines[0].modules)
    assert misses(loader) == 1  # one sample's caption (captions go first, issue #24), nothing more
    again = e2v_loader(model, e2v_root, tmp_path)
    again.prepare()
    assert misses(again) == 3 * stages - 1 and len(again.items) == 3


# --- #15: OpenCV / FFmpeg noise around the skip lines ---------------------------------------------------

def test_reading_broken_videos_prints_no_opencv_or_ffmpeg_warnings(video_dataset, tmp_path):
    data = write_messy_dataset(tmp_path / "data", video_dataset)
    broken = [str(data / name) for name in ("truncated.mp4", "garbage.mp4", "zero_frames.mp4", "truncated.png")]
    script = ("import sys\nfrom modules.dataLoader.errors import DataError\n"
              "from modules.dataLoader.video_io import read_video_frames\n"
              "for path in sys.argv[1:]:\n"
              "    try:\n        read_video_frames(path)\n"
              "    except DataError as error:\n        print(error.category)\n")
    result = subprocess.run([sys.executable, "-c", script, *broken], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == ["unreadable video"] * 3 + ["unreadable image"]
    assert "[ WARN" not in result.stderr and "moov atom" not in result.stderr, result.stderr
