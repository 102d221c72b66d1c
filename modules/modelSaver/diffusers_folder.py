"""Pieces of a diffusers model folder: the base's components copied over, and a transformer folder written
a tensor at a time (config.json + `diffusion_pytorch_model*.safetensors`, sharded like `save_pretrained`)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

import torch

from modules.util.model_folders import WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from modules.util.safetensors_io import TensorSpec, write_safetensors_streamed

MAX_SHARD_BYTES = 10 * 10**9  # save_pretrained's max_shard_size "10GB" (decimal, as huggingface_hub reads it)
TRANSFORMER_FOLDERS = ("transformer", "transformer_2")  # by expert index


def copy_base_components(model_dir: Path, folder: Path, replaced: Collection[str]) -> None:
    """Copy every entry of the base folder into `folder` except the `replaced` ones (written by the caller)."""
    for entry in model_dir.iterdir():
        if entry.name in replaced:
            continue
        if entry.is_dir():
            shutil.copytree(entry, folder / entry.name)
        else:
            shutil.copy2(entry, folder / entry.name)


def _shards(specs: Mapping[str, TensorSpec], max_bytes: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for name in sorted(specs):
        if shards[-1] and size + specs[name].nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += specs[name].nbytes
    return shards


def write_transformer_folder(folder: Path, config: Mapping[str, Any], specs: Mapping[str, TensorSpec],
                             produce: Callable[[str], torch.Tensor], *, class_name: str,
                             max_shard_bytes: int = MAX_SHARD_BYTES) -> None:
    """A `class_name` folder that `from_pretrained` loads; `produce` gives each tensor of `specs`. The class is
    what detection reads first (a VACE or SkyReels-V2 folder must say so)."""
    import diffusers

    folder.mkdir(parents=True)
    saved_config = {"_class_name": class_name, "_diffusers_version": diffusers.__version__, **config}
    (folder / "config.json").write_text(json.dumps(saved_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shards = _shards(specs, max_shard_bytes)
    files = [WEIGHTS_NAME] if len(shards) == 1 else \
        [f"diffusion_pytorch_model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    for file, names in zip(files, shards):
        with open(folder / file, "wb") as stream:
            write_safetensors_streamed(stream, {name: specs[name] for name in names}, produce, {"format": "pt"})
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(spec.nbytes for spec in specs.values())},
                 "weight_map": {name: file for file, names in zip(files, shards) for name in names}}
        (folder / WEIGHTS_INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
