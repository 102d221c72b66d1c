"""The final model never silently replaces an earlier file: when anything a save to `output_model_destination`
would write exists already (the file or folder, an expert's file, the embedding beside it, the EMA's raw
weights, an E2V run's I2V export), the run writes to the first free `<name>-2`, `<name>-3`, ... and says so,
unless `overwrite_output` is true."""
from __future__ import annotations

import logging
from pathlib import Path

from modules.modelFile.lora_formats import expert_lora_paths
from modules.modelSaver.embedding_file import embedding_path_beside
from modules.modelSaver.merged_model import i2v_export_paths
from modules.trainer.snapshots import raw_destination
from modules.util.numbered_names import numbered_names

logger = logging.getLogger(__name__)

SUFFIX = ".safetensors"


def written_paths(destination: Path) -> list[Path]:
    """Every path a save to `destination` may write, whatever the model and options."""
    raw = raw_destination(destination)
    stem = destination.with_name(destination.name[: -len(SUFFIX)]) if destination.name.endswith(SUFFIX) else destination
    folder, single = i2v_export_paths(stem)
    paths = [destination, raw, embedding_path_beside(destination), folder, single]
    for path in (destination, raw, single):
        paths += [Path(p) for p in expert_lora_paths(path)]
    return paths


def free_destination(destination: str | Path, overwrite: bool) -> Path:
    """`destination`, or the first numbered one none of whose paths exist (logged), unless `overwrite`:
    `out/lora.safetensors` -> `out/lora-2.safetensors`; `out/model` -> `out/model-2`."""
    destination = Path(destination)
    if overwrite:
        return destination
    name = destination.name
    stem, suffix = (name[: -len(SUFFIX)], SUFFIX) if name.endswith(SUFFIX) and len(name) > len(SUFFIX) else (name, "")
    for candidate in (destination.with_name(n) for n in numbered_names(stem, suffix)):
        if not _taken(candidate):
            if candidate != destination:
                logger.warning("%s exists already: the model is written to %s instead (set overwrite_output true to "
                               "replace it)", destination, candidate)
            return candidate
    raise OSError(f"no free numbered name beside {destination}")


def _taken(destination: Path) -> bool:
    return any(path.exists() or path.is_symlink() for path in written_paths(destination))
