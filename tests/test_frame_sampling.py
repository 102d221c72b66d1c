"""Frame sampling in the data loader: each window of a clip is its own item with its own cache entry; RANDOM
windows change per epoch and repeat after a resume; several lengths and resolutions; per-concept choices."""
from __future__ import annotations

import json

import numpy as np
import pytest

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict


def counting_clip(folder, name: str = "clip", frames: int = 161, fps: float = 16.0, size: int = 32):
    """A manifest of one .npz clip whose frame k is the grey level k: decoded frames tell their index."""
    folder.mkdir(parents=True, exist_ok=True)
    levels = np.arange(frames, dtype=np.uint8)[:, None, None, None]
    np.savez(folder / f"{name}.npz", frames=np.broadcast_to(levels, (frames, size, size, 3)).copy(), fps=fps)
    manifest = folder / "clips.jsonl"
    with manifest.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"path": f"{name}.npz", "prompt": f"the {name}"}) + "\n")
    return manifest


@pytest.fixture(scope="module")
def ten_seconds(tmp_path_factory):
    return counting_clip(tmp_path_factory.mktemp("ten_seconds"))


def loader(tiny_model, manifest, work, **overrides):
    config = train_config_dict(tiny_model("t2v"), manifest, work, **{"frames": 17, **overrides})
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    return trainer.data


def first_frame_index(data, index: int, epoch: int) -> int:
    """The source frame a window starts at (frame k is grey level k) — decoded without the cache."""
    fields = data._run(data.items[index], epoch, stop=1)
    return round((float(fields["video_frames"][0, 0, 0, 0]) + 1) * 127.5)


def starts(data) -> list:
    return [item.source["clip"]["start"] for item in data.items]


@pytest.mark.parametrize("options, expected", [
    ({}, [0]),
    ({"frame_sample_strategy": "SLIDE", "frame_stride": 17}, [0, 17, 34, 51, 68, 85, 102, 119, 136]),
    ({"frame_sample_strategy": "UNIFORM", "frame_windows": 4}, [0, 48, 96, 144]),
])
def test_a_ten_second_clip_gives_the_strategys_windows(tiny_model, ten_seconds, tmp_path, options, expected):
    data = loader(tiny_model, ten_seconds, tmp_path, latent_caching=False, **options)
    assert starts(data) == expected
    assert [first_frame_index(data, i, 0) for i in range(len(data.items))] == expected  # decoded from there
    assert {item.bucket.frames for item in data.items} == {17}


def test_full_takes_the_whole_clip_up_to_max_frames(tiny_model, ten_seconds, tmp_path):
    data = loader(tiny_model, ten_seconds, tmp_path / "a", frame_sample_strategy="FULL", max_frames=161)
    assert [item.bucket.frames for item in data.items] == [161]
    data = loader(tiny_model, ten_seconds, tmp_path / "b", frame_sample_strategy="FULL", max_frames=81)
    assert [item.bucket.frames for item in data.items] == [81]


def test_random_windows_change_per_epoch_and_repeat_in_another_run(tiny_model, ten_seconds, tmp_path):
    data = loader(tiny_model, ten_seconds, tmp_path / "a", latent_caching=False, frame_sample_strategy="RANDOM")
    picked = [first_frame_index(data, 0, epoch) for epoch in range(6)]
    assert len(set(picked)) > 3 and all(0 <= p <= 161 - 17 for p in picked)
    again = loader(tiny_model, ten_seconds, tmp_path / "b", latent_caching=False, frame_sample_strategy="RANDOM")
    assert [first_frame_index(again, 0, epoch) for epoch in range(6)] == picked  # what a resume reads


def test_cached_random_windows_are_encoded_up_front_and_epochs_run_no_encoder(tiny_model, ten_seconds, tmp_path):
    data = loader(tiny_model, ten_seconds, tmp_path, frame_sample_strategy="RANDOM", cache_variations=3)
    assert data.items[0].variations == 3 and data.variations == 3
    calls = data.encoder_calls
    latents = [data.load_batch([0], epoch)["latent_mean"] for epoch in range(4)]
    assert data.encoder_calls == calls  # every variant was encoded in prepare()
    assert not np.allclose(latents[0], latents[1]) and not np.allclose(latents[1], latents[2])
    assert np.array_equal(latents[3], latents[0])  # epoch 3 uses variant 3 % 3


def test_several_lengths_and_resolutions_are_items_of_their_own(tiny_model, tmp_path):
    manifest = counting_clip(tmp_path / "data", "long", frames=40)
    counting_clip(tmp_path / "data", "short", frames=12)
    data = loader(tiny_model, manifest, tmp_path / "run", frames=[9, 17, 33], resolution=[[32, 32], [16, 48]],
                  aspect_bucketing=False)
    long = sorted((i.bucket.frames, i.bucket.height, i.bucket.width) for i in data.items
                  if i.sample.media_path.stem == "long")
    assert long == sorted((f, h, w) for f in (9, 17, 33) for h, w in ((32, 32), (16, 48)))
    short = [i.bucket.frames for i in data.items if i.sample.media_path.stem == "short"]
    assert short == [9, 9]  # 12 frames hold 9 only: one window per resolution, not three
    batches = data.epoch_batches(0)
    assert all(len({data.items[i].bucket for i in batch}) == 1 for batch in batches)


