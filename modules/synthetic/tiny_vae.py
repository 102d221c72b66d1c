"""A tiny Wan 2.1-layout VAE (`AutoencoderKLWan`, z_dim 16, 8x spatial / 4x temporal) trained to reconstruct
the synthetic shape clips of `modules/synthetic/shape_clips.py`, so that a tiny transformer trained on them makes
videos that can be measured (the learning tests, `demo.py --shapes`). The target is 25 dB PSNR on held-out
clips; the committed one reaches 26.5 dB on the learning tests' held-out clips (9000 steps: tests/test_tiny_vae.py).

`train_tiny_vae(seed)` trains it from scratch, deterministically from the seed; `scripts/train_tiny_vae.py`
writes the result as the committed fixture `tests/fixtures/tiny_wan_vae/` (float16 weights, ~1.3 MB), and
`write_tiny_model(..., trained_vae=True)` copies that fixture (as float32) into a tiny model folder. The
config's `latents_mean` / `latents_std` are measured on the training clips, so normalised latents have unit
variance per channel as with the real VAE.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from modules.synthetic.shape_clips import psnr, random_motion, render

logger = logging.getLogger(__name__)

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "tiny_wan_vae"

#: The architecture: the tiny random VAE's (base_dim 8, one res block), Wan 2.1's strides.
VAE_ARGS = dict(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
                temperal_downsample=[False, True, True], dropout=0.0)

TRAIN_SIZE = (32, 32)
TRAIN_FRAMES = 9  # 3 latent frames: the third is the first to use the causal cache's two-chunk context
HELD_OUT_SIZE = (48, 48)


def clips(seed: int, count: int, frames: int, height: int, width: int) -> torch.Tensor:
    """(count, 3, F, H, W) in [-1, 1]: random shape motions from `seed`."""
    rng = np.random.default_rng(seed)
    videos = np.stack([render(random_motion(rng, height, width, frames), frames, height, width) for _ in range(count)])
    return torch.from_numpy(videos).permute(0, 4, 1, 2, 3).float() / 127.5 - 1


def new_vae(latents_mean: list[float] | None = None, latents_std: list[float] | None = None):
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(**VAE_ARGS, latents_mean=latents_mean or [0.0] * 16, latents_std=latents_std or [1.0] * 16)


def reconstruct(vae, video: torch.Tensor) -> torch.Tensor:
    """The posterior mean decoded, clamped to [-1, 1] (what the pipelines see)."""
    with torch.no_grad():
        return vae.decode(vae.encode(video).latent_dist.mode()).sample.clamp(-1, 1)


def held_out_psnr(vae, seed: int = 12345, count: int = 4, frames: int = 9) -> float:
    """Mean PSNR (dB, uint8 frames) on `count` 48x48 clips drawn from a seed never trained on."""
    video = clips(seed, count, frames, *HELD_OUT_SIZE)
    out = reconstruct(vae.eval(), video)
    to_uint8 = lambda x: ((x + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()  # noqa: E731
    return float(np.mean([psnr(to_uint8(a), to_uint8(b)) for a, b in zip(video, out)]))


def train_tiny_vae(seed: int = 0, steps: int = 9000, batch: int = 4, lr: float = 1e-3,
                   log: Callable[[str], None] = print, checkpoint: Callable[[object], None] | None = None,
                   encoder_warmup: int = 300):
    """Train from scratch; returns the VAE with its measured latent statistics in its config (`checkpoint`,
    if given, gets such a VAE every 500 steps too).

    Two stages. Trained end to end from scratch, the encoder collapses: its latents barely depend on the input
    (x and -x gave latents 0.0013 apart at a spread of 0.2), the decoder learns the mean clip, and the
    reconstruction plateaus at 18 dB. So the encoder first learns to output a linear code of its 8x8 patches
    (their 16 leading principal components: linearly decoded they give ~26 dB), then encoder and decoder
    train on the reconstruction, the encoder at a tenth of the decoder's rate so that it keeps that code."""
    torch.manual_seed(seed)
    vae = new_vae().train()
    started = time.monotonic()
    code = _PatchCode(clips(seed * 1_000_003 + 900_000, 64, TRAIN_FRAMES, *TRAIN_SIZE))
    optimizer = torch.optim.Adam(vae.parameters(), lr=lr)
    for step in range(encoder_warmup):
        video = clips(seed * 1_000_003 + 500_000 + step, 8, TRAIN_FRAMES, *TRAIN_SIZE)
        loss = (vae.encode(video).latent_dist.mode() - code(video)).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            log(f"encoder warm-up {step}/{encoder_warmup} loss {loss.item():.4f} ({time.monotonic() - started:.0f} s)")
    encoder = [p for n, p in vae.named_parameters() if n.startswith(("encoder.", "quant_conv."))]
    decoder = [p for n, p in vae.named_parameters() if not n.startswith(("encoder.", "quant_conv."))]
    optimizer = torch.optim.Adam([{"params": encoder, "lr": lr / 10}, {"params": decoder, "lr": lr}])
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[lr / 10, lr], total_steps=steps,
                                                    pct_start=0.02)
    for step in range(steps):
        video = clips(seed * 1_000_003 + step, batch, TRAIN_FRAMES, *TRAIN_SIZE)
        posterior = vae.encode(video).latent_dist
        out = _decode_unclamped(vae, posterior.mode())
        # Near-deterministic, like the real Wan VAE: the trainer draws a fresh posterior sample each step, so the
        # posterior std is pushed far below the latents' spread (a unit std, KL's optimum, would drown them).
        kl = (posterior.logvar + 12).clamp(min=0).mean() + 1e-3 * posterior.mean.pow(2).mean()
        loss = (out - video).pow(2).mean() + 0.01 * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 250 == 0 or step == steps - 1:
            log(f"step {step}/{steps} loss {loss.item():.4f} std/mean term {kl.item():.2f} "
                f"held-out PSNR {held_out_psnr(vae):.2f} dB ({time.monotonic() - started:.0f} s)")
            if checkpoint is not None and step and step % 500 == 0:
                checkpoint(_with_statistics(vae, seed))
            vae.train()
    return _with_statistics(vae, seed)


