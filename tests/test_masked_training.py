"""Masked training for video: masks found beside samples, taken to the latent grid as the VAE groups frames,
cached with the latents, weighting the loss; bad or missing masks are skipped and counted."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.dataLoader.masks import latent_grid_mask
from modules.model.step_inputs import StepRandom
from modules.synthetic.synthetic_data import write_video_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.video_write import write_video
from tests.conftest import train_config_dict


def half_mask(height: int, width: int) -> np.ndarray:
    """uint8 (H, W): the left half masked (255)."""
    mask = np.zeros((height, width), np.uint8)
    mask[:, : width // 2] = 255
    return mask


@pytest.mark.parametrize("frames", [1, 5, 17])
def test_the_latent_grid_groups_frames_as_the_vae_does(tiny_model, frames):
    """For each pixel frame f, changing only f changes the VAE's latents first at the latent frame the mask
    downsampling maps f to (the causal VAE leaves the frames before its group unchanged)."""
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(tiny_model("t2v") / "vae").eval()
    spatial = 8
    video = torch.rand(1, 3, frames, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        base = vae.encode(video).latent_dist.mean
    assert base.shape[2:] == latent_grid_mask(torch.ones(frames, 32, 32), spatial).shape[1:]
    for f in range(frames):
        one_frame = torch.zeros(frames, 32, 32)
        one_frame[f] = 1
        grid = latent_grid_mask(one_frame, spatial)
        mapped = [t for t in range(grid.shape[1]) if grid[0, t].max() > 0]
        changed = video.clone()
        changed[:, :, f] = -changed[:, :, f]
        with torch.no_grad():
            latents = vae.encode(changed).latent_dist.mean
        differs = [t for t in range(base.shape[2]) if not torch.allclose(latents[:, :, t], base[:, :, t])]
        assert mapped == [differs[0]], (f, mapped, differs)
        assert float(grid[0, mapped[0]].mean()) == pytest.approx(1 if f == 0 else 0.25)  # 1 of 4 frames


def test_a_half_mask_with_unmasked_weight_0_gives_no_gradient_outside_it(tiny_model, tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), tmp_path, tmp_path, masked_training=True,
                                                     unmasked_weight=0.0))
    from modules.modelSetup.BaseWanSetup import BaseWanSetup

    setup = BaseWanSetup.__new__(BaseWanSetup)
    setup.config = config
    mask = latent_grid_mask(torch.from_numpy(half_mask(32, 32)).float()[None].repeat(5, 1, 1) / 255, 8)[None]
    predicted = torch.randn(2, 16, 2, 4, 4, requires_grad=True)
    target = torch.randn(2, 16, 2, 4, 4)
    sigmas, frames = torch.tensor([0.3, 0.7]), torch.ones(2)
    loss = setup.loss(predicted, target, sigmas, frames, loss_mask=mask.expand(2, -1, -1, -1, -1))
    loss.backward()
    assert torch.count_nonzero(predicted.grad[..., 2:]) == 0  # the unmasked (right) half of the latent grid
    assert torch.count_nonzero(predicted.grad[..., :2]) == predicted.grad[..., :2].numel()

    full = dict(config.to_dict(), unmasked_weight=1.0)
    setup.config = TrainConfig.from_dict(full)
    with_mask = setup.loss(predicted, target, sigmas, frames, loss_mask=mask.expand(2, -1, -1, -1, -1))
    assert torch.equal(with_mask, setup.loss(predicted, target, sigmas, frames))  # weight 1 everywhere
    setup.config = TrainConfig.from_dict(dict(config.to_dict(), normalize_masked_area_loss=True))
    normalized = setup.loss(predicted, target, sigmas, frames, loss_mask=mask.expand(2, -1, -1, -1, -1))
    assert torch.allclose(normalized, loss * 2)  # half the area has weight 1, the other 0: mean weight 0.5


def masked_dataset(folder, size: int = 32, frames: int = 9):
    """Four clips: a PNG mask, an MP4 mask, no mask, and a mask of the wrong aspect ratio; plus a too short
    MP4 mask and an unreadable one."""
    data = write_video_dataset(folder, count=6, frames=frames, height=size, width=size)
    cv2.imwrite(str(data / "000-masklabel.png"), half_mask(size, size))
    write_video(data / "001-masklabel.mp4", np.repeat(np.repeat(half_mask(size, size)[None, ..., None], frames, 0), 3, 3),
                16)
    cv2.imwrite(str(data / "003-masklabel.png"), half_mask(size, 2 * size))  # another aspect ratio
    write_video(data / "004-masklabel.mp4", np.repeat(np.repeat(half_mask(size, size)[None, ..., None], 3, 0), 3, 3), 16)
    (data / "005-masklabel.png").write_bytes(b"not a png")
    return data


def test_masks_train_cached_and_bad_ones_are_skipped_and_counted(tiny_model, tmp_path):
    data = masked_dataset(tmp_path / "data")
    config = train_config_dict(tiny_model("t2v"), data, tmp_path / "run", frames=9, epochs=2, masked_training=True)
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    stems = sorted(item.sample.media_path.stem for item in trainer.data.items)
    assert stems == ["000", "001"]  # a mask file is never a sample; the rest are skipped
    reasons = {entry.path.rsplit("/", 1)[-1]: entry.category for entry in trainer.skips.entries}
    assert reasons == {"002.mp4": "missing mask", "003-masklabel.png": "bad mask", "004-masklabel.mp4": "bad mask",
                       "005-masklabel.png": "bad mask"}
    batch = trainer.data.load_batch([0], 0)
    assert batch["loss_mask"].shape == (1, 1, 3, 4, 4)
    assert torch.allclose(batch["loss_mask"][0, 0, :, :, :2], torch.ones(3, 4, 2))  # the left half
    assert float(batch["loss_mask"][0, 0, :, :, 2:].max()) < 0.05
    calls = trainer.data.encoder_calls
    trainer.train()
    assert trainer.progress.epoch == 2 and trainer.data.encoder_calls == calls  # masks come from the cache
    plain = GenericTrainer(TrainConfig.from_dict(dict(config, masked_training=False,
                                                      workspace_dir=str(tmp_path / "plain"))))
    plain.start()
    assert len(plain.data.items) == 6  # without masked_training every clip trains, masks or not


def test_manifest_masks_and_old_configs(tiny_model, tmp_path):
    data = masked_dataset(tmp_path / "data")
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text(json.dumps({"path": str(data / "002.mp4"), "prompt": "x", "mask": str(data / "000-masklabel.png")})
                        + "\n")
    config = train_config_dict(tiny_model("t2v"), manifest, tmp_path / "run", frames=9, masked_training=True)
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    assert [item.source["mask_path"] for item in trainer.data.items] == [str(data / "000-masklabel.png")]
    assert TrainConfig.from_dict({}).masked_training is False


@pytest.mark.parametrize("layout", ["separate", "joint"])
def test_e2v_masks_cover_the_video_and_leave_the_references_to_their_own_rule(tiny_model, tmp_path, layout):
    from modules.synthetic.synthetic_data import write_e2v_dataset
    from tests.conftest import e2v_on_t2v_config

    config = e2v_on_t2v_config(tiny_model, tmp_path, masked_training=True, e2v={
        "image_encoder_model_name": str(tiny_model("i2v")), "target_layout": layout})
    data = write_e2v_dataset(tmp_path / "data", count=2, frames=17, height=32, width=32)
    cv2.imwrite(str(data / "001-masklabel.png"), half_mask(32, 32))  # 002 has none: skipped and counted
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    assert [item.source["sample_id"] for item in trainer.data.items] == ["001"]
    assert [entry.category for entry in trainer.skips.entries] == ["missing mask"]
    batch = trainer.data.load_batch([0], 0)
    inputs = trainer.data.assemble(batch, StepRandom.for_micro_step(0, 0, 1))
    mask = inputs.payload.loss_mask
    assert mask.shape[2:] == inputs.x0.shape[2:] and mask.shape[:2] == (1, 1)
    k = 3  # A2's 9 reference frames touch 3 latent frames
    if layout == "separate":
        assert torch.equal(mask[0, 0, :k], torch.ones_like(mask[0, 0, :k]))  # their weight: loss_on_reference_frames
        video = mask[0, 0, k:]
    else:
        video = mask[0, 0, k:]  # frames after the references' groups
    assert torch.allclose(video[..., :2], torch.ones_like(video[..., :2])) and float(video[..., 2:].max()) < 0.05
    trainer.train()
