"""The trained tiny VAE (tests/fixtures/tiny_wan_vae, made by scripts/train_tiny_vae.py) really reconstructs."""
from __future__ import annotations

import json

import pytest

from modules.synthetic.tiny_model import MARKER_KEY, TinyModelError, write_tiny_model
from modules.synthetic.tiny_vae import FIXTURE, held_out_psnr, load_fixture


def test_the_fixture_is_small_and_safetensors_only():
    files = sorted(p.name for p in FIXTURE.iterdir())
    assert files == ["config.json", "diffusion_pytorch_model.safetensors"]
    assert sum(p.stat().st_size for p in FIXTURE.iterdir()) < 2 * 1024 * 1024


def test_held_out_clips_reconstruct_at_25_db_or_more():
    # metric: mean PSNR over 6 held-out 9-frame 48x48 clips (seeds never trained on); threshold 25 dB
    assert held_out_psnr(load_fixture(), seed=4242, count=6, frames=9) >= 25.0


def test_a_tiny_model_with_the_trained_vae_loads_it_as_float32(tmp_path):
    from diffusers import AutoencoderKLWan
    import torch

    folder = write_tiny_model("t2v", tmp_path / "m", trained_vae=True)
    assert json.loads((folder / "model_index.json").read_text())[MARKER_KEY]["trained_vae"] is True
    vae = AutoencoderKLWan.from_pretrained(folder / "vae")
    expected = load_fixture().state_dict()
    assert all(torch.equal(v, expected[k]) and v.dtype == torch.float32 for k, v in vae.state_dict().items())


def test_the_trained_vae_needs_a_wan21_layout(tmp_path):
    with pytest.raises(TinyModelError, match="Wan 2.1 layout"):
        write_tiny_model("ti2v", tmp_path / "m", trained_vae=True)


def test_the_learning_metrics_read_the_vaes_reconstructions_right():
    # The learning tests measure decoded samples; the best a sample can look is the VAE's reconstruction of a
    # training clip. metric: every reconstructed motif clip (4 starts each of the two T2V motifs, 48 px, 9 frames)
    # matches its own motif (colour, corner-ratio shape, direction) and not the other one; threshold: all 8
    import numpy as np
    import torch

    from modules.synthetic.shape_clips import BLUE_SQUARE_DOWN, RED_CIRCLE_RIGHT, Motif, directed_motion, matches, render
    from modules.synthetic.tiny_vae import reconstruct

    vae, rng = load_fixture(), np.random.default_rng(7)
    for motif in (RED_CIRCLE_RIGHT, BLUE_SQUARE_DOWN):
        for _ in range(4):
            video = render(directed_motion(motif.shape, motif.colour, motif.direction, rng, 48, 48, 9), 9, 48, 48)
            pixels = torch.from_numpy(video).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
            decoded = ((reconstruct(vae, pixels)[0].permute(1, 2, 3, 0) + 1) * 127.5).round().to(torch.uint8).numpy()
            other_shape = Motif("square" if motif.shape == "circle" else "circle", motif.colour, motif.direction)
            assert matches(decoded, motif) and not matches(decoded, other_shape), motif