class _PatchCode:
    """The encoder's warm-up target: per latent cell, the 16 leading principal components of its pixels (frame
    0's 8x8 patch for latent frame 0, frames 4k-3..4k's for latent frame k), scaled by the first one's spread."""

    def __init__(self, sample: torch.Tensor):
        self.parts = []
        for patches in self._patches(sample)[:2]:  # latent frames 1, 2... share one code
            rows = patches.permute(0, 2, 3, 1).reshape(-1, patches.shape[1])
            mean = rows.mean(0)
            _, singular, vh = torch.linalg.svd(rows - mean, full_matrices=False)
            self.parts.append((mean, vh[:16], float(singular[0]) / rows.shape[0] ** 0.5))

    @staticmethod
    def _patches(video: torch.Tensor) -> list[torch.Tensor]:
        groups = [video[:, :, :1]] + [video[:, :, f:f + 4] for f in range(1, video.shape[2], 4)]
        return [torch.nn.functional.pixel_unshuffle(g.reshape(video.shape[0], -1, *video.shape[3:]), 8)
                for g in groups]

    def __call__(self, video: torch.Tensor) -> torch.Tensor:
        codes = []
        for k, patches in enumerate(self._patches(video)):
            mean, vh, spread = self.parts[min(k, 1)]
            codes.append(torch.einsum("bdhw,kd->bkhw", patches - mean[None, :, None, None], vh) / spread)
        return torch.stack(codes, 2)


def _decode_unclamped(vae, z: torch.Tensor) -> torch.Tensor:
    """`vae.decode` without its final clamp to [-1, 1]: a clamped pixel passes no gradient, and pixels the
    young decoder overshoots would stay stuck (training plateaued at 18 dB with the clamp). Mirrors
    diffusers' `AutoencoderKLWan._decode` (no tiling, no patching: the Wan 2.1 layout)."""
    vae.clear_cache()
    x = vae.post_quant_conv(z)
    frames = []
    for i in range(z.shape[2]):
        vae._conv_idx = [0]
        frames.append(vae.decoder(x[:, :, i:i + 1], feat_cache=vae._feat_map, feat_idx=vae._conv_idx,
                                  first_chunk=i == 0))
    vae.clear_cache()
    return torch.cat(frames, 2)


def _with_statistics(vae, seed: int):
    vae.eval()
    mean, std = latent_statistics(vae, seed)
    vae.register_to_config(latents_mean=mean, latents_std=std)
    return vae


def latent_statistics(vae, seed: int) -> tuple[list[float], list[float]]:
    """Per-channel mean / std of the posterior means over training-distribution clips."""
    with torch.no_grad():
        z = vae.encode(clips(seed + 777, 16, 9, *HELD_OUT_SIZE)).latent_dist.mode()
    z = z.transpose(0, 1).reshape(z.shape[1], -1)
    return [round(float(v), 4) for v in z.mean(1)], [round(float(v), 4) for v in z.std(1)]


def save_fixture(vae, folder: Path = FIXTURE) -> Path:
    """diffusers' layout (config.json + diffusion_pytorch_model.safetensors), float16 to stay small."""
    import copy

    folder.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(vae)
    for parameter in half.parameters():  # (not .to(): diffusers warns about casting a whole model)
        parameter.data = parameter.data.to(torch.float16)
    half.save_pretrained(str(folder), safe_serialization=True)
    return folder


def load_fixture(folder: Path = FIXTURE):
    """The committed trained VAE as float32 (safetensors + JSON only)."""
    from diffusers import AutoencoderKLWan

    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"trained tiny VAE '{folder}' is missing: run scripts/train_tiny_vae.py")
    return AutoencoderKLWan.from_pretrained(str(folder), torch_dtype=torch.float32).eval()


def fixture_config(folder: Path = FIXTURE) -> dict:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))