def test_per_concept_strategy_prefix_and_old_cache_keys(tiny_model, ten_seconds, tmp_path):
    plain = loader(tiny_model, ten_seconds, tmp_path / "plain")
    assert plain.clip_keyed is False  # an old config: the cache keys of before
    concepts = [{"path": str(ten_seconds), "frame_sample_strategy": "SLIDE", "frame_stride": 48,
                 "caption_prefix": "sks, "}, {"path": str(ten_seconds), "name": "head"}]
    data = loader(tiny_model, ten_seconds, tmp_path / "mixed", concepts=concepts)
    assert starts(data) == [0, 48, 96, 144, 0]
    assert [i.source["caption"] for i in data.items] == ["sks, the clip"] * 4 + ["the clip"]
    assert len({i.latent_key for i in data.items}) == 4  # the HEAD window shares the SLIDE window at 0


def test_keyframe_windows_start_at_the_scene_cuts(tiny_model, tmp_path):
    from tests.test_frame_windows import shots

    folder = tmp_path / "data"
    folder.mkdir()
    np.savez(folder / "cuts.npz", frames=shots([40, 50, 71], size=32), fps=16.0)
    (folder / "clips.jsonl").write_text(json.dumps({"path": "cuts.npz", "prompt": "three shots"}) + "\n")
    data = loader(tiny_model, folder / "clips.jsonl", tmp_path / "run", frame_sample_strategy="KEYFRAME")
    assert starts(data) == [0, 40, 90]
    from modules.dataLoader.verdict import DataVerdict

    again = DataVerdict(data.config)  # start-up's verdict probed the clip (its cuts too) into the cache
    assert [item.clip["start"] for item in again.all()[0].items] == [0, 40, 90]
    assert again.planner.pipeline.modules[0].misses == 0  # the cuts are cached with the latents


def test_e2v_datasets_take_the_same_strategies_with_their_references_per_sample(tiny_model, tmp_path):
    import torch

    from modules.dataLoader.frames import resize_and_crop, to_tensor
    from modules.dataLoader.video_io import read_video_frames
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset

    data = write_e2v_dataset(tmp_path / "data", count=2, frames=41, height=32, width=32)
    dataset = e2v_dataset_json(data, 32, 32, 17)  # F = 17: 12 frames for 9 reference frames, 5 of the video
    dataset["datasets"][0].update(frame_sample_strategy="SLIDE", frame_stride=5)
    (tmp_path / "dataset.json").write_text(json.dumps(dataset))
    config = train_config_dict(tiny_model("t2v"), data, tmp_path / "run", dataset_config=str(tmp_path / "dataset.json"),
                               concepts=[], epochs=1, e2v={"image_encoder_model_name": str(tiny_model("i2v"))})
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    items = trainer.data.items
    windows = [(i.source["sample_id"], i.source["window"]["start"]) for i in items]
    assert windows == [(s, start) for s in ("001", "002") for start in range(0, 36, 5)]  # 41 frames: 8 windows
    assert len({i.source["element_fps"]["subject"] for i in items if i.source["sample_id"] == "001"}) == 1
    decode = trainer.data.decoders[0]
    item = items[3]  # sample 001, frames 15-19
    frames = decode.process({**item.source}, None)["video_frames"]
    video, _ = read_video_frames(item.source["video_path"], target_fps=16)
    assert torch.equal(frames, to_tensor(resize_and_crop(video[15:20], 32, 32)))
    trainer.train()  # 16 windows train
    assert trainer.progress.global_step == 16


@pytest.mark.slow
def test_windows_balancing_and_augmentation_resume_bit_identically(tiny_model, tmp_path):
    """RANDOM and SLIDE windows, a fractional balancing, cached augmentation variants and validation all draw from
    (seed, epoch, item) streams: a run stopped after step 3 and resumed ends with the uninterrupted run's weights."""
    import torch

    from modules.synthetic.synthetic_data import write_video_dataset
    from tests.conftest import stop_and_resume

    clips = write_video_dataset(tmp_path / "clips", count=3, frames=21, height=32, width=32, seed=4)
    held = write_video_dataset(tmp_path / "held", count=1, frames=9, height=32, width=32, seed=5)
    concepts = [{"path": str(clips), "frame_sample_strategy": "RANDOM", "balancing": 1.5},
                {"path": str(clips), "name": "slide", "frame_sample_strategy": "SLIDE", "frame_stride": 6,
                 "caption_prefix": "sks, "},
                {"path": str(held), "type": "VALIDATION"}]

    def make(**overrides):
        config = train_config_dict(tiny_model("t2v"), clips, tmp_path / "run", frames=9, epochs=3, concepts=concepts,
                                   random_flip=True, random_crop=0.2, cache_variations=2, backup_after=0,
                                   validate_after=2, validate_after_unit="STEP", **overrides)
        return GenericTrainer(TrainConfig.from_dict(config))

    whole = make(workspace_dir=str(tmp_path / "whole"))
    whole.start()
    whole.train()
    resumed = stop_and_resume(lambda **o: make(workspace_dir=str(tmp_path / "split"), **o), step=3)
    resumed.train()
    expected = whole.setup.trainable_state()
    assert resumed.progress.global_step == whole.progress.global_step
    assert all(torch.equal(value, expected[name]) for name, value in resumed.setup.trainable_state().items())
