"""Upper bounds on values no real run needs, so a typo or a hostile file is one line at start-up instead of an
overflow, a NaN loss or a memory error an hour later. Torch-free (checked before any model loads)."""
from __future__ import annotations

import math

from modules.util.base_config import ConfigError

# ComfyUI's LoraLoader accepts strength_model from -100 to 100; beyond it a merged weight is noise or overflows.
MAX_LORA_STRENGTH = 100.0


def check_lora_strength(label: str, strength: float) -> None:
    """`label` names the key or option ("config key 'base_loras[0].strength'", "--strength")."""
    if not math.isfinite(strength) or abs(strength) > MAX_LORA_STRENGTH:
        raise ConfigError(f"{label} is {strength:g}: a LoRA strength must be a number from -{MAX_LORA_STRENGTH:g} to "
                          f"{MAX_LORA_STRENGTH:g} (as ComfyUI's LoraLoader); Lightning-style LoRAs use about 1")

# Wan trains at 480p-720p; 4096 px a side (a 4K frame) is far beyond any GPU's memory for video and keeps a typo
# (480000) from becoming an allocation error or an int overflow in the latent shape.
MAX_RESOLUTION_SIDE = 4096


def check_resolution_side(label: str, value: int) -> None:
    if value > MAX_RESOLUTION_SIDE:
        raise ConfigError(f"{label} has a side of {value} px, more than {MAX_RESOLUTION_SIDE} (a 4K frame): Wan trains "
                          "at 480p-720p; give [height, width] such as [480, 832]")


def check_frame_count(key: str, frames: int) -> None:
    """The Wan VAE takes 4k+1 frames (1 + 4 per latent frame after the first)."""
    if frames < 1 or (frames - 1) % 4:
        raise ConfigError(f"config key '{key}' must be of the form 4k+1 (1, 5, 9, ... 81), got {frames}")


# ComfyUI's ModelSamplingSD3 takes a shift from 0 to 100 and its KSampler a cfg from 0 to 100 (nodes.py,
# comfy_extras/nodes_model_advanced.py); Wan runs at shift 3-17 and CFG 1-10. Beyond, the sigmas collapse to 1 or the
# guided prediction overflows: an all-black sample or a NaN loss, not an error.
MAX_SHIFT = 100.0
MAX_GUIDANCE_SCALE = 100.0


def check_at_most(label: str, value: float, limit: float, usual: str) -> None:
    """`label` ("config key 'samples[0].shift'", "--shift") is a finite number no larger than `limit`."""
    if not math.isfinite(value) or value > limit:
        raise ConfigError(f"{label} is {value:g}, more than {limit:g} (the most ComfyUI's nodes take): {usual}")
