"""Device memory of a Wan VAE encode, and whether caching must tile it to fit (issue #24).

The Wan VAE encodes a clip causally, one chunk of frames after another (1, then 4 at a time), so its working
set does not grow with the clip's length: it is the encoder's first, full-resolution stage holding a few
feature maps of `base_dim` channels over one chunk (plus the cached frames of its causal convolutions).
Tiled encoding (diffusers' `enable_tiling`) runs the same over 256 x 256 pixel tiles. On top: the VAE's
weights and the whole input clip, which sits on the device while it is encoded.
"""
from __future__ import annotations

import functools
import json
import logging
from typing import Mapping

import torch

logger = logging.getLogger(__name__)

GIB = 2 ** 30
CHUNK_FRAMES = 4  # frames per causal chunk
LIVE_MAPS = 9  # full-resolution feature maps alive at once in its first stage: fits issue #24's fake-CUDA peaks
# (1.3B caching at 832x480x81, float32 VAE: 16.7 GiB untiled, 12.3 tiled, both beside the 10.6 GiB of UMT5)
TILE_PIXELS = 256  # diffusers' tile_sample_min_height / _width of AutoencoderKLWan
HEADROOM_BYTES = GIB // 2  # CUDA context and allocator slack, not counted by the working set


def vae_parameters(vae_config: Mapping) -> int:
    """Parameters of the VAE of `vae_config` (built on the meta device once per config)."""
    return _counted(json.dumps({k: v for k, v in dict(vae_config).items() if not k.startswith("_")}, sort_keys=True))


@functools.lru_cache(maxsize=8)
def _counted(config_json: str) -> int:
    """Cached by the config's JSON: AUTO's plan and the GUI estimate many configs of one VAE."""
    from diffusers import AutoencoderKLWan

    with torch.device("meta"):
        return sum(p.numel() for p in AutoencoderKLWan.from_config(json.loads(config_json)).parameters())


def vae_encode_bytes(vae_config: Mapping, frames: int, height: int, width: int, dtype: torch.dtype,
                     tiled: bool = False) -> int:
    """Device bytes of encoding one `frames` x `height` x `width` clip: weights, the input clip and the encoder's
    working set (over one tile when `tiled`)."""
    element = torch.empty((), dtype=dtype).element_size()
    patch = vae_config.get("patch_size") or 1  # the Wan 2.2 VAE folds 2 x 2 pixels into channels first
    base = vae_config.get("base_dim", 96)
    area = min(height, TILE_PIXELS) * min(width, TILE_PIXELS) if tiled else height * width
    working = CHUNK_FRAMES * area // (patch * patch) * base * LIVE_MAPS * element
    clip = 3 * frames * height * width * element
    return vae_parameters(vae_config) * element + clip + working


def vae_tiling_needed(vae_config: Mapping, frames: int, height: int, width: int, dtype: torch.dtype,
                      budget_bytes: float) -> bool:
    """Whether an untiled encode of the clip exceeds `budget_bytes` of device memory (the VAE alone on the device,
    as the caching phase places it), so tiles are needed."""
    return vae_encode_bytes(vae_config, frames, height, width, dtype) > budget_bytes - HEADROOM_BYTES


def device_budget_bytes(gpu_memory_gib: float, device: torch.device) -> float | None:
    """The device memory to plan for: `gpu_memory_gib` when set, else the detected GPU's; None on the CPU."""
    if gpu_memory_gib > 0:
        return gpu_memory_gib * GIB
    if device.type == "cuda" and torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(device).total_memory)
    return None


def largest_clip(config) -> tuple[int, int, int]:
    """(frames, height, width) of the largest clip a run encodes: the longest window at the largest resolution, or
    for E2V the largest dataset's (every E2V item is encoded at its dataset's vae_resolution)."""
    if config.dataset_config:
        from modules.config.e2v_dataset_config import load_dataset_config

        return max(((d.max_num_frames, *d.vae_resolution) for d in load_dataset_config(config.dataset_config).datasets),
                   key=lambda c: c[0] * c[1] * c[2])
    from modules.config.train_config import frame_lengths, resolutions

    height, width = max(resolutions(config.resolution), key=lambda r: r[0] * r[1])
    return max(frame_lengths(config.frames)), height, width


def caching_needs_tiling(config, model) -> bool:
    """For a run: whether its largest clip (longest window at the largest resolution) needs a tiled encode on its
    device (logged when it does)."""
    budget = device_budget_bytes(config.gpu_memory_gib, model.train_device)
    if budget is None:
        return False
    frames, height, width = largest_clip(config)
    dtype = next(model.vae.parameters()).dtype
    needed = vae_encode_bytes(model.vae.config, frames, height, width, dtype)
    if needed <= budget - HEADROOM_BYTES:
        return False
    logger.info("vae_tiling: on for caching (an untiled encode of %dx%dx%d needs about %.1f GiB, more than the "
                "%.1f GiB planned for)", width, height, frames, needed / GIB, budget / GIB)
    return True
