"""A transformer folder's config.json against its own weights, before the model is built from the config: a
damaged or hostile config (num_layers 10^9, another width) would otherwise allocate a network of its own size
first and fail (or exhaust memory) only when the weights are loaded into it. Reads JSON and the safetensors
headers only — no tensor."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from modules.config.loading import loads_json
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from modules.util.model_folders import WEIGHTS_INDEX_NAME, WEIGHTS_NAME

_MAX_HEADER = 100 << 20  # safetensors' own limit on a header
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def _header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8).ljust(8, b"\0"))[0]
        if not 0 < size <= _MAX_HEADER:
            raise UserError(f"'{path}' is not a readable safetensors file (header of {size} bytes): the model folder "
                            "is damaged")
        header = json.loads(f.read(size))
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def weight_shapes(folder: Path) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> shape over the folder's weight file(s); None when it holds none we read."""
    index = folder / WEIGHTS_INDEX_NAME
    try:
        if index.is_file():
            files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        elif (folder / WEIGHTS_NAME).is_file():
            files = [WEIGHTS_NAME]
        else:
            return None
        shapes: dict[str, tuple[int, ...]] = {}
        for name in files:
            shapes.update(_header_shapes(folder / name))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"the weights of '{folder}' cannot be read ({type(e).__name__}: {e}): the model folder is "
                        "damaged") from None
    return shapes


def check_transformer_config(folder: Path) -> None:
    """One line naming config.json and the key whose value the weights contradict (number of blocks, width,
    input channels, feed-forward and text widths)."""
    shapes = weight_shapes(folder)
    if not shapes or "patch_embedding.weight" not in shapes:
        return  # no diffusers Wan weights to compare with: the loader names what is missing
    config_file = folder / "config.json"
    try:
        config = loads_json(config_file.read_text(encoding="utf-8"), f"'{config_file}'")
    except (OSError, ValueError, ConfigError) as e:
        raise UserError(f"'{config_file}' cannot be read ({e}): the model folder is damaged") from None
    if not isinstance(config, dict):
        raise UserError(f"'{config_file}' is not a JSON object: the model folder is damaged")
    patch = shapes["patch_embedding.weight"]  # (inner_dim, in_channels, *patch_size)
    found = {
        "num_layers": 1 + max((int(m.group(1)) for n in shapes if (m := _BLOCK.match(n))), default=-1),
        "in_channels": patch[1] if len(patch) > 1 else None,
        "ffn_dim": shapes.get("blocks.0.ffn.net.0.proj.weight", (None,))[0],
        "text_dim": shapes.get("condition_embedder.text_embedder.linear_1.weight", (None, None))[-1],
    }
    heads, head_dim = config.get("num_attention_heads"), config.get("attention_head_dim")
    if isinstance(heads, int) and isinstance(head_dim, int) and heads * head_dim != patch[0]:
        raise UserError(f"'{config_file}': num_attention_heads × attention_head_dim is {heads} × {head_dim} = "
                        f"{heads * head_dim}, but the weights are {patch[0]} wide: the config does not belong to "
                        "these weights (restore the folder's config.json)")
    for key, value in found.items():
        if value is not None and key in config and config[key] != value:
            raise UserError(f"'{config_file}': {key} is {json.dumps(config[key])[:30]}, but the weights have "
                            f"{value}: the config does not belong to these weights (restore the folder's config.json)")
