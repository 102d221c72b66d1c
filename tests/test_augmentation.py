"""Augmentation: one flip / crop window / colour change for all frames of a clip, cached as variants."""
from __future__ import annotations

import random

import numpy as np
import pytest

from modules.dataLoader.augmentation import Augmentation, Draw
from modules.dataLoader.frames import resize_and_crop
from tests.test_frame_sampling import loader


def marked_clip(frames: int = 9, height: int = 40, width: int = 64) -> np.ndarray:
    """A clip whose frames differ (a moving bar) and carry a fixed marker at the top left."""
    clip = np.full((frames, height, width, 3), 90, np.uint8)
    for i in range(frames):
        clip[i, 20:30, 10 + 4 * i:14 + 4 * i] = (40, 200, 90)
        clip[i, 2:8, 2:8] = 255
    return clip


def test_one_draw_applies_to_every_frame_alike():
    clip = marked_clip()
    augmentation = Augmentation(flip=True, crop=0.3, color=0.2)
    draws = [augmentation.draw(random.Random(seed)) for seed in range(40)]
    draw = next(d for d in draws if d.flip and d.crop_scale < 0.9)
    out = draw.apply(clip, 32, 32)
    box = draw.box(40, 64, 32, 32)
    geometry = Draw(draw.flip, draw.crop_scale, draw.crop_y, draw.crop_x, (1.0, 1.0, 1.0))
    for i in range(len(clip)):  # each frame alone, flipped and cropped by the same draw, gives the same frame
        assert np.array_equal(geometry.apply(clip, 32, 32)[i], geometry.apply(clip[i:i + 1], 32, 32)[0])
    assert np.array_equal(geometry.apply(clip, 32, 32), resize_and_crop(clip, 32, 32, box)[:, :, ::-1])
    still = np.repeat(clip[:1], 5, axis=0)  # colour: one change for the clip, so equal frames stay equal
    coloured = draw.apply(still, 32, 32)
    assert all(np.array_equal(coloured[0], frame) for frame in coloured) and out.shape == (9, 32, 32, 3)
    assert {d.flip for d in draws} == {True, False}
    assert all(0.7 <= d.crop_scale <= 1 and all(0.8 <= f <= 1.2 for f in d.color) for d in draws)


def test_flip_mirrors_and_the_identity_draw_is_the_plain_crop():
    clip = marked_clip()
    plain = resize_and_crop(clip, 32, 32)
    assert np.array_equal(Augmentation().draw(random.Random(1)).apply(clip, 32, 32), plain)  # also odd slack
    flipped = Draw(True, 1.0, 0.5, 0.5, (1.0, 1.0, 1.0)).apply(clip, 32, 32)
    assert np.array_equal(flipped, plain[:, :, ::-1])
    brighter = Draw(False, 1.0, 0.5, 0.5, (1.2, 1.0, 1.0)).apply(clip, 32, 32)
    assert brighter.astype(int).mean() > plain.astype(int).mean()
    grey = Draw(False, 1.0, 0.5, 0.5, (1.0, 1.0, 0.0)).apply(clip, 32, 32).astype(int)
    assert np.abs(grey[..., 0] - grey[..., 1]).max() <= 1  # saturation 0: grey


def test_cached_variants_differ_epochs_run_no_encoder_and_validation_is_not_augmented(tiny_model, tmp_path):
    from modules.synthetic.synthetic_data import write_video_dataset

    clips = write_video_dataset(tmp_path / "clips", count=1, frames=9, height=40, width=64)
    data = loader(tiny_model, clips, tmp_path / "cached", frames=9, random_crop=0.3, random_flip=True,
                  cache_variations=2)
    assert data.items[0].variations == 2
    calls = data.encoder_calls
    latents = [data.load_batch([0], epoch)["latent_mean"] for epoch in range(3)]
    assert data.encoder_calls == calls
    assert not np.allclose(latents[0], latents[1]) and np.array_equal(latents[0], latents[2])

    off = loader(tiny_model, clips, tmp_path / "off", frames=9, random_crop=0.3, cache_variations=0)
    assert off.items[0].variations == 1 and not off.augmentation.enabled  # 0 variants: no augmentation cached

    uncached = loader(tiny_model, clips, tmp_path / "uncached", frames=9, random_crop=0.3, latent_caching=False)
    frames = [uncached._run(uncached.items[0], epoch, stop=1)["video_frames"] for epoch in range(3)]
    assert not np.allclose(frames[0], frames[1])  # a new draw each epoch

    from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
    from modules.util.enum import ConceptType

    held_out = WanBaseDataLoader(data.config, data.model, concept_type=ConceptType.VALIDATION)
    assert not held_out.augmentation.enabled and held_out.variations == 1


@pytest.mark.parametrize("key", ["random_crop", "color_jitter"])
def test_augmentation_strength_is_range_checked(key):
    from modules.config.train_config import TrainConfig
    from modules.util.base_config import ConfigError

    with pytest.raises(ConfigError, match=key):
        TrainConfig.from_dict({key: 0.9})


def test_e2v_flips_the_video_and_its_references_together(tiny_model, tmp_path):
    import torch

    from modules.config.e2v_dataset_config import load_dataset_config
    from modules.config.train_config import TrainConfig
    from modules.dataLoader.e2v.modules import DecodeTargetVideo, LoadReferences
    from modules.dataLoader.pipeline import ItemContext
    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.conftest import e2v_on_t2v_config

    config = e2v_on_t2v_config(tiny_model, tmp_path, random_flip=True, cache_variations=4, epochs=4)
    dataset = load_dataset_config(config["dataset_config"]).datasets[0]
    data_root = dataset.data_root
    video = DecodeTargetVideo(dataset, 16, "separate", 32, 32, flip=True)
    plain_video = DecodeTargetVideo(dataset, 16, "separate", 32, 32)
    references = LoadReferences(dataset, 32, 32, flip=True)
    plain_references = LoadReferences(dataset, 32, 32)
    item = {"video_path": f"{data_root}/001.mp4", "num_reference_frames": 1, "window": None,
            "element_paths": {"subject": f"{data_root}/001_subject.png"}}
    decisions = []
    for variation in range(8):
        ctx = ItemContext(seed=42, index=0, epoch=None, variation=variation)
        v, plain_v = video.process(item, ctx)["video_frames"], plain_video.process(item, ctx)["video_frames"]
        r = references.process(item, ctx)["reference_frames"]
        plain_r = plain_references.process(item, ctx)["reference_frames"]
        video_flipped = torch.equal(v, plain_v.flip(-1)) and not torch.equal(v, plain_v)
        references_flipped = torch.equal(r, plain_r.flip(-1)) and not torch.equal(r, plain_r)
        assert video_flipped == references_flipped or (torch.equal(v, plain_v) and torch.equal(r, plain_r))
        decisions.append(video_flipped)
    assert set(decisions) == {True, False}

    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    stages = trainer.data.pipelines[0].modules
    assert {stage.name: stage.variations for stage in stages if stage.name in ("video", "condition")} == \
        {"video": 4, "condition": 4}  # the same variant of an epoch in both
    misses = sum(stage.misses for stage in stages)
    trainer.train()  # 4 epochs: every variant was encoded in prepare()
    assert trainer.progress.epoch == 4 and sum(stage.misses for stage in stages) == misses
